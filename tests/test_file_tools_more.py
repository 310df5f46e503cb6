"""The folder tools and `edit_file`'s several edits and dry runs, through a real `Engine` (the
default policy unless a test says otherwise) over real folders, checked on the host afterwards.

Layout of every sandbox (see `make`)::

    tmp_path/ws       -> /workspace     .env (a secret), src/app.py, src/util.py, docs/readme.md,
                                        docs/env.txt -> ../.env, out -> ../outside (a folder)
    tmp_path/inbox    -> /userinput     (read-only)
    tmp_path/outside  -> no mount: secret.txt
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult
from stockade.engine.builtin import edits
from stockade.engine.builtin.edits import TextEdit
from stockade.engine.builtin.files import add_file_tools, edit_file
from stockade.policies import Policy
from stockade.sandbox import Mount, VirtualFS

SECRET = "API_KEY=sk-live-5be0c7aa\n"
APP = "def main():\n    return 1\n\n\ndef other():\n    return 1\n"


@dataclass
class Box:
    root: Path
    ws: Path
    engine: Engine

    async def call(self, name: str, **arguments: Any) -> ToolResult:
        return await self.engine.call(ToolCall(name=name, arguments=arguments))


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Callable[..., Box]]:
    made: list[tuple[Engine, VirtualFS]] = []

    def factory(preset: str = "default", **mount_options: Any) -> Box:
        root = tmp_path / f"box{len(made)}"
        ws, inbox, outside = root / "ws", root / "inbox", root / "outside"
        for folder in (ws / "src", ws / "docs", inbox, outside):
            folder.mkdir(parents=True)
        (outside / "secret.txt").write_text("outside secret\n")
        (ws / ".env").write_text(SECRET)
        (ws / "src" / "app.py").write_text(APP)
        (ws / "src" / "util.py").write_text("X = 1\n")
        (ws / "docs" / "readme.md").write_text("# readme\n")
        os.symlink("../.env", ws / "docs" / "env.txt")
        os.symlink(outside, ws / "out")
        (inbox / "brief.txt").write_text("the brief\n")
        fs = VirtualFS(
            [Mount("/workspace", ws, **mount_options), Mount("/userinput", inbox, read_only=True)]
        )
        toolkit = Toolkit()
        add_file_tools(toolkit)
        engine = Engine(toolkit, fs=fs, policy=Policy.preset(preset))
        made.append((engine, fs))
        return Box(root, ws, engine)

    yield factory
    for engine, fs in made:
        await engine.aclose()
        fs.close()


@pytest.fixture
def box(make: Callable[..., Box]) -> Box:
    return make()


def assert_error(result: ToolResult, error_type: str, *fragments: str) -> None:
    assert result.status == "error", result.text
    assert result.error is not None
    assert result.error.type == error_type, result.text
    for fragment in fragments:
        assert fragment in result.error.message, result.error.message


# -- create_directory --------------------------------------------------------------------------


async def test_create_directory_makes_missing_parents_and_accepts_an_existing_one(box: Box) -> None:
    made = await box.call("create_directory", path="a/b/c")
    assert made.status == "ok", made.text
    assert made.text == "created /workspace/a/b/c"
    assert (box.ws / "a" / "b" / "c").is_dir()
    again = await box.call("create_directory", path="/workspace/a/b/c")
    assert again.status == "ok", again.text
    assert again.text == "already exists: /workspace/a/b/c"
    assert again.metadata["created"] is False


async def test_create_directory_over_a_file_is_an_error(box: Box) -> None:
    result = await box.call("create_directory", path="src/app.py/inner")
    assert_error(result, "NotADirectoryError_", "/workspace/src/app.py")
    assert (box.ws / "src" / "app.py").read_text() == APP


@pytest.mark.parametrize(
    ("path", "preset", "rule"),
    [
        ("/userinput/new", "default", "userinput-read-only"),
        ("out/new", "default", "sandbox"),
        ("made", "read-only", "read-only-mode"),
    ],
)
async def test_create_directory_is_judged_as_a_write(
    make: Callable[..., Box], path: str, preset: str, rule: str
) -> None:
    box = make(preset)
    result = await box.call("create_directory", path=path)
    assert result.status == "denied", result.text
    assert result.decision is not None
    assert result.decision.rule == rule
    assert not (box.root / "inbox" / "new").exists()
    assert not (box.root / "outside" / "new").exists()
    assert not (box.ws / "made").exists()


async def test_create_directory_in_an_overlay_is_staged(make: Callable[..., Box]) -> None:
    box = make(overlay=True)
    result = await box.call("create_directory", path="staged/dir")
    assert result.status == "ok", result.text
    assert not (box.ws / "staged").exists()  # on the host only once committed
    listed = await box.call("directory_tree", path="staged")
    assert json.loads(listed.text) == [{"name": "dir", "type": "directory", "children": []}]


# -- directory_tree ----------------------------------------------------------------------------


async def test_directory_tree_is_json_of_names_types_and_children(box: Box) -> None:
    result = await box.call("directory_tree", path="src")
    assert result.status == "ok", result.text
    assert json.loads(result.text) == [
        {"name": "app.py", "type": "file"},
        {"name": "util.py", "type": "file"},
    ]
    assert result.metadata == {"path": "/workspace/src", "entries": 2}


async def test_directory_tree_leaves_out_secrets_and_links_to_them_unnamed(box: Box) -> None:
    result = await box.call("directory_tree")
    assert result.status == "ok", result.text
    tree, note = result.text.rsplit("\n", 1)
    assert json.loads(tree) == [
        {"name": "docs", "type": "directory", "children": [{"name": "readme.md", "type": "file"}]},
        {
            "name": "src",
            "type": "directory",
            "children": [{"name": "app.py", "type": "file"}, {"name": "util.py", "type": "file"}],
        },
    ]  # .env and docs/env.txt (a link to it) left out; out/ (a link out of the mount) skipped
    assert note.startswith("[2 entries left out: the policy does not let this call read them")
    assert result.metadata["left_out"] == 2
    assert any("dangerous-path" in r for r in result.metadata["left_out_reasons"])
    for hidden in (".env", "env.txt", "sk-live", "outside secret", "secret.txt"):
        assert hidden not in repr(result)


@pytest.mark.parametrize(
    ("patterns", "names"),
    [
        (["*.md"], {"docs", "src", "app.py", "util.py"}),  # a name, at any depth
        (["src"], {"docs", "readme.md"}),  # a folder's name: nothing under it is walked
        (["src/app.py"], {"docs", "readme.md", "src", "util.py"}),  # a path under the root
        (["**/*.py", "docs/**"], {"docs", "src"}),
        ([], {"docs", "readme.md", "src", "app.py", "util.py"}),
    ],
)
async def test_directory_tree_excludes(box: Box, patterns: list[str], names: set[str]) -> None:
    result = await box.call("directory_tree", exclude_patterns=patterns)
    assert result.status == "ok", result.text

    def all_names(entries: list[dict[str, Any]]) -> set[str]:
        found = set()
        for entry in entries:
            found.add(entry["name"])
            found |= all_names(entry.get("children", []))
        return found

    assert all_names(json.loads(result.text.split("\n")[0])) == names


async def test_directory_tree_of_a_refused_folder_is_refused(box: Box) -> None:
    (box.ws / ".ssh").mkdir()
    (box.ws / ".ssh" / "id_rsa").write_text("KEY\n")
    result = await box.call("directory_tree", path=".ssh")
    assert result.status == "denied", result.text
    assert "id_rsa" not in repr(result)
    outside = await box.call("directory_tree", path="out")
    assert outside.status == "denied", outside.text
    assert "secret.txt" not in repr(outside)


async def test_directory_tree_walks_a_folder_once_whatever_links_lead_to_it(box: Box) -> None:
    os.symlink(".", box.ws / "src" / "up")  # a loop: src/up/up/up/...
    result = await box.call("directory_tree", path="src", exclude_patterns=["*.py"])
    assert result.status == "ok", result.text
    # the link is shown as the folder it leads to, which was walked already: not again
    assert json.loads(result.text) == [{"name": "up", "type": "directory", "children": []}]


# -- list_allowed_directories ------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["default", "read-only"])
async def test_list_allowed_directories_names_mounts_never_host_paths(
    make: Callable[..., Box], preset: str
) -> None:
    box = make(preset, overlay=True)
    result = await box.call("list_allowed_directories")
    assert result.status == "ok", result.text
    assert result.text == (
        "/userinput (read-only)\n/workspace (read-write, changes staged until they are committed)"
    )
    assert result.metadata["directories"] == [
        {"path": "/userinput", "read_only": True, "kind": "folder"},
        {"path": "/workspace", "read_only": False, "kind": "overlay"},
    ]
    assert str(box.root) not in repr(result)


# -- edit_file: several edits, all or nothing, and dry runs ----------------------------------


async def test_edits_apply_in_order_each_to_what_the_ones_before_left(box: Box) -> None:
    result = await box.call(
        "edit_file",
        path="src/app.py",
        edits=[
            {"old_text": "def main():\n    return 1", "new_text": "def main():\n    return 2"},
            {"old_text": "return 1", "new_text": "return 3"},  # unique once the first is done
            {"old_text": "return", "new_text": "yield", "replace_all": True},
        ],
    )
    assert result.status == "ok", result.text
    after = "def main():\n    yield 2\n\n\ndef other():\n    yield 3\n"
    assert (box.ws / "src" / "app.py").read_text() == after
    assert result.text.startswith("replaced 4 occurrences in /workspace/src/app.py\n\n")
    assert "-    return 1\n+    yield 3" in result.text  # the diff of the whole change
    assert result.metadata["bytes"] == len(after)


@pytest.mark.parametrize(
    ("edits", "fragments"),
    [
        (
            [
                {"old_text": "def main", "new_text": "def start"},
                {"old_text": "nope", "new_text": ""},
            ],
            ["edit 2 of 2: old_text was not found", "as the edits before it left the file"],
        ),
        (
            [{"old_text": "X", "new_text": "Y"}, {"old_text": "return 1", "new_text": "return 2"}],
            ["edit 1 of 2: old_text was not found"],
        ),
        (
            [
                {"old_text": "def main", "new_text": "def start"},
                {"old_text": "return 1", "new_text": ""},
            ],
            ["edit 2 of 2: old_text occurs 2 times", "replace_all"],
        ),
        (
            [{"old_text": "def main", "new_text": "def start"}, {"old_text": "", "new_text": "x"}],
            ["edit 2 of 2: old_text is empty"],
        ),
    ],
    ids=["second-not-found", "first-not-found", "second-ambiguous", "second-empty"],
)
async def test_one_failing_edit_writes_nothing(
    box: Box, edits: list[dict[str, str]], fragments: list[str]
) -> None:
    before = (box.ws / "src" / "app.py").stat()
    result = await box.call("edit_file", path="src/app.py", edits=edits)
    assert_error(result, "ValueError", *fragments, "nothing was written")
    assert (box.ws / "src" / "app.py").read_text() == APP
    assert (box.ws / "src" / "app.py").stat().st_mtime_ns == before.st_mtime_ns


async def test_a_dry_run_shows_the_diff_and_writes_nothing(box: Box) -> None:
    path = box.ws / "src" / "app.py"
    before = path.stat()
    result = await box.call(
        "edit_file",
        path="src/app.py",
        edits=[{"oldText": "def other", "newText": "def second"}],  # the reference's spelling
        dry_run=True,
    )
    assert result.status == "ok", result.text
    assert result.text == (
        "dry run: would replace 1 occurrence in /workspace/src/app.py; nothing was written\n\n"
        "--- a/workspace/src/app.py\n+++ b/workspace/src/app.py\n@@ -2,5 +2,5 @@\n"
        "     return 1\n \n \n-def other():\n+def second():\n     return 1"
    )
    assert result.metadata["dry_run"] is True
    assert path.read_bytes() == APP.encode()
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    assert "sha256_after" not in result.metadata  # no change is reported: none was made


@pytest.mark.parametrize(
    ("arguments", "error_type", "fragment"),
    [
        (
            {"old_text": "a", "new_text": "b", "edits": [{"old_text": "a", "new_text": "b"}]},
            "ValueError",
            "not both",
        ),
        ({"old_text": "a"}, "ValueError", "give old_text and new_text, or edits"),
        ({"edits": []}, "ArgumentError", "edits"),
        ({"edits": [{"old_text": "a", "text": "b"}]}, "ArgumentError", "edits"),
    ],
    ids=["both-ways", "half", "no-edits", "unknown-key"],
)
async def test_edit_file_says_what_is_wrong_with_how_it_was_asked(
    box: Box, arguments: dict[str, Any], error_type: str, fragment: str
) -> None:
    result = await box.call("edit_file", path="src/app.py", **arguments)
    assert_error(result, error_type, fragment)
    assert (box.ws / "src" / "app.py").read_text() == APP


def test_text_edit_takes_either_spelling_of_its_keys() -> None:
    snake = TextEdit.model_validate({"old_text": "a", "new_text": "b", "replace_all": True})
    camel = TextEdit.model_validate({"oldText": "a", "newText": "b", "replaceAll": True})
    assert snake == camel
    assert edit_file is edits.edit_file  # still importable from where it always was


async def test_a_protected_file_cannot_be_edited_even_as_a_dry_run(box: Box) -> None:
    for path in (".env", "docs/env.txt"):
        result = await box.call(
            "edit_file", path=path, old_text="API_KEY", new_text="X", dry_run=True
        )
        assert result.status == "denied", result.text
        assert "sk-live" not in repr(result)
    assert (box.ws / ".env").read_text() == SECRET
