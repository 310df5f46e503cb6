"""Result content: the blocks a tool's answer is made of, and how return values become blocks.

Tools return whatever is natural (a string, a number, a dict, a pydantic model, a list of blocks);
`to_content` turns that into a list of blocks once, here, so every format renderer downstream
deals with one shape.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
import pydantic_core
from pydantic import BaseModel

from stockade.engine.errors import OutputError


@dataclass(slots=True)
class TextBlock:
    """Plain text for the model."""

    text: str
    type: Literal["text"] = "text"


@dataclass(slots=True)
class ImageBlock:
    """An image, base64-encoded, with its media type (``image/png`` ...)."""

    data: str
    media_type: str
    type: Literal["image"] = "image"

    @classmethod
    def from_bytes(cls, raw: bytes, media_type: str) -> ImageBlock:
        """Build an image block from raw bytes."""
        return cls(base64.b64encode(raw).decode("ascii"), media_type)


Block = TextBlock | ImageBlock


@dataclass(slots=True)
class ToolOutput:
    """Return this from a tool to attach metadata to its result alongside the content."""

    content: Any
    metadata: dict[str, Any] = field(default_factory=dict)


def to_content(value: Any) -> list[Block]:
    """Turn a tool's return value into content blocks.

    Strings become one text block; blocks pass through; ``None`` is empty; anything else
    JSON-serialisable (numbers, dicts, lists, pydantic models, dataclasses, datetimes ...)
    becomes its JSON text. Raises `OutputError` naming the type when nothing fits.
    """
    kind = type(value)
    if kind is str:
        return [TextBlock(value)]
    if kind is list and value and all(isinstance(v, TextBlock | ImageBlock) for v in value):
        return list(value)
    if kind is int or kind is float or kind is dict or kind is list or kind is bool:
        try:
            return [TextBlock(orjson.dumps(value).decode())]
        except (orjson.JSONEncodeError, TypeError):
            pass  # NaN, non-str keys, odd values inside: let pydantic try below
    if isinstance(value, str):
        return [TextBlock(value)]
    if value is None:
        return []
    if isinstance(value, TextBlock | ImageBlock):
        return [value]
    if (
        isinstance(value, Sequence)
        and value
        and all(isinstance(v, TextBlock | ImageBlock) for v in value)
    ):
        return list(value)
    if isinstance(value, BaseModel):
        return [TextBlock(value.model_dump_json())]
    if isinstance(value, bytes | bytearray | memoryview):
        raise OutputError(
            f"the tool returned {type(value).__name__}, which is not text; decode it to str, "
            "or return ImageBlock.from_bytes(data, media_type) for an image"
        )
    try:
        return [TextBlock(pydantic_core.to_json(value).decode())]
    except (pydantic_core.PydanticSerializationError, ValueError, RecursionError) as exc:
        raise OutputError(
            f"the tool returned a {type(value).__name__}, which cannot be turned into result "
            f"content ({exc}); return str, JSON-compatible data, a pydantic model or content blocks"
        ) from None


def merge_blocks(blocks: Sequence[Block]) -> list[Block]:
    """Join runs of adjacent text blocks into one, keeping images where they are.

    Streaming tools yield text in pieces; the final result reads better as one block.
    """
    merged: list[Block] = []
    for block in blocks:
        if isinstance(block, TextBlock) and merged and isinstance(merged[-1], TextBlock):
            merged[-1] = TextBlock(merged[-1].text + block.text)
        else:
            merged.append(block)
    return merged


def text_of(blocks: Sequence[Block]) -> str:
    """The text of a content list, images shown as a placeholder naming their media type."""
    parts = [b.text if isinstance(b, TextBlock) else f"[image: {b.media_type}]" for b in blocks]
    return "\n".join(parts)


def block_to_dict(block: Block) -> dict[str, Any]:
    """A block as plain JSON data."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    return {"type": "image", "media_type": block.media_type, "data": block.data}


def block_from_dict(data: Mapping[str, Any]) -> Block:
    """Inverse of `block_to_dict`; raises ValueError for an unknown block type."""
    kind = data.get("type")
    if kind == "text":
        return TextBlock(str(data["text"]))
    if kind == "image":
        return ImageBlock(str(data["data"]), str(data["media_type"]))
    raise ValueError(f"unknown content block type {kind!r}; expected 'text' or 'image'")
