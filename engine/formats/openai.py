"""OpenAI tool calls: Chat Completions ``tool_calls`` and Responses API ``function_call`` items."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from stockade.engine.errors import FormatError
from stockade.engine.formats._shapes import as_list, as_object, is_list, kind, optional_text, plain
from stockade.engine.messages import ToolCall, ToolResult

_NOT_CALLS = frozenset({"message", "reasoning", "text", "web_search_call", "file_search_call"})


def parse_tool_calls(message: Any, *, subject: str = "agent") -> list[ToolCall]:
    """Tool calls from an OpenAI message, response, or list of calls.

    Accepts a Chat Completions response (``choices[0].message``), an assistant message with
    ``tool_calls``, a list of tool-call objects, a Responses API response (``output``) or a
    list of its items. Arguments stay as the model wrote them (a JSON string): the engine
    validates them, so malformed JSON becomes that call's error result instead of losing the
    whole message. Anything else, at any level, is a `FormatError` saying what was found where.
    """
    message = plain(message)  # an SDK's own object: the data it stands for
    if isinstance(message, Mapping) and "choices" in message:
        choices = as_list(message["choices"], "choices")
        if not choices:
            return []
        choice = as_object(choices[0], "choices[0]")
        message = as_object(choice.get("message", {}), "choices[0].message")
    if isinstance(message, Mapping):
        if is_list(message.get("output")):
            items = message["output"]
        elif message.get("type") == "function_call":
            return [_responses_item(message, 0, subject)]
        else:
            listed = message.get("tool_calls")
            items = [] if listed is None else as_list(listed, "tool_calls")
    elif is_list(message):
        items = message
    else:
        raise FormatError(
            "expected an OpenAI message, response or list of tool calls, "
            f"got {type(message).__name__}"
        )
    calls = []
    for index, item in enumerate(items):
        call = _item(item, index, subject)
        if call is not None:
            calls.append(call)
    return calls


def _item(item: Any, index: int, subject: str) -> ToolCall | None:
    """The call one item holds, or None for a Responses output item that is not a call."""
    item = as_object(item, f"tool call #{index}")
    item_type = item.get("type", "function")
    if not isinstance(item_type, str):
        raise FormatError(f"tool call #{index}: its type is {kind(item_type)}, not a string")
    if item_type == "function_call":
        return _responses_item(item, index, subject)
    if item_type == "function":
        return _chat_item(item, index, subject)
    if item_type in _NOT_CALLS:
        return None
    raise FormatError(
        f"tool call #{index} has type {item_type!r}; expected 'function' "
        "(Chat Completions) or 'function_call' (Responses)"
    )


def _chat_item(item: Mapping[str, Any], index: int, subject: str) -> ToolCall:
    function = item.get("function")
    if not isinstance(function, Mapping):
        raise FormatError(f"tool call #{index} has no function name")
    name = optional_text(function.get("name"), f"tool call #{index}: function name")
    if name is None:
        raise FormatError(f"tool call #{index} has no function name")
    call_id = optional_text(item.get("id"), f"tool call #{index}: id")
    return ToolCall(
        name=name,
        arguments=_arguments(function.get("arguments"), index),
        subject=subject,
        **({"id": call_id} if call_id else {}),
    )


def _responses_item(item: Mapping[str, Any], index: int, subject: str) -> ToolCall:
    name = optional_text(item.get("name"), f"function_call item #{index}: name")
    if name is None:
        raise FormatError(f"function_call item #{index} has no name")
    call_id = optional_text(item.get("call_id"), f"function_call item #{index}: call_id")
    call_id = call_id or optional_text(item.get("id"), f"function_call item #{index}: id")
    return ToolCall(
        name=name,
        arguments=_arguments(item.get("arguments"), index),
        subject=subject,
        **({"id": call_id} if call_id else {}),
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
