"""Stockade protects itself: its audit log (with its seal and rotated files), its traces and the
policy file it was loaded from are out of every call's reach wherever they are, and a log that
was cut short, emptied or deleted does not verify.

The attacks are the ones an agent would make: empty the log with ``write_file``, delete it, move
its folder away, reach it by its host path with a raw tool or by a redirection in a command,
rewrite ``stockade.toml`` so the next session obeys it. Each test checks the real effect: the
files on disk, and what `verify_audit` says afterwards.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from support import require_bubblewrap

from stockade import AuditLog, Engine, Mount, Policy, ToolCall, Toolkit, VirtualFS, verify_audit
from stockade.engine import ToolResult, add_file_tools, add_raw_text_tools, add_shell_tools
from stockade.engine.observe import AuditError
from stockade.engine.observe.tracing import tracer_provider
from stockade.policies import Request

ALLOW_ALL = Policy.from_dict({"default": "allow", "dangerous_paths": {"replace": []}})


def file_toolkit(*, shell: bool = False, raw: bool = False) -> Toolkit:
    toolkit = Toolkit()
    add_file_tools(toolkit)
    if shell:
        add_shell_tools(toolkit)
    if raw:
        add_raw_text_tools(toolkit)
    return toolkit


async def call(engine: Engine, name: str, **arguments: Any) -> ToolResult:
    return await engine.call(ToolCall(name=name, arguments=arguments))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "notes.md").write_text("notes\n")
    return folder


def assert_refused(result: ToolResult) -> None:
    assert result.status == "denied", result.text
    assert result.decision is not None
    assert result.decision.rule == "stockade-state", result.decision


# -- the audit log and its folder, inside the workspace --------------------------------------


ATTACKS = [
    ("write_file", {"path": ".stockade/audit.jsonl", "content": ""}),
    ("write_file", {"path": "/workspace/.stockade/audit.jsonl.seal", "content": ""}),
    ("write_file", {"path": ".STOCKADE/./audit.jsonl", "content": ""}),
    ("delete_file", {"path": ".stockade/audit.jsonl"}),
    ("edit_file", {"path": ".stockade/audit.jsonl", "old_text": "intent", "new_text": "x"}),
    ("insert_text", {"path": ".stockade/audit.jsonl", "line": 1, "text": "{}"}),
    ("move_file", {"source": ".stockade", "destination": "moved"}),
    (
        "move_file",
        {"source": "notes.md", "destination": ".stockade/audit.jsonl", "overwrite": True},
    ),
    ("read_text_file", {"path": ".stockade/audit.jsonl"}),
    ("write_file", {"path": ".stockade/traces.jsonl", "content": ""}),
]


@pytest.mark.parametrize(("tool", "arguments"), ATTACKS, ids=[f"{t}:{a}" for t, a in ATTACKS])
async def test_the_audit_log_in_the_workspace_is_out_of_reach(
    ws: Path, tool: str, arguments: dict[str, Any]
) -> None:
    log = ws / ".stockade" / "audit.jsonl"
    with AuditLog(log) as audit, VirtualFS([Mount("/workspace", ws)]) as fs:
        # even a policy that allows everything, and protects no path of its own
        async with Engine(file_toolkit(), policy=ALLOW_ALL, fs=fs, audit=audit) as engine:
            assert (await call(engine, "write_file", path="a.txt", content="x")).status == "ok"
            assert_refused(await call(engine, tool, **arguments))
            assert "Stockade's own files" in engine.calls.results[-1].text
            before = audit.verify()
    assert before.ok, str(before)
    report = verify_audit(log)
    assert report.ok, str(report)
    assert report.records == report.sealed == 4  # two calls, each intent and outcome
    assert (ws / "notes.md").read_text() == "notes\n"
    assert not (ws / "moved").exists()


async def test_a_log_directly_in_the_workspace_keeps_its_neighbours_usable(ws: Path) -> None:
    log = ws / "audit.jsonl"
    audit = AuditLog(log, max_batch=1, rotate_bytes=1024)
    with audit, VirtualFS([Mount("/workspace", ws)]) as fs:
        async with Engine(file_toolkit(), policy=ALLOW_ALL, fs=fs, audit=audit) as engine:
            for _ in range(4):  # enough to rotate
                wrote = await call(engine, "write_file", path="b.txt", content="x")
                assert wrote.status == "ok"
            assert (ws / "audit.jsonl.000001").exists()
            assert_refused(await call(engine, "delete_file", path="audit.jsonl.000001"))
            assert_refused(await call(engine, "write_file", path="audit.jsonl.seal", content=""))
            assert_refused(await call(engine, "write_file", path="audit.jsonl", content=""))
            neighbour = await call(engine, "write_file", path="audit.txt", content="ok")
            assert neighbour.status == "ok"
    assert verify_audit(log).ok


async def test_the_log_is_protected_by_its_host_path_from_host_file_tools(
    tmp_path: Path, ws: Path
) -> None:
    log = tmp_path / "state" / "audit.jsonl"  # outside the workspace: only host tools reach it
    with AuditLog(log) as audit, VirtualFS([Mount("/workspace", ws)]) as fs:
        toolkit = file_toolkit(raw=True)
        async with Engine(toolkit, policy=ALLOW_ALL, fs=fs, audit=audit) as engine:
            assert_refused(await call(engine, "write_text_file", file_path=str(log), content=""))
            linked = tmp_path / "link-to-state"
            linked.symlink_to(log.parent)
            assert_refused(
                await call(engine, "write_text_file", file_path=f"{linked}/audit.jsonl", content="")
            )
            assert_refused(await call(engine, "view_text_file", file_path=f"{log}.seal"))
            other = tmp_path / "state" / "notes.txt"
            wrote = await call(engine, "write_text_file", file_path=str(other), content="mine")
            assert wrote.status == "ok", wrote.text  # only Stockade's own files
    assert verify_audit(log).ok


# -- the policy file ------------------------------------------------------------------------


async def test_the_policy_file_cannot_be_rewritten_so_the_next_session_obeys_it(ws: Path) -> None:
    policy_file = ws / "stockade.toml"
    policy_file.write_text(
        'version = 1\ndefault = "allow"\n[[rules]]\nid = "no-notes"\neffect = "deny"\n'
        'paths = ["notes.md"]\n',
        encoding="utf-8",
    )
    policy = Policy.load(policy_file)
    with VirtualFS([Mount("/workspace", ws)]) as fs:
        async with Engine(file_toolkit(), policy=policy, fs=fs) as engine:
            assert engine.policy.file == policy_file.resolve()
            assert_refused(
                await call(
                    engine,
                    "write_file",
                    path="stockade.toml",
                    content='version = 1\ndefault = "allow"\n',
                )
            )
            assert_refused(await call(engine, "delete_file", path="stockade.toml"))
            denied = await call(engine, "write_file", path="notes.md", content="x")
            assert denied.decision is not None
            assert denied.decision.rule == "no-notes"
    again = Policy.load(policy_file)  # the next session
    assert [rule.id for rule in again.spec.rules] == ["no-notes"]


async def test_a_policy_file_of_another_name_is_protected_too(ws: Path) -> None:
    (ws / "rules").mkdir()
    policy_file = ws / "rules" / "agents.toml"
    policy_file.write_text('version = 1\ndefault = "allow"\n', encoding="utf-8")
    with VirtualFS([Mount("/workspace", ws)]) as fs:
        async with Engine(file_toolkit(), policy=Policy.load(policy_file), fs=fs) as engine:
            assert_refused(await call(engine, "write_file", path="rules/agents.toml", content=""))
            ok = await call(engine, "write_file", path="rules/other.toml", content="")
            assert ok.status == "ok"


def test_stockade_toml_and_the_state_folder_are_on_the_protected_list_anywhere() -> None:
    default = Policy.preset("default")
    for path in ("/workspace/sub/stockade.toml", "/workspace/x/.stockade/audit.jsonl"):
        decision = default.decide(Request("agent", "write_file", paths=[(path, "write")]))
        assert decision.rule == "dangerous-path", path


# -- traces -----------------------------------------------------------------------------------


async def test_a_trace_file_in_the_workspace_is_protected(ws: Path) -> None:
    provider = tracer_provider("jsonl", path=ws / "traces" / "spans.jsonl")
    try:
        with VirtualFS([Mount("/workspace", ws)]) as fs:
            engine = Engine(file_toolkit(), policy=ALLOW_ALL, fs=fs, tracer_provider=provider)
            async with engine:
                assert_refused(
                    await call(engine, "write_file", path="traces/spans.jsonl", content="")
                )
                ok = await call(engine, "write_file", path="traces/mine.txt", content="")
                assert ok.status == "ok"
    finally:
        provider.shutdown()


def test_an_engine_without_own_files_keeps_the_policy_it_was_given() -> None:
    policy = Policy.preset("default")
    assert Engine(file_toolkit(), policy=policy).policy is policy


# -- a command --------------------------------------------------------------------------------


async def test_a_command_cannot_cut_the_log_unnoticed(ws: Path) -> None:
    """A redirection into the log is a write the policy judges (refused). Whatever else a command
    does to the log, the seal sees: the log either keeps every record, or does not verify."""
    require_bubblewrap()
    log = ws / ".stockade" / "audit.jsonl"
    with AuditLog(log, durability="fsync") as audit, VirtualFS([Mount("/workspace", ws)]) as fs:
        engine = Engine(file_toolkit(shell=True), policy=ALLOW_ALL, fs=fs, audit=audit)
        async with engine:
            redirected = await call(engine, "run_shell", command=": > .stockade/audit.jsonl")
            assert_refused(redirected)
            removed = await call(engine, "run_shell", command="rm -f .stockade/audit.jsonl")
            sealed = audit.verify().sealed
    report = verify_audit(log)
    if removed.status == "denied" or (log.exists() and report.ok):
        assert report.ok, str(report)  # the change was refused
        assert report.records == sealed
    else:
        assert not report.ok
        assert "deleted" in str(report), str(report)


# -- the seal ---------------------------------------------------------------------------------


def write_log(path: Path, records: int, **options: Any) -> list[bytes]:
    with AuditLog(path, **options) as log:
        for number in range(records):
            log.record("intent", {"n": number})
    return path.read_bytes().splitlines(keepends=True)


def test_a_truncated_log_does_not_verify_and_says_what_is_missing(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    lines = write_log(log, 12)
    log.write_bytes(b"".join(lines[:7]))
    report = verify_audit(log)
    assert not report.ok
    assert (report.records, report.sealed, report.bad_record) == (7, 12, 8)
    assert "records 8..12 are missing: the log was truncated" in str(report)
    log.write_bytes(b"".join(lines[:11]))
    assert "record 12 is missing" in str(verify_audit(log))


@pytest.mark.parametrize("how", ["emptied", "deleted"])
def test_an_emptied_or_deleted_log_does_not_verify(tmp_path: Path, how: str) -> None:
    log = tmp_path / "audit.jsonl"
    write_log(log, 5)
    if how == "emptied":
        log.write_bytes(b"")
    else:
        log.unlink()
    report = verify_audit(log)
    assert not report.ok
    assert ("deleted or emptied" if how == "emptied" else "it was deleted") in str(report)
    assert "5" in str(report)


def test_a_log_rechained_from_scratch_does_not_verify_against_its_seal(tmp_path: Path) -> None:
    """Someone rewrites the whole log as a perfect chain of their own: its own hashes hold,
    but the record the seal names is not there any more."""
    log = tmp_path / "audit.jsonl"
    write_log(log, 6)
    seal = log.with_name("audit.jsonl.seal").read_bytes()
    log.unlink()
    log.with_name("audit.jsonl.seal").unlink()
    write_log(log, 6)  # a new chain, as long as the old one
    log.with_name("audit.jsonl.seal").write_bytes(seal)  # the original seal kept elsewhere
    report = verify_audit(log)
    assert not report.ok
    assert "record 6" in str(report)
    assert "rewritten" in str(report)


def test_a_new_audit_log_refuses_to_chain_on_over_a_truncated_one(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    lines = write_log(log, 8)
    log.write_bytes(b"".join(lines[:3]))
    with pytest.raises(AuditError, match=r"records 4\.\.8 are missing"):
        AuditLog(log)
    assert log.read_bytes() == b"".join(lines[:3])  # left as found: the evidence
    log.unlink()
    with pytest.raises(AuditError, match="deleted or emptied"):
        AuditLog(log)
    assert not log.exists()


def test_the_seal_can_live_elsewhere(tmp_path: Path) -> None:
    log, seal = tmp_path / "audit.jsonl", tmp_path / "elsewhere" / "seal"
    lines = write_log(log, 4, seal=seal)
    assert seal.exists()
    assert not log.with_name("audit.jsonl.seal").exists()
    log.write_bytes(b"".join(lines[:2]))
    assert verify_audit(log, seal=seal).ok is False
    assert verify_audit(log).ok  # held to no seal, the cut cannot be seen: why a seal exists
    assert "no seal" in str(verify_audit(log))


def test_a_damaged_seal_fails_verification(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    write_log(log, 3)
    log.with_name("audit.jsonl.seal").write_text("whatever\n")
    report = verify_audit(log)
    assert not report.ok
    assert "seal" in str(report)
    assert "damaged" in str(report)


def test_the_process_head_catches_a_log_rewritten_with_its_seal(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    with AuditLog(log) as audit:
        for number in range(5):
            audit.record("intent", {"n": number})
        assert audit.verify().ok
        lines = log.read_bytes().splitlines(keepends=True)
        log.write_bytes(b"".join(lines[:2]))
        # the seal forged to match: record 2's number and hash
        second = json.loads(lines[1])["hash"].encode()
        log.with_name("audit.jsonl.seal").write_bytes(
            b'{"stockade_audit_seal":1,"seq":2,"hash":"%s"}\n' % second
        )
        assert verify_audit(log).ok  # the files agree with each other...
        report = audit.verify()
        assert not report.ok
        assert "records 3..5 are missing" in str(report)
        assert "in memory" in str(report)


def test_a_log_from_before_seals_gets_one_and_goes_on(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    write_log(log, 3)
    log.with_name("audit.jsonl.seal").unlink()  # as an older Stockade left it
    assert verify_audit(log).ok
    with AuditLog(log) as audit:
        audit.record("intent", {})
    report = verify_audit(log)
    assert report.ok
    assert report.sealed == 4


def test_the_seal_is_written_only_by_its_user(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    write_log(log, 1)
    assert os.stat(log.with_name("audit.jsonl.seal")).st_mode & 0o077 == 0


def seal_of(line: bytes) -> bytes:
    record = json.loads(line)
    return b'{"stockade_audit_seal":1,"seq":%d,"hash":"%s"}\n' % (
        record["seq"],
        record["hash"].encode(),
    )


def test_a_seal_left_behind_by_a_crash_is_no_alarm_and_catches_up(tmp_path: Path) -> None:
    """A crash between the log's write and the seal's leaves the seal behind the log: the
    sealed record is still there, so the log verifies, opens, and is sealed again."""
    log = tmp_path / "audit.jsonl"
    lines = write_log(log, 6)
    log.with_name("audit.jsonl.seal").write_bytes(seal_of(lines[3]))
    assert verify_audit(log).ok
    with AuditLog(log) as audit:
        audit.record("intent", {})
    report = verify_audit(log)
    assert report.ok
    assert report.sealed == 7


def test_a_seal_behind_a_log_whose_sealed_record_changed_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    lines = write_log(log, 6)
    other = tmp_path / "other.jsonl"
    forged = write_log(other, 6)  # the same numbers, other hashes
    log.with_name("audit.jsonl.seal").write_bytes(seal_of(forged[3]))
    assert "rewritten" in str(verify_audit(log))
    with pytest.raises(AuditError, match="rewritten"):
        AuditLog(log)
    assert log.read_bytes() == b"".join(lines)
