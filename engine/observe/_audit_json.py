"""A record as one line of JSON, whatever it holds.

Records carry what callers and models sent: a call id with a lone surrogate (``json.loads``
makes one from the escape ``"\\ud800"``), a path from undecodable bytes, an integer of
thousands of digits, an object whose ``str()`` raises, a mapping nested past any parser's
limit. None of these may cost a record, let alone the ones written with it, so `dumps` never
raises: what orjson writes as it is (the fast path, almost always) is written so; anything else
goes through `plain`, which keeps the record's shape and turns only the parts that cannot be
written into text, and the record says so with ``"escaped": true``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import orjson

MAX_DEPTH = 200  # below orjson's own limit (254), and far below Python's recursion limit


def dumps(entry: Mapping[str, Any]) -> bytes:
    """``entry`` as JSON bytes (one object, no newline). Never raises."""
    try:
        return orjson.dumps(entry, default=text)
    except (TypeError, ValueError, RecursionError):  # orjson.JSONEncodeError is a TypeError
        pass
    kept = plain(entry, 0)
    if not isinstance(kept, dict):  # a mapping that is not a dict and would not say so
        kept = {"value": kept}
    kept["escaped"] = True
    # the standard library, not orjson, for the integers past 64 bits JSON allows
    return json.dumps(kept, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def plain(value: Any, depth: int) -> Any:
    """``value`` as what orjson can always write: strings made encodable (a lone surrogate
    becomes the six characters of its escape), integers as they are (or their size, past the
    digits Python will print), infinities and NaN as null, mappings with text keys, sequences as
    lists, anything else as its text; nothing deeper than `MAX_DEPTH`."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None  # as orjson writes them
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, int):
        try:
            str(value)
        except ValueError:  # more digits than int -> str allows
            return f"<an integer of {value.bit_length()} bits>"
        return int(value)  # an int subclass's own str() may say anything
    if depth >= MAX_DEPTH:
        return f"<nested deeper than {MAX_DEPTH} levels>"
    if isinstance(value, Mapping):
        return {clean(text(k)): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, depth + 1) for v in value]
    return clean(text(value))


def clean(value: str) -> str:
    """``value`` if it can be written as UTF-8, else with each lone surrogate escaped."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode()
    return value


def text(value: object) -> str:
    """``str(value)``, or its ``repr``, or its type's name: whichever does not raise."""
    try:
        return str(value)
    except Exception:  # an object that cannot say what it is is still recorded
        pass
    try:
        return repr(value)
    except Exception:
        return f"<a {type(value).__name__} that cannot be shown>"
