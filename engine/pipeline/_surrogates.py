"""Naming the argument that holds a lone surrogate, so the error says which one is wrong.

A lone surrogate (U+D800 to U+DFFF on its own, as a file name of undecodable bytes reads in
Python) is not a character: UTF-8 cannot encode it, so it cannot travel as JSON, whether raw or
escaped as ``\\udcff`` in the JSON text. orjson refuses such arguments as a whole without
saying where; the standard library's parser accepts them, so only then, on the error path, the
text is read again by it to find the argument.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from stockade.engine.messages import escaped

_DEEPEST = 64  # nesting searched; an argument deeper than this is not named


def lone_surrogate(text: str) -> str | None:
    """What is wrong with the JSON ``text`` when it is a lone surrogate in an argument (an
    `ArgumentError` message), or None when it is something else."""
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):  # not JSON for the standard library either
        return None
    return surrogate_in(parsed) if isinstance(parsed, dict) else None


def surrogate_in(arguments: Mapping[str, Any]) -> str | None:
    """An `ArgumentError` message naming the argument of ``arguments`` that holds a lone
    surrogate, or None when none does."""
    try:
        found = _find(arguments, (), 0)
    except Exception:  # a mapping that fails to be read: the caller's own message stands
        return None
    if found is None:
        return None
    path, index, code = found
    where = ".".join(path) or "(arguments)"
    return (
        f"argument {where} holds a lone surrogate (U+{code:04X} at character {index}), which "
        "is not text: UTF-8 and JSON cannot carry it; send valid Unicode text (binary data as "
        "base64)"
    )


def _find(value: Any, path: tuple[str, ...], depth: int) -> tuple[tuple[str, ...], int, int] | None:
    if isinstance(value, str):
        at = _surrogate_at(value)
        return None if at is None else (path, *at)
    if depth >= _DEEPEST:
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            name = escaped(key) if isinstance(key, str) else repr(key)
            if isinstance(key, str) and (at := _surrogate_at(key)) is not None:
                return (*path, f"name {name!r}"), *at
            found = _find(item, (*path, name), depth + 1)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _find(item, (*path, str(index)), depth + 1)
            if found is not None:
                return found
    return None


def _surrogate_at(text: str) -> tuple[int, int] | None:
    """Where the first lone surrogate of ``text`` is, and its code point."""
    if text.isascii():
        return None
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return exc.start, ord(text[exc.start])
    return None
