"""A result's metadata made safe to show: what a tool's `ToolOutput` brings, checked and
rendered so that nothing downstream (a format's JSON, the log, a span) fails on it.

A tool's metadata is free-form. Most of it is plain JSON data and is kept as it is (one
``orjson.dumps`` tells); a value that is not (a path of undecodable bytes read as lone
surrogates, an object whose ``str()`` raises, an integer too long to print, a cycle) is
rendered: strings escaped, integers beyond 64 bits as their digits, other objects as JSON data
where pydantic can make them so, else as `printable` text. ``result.tool_metadata`` keeps
exactly what the tool returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import pydantic_core

from stockade.engine.content import FileReport, ProcessReport, ToolOutput
from stockade.engine.errors import OutputError
from stockade.engine.messages import escaped, printable

_DEEPEST = 32  # nesting rendered as data; deeper values are shown as text


def checked(output: ToolOutput) -> None:
    """Raise `OutputError` when ``output``'s fields are not of the types the engine reads."""
    wrong: list[str] = []
    if not isinstance(output.metadata, Mapping):
        wrong.append(f"metadata is {type(output.metadata).__name__}, not a dict")
    if output.file is not None and not isinstance(output.file, FileReport):
        wrong.append(f"file is {type(output.file).__name__}, not a FileReport")
    if output.process is not None and not isinstance(output.process, ProcessReport):
        wrong.append(f"process is {type(output.process).__name__}, not a ProcessReport")
    if wrong:
        raise OutputError(f"the tool returned a ToolOutput whose {'; '.join(wrong)}")


def shown(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` with every value that JSON cannot hold as it is rendered."""
    try:
        orjson.dumps(metadata)
    except (orjson.JSONEncodeError, TypeError):
        pass
    else:
        return metadata  # the usual case: plain data, kept as it is
    rendered: dict[str, Any] = {}
    for key, value in metadata.items():
        rendered[_key(key)] = _value(value, 0)
    return rendered


def _key(key: object) -> str:
    return escaped(key) if type(key) is str else printable(key)


def _value(value: Any, depth: int) -> Any:
    """``value`` as JSON data, never raising."""
    try:
        return _data(value, depth)
    except BaseException:  # a hostile object (or one nested too deep): shown as text
        return printable(value)


def _data(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return escaped(str.__str__(value))
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else _long_int(value)
    if depth >= _DEEPEST:
        return printable(value)
    if isinstance(value, Mapping):
        return {_key(k): _value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_value(item, depth + 1) for item in value]
    try:
        plain = pydantic_core.to_jsonable_python(value)  # dataclasses, models, dates ...
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError, RecursionError):
        return printable(value)
    return _data(plain, depth + 1)


def _long_int(value: int) -> str:
    """An integer outside 64 bits (which JSON libraries refuse) as its digits, or as a
    description when it has more than Python prints (4,300 digits by default)."""
    try:
        return str(value)
    except ValueError:
        return f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"


__all__ = ["checked", "shown"]
