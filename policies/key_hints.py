""" "Did you mean" for an unknown key of a policy file: the key names it resembles at that place.

A misspelt key (``efect``, ``path``, ``read_only_tool``) is refused when the file loads; the
error is more useful when it names the key the writer meant. Which keys are valid depends on
where the key is (a rule, an approval, the ``[process]`` table ...), so the place is followed
through the file's models, from the top, by the location pydantic reports.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

UNKNOWN_KEY = "unknown key; check the spelling against the policy format in the README"


def unknown_key_message(root: type[BaseModel], location: Sequence[str | int]) -> str:
    """The message for the unknown key at ``location`` (as pydantic reports it, the key last)
    of a document validated by ``root``: with the closest valid keys there, when any is close."""
    if not location or not isinstance(location[-1], str):
        return UNKNOWN_KEY
    names = _keys_at(root, location[:-1])
    close = difflib.get_close_matches(location[-1], names, n=2, cutoff=0.6)
    if not close:
        return UNKNOWN_KEY
    return "unknown key; did you mean " + " or ".join(repr(name) for name in close) + "?"


def _keys_at(root: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The field names of the model that holds the keys at ``path``; none when the path leads
    to no model (a free-form table)."""
    current: list[Any] = [root]
    for part in path:
        following: list[Any] = []
        for kind in _members(current):
            following += _step(kind, part)
        if not following:
            return []
        current = following
    names: list[str] = []
    for kind in _members(current):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            names += [n for n in kind.model_fields if n not in names]
    return names


def _step(kind: Any, part: str | int) -> list[Any]:
    """What is one step (a field, an index, a table key, a union member's name) into ``kind``."""
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        field = kind.model_fields.get(part) if isinstance(part, str) else None
        if field is not None:
            return [field.annotation]
        # a union member as pydantic names it in a location: ('allow', 0, 'ExampleCall', ...)
        return [kind] if part == kind.__name__ else []
    origin = get_origin(kind)
    args = get_args(kind)
    if origin in (list, tuple) and isinstance(part, int) and args:
        return [args[0]]
    if origin is dict and isinstance(part, str) and len(args) == 2:
        return [args[1]]
    return []


def _members(kinds: list[Any]) -> list[Any]:
    """``kinds`` with unions, optionals and annotations taken apart into their members."""
    found: list[Any] = []
    pending = list(kinds)
    while pending:
        kind = pending.pop(0)
        origin = get_origin(kind)
        if origin in (Union, types.UnionType):
            pending += list(get_args(kind))
        elif origin is Annotated:
            pending.append(get_args(kind)[0])
        elif kind is not type(None):
            found.append(kind)
    return found
