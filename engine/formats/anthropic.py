"""Anthropic tool calls: ``tool_use`` content blocks in, ``tool_result`` blocks out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from stockade.engine.content import ImageBlock, TextBlock
from stockade.engine.errors import FormatError
from stockade.engine.formats._shapes import as_list, as_object, is_list, optional_text, plain
from stockade.engine.messages import ToolCall, ToolResult


def parse_tool_calls(message: Any, *, subject: str = "agent") -> list[ToolCall]:
    """Tool calls from an Anthropic response or message (``content`` blocks) or a block list.
    Blocks other than ``tool_use`` (text, thinking) are skipped; anything malformed, at any
    level, is a `FormatError` saying what was found where."""
    message = plain(message)  # an SDK's own object: the data it stands for
    if isinstance(message, Mapping):
        blocks = message.get("content", [])
        if isinstance(blocks, str):
            return []  # a message of plain text
        blocks = as_list(blocks, "content")
    elif is_list(message):
        blocks = message
    else:
        raise FormatError(
            f"expected an Anthropic message or list of content blocks, got {type(message).__name__}"
        )
    calls = []
    for index, block in enumerate(blocks):
        block = as_object(block, f"content block #{index}")
        if block.get("type") != "tool_use":
            continue
        name = optional_text(block.get("name"), f"tool_use block #{index}: name")
        if name is None:
            raise FormatError(f"tool_use block #{index} has no name")
        arguments = block.get("input", {})
        if not isinstance(arguments, Mapping | str):
            raise FormatError(
                f"tool_use block #{index}: input must be an object, not {type(arguments).__name__}"
            )
        call_id = optional_text(block.get("id"), f"tool_use block #{index}: id")
        extra = {"id": call_id} if call_id else {}
        calls.append(ToolCall(name=name, arguments=arguments, subject=subject, **extra))
    return calls


def render_result(result: ToolResult) -> dict[str, Any]:
    """A ``tool_result`` content block; failures carry ``is_error`` and the error text."""
    content: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, TextBlock):
            content.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            content.append(
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": block.media_type,
                        "data": block.data,
                    },
                }
            )
    if result.error is not None:
        content.insert(0, {"type": "text", "text": str(result.error)})
    return {
        "type": "tool_result",
        "tool_use_id": result.call_id,
        "content": content,
        "is_error": not result.ok,
    }


def render_results(results: Iterable[ToolResult]) -> dict[str, Any]:
    """The user message that returns several results at once, as the Messages API expects."""
    return {"role": "user", "content": [render_result(r) for r in results]}
