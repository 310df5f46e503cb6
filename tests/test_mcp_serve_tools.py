"""The file tools `stockade serve` offers beside the basic ones, as an MCP client meets them: a
real subprocess driven by the SDK's own client over stdio, in both protocol eras. An image
comes back as MCP image content, several files as one text with a header each, a folder as a
JSON tree; protected files and links to them stay out of every answer."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import mcp_types as types
import pytest
from mcp import Client
from support import serve_params

from stockade.engine.observe import read_audit, verify_audit

MODES = ["legacy", "auto"]
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"
SECRET = "API_KEY=sk-live-77aa01fe\n"
NEW_TOOLS = {
    "read_media_file",
    "read_multiple_files",
    "create_directory",
    "directory_tree",
    "list_allowed_directories",
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("print('app')\n")
    (ws / "notes.txt").write_text("notes\n")
    (ws / "logo.png").write_bytes(PNG)
    (ws / ".env").write_text(SECRET)
    os.symlink("../.env", ws / "src" / "settings.txt")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "spec.md").write_text("the spec\n")
    return tmp_path


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.parametrize("mode", MODES)
async def test_the_new_file_tools_through_the_mcp_client(project: Path, mode: str) -> None:
    async with Client(serve_params(project), mode=mode) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        image = await client.call_tool("read_media_file", {"path": "logo.png"})
        several = await client.call_tool(
            "read_multiple_files",
            {"paths": ["notes.txt", "/userinput/spec.md", "missing.txt"]},
        )
        denied = await client.call_tool("read_multiple_files", {"paths": ["notes.txt", ".env"]})
        secret_image = await client.call_tool("read_media_file", {"path": "src/settings.txt"})
        tree = await client.call_tool(
            "directory_tree", {"path": "/workspace", "exclude_patterns": ["*.png"]}
        )
        made = await client.call_tool("create_directory", {"path": "build/out"})
        mounts = await client.call_tool("list_allowed_directories", {})
        dry = await client.call_tool(
            "edit_file",
            {
                "path": "notes.txt",
                "edits": [{"oldText": "notes", "newText": "NOTES"}],
                "dry_run": True,
            },
        )

    assert set(listed) >= NEW_TOOLS
    assert listed["read_multiple_files"].input_schema["properties"]["paths"]["type"] == "array"
    assert listed["directory_tree"].annotations is not None
    assert listed["directory_tree"].annotations.read_only_hint is True
    assert listed["create_directory"].annotations is not None
    assert listed["create_directory"].annotations.read_only_hint is False

    assert not image.is_error, _text(image)
    pictures = [c for c in image.content if isinstance(c, types.ImageContent)]
    assert len(pictures) == 1
    assert pictures[0].mime_type == "image/png"
    assert base64.b64decode(pictures[0].data) == PNG

    assert not several.is_error, _text(several)
    text = _text(several)
    assert "==> /workspace/notes.txt <==\nnotes\n" in text
    assert "==> /userinput/spec.md <==\nthe spec\n" in text
    assert "[error: NotFoundError: /workspace/missing.txt does not exist]" in text

    for refused in (denied, secret_image):
        assert refused.is_error
        assert _text(refused).startswith("denied by rule dangerous-path:"), _text(refused)

    assert not tree.is_error, _text(tree)
    shown, note = _text(tree).split("\n", 1)
    assert json.loads(shown) == [
        {"name": "notes.txt", "type": "file"},
        {"name": "src", "type": "directory", "children": [{"name": "app.py", "type": "file"}]},
    ]
    assert note.startswith("[2 entries left out")  # .env and the link to it, never named

    assert not made.is_error, _text(made)
    assert (project / "ws" / "build" / "out").is_dir()
    assert _text(mounts).splitlines() == ["/userinput (read-only)", "/workspace (read-write)"]
    assert str(project) not in _text(mounts)
    assert not dry.is_error, _text(dry)
    assert "-notes\n+NOTES" in _text(dry)
    assert (project / "ws" / "notes.txt").read_text() == "notes\n"

    everything = repr([image, several, denied, secret_image, tree, mounts])
    assert "sk-live-77aa01fe" not in everything
    assert base64.b64encode(SECRET.encode()).decode() not in everything
    log = project / "state" / "audit.jsonl"
    assert verify_audit(log).ok
    statuses = [r["status"] for r in read_audit(log, kind="outcome")]
    assert statuses == ["ok", "ok", "denied", "denied", "ok", "ok", "ok", "ok"]
