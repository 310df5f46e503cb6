"""Reading the XML tool-call format (described in `stockade.engine.formats.xml`): the calls in a
model's text, the elements inside a call, and the value an element holds.

A scanner rather than an XML parser, so that sloppy pseudo-XML still reads; and a linear one,
because the text is outside input that prompt injection can shape. Each function searches
forward only and never reads a stretch of text twice for the same purpose: a search that went
past what it was looking for keeps its answer instead of searching again from an earlier place
(re-reading from each of n tags turns n tags into n² characters read), and no regular
expression can backtrack over more than the run of characters it matches.
"""

from __future__ import annotations

import re

OPEN_CALL = "<tool_call>"
CLOSE_CALL = "</tool_call>"
CDATA_OPEN = "<![CDATA["
CDATA_CLOSE = "]]>"
_OPEN_TAG = re.compile(r"<([A-Za-z_][\w.-]*)>")
# what ends the inside of a call: its close, the next call's open, or a CDATA section to skip
_CALL_MARK = re.compile(r"<(?:tool_call>|/tool_call>|!\[CDATA\[)")
_REFERENCE = re.compile(r"&(lt|gt|amp|quot|apos|#[0-9]{1,7}|#x[0-9A-Fa-f]{1,6});")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}


def _skip_cdata(text: str, start: int, stop_at: str) -> int:
    """Index of the first ``stop_at`` at or after ``start`` that is not inside CDATA, or -1.

    Each search goes on from where the last one stopped: a ``stop_at`` found beyond a CDATA
    section is kept rather than searched for again, and a section is looked for only before it,
    so the text up to the answer is read once."""
    position = start
    stop = text.find(stop_at, position)
    while stop != -1:
        # a section must open before ``stop`` to matter (and cannot overlap it: ``stop_at``
        # starts with "<", which "<![CDATA[" holds only at its start)
        cdata = text.find(CDATA_OPEN, position, stop)
        if cdata == -1:
            return stop
        end = text.find(CDATA_CLOSE, cdata + len(CDATA_OPEN))
        if end == -1:
            return -1  # CDATA runs to the end of the text: nothing after it is markup
        position = end + len(CDATA_CLOSE)
        if stop < position:
            stop = text.find(stop_at, position)  # that one was inside the section
    return -1


def call_bodies(text: str) -> list[str]:
    """The inside of each call. A call left unclosed ends where the next call starts, or at
    the end of the text (a reply cut off by the token limit)."""
    bodies: list[str] = []
    position = text.find(OPEN_CALL)
    while position != -1:
        start = position + len(OPEN_CALL)
        end, position = _call_end(text, start)
        bodies.append(text[start:end])
    return bodies


def _call_end(text: str, start: int) -> tuple[int, int]:
    """Where the call whose inside begins at ``start`` ends, and where the next call begins
    (-1: none). One forward pass for the close and the next open together, CDATA skipped."""
    position = start
    while (mark := _CALL_MARK.search(text, position)) is not None:
        if mark.group() == OPEN_CALL:
            return mark.start(), mark.start()  # unclosed: the next call ends it
        if mark.group() == CLOSE_CALL:
            return mark.start(), text.find(OPEN_CALL, mark.end())
        end = text.find(CDATA_CLOSE, mark.end())
        if end == -1:
            break  # CDATA runs to the end of the text: nothing after it is markup
        position = end + len(CDATA_CLOSE)
    return len(text), -1


def elements(text: str, *, keep_unclosed: bool = True) -> list[tuple[str, str]]:
    """Top-level ``<tag>raw</tag>`` pairs, in order; stray text between elements is ignored.
    An element left unclosed (a reply cut off by the token limit) takes the rest of the text,
    or is dropped when ``keep_unclosed`` is false: half a value is not a value."""
    found: list[tuple[str, str]] = []
    position = 0
    while True:
        opening = _OPEN_TAG.search(text, position)
        if opening is None:
            return found
        tag = opening.group(1)
        start = opening.end()
        close = _skip_cdata(text, start, f"</{tag}>")
        if close == -1:
            if keep_unclosed:
                found.append((tag, text[start:]))
            return found
        found.append((tag, text[start:close]))
        position = close + len(tag) + 3


def value(raw: str) -> str:
    """A value as written: CDATA sections verbatim (whitespace around them is formatting),
    anything else stripped with XML character references decoded."""
    stripped = raw.strip()
    if stripped.startswith(CDATA_OPEN):
        sections = _cdata_sections(stripped)
        if sections is not None:
            return "".join(sections)
    return _REFERENCE.sub(_decode_reference, stripped)


def _cdata_sections(text: str) -> list[str] | None:
    """The insides of the CDATA sections ``text`` is made of, or None when anything but
    whitespace lies between or after them (an unclosed section included)."""
    sections: list[str] = []
    position = 0
    while True:
        cdata = text.find(CDATA_OPEN, position)
        between = text[position:] if cdata == -1 else text[position:cdata]
        if between and not between.isspace():
            return None
        if cdata == -1:
            return sections
        start = cdata + len(CDATA_OPEN)
        end = text.find(CDATA_CLOSE, start)
        if end == -1:
            return None
        sections.append(text[start:end])
        position = end + len(CDATA_CLOSE)


def _decode_reference(match: re.Match[str]) -> str:
    ref = match.group(1)
    if ref in _NAMED:
        return _NAMED[ref]
    code = int(ref[2:], 16) if ref.startswith("#x") else int(ref[1:])
    try:
        return chr(code)
    except (ValueError, OverflowError):
        return match.group(0)
