"""A shell word as the command judge sees it, and how bash unquotes the pieces of one."""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_GLOB_CHARS = frozenset("*?[{")


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word: its text after unquoting, and whether that text is only known at run
    time (an expansion, a substitution: ``dynamic``) or is a pattern the shell would expand (an
    unquoted glob or brace: ``pattern``). Either way it is kept as written."""

    text: str
    dynamic: bool = False
    pattern: bool = False

    @property
    def static(self) -> bool:
        """Whether the text is exactly what the program will receive."""
        return not self.dynamic and not self.pattern


def join_words(parts: Iterable[Word]) -> Word:
    """Pieces that touch, as the one word bash makes of them: dynamic or a pattern if any
    piece is."""
    pieces = list(parts)
    return Word(
        "".join(p.text for p in pieces),
        any(p.dynamic for p in pieces),
        any(p.pattern for p in pieces),
    )


def has_glob(raw: str) -> bool:
    """Whether an unquoted word, as written, holds a character bash would expand."""
    escaped = False
    for ch in raw:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in _GLOB_CHARS:
            return True
    return False


def unescape_word(raw: str) -> str:
    """An unquoted word's text as the program receives it."""
    # outside quotes a backslash keeps the next character literally; backslash-newline vanishes
    out: list[str] = []
    chars: Iterator[str] = iter(raw)
    for ch in chars:
        if ch == "\\":
            following = next(chars, "")
            if following != "\n":
                out.append(following)
        else:
            out.append(ch)
    return "".join(out)


def unescape_string(raw: str) -> str:
    """The literal text inside double quotes as the program receives it."""
    # inside double quotes a backslash escapes only $ ` " \ and newline
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw) and raw[i + 1] in '$`"\\\n':
            if raw[i + 1] != "\n":
                out.append(raw[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def ansi_c(raw: str) -> str:
    """The text of a ``$'...'`` string (without its quotes), escapes decoded; as written when
    they cannot be."""
    try:
        return codecs.decode(raw.encode("latin-1", "backslashreplace"), "unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return raw
