"""What becomes of a command's changes: judged after the run, however it ended, and applied
only as the policy allows. Real engine, real bubblewrap, real overlays, real files.

What a user relies on: allowed changes land (files, folders, modes, links); a change that asks
goes to the approver with what the command did and its diff, one change at a time; a change the
call named and a person approved goes through; a read-only policy lets a command run and keeps
nothing; a command that times out or is cancelled still has its changes judged (a cancelled
call asks nobody); a file over the size limit is not applied and says why; every change is in
the result, the audit outcome and the span.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
from support import require_layers, snapshot, stray_temp_files

from stockade import Engine, Policy, ToolCall, Toolkit
from stockade.engine import AuditLog, add_shell_tools, read_audit, verify_audit
from stockade.engine.pipeline import _commands
from stockade.policies import Decision
from stockade.sandbox import Mount, VirtualFS

ALLOW = Policy.from_dict({"default": "allow", "process": {"require_isolation": True}})


@pytest.fixture(autouse=True)
def _needs_layers() -> None:
    require_layers()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("one\n")
    (root / ".env").write_text("API_KEY=sk-live-secret\n")
    return root


async def run(
    ws: Path,
    command: str,
    *,
    policy: Policy = ALLOW,
    approver: Any = None,
    audit: AuditLog | None = None,
    timeout_s: float | None = None,
    **fs_options: Any,
) -> Any:
    toolkit = Toolkit()
    add_shell_tools(toolkit)
    arguments: dict[str, Any] = {"command": command}
    if timeout_s is not None:
        arguments["timeout_s"] = timeout_s
    with VirtualFS([Mount("/workspace", ws)], **fs_options) as fs:
        async with Engine(toolkit, policy=policy, fs=fs, approver=approver, audit=audit) as engine:
            return await engine.call(ToolCall(name="run_shell", arguments=arguments))


def gone(path: Path) -> bool:
    return not os.path.lexists(path)


def changes(result: Any) -> dict[str, dict[str, Any]]:
    return {c["path"]: c for c in result.metadata.get("changes", [])}


async def test_allowed_changes_land_files_folders_modes_and_links(ws: Path) -> None:
    result = await run(
        ws,
        "mkdir -p src/pkg && echo 'print(1)' > src/pkg/main.py && printf '#!/bin/sh\\n' > go.sh "
        "&& chmod 755 go.sh && ln -s /workspace/notes.txt src/link && ln -s ../notes.txt rel "
        "&& echo two >> notes.txt && rm notes.txt && echo three > notes.txt",
    )
    assert result.status == "ok", result.text
    assert (ws / "src/pkg/main.py").read_text() == "print(1)\n"
    assert os.stat(ws / "go.sh").st_mode & 0o777 == 0o755
    # a link the command made to its own mount by absolute path means the same on the host
    assert os.readlink(ws / "src/link") == "../notes.txt"
    assert (ws / "src/link").read_text() == "three\n"
    assert os.readlink(ws / "rel") == "../notes.txt"
    assert (ws / "notes.txt").read_text() == "three\n"
    found = changes(result)
    assert found["/workspace/go.sh"]["applied"] is True
    assert found["/workspace/notes.txt"]["kind"] == "modified"
    assert found["/workspace/notes.txt"]["sha256_after"]
    assert "changes:" in result.text
    assert "applied" in result.text
    assert not stray_temp_files(ws)  # nothing of the apply left behind


async def test_a_change_that_asks_goes_to_the_approver_with_its_diff(ws: Path) -> None:
    asked: list[Decision] = []

    def approver(call: ToolCall, decision: Decision) -> bool:
        asked.append(decision)
        yes = ("/workspace/.vscode", "/workspace/.vscode/keep.json")
        return decision.rule == "commands-ask" or decision.target in yes

    command = "mkdir .vscode && echo '{\"a\": 1}' | tee .vscode/keep.json .vscode/drop.json"
    result = await run(ws, command, policy=Policy.preset("default"), approver=approver)
    assert result.status == "ok", result.text
    about = {d.target: d for d in asked if d.rule == "dangerous-path"}
    assert set(about) == {
        "/workspace/.vscode",
        "/workspace/.vscode/keep.json",
        "/workspace/.vscode/drop.json",
    }
    question = about["/workspace/.vscode/keep.json"].reason
    assert "created /workspace/.vscode/keep.json" in question
    assert '+{"a": 1}' in question  # the diff, for the person to read
    assert (ws / ".vscode/keep.json").exists()
    assert not (ws / ".vscode/drop.json").exists()
    assert "created the folder /workspace/.vscode" in about["/workspace/.vscode"].reason
    dropped = changes(result)["/workspace/.vscode/drop.json"]
    assert dropped["applied"] is False
    assert dropped["rule"] == "dangerous-path"
    assert any("not applied" in w for w in result.metadata["warnings"])


async def test_a_redirection_a_person_approved_is_written(ws: Path) -> None:
    asked: list[Decision] = []

    def approver(call: ToolCall, decision: Decision) -> bool:
        asked.append(decision)
        return True

    result = await run(
        ws, "echo EXTRA=1 >> .env", policy=Policy.preset("default"), approver=approver
    )
    assert result.status == "ok", result.text
    assert (ws / ".env").read_text() == "API_KEY=sk-live-secret\nEXTRA=1\n"
    assert len(asked) == 1  # asked once, with the call; not again after the run


async def test_without_an_approver_a_protected_change_is_refused(ws: Path) -> None:
    before = (ws / ".env").read_text()
    result = await run(ws, "python3 -c \"open('.envrc', 'w').write('x')\" && echo ok > ok.txt")
    assert result.status == "ok"
    assert (ws / "ok.txt").exists()
    assert (ws / ".env").read_text() == before
    # allowed by the policy `default = allow`? no: .envrc is a protected path, denied there
    refused = Policy.preset("permissive")
    ws2 = ws.parent / "ws2"
    ws2.mkdir()
    result = await run(ws2, "python3 -c \"open('.envrc', 'w').write('x')\"", policy=refused)
    assert not (ws2 / ".envrc").exists()
    assert changes(result)["/workspace/.envrc"]["applied"] is False


async def test_a_read_only_policy_runs_commands_and_keeps_nothing(ws: Path) -> None:
    before = snapshot(ws)
    result = await run(
        ws,
        "cat notes.txt; python3 -c \"open('notes.txt', 'a').write('x'); open('new', 'w')\"",
        policy=Policy.preset("read-only"),
    )
    assert result.status == "ok", result.text
    assert "one" in result.text
    assert snapshot(ws) == before
    found = changes(result)
    assert found["/workspace/new"]["applied"] is False
    assert found["/workspace/new"]["rule"] == "read-only-mode"
    assert "discarded" in found["/workspace/notes.txt"]["reason"]


async def test_a_command_that_times_out_still_has_its_changes_judged(
    ws: Path, tmp_path: Path
) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    result = await run(ws, "echo done > out.txt; sleep 30", audit=log, timeout_s=1)
    log.close()
    assert result.status == "timeout"
    assert (ws / "out.txt").read_text() == "done\n"
    outcome = [r for r in read_audit(log.path) if r["kind"] == "outcome"][-1]
    assert [c["path"] for c in outcome["changes"]] == ["/workspace/out.txt"]
    assert verify_audit(log.path).ok


async def test_a_cancelled_command_has_its_changes_judged_and_asks_nobody(ws: Path) -> None:
    asked: list[list[str]] = []

    def approver(call: ToolCall, decision: Decision) -> bool:
        rules = sorted(part.rule or "" for part in decision.asks or (decision,))
        asked.append(rules)
        return "commands-ask" in rules  # the command (and the file it says it writes)

    toolkit = Toolkit()
    add_shell_tools(toolkit)
    command = "echo kept > kept.txt; mkdir .vscode; echo x > .vscode/t.json; sleep 30"
    with VirtualFS([Mount("/workspace", ws)]) as fs:
        policy = Policy.preset("default")
        async with Engine(toolkit, policy=policy, fs=fs, approver=approver) as engine:
            task = asyncio.ensure_future(
                engine.call(ToolCall(name="run_shell", arguments={"command": command}))
            )
            for _ in range(200):
                await asyncio.sleep(0.02)
                if any(p.name == "sleep" for p in _children()):
                    break
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert (ws / "kept.txt").read_text() == "kept\n"
    assert not (ws / ".vscode").exists()
    # asked once, about the line; the change's own ask went unanswered, to nobody
    assert asked == [["commands-ask", "dangerous-path"]]


def _children() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


async def test_a_file_over_the_size_limit_is_not_applied_and_says_why(ws: Path) -> None:
    result = await run(
        ws, "head -c 5000 /dev/zero > big.bin; echo small > small.txt", max_file_bytes=4096
    )
    assert result.status == "ok"
    assert not (ws / "big.bin").exists()
    assert (ws / "small.txt").exists()
    assert "over the 4,096-byte limit" in changes(result)["/workspace/big.bin"]["reason"]


async def test_a_hard_link_in_the_workspace_is_replaced_not_written_through(
    ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    os.link(outside, ws / "linked.txt")
    result = await run(ws, "echo more >> linked.txt")
    assert result.status == "ok"
    assert outside.read_text() == "outside\n"
    assert (ws / "linked.txt").read_text() == "outside\nmore\n"
    assert os.stat(ws / "linked.txt").st_nlink == 1


async def test_a_read_only_mount_is_masked_too(tmp_path: Path, ws: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / ".env").write_text("INBOX_SECRET=sk-inbox\n")
    (inbox / "brief.txt").write_text("the brief\n")
    toolkit = Toolkit()
    add_shell_tools(toolkit)
    mounts = [Mount("/workspace", ws), Mount("/userinput", inbox, read_only=True)]
    with VirtualFS(mounts) as fs:
        async with Engine(toolkit, policy=Policy.preset("permissive"), fs=fs) as engine:
            result = await engine.call(
                ToolCall(
                    name="run_shell",
                    arguments={"command": "cat /userinput/brief.txt /userinput/.env"},
                )
            )
    assert "the brief" in result.text
    assert "sk-inbox" not in result.text


async def test_a_commands_files_land_with_one_name_each_and_no_staging_left(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the layer's files are hard-linked into place (not copied twice), then the layer goes:
    # what lands is an ordinary file with one name; two names the command gave one file land
    # as two files, since linking them would tie the workspace's files together
    staging_base = tmp_path / "tmp"
    staging_base.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging_base))  # this test's layers only
    result = await run(ws, "seq 1 1000 > big.txt; echo x > a.txt; ln a.txt b.txt")
    assert result.status == "ok", result.text
    assert (ws / "big.txt").read_text().splitlines()[-1] == "1000"
    for name in ("big.txt", "a.txt", "b.txt"):
        assert os.stat(ws / name).st_nlink == 1, name
    (ws / "a.txt").write_text("changed\n")
    assert (ws / "b.txt").read_text() == "x\n"
    assert os.listdir(staging_base) == []  # the layers are gone
    assert not [name for name in os.listdir(ws) if name.startswith(".stockade-")]


async def test_a_call_cancelled_while_its_view_is_made_leaves_no_staging_folder(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the view is made in a worker thread, which a cancellation cannot stop: what it makes
    # after the call is gone must still be removed
    made: list[Any] = []
    slow = threading.Event()
    original = _commands.Commands._stage

    def stage(self: Any, admitted: Any, fs: Any) -> Any:
        slow.wait(5)  # until the call has been cancelled
        view = original(self, admitted, fs)
        made.append(view)
        return view

    monkeypatch.setattr(_commands.Commands, "_stage", stage)
    call = asyncio.ensure_future(run(ws, "echo never > ran.txt"))
    await asyncio.sleep(0.2)
    call.cancel()
    slow.set()
    with pytest.raises(asyncio.CancelledError):
        await call
    for _ in range(100):  # the thread finishes after the cancellation
        if made and made[0].closed:
            break
        await asyncio.sleep(0.02)
    assert made, "the view was never made"
    assert made[0].closed
    assert gone(made[0].folder)
    assert gone(ws / "ran.txt")
