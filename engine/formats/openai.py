"""OpenAI tool calls: Chat Completions ``tool_calls`` and Responses API ``function_call`` items."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from stockade.engine.errors import FormatError
from stockade.engine.messages import ToolCall, ToolResult

_NOT_CALLS = frozenset({"message", "reasoning", "text", "web_search_call", "file_search_call"})


def parse_tool_calls(message: Any, *, subject: str = "agent") -> list[ToolCall]:
    """Tool calls from an OpenAI message, response, or list of calls.

    Accepts a Chat Completions response (``choices[0].message``), an assistant message with
    ``tool_calls``, a list of tool-call objects, a Responses API response (``output``) or a
    list of its items. Arguments stay as the model wrote them (a JSON string): the engine
    validates them, so malformed JSON becomes that call's error result instead of losing the
    whole message.
    """
    if isinstance(message, Mapping):
        if "choices" in message:
            choices = message["choices"]
            if not choices:
                return []
            if not isinstance(choices[0], Mapping):
                raise FormatError(f"choices[0] is a {type(choices[0]).__name__}, not an object")
            return parse_tool_calls(choices[0].get("message", {}), subject=subject)
        if "output" in message and isinstance(message["output"], list):
            return parse_tool_calls(message["output"], subject=subject)
        if message.get("type") == "function_call":
            return [_responses_item(message, 0, subject)]
        items = message.get("tool_calls") or []
    elif isinstance(message, Sequence) and not isinstance(message, str | bytes):
        items = message
    else:
        raise FormatError(
            "expected an OpenAI message, response or list of tool calls, "
            f"got {type(message).__name__}"
        )
    calls = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise FormatError(f"tool call #{index} is a {type(item).__name__}, not an object")
        if item.get("type") == "function_call":
            calls.append(_responses_item(item, index, subject))
        elif item.get("type", "function") == "function" and "function" in item:
            calls.append(_chat_item(item, index, subject))
        elif item.get("type") in _NOT_CALLS:
            continue  # Responses output items that are not calls
        else:
            raise FormatError(
                f"tool call #{index} has type {item.get('type')!r}; expected 'function' "
                "(Chat Completions) or 'function_call' (Responses)"
            )
    return calls


def _chat_item(item: Mapping[str, Any], index: int, subject: str) -> ToolCall:
    function = item.get("function")
    if not isinstance(function, Mapping) or not function.get("name"):
        raise FormatError(f"tool call #{index} has no function name")
    extra = {"id": str(item["id"])} if item.get("id") else {}
    return ToolCall(
        name=str(function["name"]),
        arguments=_arguments(function.get("arguments"), index),
        subject=subject,
        **extra,
    )


def _responses_item(item: Mapping[str, Any], index: int, subject: str) -> ToolCall:
    if not item.get("name"):
        raise FormatError(f"function_call item #{index} has no name")
    call_id = item.get("call_id") or item.get("id")
    extra = {"id": str(call_id)} if call_id else {}
    return ToolCall(
        name=str(item["name"]),
        arguments=_arguments(item.get("arguments"), index),
        subject=subject,
        **extra,
    )


def _arguments(raw: Any, index: int) -> Mapping[str, Any] | str:
    if raw is None:
        return {}
    if isinstance(raw, str | Mapping):
        return raw
    raise FormatError(
        f"tool call #{index}: arguments must be a JSON string or object, not {type(raw).__name__}"
    )


def render_result(
    result: ToolResult, *, api: Literal["chat", "responses"] = "chat"
) -> dict[str, Any]:
    """The message (Chat Completions) or input item (Responses) that returns a result."""
    if api == "responses":
        return {"type": "function_call_output", "call_id": result.call_id, "output": result.text}
    return {"role": "tool", "tool_call_id": result.call_id, "content": result.text}
