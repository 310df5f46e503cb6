"""Attacks on the file tools and the stdio MCP server, row by row, each beside the legitimate
call that must keep working: what happens between a check and the use (a link swapped in, a
file that grows, a pipe where a file was), inputs that cost far more than they weigh (glob
patterns, edits that multiply the text), and a client that sends what it should not.

Every row checks real effects: the host's files before and after, secrets searched for in all
that comes back (base64 too), and the server answering a ping afterwards.

Layout of every sandbox (see `make`)::

    tmp/ws       -> /workspace     .env (a secret), notes.txt, link -> .env, out -> ../outside
    tmp/outside  -> no mount: secret.txt
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from stdio_peer import Peer

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult
from stockade.engine.builtin import line_ranges
from stockade.engine.builtin.file_reads import read_text
from stockade.engine.builtin.files import add_file_tools
from stockade.engine.mcp import stdio
from stockade.engine.mcp.stdio import StdioService
from stockade.policies import Policy
from stockade.sandbox import Mount, PathDeniedError, VirtualFS

SECRET = "API_KEY=sk-live-77aa01be\n"
OUTSIDE = "outside secret 93cd\n"
MARKS = ("sk-live-77aa01be", "outside secret 93cd")


@dataclass
class Box:
    root: Path
    ws: Path
    fs: VirtualFS
    engine: Engine

    async def call(self, name: str, **arguments: Any) -> ToolResult:
        return await asyncio.wait_for(
            self.engine.call(ToolCall(name=name, arguments=arguments)), 20
        )

    def host(self) -> dict[str, bytes | str]:
        """Every entry under the sandbox's root on the host: a file's bytes, a link's target."""
        seen: dict[str, bytes | str] = {}
        for folder, dirs, files in os.walk(self.root):
            for name in dirs + files:
                path = Path(folder) / name
                relative = str(path.relative_to(self.root))
                if path.is_symlink():
                    seen[relative] = f"-> {os.readlink(path)}"
                elif path.is_file():
                    seen[relative] = path.read_bytes()
                else:
                    seen[relative] = "dir" if path.is_dir() else "other"
        return seen


def assert_no_secret(result: Any) -> None:
    everything = repr(result)
    for mark in MARKS:
        assert mark not in everything
        for shift in range(3):  # base64 of the secret at any alignment
            encoded = base64.b64encode(b"xx"[:shift] + mark.encode()).decode()
            assert encoded[4:-4] not in everything


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Callable[..., Box]]:
    made: list[Box] = []

    def factory(policy: Policy | None = None, **fs_options: Any) -> Box:
        root = tmp_path / f"box{len(made)}"
        ws, outside = root / "ws", root / "outside"
        for folder in (ws, outside):
            folder.mkdir(parents=True)
        (outside / "secret.txt").write_text(OUTSIDE)
        (ws / ".env").write_text(SECRET)
        (ws / "notes.txt").write_text("alpha\nbeta\ngamma\n")
        os.symlink(".env", ws / "link")
        os.symlink(outside, ws / "out")
        fs = VirtualFS([Mount("/workspace", ws)], **fs_options)
        toolkit = Toolkit()
        add_file_tools(toolkit)
        engine = Engine(toolkit, fs=fs, policy=policy or Policy.preset("default"))
        made.append(Box(root, ws, fs, engine))
        return made[-1]

    yield factory
    for box in made:
        await box.engine.aclose()
        box.fs.close()


@pytest.fixture
def box(make: Callable[..., Box]) -> Box:
    return make()


async def still_reads(box: Box) -> None:
    """The legitimate call beside every attack: it still works, and promptly."""
    result = await box.call("read_text_file", path="notes.txt", head=1)
    assert result.status == "ok", result.text
    assert result.text == "alpha\n"


# -- special files: a pipe or device where a file was --


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_text_file", {"path": "pipe"}),
        ("read_text_file", {"path": "pipe", "head": 3}),
        ("read_text_file", {"path": "pipe", "tail": 3}),
        ("read_media_file", {"path": "pipe"}),
        ("read_multiple_files", {"paths": ["pipe", "notes.txt"]}),
        ("edit_file", {"path": "pipe", "old_text": "a", "new_text": "b"}),
    ],
    ids=["inline", "head", "tail", "media", "multiple", "edit"],
)
async def test_a_fifo_never_blocks_a_read(box: Box, tool: str, arguments: dict[str, Any]) -> None:
    os.mkfifo(box.ws / "pipe")
    before = box.host()
    started = time.monotonic()
    result = await box.call(tool, **arguments)
    assert time.monotonic() - started < 5
    if tool == "read_multiple_files":
        assert "alpha" in result.text
        assert "not a regular file" in result.text
    else:
        assert result.status == "error", result.text
        assert "not a regular file" in result.text
    assert box.host() == before
    await still_reads(box)


async def test_a_directory_tree_shows_a_fifo_without_opening_it(box: Box) -> None:
    os.mkfifo(box.ws / "pipe")
    result = await box.call("directory_tree", path="/workspace")
    assert result.status == "ok", result.text
    assert '"pipe"' in result.text
    assert_no_secret(result)


# -- a file that changes between the look and the read --


def test_a_file_that_grew_after_its_size_was_taken_is_refused_not_read_whole(
    make: Callable[..., Box],
) -> None:
    box = make(max_file_bytes=1 << 20)
    (box.ws / "log.txt").write_bytes(b"line\n" * 10)
    size = (box.ws / "log.txt").stat().st_size  # what the tool saw ...
    (box.ws / "log.txt").write_bytes(b"line\n" * (3 << 20))  # ... before it became 15 MB
    with pytest.raises(Exception, match=r"(over|grew past) the 1048576-byte limit"):
        read_text("log.txt", box.fs, size=size)
    assert read_text("log.txt", box.fs, tail=1).content == "line\n"  # a part still reads


def test_a_link_swapped_in_during_a_chunked_scan_is_judged_at_that_chunk(
    make: Callable[..., Box],
) -> None:
    box = make()
    (box.ws / "big.txt").write_bytes(b"x" * 100 + b"\n" + b"y" * 100 + b"\n")
    (box.ws / ".env").write_text(SECRET * 20)

    def guard(path: str, access: str) -> str | None:
        return "credentials" if path.endswith("/.env") else None

    view = box.fs.guarded(guard)
    reads = 0

    def read(offset: int, length: int) -> bytes:
        nonlocal reads
        reads += 1
        if reads == 2:  # after the first chunk, the file becomes a link to the secret
            (box.ws / "big.txt").unlink()
            os.symlink(".env", box.ws / "big.txt")
        return view.read_range("big.txt", offset, length)

    size = (box.ws / "big.txt").stat().st_size
    with pytest.raises(PathDeniedError, match=r"/workspace/\.env may not be read"):
        line_ranges.head(read, size, 2, chunk=16)


# -- read_media_file and read_multiple_files through links --


@pytest.mark.parametrize("path", ["link", ".env", "out/secret.txt", "/workspace/../ws/.env"])
async def test_secrets_never_come_back_encoded(box: Box, path: str) -> None:
    for tool, arguments in (
        ("read_media_file", {"path": path}),
        ("read_multiple_files", {"paths": ["notes.txt", path]}),
        ("read_text_file", {"path": path, "tail": 1}),
    ):
        result = await box.call(tool, **arguments)
        assert result.status != "ok" or "alpha" in result.text, result.text
        assert_no_secret(result)
    await still_reads(box)


# -- directory_tree: patterns and loops --


async def test_a_hundred_patterns_over_a_thousand_files_stay_fast(box: Box) -> None:
    for n in range(1000):
        (box.ws / f"f{n}.txt").write_text("")
    patterns = [f"nothing{n}/**/*.{{a,b,c}}" for n in range(99)] + ["f9*.txt"]
    started = time.monotonic()
    result = await box.call("directory_tree", path="/workspace", exclude_patterns=patterns)
    assert time.monotonic() - started < 5
    assert result.status == "ok", result.text
    assert '"f1.txt"' in result.text
    assert '"f9.txt"' not in result.text
    assert '"f95.txt"' not in result.text


@pytest.mark.parametrize(
    "pattern", ["{a,b}" * 12, "{1..100000}", "[" * 2000, "*a" * 500, "**/" * 400 + "x"]
)
async def test_pathological_patterns_answer_promptly(box: Box, pattern: str) -> None:
    started = time.monotonic()
    result = await box.call("directory_tree", path="/workspace", exclude_patterns=[pattern])
    assert time.monotonic() - started < 5
    if result.status != "ok":
        assert result.status == "error"
        assert "exclude_patterns" in result.text
        assert "Traceback" not in result.text
    assert_no_secret(result)
    await still_reads(box)


async def test_link_loops_end_the_walk(box: Box) -> None:
    os.symlink("self", box.ws / "self")
    os.symlink(".", box.ws / "here")
    (box.ws / "deep").mkdir()
    os.symlink("..", box.ws / "deep" / "up")
    result = await box.call("directory_tree", path="/workspace")
    assert result.status == "ok", result.text
    assert result.text.count('"notes.txt"') == 1
    assert_no_secret(result)


async def test_excluded_entries_count_towards_the_walk_bound(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stockade.engine.builtin import folders

    monkeypatch.setattr(folders, "MAX_WALK", 50)
    monkeypatch.setattr(folders, "MAX_LOOKED", 500)
    for n in range(600):
        (box.ws / f"skip{n}.pyc").write_text("")
    result = await box.call("directory_tree", path="/workspace", exclude_patterns=["*.pyc"])
    assert result.status == "error", result.text
    assert "more than 500 names under /workspace" in result.text
    few = await box.call("directory_tree", path="/workspace", exclude_patterns=["skip1*"])
    assert few.status == "error"  # 489 entries shown: over the bound of what is shown
    assert "more than 50 entries under /workspace" in few.text
    for n in range(600):
        (box.ws / f"skip{n}.pyc").unlink()
    assert (await box.call("directory_tree", path="/workspace")).status == "ok"


# -- edit_file --


async def test_edits_that_multiply_the_text_are_refused_before_it_is_built(
    make: Callable[..., Box],
) -> None:
    box = make(max_file_bytes=1 << 20)
    (box.ws / "a.txt").write_text("a" * 1000)
    before = box.host()
    doubling = [{"old_text": "a", "new_text": "aa", "replace_all": True}] * 40
    for dry_run in (True, False):
        started = time.monotonic()
        result = await box.call("edit_file", path="a.txt", edits=doubling, dry_run=dry_run)
        assert time.monotonic() - started < 5
        assert result.status == "error", result.text
        assert "1048576-byte limit" in result.text
        assert "nothing was written" in result.text
    assert box.host() == before
    fine = await box.call("edit_file", path="a.txt", edits=doubling[:3])
    assert fine.status == "ok", fine.text
    assert (box.ws / "a.txt").read_text() == "a" * 8000


@pytest.mark.parametrize(
    ("edits", "expected"),
    [
        ([("ab", "X"), ("Xc", "Y")], "Y\n"),  # the second edit sees what the first left
        ([("b", "bb"), ("abbc", "Z")], "Z\n"),  # new_text makes the next old_text
        ([("abc", "cab"), ("ab", "q")], "cq\n"),
    ],
)
async def test_edits_apply_in_sequence(
    box: Box, edits: list[tuple[str, str]], expected: str
) -> None:
    (box.ws / "e.txt").write_text("abc\n")
    steps = [{"old_text": old, "new_text": new} for old, new in edits]
    result = await box.call("edit_file", path="e.txt", edits=steps)
    assert result.status == "ok", result.text
    assert (box.ws / "e.txt").read_text() == expected


@pytest.mark.parametrize("path", [".env", "link", "out/secret.txt"])
async def test_a_dry_run_on_a_protected_file_is_judged_as_a_write(box: Box, path: str) -> None:
    before = box.host()
    result = await box.call("edit_file", path=path, old_text="API_KEY", new_text="X", dry_run=True)
    assert result.status in ("denied", "error"), result.text
    assert result.attempts == 0 or result.status == "error"
    assert_no_secret(result)
    assert box.host() == before


# -- create_directory and list_allowed_directories --


@pytest.mark.parametrize("path", ["out/made", "out/a/b", "/workspace/../outside/made", "link/x"])
async def test_create_directory_never_reaches_out(box: Box, path: str) -> None:
    before = box.host()
    result = await box.call("create_directory", path=path)
    assert result.status != "ok", result.text
    assert box.host() == before
    assert not (box.root / "outside" / "made").exists()
    made = await box.call("create_directory", path="src/made")
    assert made.status == "ok", made.text
    assert (box.ws / "src" / "made").is_dir()


async def test_list_allowed_directories_names_no_host_path(box: Box) -> None:
    result = await box.call("list_allowed_directories")
    assert result.status == "ok"
    assert "/workspace (read-write)" in result.text
    assert str(box.root) not in repr(result)


async def test_a_dry_run_the_write_would_refuse_for_its_bytes_is_refused(
    make: Callable[..., Box],
) -> None:
    box = make(max_file_bytes=1 << 20)
    (box.ws / "a.txt").write_text("a" * 600_000)  # "é" is two bytes: 1.2 MB once replaced
    edit = {"old_text": "a", "new_text": "é", "replace_all": True, "dry_run": True}
    result = await box.call("edit_file", path="a.txt", **edit)
    assert result.status == "error", result.text
    assert "1200000 bytes, over the 1048576-byte limit" in result.text
    real = await box.call("edit_file", path="a.txt", **{**edit, "dry_run": False})
    assert real.status == "error"
    assert (box.ws / "a.txt").read_text() == "a" * 600_000


# -- the stdio server --

ASKING = Policy.from_dict(
    {
        "default": "allow",
        "rules": [{"id": "asked", "effect": "ask", "paths": ["/workspace/asked/**"]}],
    }
)


@pytest.fixture
async def served(make: Callable[..., Box]) -> AsyncIterator[tuple[Box, Peer]]:
    box = make(ASKING)
    (box.ws / "asked").mkdir()
    peer = Peer(StdioService(box.engine))
    await peer.start()
    await peer.initialize({"elicitation": {}})
    yield box, peer
    await peer.close()


@pytest.mark.parametrize("request_id", [[1], {"a": 1}, None, 3.5, True, "never-sent", 99], ids=repr)
async def test_cancelling_what_was_never_sent_stops_nothing(
    served: tuple[Box, Peer], request_id: Any
) -> None:
    _, peer = served
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
    peer.send({**cancel, "params": {"requestId": request_id}})
    peer.send({**cancel, "params": [request_id]})
    await peer.alive()


async def test_replies_to_requests_never_made_are_dropped(served: tuple[Box, Peer]) -> None:
    _, peer = served
    for ident in (1, 10**6, "x", -1):
        peer.send({"jsonrpc": "2.0", "id": ident, "result": {"action": "accept"}})
        peer.send({"jsonrpc": "2.0", "id": ident, "error": {"code": 1, "message": "m"}})
    peer.send({"jsonrpc": "2.0", "id": 5, "error": [1, 2]})
    await peer.alive()


async def test_many_concurrent_calls_are_each_answered_once(served: tuple[Box, Peer]) -> None:
    _, peer = served
    for ident in range(1, 251):
        params = {"name": "read_text_file", "arguments": {"path": "notes.txt", "head": 1}}
        peer.send({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params})
    answers = [await peer.receive() for _ in range(250)]
    assert sorted(a["id"] for a in answers) == list(range(1, 251))
    assert all(a["result"]["content"][0]["text"] == "alpha\n" for a in answers)
    again = await peer.request(1, "tools/call", {"name": "list_allowed_directories"})
    assert again["id"] == 1  # an id used before, by a call that is done
    assert not again["result"]["isError"]
    await peer.alive()


@pytest.mark.parametrize(
    "reply",
    [
        {"action": "accept", "content": {"answer": 5}},
        {"action": "accept", "content": {"answer": ["once"]}},
        {"action": "accept", "content": {"answer": {"once": True}}},
        {"action": "accept", "content": {"answer": "session:²"}},
        {"action": "accept", "content": {"answer": "always:0"}},
        {"action": "accept", "content": {"answer": "session:99999999999999999999"}},
        {"action": "accept", "content": {"approve": "true"}},
        {"action": "accept", "content": {"approve": 1}},
        {"action": "accept", "content": ["once"]},
        {"action": ["accept"], "content": {"answer": "once"}},
        {"action": "ACCEPT", "content": {"answer": "once"}},
        {"action": "accept"},
        "accept",
        None,
    ],
    ids=repr,
)
async def test_an_answer_of_the_wrong_shape_never_approves(
    served: tuple[Box, Peer], reply: Any
) -> None:
    box, peer = served
    call = {"name": "write_file", "arguments": {"path": "asked/new.txt", "content": "x"}}
    peer.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
    question = await peer.receive()
    assert question["method"] == "elicitation/create"
    peer.send({"jsonrpc": "2.0", "id": question["id"], "result": reply})
    answer = await peer.receive()
    assert answer["id"] == 1
    assert answer["result"]["isError"] is True
    assert answer["result"]["structuredContent"]["status"] == "denied", answer
    said = answer["result"]["content"][0]["text"]
    assert "not approved" in said or "refused by the approver" in said
    content = reply.get("content") if isinstance(reply, dict) else None
    if isinstance(content, dict) and "answer" in content and reply["action"] == "accept":
        assert "is none of those offered" in said  # a choice not offered is said to be one
    assert not (box.ws / "asked" / "new.txt").exists()
    await peer.alive()


async def test_a_client_that_does_not_read_stops_being_read(
    make: Callable[..., Box], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdio, "MAX_UNREAD", 256 << 10)
    box = make(ASKING)
    (box.ws / "big.txt").write_text("x" * 150_000 + "\n")
    peer = Peer(StdioService(box.engine))
    await peer.start()
    await peer.initialize()
    params = {"name": "read_text_file", "arguments": {"path": "big.txt"}}
    assert peer.reading is not None
    peer.reading.pause_reading()
    for ident in range(1, 21):  # sent one by one, and never read meanwhile
        peer.send({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params})
        await asyncio.sleep(0.03)
    ran = len(box.engine.calls.results)
    assert ran < 8, ran  # about 256 KB of answers, then no more requests were read
    peer.reading.resume_reading()
    answers = [await peer.receive() for _ in range(20)]  # reading lets it go on
    assert sorted(a["id"] for a in answers) == list(range(1, 21))
    assert all(len(a["result"]["content"][0]["text"]) == 150_001 for a in answers)
    await peer.alive()
    await peer.close()


async def test_calls_past_the_most_running_at_once_are_answered_busy(
    make: Callable[..., Box],
) -> None:
    box = make(ASKING)
    (box.ws / "asked").mkdir()
    peer = Peer(StdioService(box.engine, max_running=2))
    await peer.start()
    await peer.initialize({"elicitation": {}})
    for ident in (1, 2):  # each waits for its question to be answered
        call = {"name": "write_file", "arguments": {"path": f"asked/{ident}.txt", "content": ""}}
        peer.send({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": call})
    questions = [await peer.receive() for _ in range(2)]
    busy = await peer.request(3, "tools/call", {"name": "list_allowed_directories"})
    assert busy["error"]["code"] == -32000
    assert "2 calls are running" in busy["error"]["message"]
    for question in questions:
        answer = {"action": "accept", "content": {"answer": "once"}}
        peer.send({"jsonrpc": "2.0", "id": question["id"], "result": answer})
    done = [await peer.receive() for _ in range(2)]
    assert all(not d["result"]["isError"] for d in done)
    again = await peer.request(3, "tools/call", {"name": "list_allowed_directories"})
    assert not again["result"]["isError"]
    await peer.close()
