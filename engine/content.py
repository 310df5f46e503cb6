"""What a tool returns: the blocks its answer is made of, and `ToolOutput` for more.

Tools return whatever is natural (a string, a number, a dict, a pydantic model, a list of blocks);
`to_content` turns that into a list of blocks once, here, so every format renderer downstream
deals with one shape. A tool that has more to say returns a `ToolOutput`: its content, metadata
of its own (free-form, for the caller), and typed reports of what it did (`FileReport`,
`ProcessReport`), which are the only things of a tool's that reach the audit log.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
import pydantic_core
from pydantic import BaseModel

from stockade.engine.errors import FormatError, OutputError
from stockade.sandbox.limits import Isolation


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


@dataclass(frozen=True, slots=True)
class FileReport:
    """A file a tool changed: its logical path, the bytes it holds now (or held, when deleted),
    and the sha256 of its content before and after (None: there was no file)."""

    path: str
    bytes: int
    sha256_before: str | None
    sha256_after: str | None

    def as_metadata(self) -> dict[str, Any]:
        """The report as result metadata shows it."""
        return {
            "path": self.path,
            "bytes": self.bytes,
            "sha256_before": self.sha256_before,
            "sha256_after": self.sha256_after,
        }


@dataclass(frozen=True, slots=True)
class ProcessReport:
    """A process a tool ran: under which isolation, how it ended, and why it was killed."""

    isolation: Isolation
    exit_code: int | None
    killed_reason: str | None


@dataclass(slots=True)
class ToolOutput:
    """Return this from a tool to give its result more than content: ``metadata`` of the tool's
    own (shown in ``result.metadata``; keys the engine uses for its own notes keep the engine's
    values, the tool's are in ``result.tool_metadata``), and typed reports of what it did."""

    content: Any
    metadata: dict[str, Any] = field(default_factory=dict)
    file: FileReport | None = None
    process: ProcessReport | None = None


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
    raise FormatError(f"unknown content block type {kind!r}; expected 'text' or 'image'")
