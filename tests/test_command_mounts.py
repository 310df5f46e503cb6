"""Commands see memory and overlay mounts, and what they change there stays there.

A command runs on copy-on-write layers; a mount that is not a host folder is written out
beneath them (a memory mount whole, an overlay mount's staged changes over its host folder).
What a user relies on: the command sees what the file tools see (staged files, not deleted
ones, not secrets), its changes join the overlay's staged diff (the host folder untouched until
committed) or the memory mount, and `stockade run --overlay` replays commands into the diff.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Annotated

import pytest
from support import require_layers, stockade_cli

from stockade.engine import (
    Engine,
    FromContext,
    ToolCall,
    Toolkit,
    ToolResult,
    add_shell_tools,
    tool,
)
from stockade.policies import Policy
from stockade.sandbox import Bubblewrap, Mount, VirtualFS, run_process_async
from stockade.sandbox.views import View

SECRET = "API_KEY=sk-mounts-0123456789"


@pytest.fixture(autouse=True)
def _needs_layers() -> None:
    require_layers()


async def shell(fs: VirtualFS, command: str, policy: str = "permissive") -> ToolResult:
    toolkit = Toolkit()
    add_shell_tools(toolkit)
    async with Engine(toolkit, policy=Policy.preset(policy), fs=fs) as engine:
        return await engine.call(ToolCall(name="run_shell", arguments={"command": command}))


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` and its content's hash: the host before and after."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def host(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("host a\n")
    (folder / "gone.txt").write_text("to be deleted\n")
    (folder / "sub" / "x.txt").write_text("x\n")
    (folder / ".env").write_text(SECRET)
    return folder


async def test_a_command_sees_an_overlays_staged_state_and_its_changes_join_the_diff(
    host: Path,
) -> None:
    before = snapshot(host)
    with VirtualFS([Mount("/workspace", host, overlay=True)]) as fs:
        fs.write_text("/workspace/staged.txt", "staged by a file tool\n")
        fs.delete("/workspace/gone.txt")
        fs.delete("/workspace/sub", recursive=True)
        fs.mkdir("/workspace/sub")  # made again, empty: x.txt is gone from the view
        result = await shell(
            fs,
            "ls -A; ls -A sub; cat staged.txt; cat .env; echo new > new.txt; "
            "echo more >> a.txt; mkdir -p made && echo deep > made/deep.txt",
        )
        assert result.status == "ok", result.text
        listing = result.text.split("--- stdout ---")[1]
        assert "staged.txt" in listing
        assert "a.txt" in listing
        assert "gone.txt" not in listing
        assert "x.txt" not in listing
        assert "staged by a file tool" in listing
        assert SECRET not in result.text  # masked in the overlay's view too
        assert result.metadata["process"]["isolation"] == "bubblewrap+layers"
        changes = {c.path: c.kind for c in fs.changes()}
        assert changes["/workspace/new.txt"] == "added"
        assert changes["/workspace/a.txt"] == "modified"
        assert changes["/workspace/made/deep.txt"] == "added"
        assert changes["/workspace/gone.txt"] == "deleted"
        assert fs.read_text("/workspace/a.txt") == "host a\nmore\n"
        assert snapshot(host) == before  # nothing reached the host
        fs.commit()
    assert (host / "new.txt").read_text() == "new\n"
    assert (host / "made" / "deep.txt").read_text() == "deep\n"
    assert not (host / "gone.txt").exists()
    assert not (host / "sub" / "x.txt").exists()


async def test_a_command_deleting_in_an_overlay_stages_the_deletion(host: Path) -> None:
    with VirtualFS([Mount("/workspace", host, overlay=True)]) as fs:
        result = await shell(fs, "rm a.txt && rm -r sub")
        assert result.status == "ok", result.text
        assert not fs.exists("/workspace/a.txt")
        assert not fs.exists("/workspace/sub/x.txt")
    assert (host / "a.txt").exists()
    assert (host / "sub" / "x.txt").exists()


async def test_a_command_runs_in_a_memory_mount_and_its_files_stay_in_memory(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with VirtualFS([Mount("/workspace", workspace), Mount("/scratch", memory=True)]) as fs:
        fs.write_text("/scratch/in-memory.txt", "from memory\n")
        fs.write_text("/scratch/.env", SECRET)
        result = await shell(
            fs, "cd /scratch && cat in-memory.txt && cat .env; echo made > made.txt; ls -A"
        )
        assert result.status == "ok", result.text
        assert "from memory" in result.text
        assert SECRET not in result.text
        assert fs.read_text("/scratch/made.txt") == "made\n"
    assert list(workspace.iterdir()) == []
    assert not list(tmp_path.rglob("made.txt"))  # noqa: ASYNC240 - nowhere on disk


async def test_a_protected_file_a_command_makes_in_an_overlay_is_refused(host: Path) -> None:
    with VirtualFS([Mount("/workspace", host, overlay=True)]) as fs:
        # the path in a variable: the words do not say it; the change the command made does
        result = await shell(fs, "H=.git/hooks; mkdir -p $H && echo evil > $H/pre-commit")
        assert result.status == "ok", result.text
        assert not fs.exists("/workspace/.git/hooks/pre-commit")
        assert any(
            note["path"] == "/workspace/.git/hooks/pre-commit" and not note["applied"]
            for note in result.metadata["changes"]
        )


def test_stockade_run_overlay_replays_commands_into_the_diff(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    calls = [
        {"name": "write_file", "arguments": {"path": "notes.txt", "content": "hello\n"}},
        {"name": "run_shell", "arguments": {"command": "cat notes.txt > copy.txt; rm a.txt"}},
    ]
    transcript = tmp_path / "calls.jsonl"
    transcript.write_text("".join(json.dumps(c) + "\n" for c in calls))
    args = [str(transcript), "--workspace", str(ws), "--overlay", "--json"]
    args += ["--preset", "permissive"]
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    refused = stockade_cli("run", *args, cwd=tmp_path, stdin="n\n", env=env)
    assert refused.returncode == 0, refused.stdout + refused.stderr
    report = json.loads(refused.stdout)
    assert [r["status"] for r in report["results"]] == ["ok", "ok"]
    # the command line's engine probes the layers as its commands enter them: between fork and
    # exec its at-fork handlers (the tracing SDK's) start a thread in the child, and a process
    # with two threads cannot enter a user namespace
    assert report["results"][1]["metadata"]["process"]["isolation"] == "bubblewrap+layers"
    assert report["overlay"] == {
        "changes": [
            {"path": "/workspace/a.txt", "kind": "deleted"},
            {"path": "/workspace/copy.txt", "kind": "added"},
            {"path": "/workspace/notes.txt", "kind": "added"},
        ],
        "applied": False,
    }
    assert sorted(os.listdir(ws)) == ["a.txt"]  # untouched until confirmed
    confirmed = stockade_cli("run", *args, cwd=tmp_path, stdin="y\n", env=env)
    assert json.loads(confirmed.stdout)["overlay"]["applied"] is True
    assert (ws / "copy.txt").read_text() == "hello\n"
    assert not (ws / "a.txt").exists()


@tool(command="command")
async def make(
    command: str,
    fs: VirtualFS,
    bubblewrap: Annotated[Bubblewrap, FromContext],
    staging: View | None = None,
) -> str:
    """Run a build target (the README's own command tool)."""
    result = await run_process_async(
        command, fs=fs, timeout=30, bubblewrap=bubblewrap, staging=staging
    )
    return f"exit {result.exit_code} {result.isolation}\n{result.stdout}"


async def test_a_command_tool_of_ones_own_gets_the_judged_view_by_taking_staging(
    host: Path,
) -> None:
    toolkit = Toolkit()
    toolkit.add(make)
    with VirtualFS([Mount("/workspace", host)]) as fs:
        async with Engine(toolkit, policy=Policy.preset("permissive"), fs=fs) as engine:
            result = await engine.call(
                ToolCall(
                    name="make",
                    arguments={"command": "cat .env; D=.git/hooks; mkdir -p $D; "
                               "echo evil > $D/pre-commit; echo built > out.txt"},
                )
            )  # fmt: skip
    assert result.status == "ok", result.text
    assert "bubblewrap+layers" in result.text
    assert SECRET not in result.text
    assert (host / "out.txt").read_text() == "built\n"
    assert not (host / ".git" / "hooks" / "pre-commit").exists()
