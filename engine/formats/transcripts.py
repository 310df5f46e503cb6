"""Recorded tool calls, read back from a transcript file to be replayed through the engine.

Four forms are read, by what the file holds (its extension only breaks ties):

* JSON Lines of `ToolCall`s: ``{"name": ..., "arguments": {...}, "id": ..., "subject": ...}``;
* OpenAI: a Chat Completions or Responses reply, an assistant message with ``tool_calls``, or a
  conversation (a list of messages, or JSON Lines of them) whose assistant turns hold calls;
* Anthropic: a message (or a conversation) whose ``content`` holds ``tool_use`` blocks;
* the XML tool-call format (``<tool_call>...</tool_call>`` anywhere in the text).

Every problem is a `TranscriptError` naming the file, the line when there is one, and what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from stockade.engine.errors import FormatError
from stockade.engine.formats import anthropic, openai, xml
from stockade.engine.formats._shapes import kind
from stockade.engine.messages import ToolCall
from stockade.engine.tools.catalog import ToolCatalog


class TranscriptError(FormatError):
    """A transcript that cannot be read; the message says where and why."""


def load_transcript(
    path: str | Path, *, toolkit: ToolCatalog | None = None, subject: str = "agent"
) -> list[ToolCall]:
    """The tool calls recorded in ``path``, in order."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TranscriptError(f"no transcript at {path}; check the path") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL in the path
        raise TranscriptError(f"cannot read the transcript {path}: {exc}") from exc
    stripped = text.strip()
    if not stripped:
        raise TranscriptError(f"{path} is empty: it holds no tool calls")
    if "<tool_call>" in text and not stripped.startswith(("{", "[")):
        return _from_xml(path, text, toolkit, subject)
    try:
        whole = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return _from_json_lines(path, text, subject)
    return _from_value(path, whole, None, subject)


def _from_xml(path: Path, text: str, toolkit: ToolCatalog | None, subject: str) -> list[ToolCall]:
    try:
        calls = xml.parse_tool_calls(text, toolkit=toolkit, subject=subject)
    except FormatError as exc:
        raise TranscriptError(f"{path}: {exc}") from exc
    if not calls:
        raise TranscriptError(f"{path}: no <tool_call> could be read")
    return calls


def _from_json_lines(path: Path, text: str, subject: str) -> list[ToolCall]:
    calls: list[ToolCall] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TranscriptError(
                f"{path}:{number}: not valid JSON ({exc}); each line must be one JSON object"
            ) from exc
        calls.extend(_from_value(path, value, number, subject))
    if not calls:
        raise TranscriptError(f"{path} holds no tool calls")
    return calls


def _from_value(path: Path, value: Any, line: int | None, subject: str) -> list[ToolCall]:
    """The calls in one JSON value; a list is a conversation, lists in it are flattened (by
    hand rather than by recursion, so no depth of nesting overflows the stack)."""
    calls: list[ToolCall] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(reversed(item))
        else:
            calls.extend(_from_item(path, item, line, subject))
    return calls


def _from_item(path: Path, value: Any, line: int | None, subject: str) -> list[ToolCall]:
    where = f"{path}:{line}" if line else str(path)
    try:
        if not isinstance(value, Mapping):
            raise TranscriptError(f"{where}: expected a JSON object, got {type(value).__name__}")
        if "name" in value and "arguments" in value and "function" not in value:
            return [ToolCall.from_dict({"subject": subject, **_labels(value)})]
        content = value.get("content")
        if isinstance(content, list) and any(
            isinstance(b, Mapping) and b.get("type") == "tool_use" for b in content
        ):
            return anthropic.parse_tool_calls(value, subject=subject)
        if any(key in value for key in ("tool_calls", "choices", "output")) or (
            value.get("type") == "function_call"
        ):
            return openai.parse_tool_calls(value, subject=subject)
        if "role" in value or "content" in value or value.get("type") in ("message", "text"):
            return []  # a turn without calls: a user message, an assistant's prose
    except (FormatError, ValueError) as exc:
        if isinstance(exc, TranscriptError):
            raise
        raise TranscriptError(f"{where}: {exc}") from exc
    raise TranscriptError(
        f"{where}: not a tool call or a message; expected a ToolCall "
        '({"name": ..., "arguments": {...}}), an OpenAI or Anthropic message, or XML tool calls'
    )


def _labels(call: Mapping[str, Any]) -> Mapping[str, Any]:
    """``call``, once its ``id`` and ``subject`` are known to be text (or an integer, for an id
    written by hand): anything else would be turned into text whole, which a deeply nested
    value cannot be."""
    call_id, subject = call.get("id"), call.get("subject")
    if call_id and (isinstance(call_id, bool) or not isinstance(call_id, str | int)):
        raise FormatError(f"the call's id is {kind(call_id)}, not a string or an integer")
    if subject and not isinstance(subject, str):
        raise FormatError(f"the call's subject is {kind(subject)}, not a string")
    return call
