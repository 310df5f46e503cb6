"""Checks on the shape of a model's message, shared by the JSON formats (``openai``,
``anthropic``): a message is outside input, so every level is checked before it is used and a
wrong one is a `FormatError` naming the place, never a ``TypeError`` from deep inside. The
SDKs' own objects (pydantic models: ``ChatCompletionMessage``, ``ResponseFunctionToolCall``,
an Anthropic ``Message``) are read as the JSON they stand for (`plain`), at every level."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from stockade.engine.errors import FormatError


def kind(value: Any) -> str:
    """What ``value`` is, in words: "an int", "a dict"; None is "null", as JSON writes it."""
    if value is None:
        return "null"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def is_list(value: Any) -> TypeGuard[Sequence[Any]]:
    """A JSON array as Python holds it: a sequence that is not text or bytes."""
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


def as_list(value: Any, where: str) -> Sequence[Any]:
    """``value`` if it is a list; otherwise a `FormatError` saying what ``where`` holds."""
    if not is_list(value):
        raise FormatError(f"{where} is {kind(value)}, not a list")
    return value


def plain(value: Any) -> Any:
    """An SDK's own object (a pydantic model, as the OpenAI and Anthropic SDKs return) as the
    JSON-shaped data it stands for; anything else as it is. Duck-typed: the SDKs are not
    Stockade's dependencies, and their classes change between versions."""
    if isinstance(value, Mapping | str | bytes | bytearray) or is_list(value):
        return value
    dump = getattr(value, "model_dump", None)
    if not callable(dump):
        return value
    try:
        return dump(mode="json")
    except Exception as exc:  # the object's own code: whatever it raises is a bad message
        raise FormatError(
            f"{type(value).__name__} could not be read as data ({type(exc).__name__}: {exc})"
        ) from None


def as_object(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` (an SDK's object read as its data) if it is an object; otherwise a
    `FormatError` saying what ``where`` holds."""
    value = plain(value)
    if not isinstance(value, Mapping):
        raise FormatError(f"{where} is {kind(value)}, not an object")
    return value


def optional_text(value: Any, where: str) -> str | None:
    """A string field that may be missing (absent, null, empty: None). Anything else but a
    string is refused rather than turned into one with ``str()``, which for a deeply nested
    value or a huge int raises an error of its own."""
    if not value:
        return None
    if not isinstance(value, str):
        raise FormatError(f"{where} is {kind(value)}, not a string")
    return value
