"""The reading file tools: text by lines (whole, a range, the head or the tail, also of files
too big to read whole), images and other binary files, and several files in one call.

Like every file tool they reach files only through the `VirtualFS` the engine gives them (a
guarded view, which judges each file where it really is, at the moment it is opened), and
declare their paths to the policy, a list of paths too (each one is judged):

    toolkit.add(read_text_file)          # read_text_file(path, tail=20) of a 2 GB log works
    toolkit.add(read_multiple_files)     # one file's error never fails the others
"""

from __future__ import annotations

import asyncio
import base64
import mimetypes
from typing import Annotated, Any

from pydantic import Field

from stockade.engine.builtin import line_ranges
from stockade.engine.builtin.file_support import MAX_READ_CHARS, cut, lines_of, sha
from stockade.engine.content import ImageBlock, TextBlock, ToolOutput
from stockade.engine.tools import tool
from stockade.sandbox import QuotaError, SandboxError, VirtualFS
from stockade.sandbox.text import SNIFF_BYTES, decode_text, refuse_binary

MAX_MEDIA_BYTES = 5 << 20  # an image bigger than this is refused by most model APIs anyway
MAX_BLOB_BYTES = MAX_READ_CHARS * 3 // 4  # other binary files: base64 within the output limit
MAX_FILES = 100  # paths in one read_multiple_files call
INLINE_BYTES = 64 << 10  # read_text_file reads a file up to this size on the event loop
# what the first bytes of an image say it is: the types model APIs take as images
_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)

Line = Annotated[int | None, Field(ge=1)]


@tool(read_only=True, paths={"path": "read"})
async def read_text_file(
    path: str,
    fs: VirtualFS,
    start_line: Line = None,
    end_line: Line = None,
    head: Line = None,
    tail: Line = None,
) -> ToolOutput:
    """Read a UTF-8 text file: whole, a range of lines, its first lines or its last lines.

    A file over the size limit for one read cannot be read whole, but its head, its tail and
    any range of its lines can.

    Args:
        path: The file, e.g. /workspace/src/app.py (relative paths are under /workspace).
        start_line: First line to return (1-based); default the first.
        end_line: Last line to return (inclusive); default the last.
        head: Return only the first this many lines (not with tail or a line range).
        tail: Return only the last this many lines (not with head or a line range).
    """
    _check_choice(start_line, end_line, head, tail)
    # The usual read is of a small file: a few system calls, like those the engine already
    # makes on the event loop to resolve the path it judges, and a worker thread's round trip
    # would cost more than the read (about 0.1 ms). A bigger file is read in a thread, so that
    # decoding and hashing it never hold the loop and the call's timeout can stop waiting.
    size = fs.stat(path).size
    if size <= INLINE_BYTES:
        return read_text(path, fs, start_line, end_line, head, tail, size=size)
    return await asyncio.to_thread(read_text, path, fs, start_line, end_line, head, tail)


def read_text(
    path: str,
    fs: VirtualFS,
    start_line: int | None = None,
    end_line: int | None = None,
    head: int | None = None,
    tail: int | None = None,
    *,
    size: int | None = None,
) -> ToolOutput:
    """What `read_text_file` returns, read in the calling thread (``size``: the file's, when
    the caller has just read it)."""
    _check_choice(start_line, end_line, head, tail)
    canonical = fs.canonical(path)
    if size is None:
        size = fs.stat(path).size
    if size > fs.max_file_bytes:
        if start_line is None and end_line is None and head is None and tail is None:
            raise QuotaError(
                f"{canonical} is {size} bytes, over the {fs.max_file_bytes}-byte limit for "
                "reading one file whole; read part of it with head, tail, or start_line and "
                "end_line",
                canonical,
            )
        return _read_part(fs, path, canonical, size, start_line, end_line, head, tail)
    data = fs.read_bytes(path)
    lines = lines_of(decode_text(data, canonical))
    if tail is not None:
        first = max(len(lines) - tail, 0)
        last = len(lines)
    else:
        first = (start_line or 1) - 1
        last = head if head is not None else end_line if end_line is not None else len(lines)
        if first >= len(lines) and first > 0:
            raise ValueError(
                f"start_line {first + 1} is past the end: the file has {len(lines)} lines"
            )
    chosen, truncated = cut("".join(lines[first:last]), "read a line range")
    metadata: dict[str, Any] = {
        "path": canonical,
        "bytes": len(data),
        "lines": len(lines),
        "sha256": sha(data),
    }
    if truncated:
        metadata["truncated"] = True
    return ToolOutput(chosen, metadata)


def _check_choice(
    start_line: int | None, end_line: int | None, head: int | None, tail: int | None
) -> None:
    ranged = start_line is not None or end_line is not None
    if head is not None and tail is not None:
        raise ValueError("give head or tail, not both (one call reads the first or last lines)")
    if ranged and (head is not None or tail is not None):
        raise ValueError(
            "give head or tail, or start_line/end_line, not both: head=N is lines 1 to N"
        )
    if start_line is not None and end_line is not None and end_line < start_line:
        raise ValueError(f"end_line {end_line} is before start_line {start_line}")


def _read_part(
    fs: VirtualFS,
    path: str,
    canonical: str,
    size: int,
    start_line: int | None,
    end_line: int | None,
    head: int | None,
    tail: int | None,
) -> ToolOutput:
    """Lines of a file too big to read whole, found by reading it in chunks (each read judged
    where the file is, as a whole read is)."""
    chunk = max(1, min(line_ranges.CHUNK, fs.max_file_bytes))

    def read(offset: int, length: int) -> bytes:
        return fs.read_range(path, offset, length)

    refuse_binary(read(0, min(SNIFF_BYTES, fs.max_file_bytes)), canonical)
    if tail is not None:
        span = line_ranges.tail(read, size, tail, chunk)
    elif head is not None:
        span = line_ranges.head(read, size, head, chunk)
    else:
        span = line_ranges.lines(read, size, start_line or 1, end_line, chunk)
    # at most as many bytes as the characters shown can take (UTF-8: four each at most)
    limit = span.start + 4 * MAX_READ_CHARS + 4
    whole = span.end <= limit
    data = line_ranges.read_span(read, span.start, min(span.end, limit), chunk)
    text = line_ranges.decode_part(data, canonical, span.start, whole=whole)
    if whole:
        chosen, truncated = cut(text, "read a smaller line range")
    else:  # read up to a limit: how much more there is, nobody counted
        more = "the lines asked for go on past what is shown; read a smaller line range"
        chosen, truncated = f"{text[:MAX_READ_CHARS]}\n[... more: {more}]", True
    metadata: dict[str, Any] = {
        "path": canonical,
        "bytes": size,
        "partial": True,
        "lines_known": span.total_lines is not None,
    }
    if span.total_lines is not None:
        metadata["lines"] = span.total_lines
    if span.first_line is not None:
        metadata["first_line"] = span.first_line
    if span.last_line is not None:
        metadata["last_line"] = span.last_line
    metadata["truncated"] = truncated
    return ToolOutput(chosen, metadata)


def sniff_image(start: bytes) -> str | None:
    """The media type of an image (PNG, JPEG, GIF, WebP) told by its first bytes, else None."""
    for magic, media_type in _IMAGE_MAGIC:
        if start.startswith(magic):
            return media_type
    if start[:4] == b"RIFF" and start[8:12] == b"WEBP":
        return "image/webp"
    return None


@tool(read_only=True, paths={"path": "read"})
def read_media_file(path: str, fs: VirtualFS) -> ToolOutput:
    """Read an image (PNG, JPEG, GIF, WebP) as an image, or another binary file as base64 text
    with its MIME type.

    Args:
        path: The file, e.g. /workspace/docs/diagram.png.
    """
    canonical = fs.canonical(path)
    size = fs.stat(path).size
    if size > min(MAX_MEDIA_BYTES, fs.max_file_bytes):
        raise QuotaError(
            f"{canonical} is {size} bytes, over the "
            f"{min(MAX_MEDIA_BYTES, fs.max_file_bytes)}-byte limit of read_media_file",
            canonical,
        )
    data = fs.read_bytes(path)
    image = sniff_image(data[:16])
    guessed = mimetypes.guess_type(canonical, strict=False)[0]
    metadata: dict[str, Any] = {"path": canonical, "bytes": len(data), "sha256": sha(data)}
    if image is not None:  # told by the content: a misnamed image is still one
        metadata["media_type"] = image
        blocks = [TextBlock(f"{canonical} ({image}, {len(data)} bytes)")]
        return ToolOutput([*blocks, ImageBlock.from_bytes(data, image)], metadata)
    if len(data) > MAX_BLOB_BYTES:
        raise QuotaError(
            f"{canonical} is {len(data)} bytes and not an image read_media_file shows (PNG, "
            f"JPEG, GIF, WebP); other files are returned as base64 up to {MAX_BLOB_BYTES} bytes",
            canonical,
        )
    media_type = guessed or "application/octet-stream"
    metadata["media_type"] = media_type
    note = ""
    if media_type in {"image/png", "image/jpeg", "image/gif", "image/webp"}:
        # named like an image, but its bytes are not one: never shown to a model as an image
        note = f"; its name says {media_type}, but its content is not such an image"
        media_type = metadata["media_type"] = "application/octet-stream"
    encoded = base64.b64encode(data).decode("ascii")
    header = f"{canonical} ({media_type}, {len(data)} bytes{note}), base64:"
    return ToolOutput(f"{header}\n{encoded}", metadata)


@tool(read_only=True, paths={"paths": "read"})
def read_multiple_files(
    paths: Annotated[list[str], Field(min_length=1, max_length=MAX_FILES)], fs: VirtualFS
) -> ToolOutput:
    """Read several UTF-8 text files at once, each under a header line; a file that cannot be
    read (missing, binary, refused) gets an error line and the others are still read.

    Args:
        paths: The files, e.g. ["/workspace/a.py", "/workspace/b.py"].
    """
    parts: list[str] = []
    files: list[dict[str, Any]] = []
    room = MAX_READ_CHARS
    for path in paths:
        try:
            where = fs.canonical(path)
        except SandboxError:
            where = path
        if room <= 0:
            parts.append(f"==> {where} <==\n[not read: the output limit was reached]")
            files.append({"path": where, "error": "not read: output limit"})
            continue
        try:
            data = fs.read_bytes(path)
            text = decode_text(data, where)
        except SandboxError as exc:  # this file only; a refusal names what was refused
            parts.append(f"==> {where} <==\n[error: {type(exc).__name__}: {exc}]")
            files.append({"path": where, "error": type(exc).__name__})
            continue
        report: dict[str, Any] = {"path": where, "bytes": len(data), "sha256": sha(data)}
        if len(text) > room:
            text = f"{text[:room]}\n[... {len(text) - room} more characters: read it alone]"
            report["truncated"] = True
        room -= len(text)
        parts.append(f"==> {where} <==\n{text}")
        files.append(report)
    failed = sum(1 for file in files if "error" in file)
    metadata = {"files": files, "read": len(files) - failed, "failed": failed}
    return ToolOutput("\n".join(parts), metadata)
