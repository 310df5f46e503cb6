"""Step 2, validate: a call's arguments parsed, checked against the tool's schema, presets
applied, and context objects injected by type."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import pydantic_core

from stockade.engine.errors import ArgumentError
from stockade.engine.injection import ContextLevel, Emitter, ToolContext
from stockade.engine.messages import ToolCall, printable
from stockade.engine.pipeline._surrogates import lone_surrogate, surrogate_in
from stockade.engine.tools import RegisteredTool
from stockade.engine.tools.compiled import REQUIRED


def parse_arguments(arguments: Mapping[str, Any] | str, limit: int) -> Mapping[str, Any]:
    """The call's arguments as a mapping of at most ``limit`` bytes of JSON; raises
    `ArgumentError` saying what is wrong and what to send instead."""
    if isinstance(arguments, str):
        # a character is at most 4 bytes in UTF-8: count bytes only when it could matter (a
        # lone surrogate, which UTF-8 cannot hold, counted as the 3 bytes it would take)
        size = (
            len(arguments)
            if len(arguments) * 4 <= limit
            else len(arguments.encode("utf-8", "surrogatepass"))
        )
        if size > limit:
            raise ArgumentError(
                f"arguments are {size} bytes, over the limit of {limit}; "
                "send less data (write large content to a file first)"
            )
        try:
            parsed = orjson.loads(arguments) if arguments.strip() else {}
        except orjson.JSONDecodeError as exc:
            raise ArgumentError(
                lone_surrogate(arguments)
                or f"arguments are not valid JSON ({exc}); send a JSON object"
            ) from None
        if not isinstance(parsed, dict):
            raise ArgumentError(f"arguments must be a JSON object, not {type(parsed).__name__}")
        return parsed
    if type(arguments) is not dict and not isinstance(arguments, Mapping):
        raise ArgumentError(
            f"arguments must be a mapping or a JSON string, not {type(arguments).__name__}"
        )
    try:
        size = len(orjson.dumps(arguments, default=str, option=orjson.OPT_NON_STR_KEYS))
    except (orjson.JSONEncodeError, TypeError):
        try:  # orjson stops at 64-bit integers and 254 levels of nesting; pydantic does not
            size = len(pydantic_core.to_json(arguments, fallback=printable))
        except (ValueError, RecursionError) as exc:
            raise ArgumentError(
                surrogate_in(arguments)
                or f"arguments cannot be read as JSON ({printable(exc)}); send plain JSON data"
            ) from None
    if size > limit:
        raise ArgumentError(
            f"arguments are {size} bytes as JSON, over the limit of {limit}; send less data"
        )
    return arguments


def validate(
    tool: RegisteredTool,
    call: ToolCall,
    levels: tuple[ContextLevel, ...],
    emitter: Emitter,
    limit: int,
) -> tuple[dict[str, Any], ToolContext | None, list[str]]:
    """The tool's keyword arguments, its `ToolContext` (None when it needs none), and the preset
    names the call tried to set (ignored). ``levels`` is the context chain, nearest first."""
    arguments = parse_arguments(call.arguments, limit)
    ignored: list[str] = _NOTHING
    if tool.hidden:
        ignored = [k for k in arguments if k in tool.hidden]
        if ignored:
            arguments = {k: v for k, v in arguments.items() if k not in tool.hidden}
    kwargs = tool.validate(arguments)
    if not tool.needs_context:
        return kwargs, None, ignored
    ctx = ToolContext(call, tool.name, emitter, levels)
    for injection in tool.injections:
        wanted = injection.type
        if issubclass(wanted, Emitter):
            value: Any = emitter
        elif issubclass(wanted, ToolContext):
            value = ctx
        elif issubclass(wanted, ToolCall):
            value = call
        else:
            value = ctx.get(wanted, REQUIRED)
            if value is REQUIRED:
                if injection.default is REQUIRED:
                    ctx.require(wanted)  # raises ContextMissingError with the full story
                value = injection.default
        kwargs[injection.name] = value
    return kwargs, ctx, ignored


_NOTHING: list[str] = []  # never changed: what most calls return as "nothing ignored"


def ignored_warning(ignored: list[str]) -> str:
    """What the result says of preset names the call tried to set."""
    return (
        f"argument(s) {', '.join(ignored)} are preset by the toolkit; the values given in the "
        "call were ignored"
    )
