"""The reading file tools through a real `Engine` (the default policy) over real folders:
partial reads of files too big to read whole (head, tail, line ranges), `VirtualFS.read_range`
on every kind of mount, images and other binary files, and several files in one call.

Layout of every sandbox (see `build`)::

    tmp_path/ws       -> /workspace     .env (a secret), notes.txt, link -> .env, out -> ../outside
    tmp_path/inbox    -> /userinput     (read-only)
    tmp_path/outside  -> no mount: secret.txt
"""

from __future__ import annotations

import base64
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import Gate, hold, until

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult
from stockade.engine.builtin import line_ranges
from stockade.engine.builtin.file_reads import MAX_BLOB_BYTES, read_text
from stockade.engine.builtin.file_support import MAX_READ_CHARS, lines_of
from stockade.engine.builtin.files import add_file_tools
from stockade.engine.content import ImageBlock, TextBlock
from stockade.policies import Decision, Policy, Request
from stockade.sandbox import Mount, PathDeniedError, SandboxError, VirtualFS

SECRET = "API_KEY=sk-live-9c1f00d2\n"
OUTSIDE = "outside secret 41ab\n"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02"
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01"
GIF = b"GIF89a\x01\x00\x01\x00\x80\x00\x00"
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 "


class Decided:
    """An observer noting which calls have been decided."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def began(self, call: ToolCall, description: str | None, *, current: bool) -> None:
        return None

    def decided(self, call: ToolCall, request: Request, decision: Decision) -> None:
        self.ids.add(call.id)

    def ended(self, call: ToolCall, result: ToolResult) -> None:
        return None


@dataclass
class Box:
    ws: Path
    fs: VirtualFS
    engine: Engine
    gate: Gate
    decided: Decided

    async def call(self, name: str, **arguments: Any) -> ToolResult:
        return await self.engine.call(ToolCall(name=name, arguments=arguments))

    def put(self, relative: str, content: str | bytes) -> Path:
        path = self.ws / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
        return path


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Callable[..., Box]]:
    made: list[Box] = []

    def factory(**fs_options: Any) -> Box:
        root = tmp_path / f"box{len(made)}"
        ws, inbox, outside = root / "ws", root / "inbox", root / "outside"
        for folder in (ws, inbox, outside):
            folder.mkdir(parents=True)
        (outside / "secret.txt").write_text(OUTSIDE)
        (ws / ".env").write_text(SECRET)
        (ws / "notes.txt").write_text("alpha\nbeta\ngamma\n")
        os.symlink(".env", ws / "link")
        os.symlink(outside / "secret.txt", ws / "out")
        (inbox / "brief.txt").write_text("the brief\n")
        fs = VirtualFS(
            [Mount("/workspace", ws), Mount("/userinput", inbox, read_only=True)], **fs_options
        )
        toolkit = Toolkit()
        add_file_tools(toolkit)
        toolkit.add(hold)
        gate, decided = Gate(), Decided()
        engine = Engine(
            toolkit, fs=fs, policy=Policy.preset("default"), context=[gate], observers=[decided]
        )
        made.append(Box(ws, fs, engine, gate, decided))
        return made[-1]

    yield factory
    for box in made:
        await box.engine.aclose()
        box.fs.close()


@pytest.fixture
def box(make: Callable[..., Box]) -> Box:
    return make()


def assert_no_secret(result: ToolResult) -> None:
    everything = repr(result)
    assert "sk-live-9c1f00d2" not in everything
    assert "outside secret 41ab" not in everything


# -- read_text_file: head and tail of an ordinary file -----------------------------------------


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"head": 2}, "alpha\nbeta\n"),
        ({"head": 9}, "alpha\nbeta\ngamma\n"),
        ({"tail": 1}, "gamma\n"),
        ({"tail": 2}, "beta\ngamma\n"),
        ({"tail": 9}, "alpha\nbeta\ngamma\n"),
    ],
    ids=["head", "head-past-the-end", "tail-one", "tail", "tail-past-the-start"],
)
async def test_head_and_tail_of_a_small_file(
    box: Box, arguments: dict[str, int], expected: str
) -> None:
    result = await box.call("read_text_file", path="notes.txt", **arguments)
    assert result.status == "ok", result.text
    assert result.text == expected
    assert result.metadata["lines"] == 3


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"head": 1, "tail": 1}, "give head or tail, not both"),
        ({"head": 1, "start_line": 2}, "not both: head=N is lines 1 to N"),
        ({"tail": 1, "end_line": 2}, "or start_line/end_line, not both"),
    ],
    ids=["head-and-tail", "head-and-start", "tail-and-end"],
)
async def test_head_and_tail_exclude_each_other_and_line_ranges(
    box: Box, arguments: dict[str, int], fragment: str
) -> None:
    result = await box.call("read_text_file", path="notes.txt", **arguments)
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ValueError"
    assert fragment in result.error.message


@pytest.mark.parametrize("name", ["head", "tail"])
async def test_head_and_tail_count_from_one(box: Box, name: str) -> None:
    result = await box.call("read_text_file", path="notes.txt", **{name: 0})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ArgumentError"


# -- read_text_file: a file too big to read whole ----------------------------------------------

LINES = 2_000_000  # "%09d\n": 10 bytes each, 20 MB in all


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.log"
    with path.open("wb") as out:
        step = 100_000
        for first in range(1, LINES + 1, step):
            out.write(b"".join(b"%09d\n" % n for n in range(first, first + step)))
    return path


def numbered(first: int, last: int) -> str:
    return "".join(f"{n:09d}\n" for n in range(first, last + 1))


async def test_parts_of_a_20_mb_file_are_read_quickly(box: Box, big_file: Path) -> None:
    os.link(big_file, box.ws / "big.log")
    assert (box.ws / "big.log").stat().st_size > box.fs.max_file_bytes
    started = time.perf_counter()
    head = await box.call("read_text_file", path="big.log", head=3)
    tail = await box.call("read_text_file", path="big.log", tail=3)
    middle = await box.call(
        "read_text_file", path="big.log", start_line=1_234_567, end_line=1_234_569
    )
    last = await box.call(
        "read_text_file", path="big.log", start_line=LINES - 1, end_line=LINES + 5
    )
    elapsed = time.perf_counter() - started
    for result in (head, tail, middle, last):
        assert result.status == "ok", result.text
        assert result.metadata["partial"] is True
        assert result.metadata["bytes"] == LINES * 10
        assert result.metadata["truncated"] is False
    assert head.text == numbered(1, 3)
    assert (head.metadata["first_line"], head.metadata["last_line"]) == (1, 3)
    assert head.metadata["lines_known"] is False  # the scan stopped at line 3
    assert tail.text == numbered(LINES - 2, LINES)
    assert middle.text == numbered(1_234_567, 1_234_569)
    assert last.text == numbered(LINES - 1, LINES)
    assert last.metadata["lines"] == LINES  # the scan reached the end: the count is known
    assert last.metadata["last_line"] == LINES
    assert elapsed < 5, elapsed  # chunks of a megabyte, counted in C: well under a second


async def test_a_whole_read_of_a_too_big_file_says_how_to_read_part(
    box: Box, big_file: Path
) -> None:
    os.link(big_file, box.ws / "big.log")
    result = await box.call("read_text_file", path="big.log")
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "QuotaError"
    for fragment in ("/workspace/big.log is 20000000 bytes", "head", "tail", "start_line"):
        assert fragment in result.error.message
    past = await box.call("read_text_file", path="big.log", start_line=LINES + 1)
    assert past.error is not None
    assert f"start_line {LINES + 1} is past the end: the file has {LINES} lines" in (
        past.error.message
    )


async def test_one_huge_line_is_cut_to_the_output_limit(make: Callable[..., Box]) -> None:
    box = make(max_file_bytes=1 << 20)
    box.put("minified.js", "é" * (1 << 20) + "\nlast\n")  # 2 MB of two-byte characters
    result = await box.call("read_text_file", path="minified.js", head=1)
    assert result.status == "ok", result.text
    assert result.metadata["truncated"] is True
    assert result.text.startswith("é" * MAX_READ_CHARS + "\n[... more")
    assert len(result.text) < MAX_READ_CHARS + 200
    tail = await box.call("read_text_file", path="minified.js", tail=1)
    assert tail.text == "last\n"


async def test_a_big_binary_file_is_not_text_in_part_either(make: Callable[..., Box]) -> None:
    box = make(max_file_bytes=1000)
    box.put("blob.bin", b"\x00\x01" * 1000)
    result = await box.call("read_text_file", path="blob.bin", head=1)
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "NotTextError"
    assert "looks binary" in result.error.message


async def test_a_part_read_through_a_link_to_a_secret_is_refused(
    make: Callable[..., Box],
) -> None:
    box = make(max_file_bytes=8)  # .env is bigger: read in parts, each one judged
    for name in ("link", ".env"):
        result = await box.call("read_text_file", path=name, head=1)
        assert result.status == "denied", result.text
        assert_no_secret(result)


# -- read_range, and partial reads agreeing with whole ones ------------------------------------


@pytest.fixture(params=["host", "memory", "overlay-host", "overlay-staged"])
def ranged(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[bytes], VirtualFS]]:
    """A file system whose /workspace/f holds the bytes given, on each kind of mount: a host
    folder, memory, an overlay reading through to the host, an overlay's staged file."""
    kind = str(request.param)
    if kind == "memory":
        mount = Mount("/workspace", memory=True)
    else:
        mount = Mount("/workspace", tmp_path, overlay=kind.startswith("overlay"))
    fs = VirtualFS([mount])
    host = VirtualFS([Mount("/workspace", tmp_path)], durable=False)
    staged = kind in ("memory", "overlay-staged")

    def holding(data: bytes) -> VirtualFS:
        (fs if staged else host).write_bytes("f", data)
        return fs

    yield holding
    fs.close()
    host.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=300), offset=st.integers(0, 320), length=st.integers(0, 64))
def test_read_range_is_a_slice_of_the_file(
    ranged: Callable[[bytes], VirtualFS], data: bytes, offset: int, length: int
) -> None:
    fs = ranged(data)
    assert fs.read_range("f", offset, length) == data[offset : offset + length]


def test_read_range_bounds_its_length_and_offset(fs: VirtualFS, workspace: Path) -> None:
    (workspace / "f").write_bytes(b"0123456789")
    assert fs.read_range("/workspace/f", 8, 100) == b"89"
    assert fs.read_range("f", 10, 5) == b""
    for offset, length in ((-1, 1), (0, fs.max_file_bytes + 1), (0, -1)):
        with pytest.raises(SandboxError, match="the offset must be 0 or more"):
            fs.read_range("f", offset, length)
    before = fs.written
    fs.read_range("f", 0, 10)
    assert fs.written == before  # reads count against no quota


def test_read_range_is_judged_where_a_link_leads(fs: VirtualFS, workspace: Path) -> None:
    (workspace / ".env").write_text(SECRET)
    os.symlink(".env", workspace / "innocent.txt")

    def guard(path: str, access: str) -> str | None:
        return "credentials" if path.endswith("/.env") else None

    with pytest.raises(PathDeniedError, match=re.escape("/workspace/.env may not be read")):
        fs.guarded(guard).read_range("innocent.txt", 0, 10)


TEXT = st.lists(
    st.sampled_from(["a", "bc", "é", "\n", "\n", "\r\n", "\x0c", "\u2028", "xyz"]), max_size=60
).map("".join)


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=400), chunk=st.integers(1, 50), first=st.integers(1, 40))
def test_line_spans_agree_with_splitting_the_whole_file(
    data: bytes, chunk: int, first: int
) -> None:
    # any bytes at all: the spans are byte offsets, decided by "\n" alone
    lines = [line.encode("latin-1") for line in lines_of(data.decode("latin-1"))]

    def read(offset: int, length: int) -> bytes:
        assert length <= chunk
        return data[offset : offset + length]

    for count in (first, 1, len(lines) or 1):
        span = line_ranges.head(read, len(data), count, chunk)
        assert data[span.start : span.end] == b"".join(lines[:count])
        span = line_ranges.tail(read, len(data), count, chunk)
        assert data[span.start : span.end] == b"".join(lines[-count:])
    for last in (first, first + 3, None):
        if first > max(len(lines), 1):
            with pytest.raises(ValueError, match=f"the file has {len(lines)} lines"):
                line_ranges.lines(read, len(data), first, last, chunk)
            continue
        span = line_ranges.lines(read, len(data), first, last, chunk)
        assert data[span.start : span.end] == b"".join(lines[first - 1 : last])
        if span.total_lines is not None:
            assert span.total_lines == len(lines)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=TEXT, count=st.integers(1, 30), start=st.integers(1, 30))
def test_partial_reads_agree_with_a_whole_read(
    tmp_path: Path, text: str, count: int, start: int
) -> None:
    # the same file read whole (a high limit) and in parts (a limit of 16 bytes)
    (tmp_path / "t.txt").write_text(text, encoding="utf-8", newline="")
    with (
        VirtualFS([Mount("/workspace", tmp_path)]) as whole,
        VirtualFS([Mount("/workspace", tmp_path)], max_file_bytes=16) as parts,
    ):
        partial = len(text.encode()) > 16
        for arguments in (
            {"head": count},
            {"tail": count},
            {"start_line": start, "end_line": start + count},
        ):
            try:
                expected = read_text("t.txt", whole, **arguments)
            except ValueError as exc:
                with pytest.raises(ValueError, match=str(exc).split(":")[0]):
                    read_text("t.txt", parts, **arguments)
                continue
            got = read_text("t.txt", parts, **arguments)
            assert got.content == expected.content
            assert got.metadata.get("partial", False) is partial


# -- read_media_file ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "media_type"),
    [
        ("logo.png", PNG, "image/png"),
        ("photo.jpg", JPEG, "image/jpeg"),
        ("anim.gif", GIF, "image/gif"),
        ("pic.webp", WEBP, "image/webp"),
        ("misnamed.dat", PNG, "image/png"),  # told by its content, not its name
    ],
)
async def test_images_come_back_as_image_blocks(
    box: Box, name: str, content: bytes, media_type: str
) -> None:
    box.put(name, content)
    result = await box.call("read_media_file", path=name)
    assert result.status == "ok", result.text
    images = [block for block in result.content if isinstance(block, ImageBlock)]
    assert len(images) == 1
    assert images[0].media_type == media_type
    assert base64.b64decode(images[0].data) == content
    assert result.metadata["media_type"] == media_type
    assert result.metadata["bytes"] == len(content)


async def test_other_binary_files_come_back_as_base64_with_their_type(box: Box) -> None:
    pdf = b"%PDF-1.7\n\x00\x01binary"
    box.put("report.pdf", pdf)
    box.put("fake.png", "not an image at all\n")
    result = await box.call("read_media_file", path="report.pdf")
    assert result.status == "ok", result.text
    assert all(isinstance(block, TextBlock) for block in result.content)
    header, encoded = result.text.split("\n")
    assert header.startswith("/workspace/report.pdf (application/pdf,")
    assert base64.b64decode(encoded) == pdf
    fake = await box.call("read_media_file", path="fake.png")
    assert not any(isinstance(block, ImageBlock) for block in fake.content)
    assert fake.metadata["media_type"] == "application/octet-stream"
    assert "its content is not such an image" in fake.text


async def test_media_past_the_limits_is_refused_clearly(box: Box) -> None:
    box.put("data.bin", b"\x01" * (MAX_BLOB_BYTES + 1))
    result = await box.call("read_media_file", path="data.bin")
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "QuotaError"
    assert f"up to {MAX_BLOB_BYTES} bytes" in result.error.message


@pytest.mark.parametrize("name", [".env", "link", "out"])
async def test_read_media_file_refuses_secrets_and_links_to_them(box: Box, name: str) -> None:
    result = await box.call("read_media_file", path=name)
    assert result.status == "denied", result.text
    assert result.attempts == 0
    assert_no_secret(result)


# -- read_multiple_files -----------------------------------------------------------------------


async def test_several_files_each_under_its_header_and_errors_stay_per_file(box: Box) -> None:
    box.put("a.txt", "first file\n")
    box.put("img.png", PNG)
    result = await box.call(
        "read_multiple_files",
        paths=["a.txt", "missing.txt", "img.png", "/userinput/brief.txt"],
    )
    assert result.status == "ok", result.text
    assert result.text == (
        "==> /workspace/a.txt <==\nfirst file\n\n"
        "==> /workspace/missing.txt <==\n"
        "[error: NotFoundError: /workspace/missing.txt does not exist]\n"
        "==> /workspace/img.png <==\n"
        "[error: NotTextError: /workspace/img.png looks binary (it contains NUL bytes); "
        "it is not text]\n"
        "==> /userinput/brief.txt <==\nthe brief\n"
    )
    assert (result.metadata["read"], result.metadata["failed"]) == (2, 2)
    assert [f.get("error") for f in result.metadata["files"]] == [
        None,
        "NotFoundError",
        "NotTextError",
        None,
    ]


@pytest.mark.parametrize("bad", [".env", "link", "out", "/etc/passwd", "../outside/secret.txt"])
async def test_one_denied_path_among_allowed_ones_refuses_the_call(box: Box, bad: str) -> None:
    # every path of the list is judged before the call; one refused refuses it all
    result = await box.call("read_multiple_files", paths=["notes.txt", bad, "/userinput/brief.txt"])
    assert result.status == "denied", result.text
    assert result.attempts == 0
    assert "alpha" not in result.text
    assert_no_secret(result)


async def test_a_link_swapped_in_after_the_decision_fails_that_file_only(box: Box) -> None:
    box.put("a.txt", "ordinary a\n")
    box.put("b.txt", "ordinary b\n")
    held = ToolCall(name="hold", arguments={})
    holding = box.engine.submit(held)
    await until(lambda: held.id in box.decided.ids)
    read = ToolCall(name="read_multiple_files", arguments={"paths": ["a.txt", "b.txt"]})
    task = box.engine.submit(read)
    await until(lambda: read.id in box.decided.ids)
    (box.ws / "b.txt").unlink()  # as a command would, between the decision and the run
    os.symlink(".env", box.ws / "b.txt")
    box.gate.open.set()
    result = await task
    assert (await holding).status == "ok"
    assert result.status == "ok", result.text
    assert "ordinary a" in result.text
    assert "[error: PathDeniedError: /workspace/.env may not be read" in result.text
    assert result.metadata["failed"] == 1
    assert_no_secret(result)


async def test_many_files_share_the_output_limit(box: Box) -> None:
    for n in range(3):
        box.put(f"f{n}.txt", str(n) * (MAX_READ_CHARS // 2 + 10))
    result = await box.call("read_multiple_files", paths=["f0.txt", "f1.txt", "f2.txt"])
    assert result.status == "ok", result.text
    assert len(result.text) < MAX_READ_CHARS + 500
    assert "more characters: read it alone" in result.text
    assert "[not read: the output limit was reached]" in result.text
    assert result.metadata["files"][1]["truncated"] is True


async def test_read_multiple_files_needs_one_path_at_least(box: Box) -> None:
    result = await box.call("read_multiple_files", paths=[])
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ArgumentError"
