"""The audit log (engine/observe/) end to end: real files, a real `Engine`, a real subprocess.

What it must guarantee, and so what is tested here:

* tampering of every kind (edits, deletions, insertions, reordering, cut lines, foreign files,
  rotated files deleted or renamed) makes `verify_audit` fail, naming the FIRST bad record by its
  1-based line across files and saying why; an intact log, a rotated one, and one whose last
  line was half-written by a crash still verify;
* a crash's half-written last line is recovered into a ``recovered`` record and the chain goes
  on; a process killed with SIGKILL mid-run leaves a log that verifies and can be continued;
* ``fsync`` durability puts each record on disk before ``record`` returns; ``batch`` durability
  writes on `flush`, `close`, after ``max_delay_s`` and at ``max_batch``;
* the engine writes one ``intent`` and one ``outcome`` per call with the fields of
  engine/observe/records.py, for every status, and denies a call whose intent cannot be written;
* 10,000 concurrent calls (and calls from several threads) leave whole, chained lines;
* `read_audit` filters, and bad input is refused with a clear message.

Timing tests poll with generous deadlines (a loaded 2-core CI machine can be slow, never fast).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult, tool
from stockade.engine.builtin.files import add_file_tools
from stockade.engine.observe import AuditError, AuditLog, read_audit, verify_audit
from stockade.engine.observe._audit_tail import GENESIS
from stockade.policies import Policy
from stockade.sandbox import Mount, VirtualFS

ROOT = Path(__file__).resolve().parents[1]

# What tools did, so a test can tell whether a tool ran at all.
ran: list[str] = []


@pytest.fixture(autouse=True)
def _fresh_state() -> None:
    ran.clear()


# -- helpers ---------------------------------------------------------------------------------


def files_of(path: Path) -> list[Path]:
    """The log's files, oldest first: rotated ones (``<name>.000001`` ...), then the live one.
    Found independently of the audit log's code, so a bug there cannot hide here."""
    rotated = sorted(path.parent.glob(f"{path.name}.[0-9][0-9][0-9][0-9][0-9][0-9]"))
    return [*rotated, path] if path.exists() else rotated


def lines_of(path: Path) -> list[bytes]:
    """Every line of the log across its files, each with its newline."""
    return [line for f in files_of(path) for line in f.read_bytes().splitlines(keepends=True)]


def make_log(path: Path, count: int, *, rotate_bytes: int = 64 * 1024 * 1024) -> None:
    """``count`` records written by a real `AuditLog`. One record a batch, so a small
    ``rotate_bytes`` rotates between records and the log spans several files."""
    with AuditLog(path, max_batch=1, rotate_bytes=rotate_bytes) as log:
        for n in range(count):
            log.record("intent", {"call_id": f"call_{n:04d}", "tool": "echo", "pad": "x" * 120})


def seal(record: dict[str, Any]) -> bytes:
    """A record's line as the format defines it (JSON ending in the sha256 of the line without
    its hash): how a forger who knows the format would write one. Written here from the
    documented format, not borrowed from the audit log's code."""
    body = orjson.dumps(record)
    digest = hashlib.sha256(body).hexdigest()
    return body[:-1] + b',"hash":"' + digest.encode() + b'"}\n'


def hash_of(line: bytes) -> str:
    return str(orjson.loads(line)["hash"])


def records(log: AuditLog, **filters: Any) -> list[dict[str, Any]]:
    """What the log holds now (waiting records written first), filtered like `read_audit`."""
    log.flush()
    return list(read_audit(log.path, **filters))


def of_call(log: AuditLog, call_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The intent and the outcome of one call: exactly one of each."""
    found = records(log, call_id=call_id)
    assert [r["kind"] for r in found] == ["intent", "outcome"], found
    return found[0], found[1]


def wait_for(predicate: Callable[[], bool], limit: float = 5.0) -> None:
    """Poll until ``predicate()`` holds; fail after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


# -- tools and policies ----------------------------------------------------------------------


@tool(read_only=True)
async def echo(text: str) -> str:
    """Echo the text back."""
    ran.append("echo")
    return text


@tool(read_only=True)
async def nop() -> str:
    """Do nothing (the 10,000-call test measures the engine and the log, not the tool)."""
    return "ok"


@tool(retry=False)
async def boom() -> str:
    """Always fail."""
    ran.append("boom")
    raise ValueError("boom")


@tool(timeout=0.05, retry=False)
async def sleepy() -> str:
    """Take far longer than its timeout."""
    ran.append("sleepy")
    await asyncio.sleep(10)
    return "never"


@tool()
async def poke() -> str:
    """A tool the policy denies."""
    ran.append("poke")
    return "poked"


# The tools above decided by rules of our own, so intents carry known rules and reasons.
POLICY = Policy.from_dict(
    {
        "rules": [
            {"id": "no-poke", "effect": "deny", "tools": ["poke"], "reason": "poking is off"},
            {"id": "tools-ok", "effect": "allow", "tools": ["*"], "reason": "tools are fine"},
        ],
        "dangerous_paths": {"replace": []},
    }
)


def make_engine(log: AuditLog, *tools: Any) -> Engine:
    toolkit = Toolkit()
    for item in tools or (echo, nop, boom, sleepy, poke):
        toolkit.add(item)
    return Engine(toolkit, policy=POLICY, audit=log)


async def call(engine: Engine, name: str, **arguments: Any) -> ToolResult:
    return await engine.call(ToolCall(name=name, arguments=arguments, subject="alice"))


# -- 1. tampering: verify_audit names the first bad record ------------------------------------

Tamper = Callable[[list[bytes]], list[bytes]]


def _edit(index: int, old: bytes, new: bytes) -> Tamper:
    def edit(lines: list[bytes]) -> list[bytes]:
        assert old in lines[index]
        lines[index] = lines[index].replace(old, new)
        return lines

    return edit


def _delete(index: int) -> Tamper:
    def delete(lines: list[bytes]) -> list[bytes]:
        del lines[index]
        return lines

    return delete


def _insert(index: int, make: Callable[[list[bytes]], bytes]) -> Tamper:
    def insert(lines: list[bytes]) -> list[bytes]:
        lines.insert(index, make(lines))
        return lines

    return insert


def _swap(index: int) -> Tamper:
    def swap(lines: list[bytes]) -> list[bytes]:
        lines[index], lines[index + 1] = lines[index + 1], lines[index]
        return lines

    return swap


def _cut(index: int) -> Tamper:
    """Bytes cut from the middle of one record to the middle of the next: one joined line."""

    def cut(lines: list[bytes]) -> list[bytes]:
        first, second = lines[index], lines[index + 1]
        lines[index : index + 2] = [first[: len(first) // 2] + second[len(second) // 3 :]]
        return lines

    return cut


def _join(index: int) -> Tamper:
    """The newline between two records removed."""

    def join(lines: list[bytes]) -> list[bytes]:
        lines[index : index + 2] = [lines[index].rstrip(b"\n") + lines[index + 1]]
        return lines

    return join


def _replace_all(data: bytes) -> Tamper:
    return lambda lines: [data]


def _chained_forgery(lines: list[bytes]) -> bytes:
    """A record forged to follow record 4 perfectly: right prev, right seq, right own hash."""
    record = {"seq": 5, "prev": hash_of(lines[3]), "kind": "intent", "time": time.time()}
    return seal({**record, "call_id": "forged", "tool": "rm", "effect": "allow"})


def _unchained_forgery(lines: list[bytes]) -> bytes:
    """A record with a correct own hash that claims to follow the genesis."""
    record = {"seq": 5, "prev": GENESIS, "kind": "intent", "time": time.time()}
    return seal({**record, "call_id": "forged", "tool": "rm", "effect": "allow"})


EDITED = "edited"
UNCHAINED = "does not follow"
FOREIGN = "not a Stockade audit record"

# (tampering, the 1-based line of the first bad record, a word of the problem), on a log of 10
# records in one file (lines 1..10).
SINGLE_FILE_TAMPERING = [
    pytest.param(_edit(4, b"call_0004", b"call_6666"), 5, EDITED, id="edit-middle-field"),
    pytest.param(_edit(4, b'"tool":"echo"', b'"tool":"rm"'), 5, EDITED, id="edit-middle-tool"),
    pytest.param(_edit(9, b"call_0009", b"call_9999"), 10, EDITED, id="edit-last-record"),
    pytest.param(_edit(0, b'"seq":1,', b'"seq":1 ,'), 1, EDITED, id="edit-first-whitespace"),
    pytest.param(_delete(4), 5, UNCHAINED, id="delete-middle"),
    pytest.param(_delete(0), 1, UNCHAINED, id="delete-first"),
    # a copy of a genuine record: its own hash is right, its place in the chain is not
    pytest.param(_insert(4, lambda lines: lines[2]), 5, UNCHAINED, id="insert-replayed-record"),
    pytest.param(_insert(4, _unchained_forgery), 5, UNCHAINED, id="insert-forged-record"),
    # a forgery that chains perfectly onto record 4 cannot itself be told from a real record
    # (there is no key): the first record that can be shown bad is the genuine one after it
    pytest.param(_insert(4, _chained_forgery), 6, UNCHAINED, id="insert-chained-forgery"),
    pytest.param(_swap(4), 5, UNCHAINED, id="swap-two-records"),
    pytest.param(_swap(0), 1, UNCHAINED, id="swap-first-two"),
    pytest.param(_cut(4), 5, EDITED, id="cut-mid-record-to-mid-next"),
    pytest.param(_join(4), 5, EDITED, id="newline-between-records-removed"),
    pytest.param(_insert(4, lambda lines: b"\n"), 5, FOREIGN, id="empty-line-inserted"),
    pytest.param(_insert(0, lambda lines: b"\n"), 1, FOREIGN, id="empty-line-first"),
    pytest.param(_insert(4, lambda lines: b'{"note":"hi"}\n'), 5, FOREIGN, id="json-line-inserted"),
    pytest.param(_replace_all(b"hello\nworld\n"), 1, FOREIGN, id="foreign-plain-text"),
    pytest.param(_replace_all(b'{"a": 1}\n{"b": 2}\n'), 1, FOREIGN, id="foreign-json-lines"),
]


@pytest.mark.parametrize(("tamper", "bad", "why"), SINGLE_FILE_TAMPERING)
def test_tampering_is_caught_at_the_first_bad_record(
    tmp_path: Path, tamper: Tamper, bad: int, why: str
) -> None:
    path = tmp_path / "audit.jsonl"
    make_log(path, 10)
    assert verify_audit(path).ok  # the log was intact before the tampering
    path.write_bytes(b"".join(tamper(lines_of(path))))

    report = verify_audit(path)

    assert not report.ok, str(report)
    assert report.bad_record == bad, report.problem
    assert report.problem is not None
    assert f"record {bad} " in report.problem
    assert why in report.problem
    assert report.bad_file == str(path)
    assert report.records == bad - 1  # the records before the bad one were good
    assert "NOT intact" in str(report)


def _delete_file(number: int) -> Callable[[Path], None]:
    def delete(path: Path) -> None:
        path.with_name(f"{path.name}.{number:06d}").unlink()

    return delete


def _rename(*moves: tuple[int, int]) -> Callable[[Path], None]:
    """Rotated files renamed (through temporary names, so swaps work)."""

    def rename(path: Path) -> None:
        for old, _ in moves:
            path.with_name(f"{path.name}.{old:06d}").rename(path.with_name(f"tmp.{old}"))
        for old, new in moves:
            path.with_name(f"tmp.{old}").rename(path.with_name(f"{path.name}.{new:06d}"))

    return rename


def _truncate_file(number: int) -> Callable[[Path], None]:
    def truncate(path: Path) -> None:
        rotated = path.with_name(f"{path.name}.{number:06d}")
        rotated.write_bytes(rotated.read_bytes()[:-10])

    return truncate


def _records_in(path: Path, *numbers: int) -> int:
    return sum(count_lines(path.with_name(f"{path.name}.{n:06d}")) for n in numbers)


# (what is done to the rotated files, the first bad line given the untouched files, its file,
# a word of the problem)
ROTATED_TAMPERING = [
    pytest.param(_delete_file(2), lambda p: _records_in(p, 1) + 1, 3, UNCHAINED, id="middle-gone"),
    pytest.param(_delete_file(1), lambda p: 1, 2, UNCHAINED, id="first-rotated-gone"),
    pytest.param(_rename((1, 2), (2, 1)), lambda p: 1, 1, UNCHAINED, id="first-two-swapped"),
    pytest.param(
        _rename((2, 3), (3, 2)), lambda p: _records_in(p, 1) + 1, 2, UNCHAINED, id="2-3-swapped"
    ),
    pytest.param(_rename((1, 9)), lambda p: 1, 2, UNCHAINED, id="first-renamed-last"),
    pytest.param(
        _truncate_file(1),
        lambda p: _records_in(p, 1),
        1,
        "half-written record inside",
        id="rotated-file-cut-mid-record",
    ),
]


@pytest.mark.parametrize(("tamper", "bad", "bad_file", "why"), ROTATED_TAMPERING)
def test_tampering_with_rotated_files_is_caught(
    tmp_path: Path,
    tamper: Callable[[Path], None],
    bad: Callable[[Path], int],
    bad_file: int,
    why: str,
) -> None:
    path = tmp_path / "audit.jsonl"
    make_log(path, 50, rotate_bytes=2048)
    assert len(files_of(path)) >= 5  # several rotated files, or the test tests nothing
    expected = bad(path)  # from the files as written, before the tampering
    tamper(path)

    report = verify_audit(path)

    assert not report.ok, str(report)
    assert report.bad_record == expected, report.problem
    assert report.problem is not None
    assert f"record {expected} " in report.problem
    assert why in report.problem
    assert report.bad_file == str(path.with_name(f"{path.name}.{bad_file:06d}"))


def test_a_missing_log_does_not_verify(tmp_path: Path) -> None:
    report = verify_audit(tmp_path / "nowhere" / "audit.jsonl")
    assert not report.ok
    assert report.records == 0
    assert report.problem is not None
    assert "no audit log" in report.problem
    assert str(tmp_path / "nowhere" / "audit.jsonl") in report.problem


def test_an_intact_log_verifies(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    make_log(path, 10)
    report = verify_audit(path)
    assert report.ok, str(report)
    assert (report.records, report.partial_tail, report.problem) == (10, False, None)
    assert report.files == (str(path),)
    # the chain as documented: seq from 1, prev the hash of the record before, genesis first
    parsed = [orjson.loads(line) for line in lines_of(path)]
    assert [r["seq"] for r in parsed] == list(range(1, 11))
    assert [r["prev"] for r in parsed] == [GENESIS] + [r["hash"] for r in parsed[:-1]]


def test_a_half_written_last_line_is_tolerated_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    make_log(path, 10)
    whole = lines_of(path)
    # a crash mid-write: the last record only half on disk
    path.write_bytes(b"".join(whole[:-1]) + whole[-1][:50])

    report = verify_audit(path)

    assert report.ok, str(report)
    assert report.partial_tail
    assert report.records == 9
    assert "half-written" in str(report)


def test_a_rotated_log_verifies_across_its_files(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    make_log(path, 50, rotate_bytes=2048)
    files = files_of(path)
    assert len(files) >= 5
    assert all(f.stat().st_size < 2048 + 400 for f in files)  # rotated near rotate_bytes
    report = verify_audit(path)
    assert report.ok, str(report)
    assert report.records == 50
    assert report.files == tuple(str(f) for f in files)
    # records in order across files, oldest file first
    assert [r["call_id"] for r in read_audit(path)] == [f"call_{n:04d}" for n in range(50)]


# -- 2. recovery after a crash -----------------------------------------------------------------

HALF_LINE = b'{"seq":6,"prev":"0a1b2c","kind":"intent","time":17'


def test_a_new_log_recovers_a_half_written_last_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    make_log(path, 5)
    with path.open("ab") as handle:
        handle.write(HALF_LINE)
    assert verify_audit(path).partial_tail

    with AuditLog(path) as log:
        log.record("intent", {"call_id": "after-crash"})
        log.record("outcome", {"call_id": "after-crash"})

    report = verify_audit(path)
    assert report.ok, str(report)
    assert not report.partial_tail
    assert report.records == 5 + 1 + 2
    recovered = list(read_audit(path, kind="recovered"))
    assert len(recovered) == 1
    assert recovered[0]["partial_line"] == HALF_LINE.decode()
    assert recovered[0]["seq"] == 6  # it took the half line's place in the chain
    assert [r["call_id"] for r in read_audit(path, call_id="after-crash")] == ["after-crash"] * 2


def test_a_log_reopened_without_a_crash_just_continues(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    make_log(path, 5)
    make_log(path, 5)
    report = verify_audit(path)
    assert (report.ok, report.records) == (True, 10), report
    assert list(read_audit(path, kind="recovered")) == []


def test_a_rotated_log_reopened_continues_its_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    make_log(path, 30, rotate_bytes=2048)
    make_log(path, 30, rotate_bytes=2048)
    report = verify_audit(path)
    assert (report.ok, report.records) == (True, 60), report


def test_a_crash_just_after_rotation_is_recovered_too(tmp_path: Path) -> None:
    """A crash during the first write after a rotation leaves a live file holding nothing but a
    half line, while the chain's last record is in the newest rotated file: recovery must
    continue the chain from there, as it does when the half line follows whole records."""
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, max_batch=1, rotate_bytes=1024) as log:
        n = 0
        while not files_of(path)[:-1] or path.stat().st_size:  # until a rotation just happened
            log.record("intent", {"call_id": f"call_{n}", "pad": "x" * 100})
            n += 1
    assert path.stat().st_size == 0
    with path.open("ab") as handle:
        handle.write(HALF_LINE)
    assert verify_audit(path).ok

    with AuditLog(path) as log:
        log.record("intent", {"call_id": "after-crash"})

    report = verify_audit(path)
    assert report.ok, str(report)
    assert report.records == n + 2  # every record before, the recovered one, the new one
    assert len(list(read_audit(path, kind="recovered"))) == 1


# -- 3. durability -----------------------------------------------------------------------------


def test_fsync_mode_puts_each_record_on_disk_before_record_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "audit.jsonl"
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:  # the real fsync, counted
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    with AuditLog(path, durability="fsync", max_delay_s=60) as log:
        for n in range(1, 6):
            log.record("intent", {"call_id": f"call_{n}"})
            # read back by another handle at once: written, whole, and fsynced
            assert count_lines(path) == n
            assert len(synced) == n
            assert orjson.loads(lines_of(path)[-1])["call_id"] == f"call_{n}"
    assert verify_audit(path).records == 5


def test_batch_mode_writes_on_flush(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, max_batch=1000, max_delay_s=60) as log:
        for n in range(3):
            log.record("intent", {"call_id": f"call_{n}"})
        assert count_lines(path) == 0  # kept in memory: nothing due yet
        log.flush()
        assert count_lines(path) == 3
        log.record("intent", {"call_id": "call_3"})
        assert count_lines(path) == 3
        log.flush()
        assert count_lines(path) == 4
    assert verify_audit(path).records == 4


def test_batch_mode_writes_on_close(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, max_batch=1000, max_delay_s=60)
    for n in range(3):
        log.record("intent", {"call_id": f"call_{n}"})
    assert count_lines(path) == 0
    log.close()
    assert count_lines(path) == 3
    log.close()  # safe twice
    assert verify_audit(path).records == 3
    with pytest.raises(AuditError, match="closed"):
        log.record("intent", {"call_id": "late"})


def test_batch_mode_writes_on_its_own_after_max_delay(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, max_batch=1000, max_delay_s=0.05) as log:
        log.record("intent", {"call_id": "call_0"})
        log.record("intent", {"call_id": "call_1"})
        # nobody flushes: the background thread must (within about 0.05 s; polled generously)
        wait_for(lambda: count_lines(path) == 2)
        log.record("intent", {"call_id": "call_2"})
        wait_for(lambda: count_lines(path) == 3)
    assert verify_audit(path).records == 3


def test_batch_mode_writes_when_max_batch_records_wait(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, max_batch=5, max_delay_s=60) as log:
        for n in range(4):
            log.record("intent", {"call_id": f"call_{n}"})
        assert count_lines(path) == 0
        log.record("intent", {"call_id": "call_4"})
        assert count_lines(path) == 5  # the fifth record wrote the batch, before returning
        for n in range(5, 9):
            log.record("intent", {"call_id": f"call_{n}"})
        assert count_lines(path) == 5
    assert verify_audit(path).records == 9


# -- 4. the engine writes intent and outcome ---------------------------------------------------


@pytest.fixture
def log(tmp_path: Path) -> Iterator[AuditLog]:
    with AuditLog(tmp_path / "audit.jsonl") as audit:
        yield audit


async def test_an_allowed_call_leaves_one_intent_and_one_outcome(log: AuditLog) -> None:
    engine = make_engine(log)
    result = await call(engine, "echo", text="hi")
    assert result.status == "ok"

    assert len(records(log)) == 2
    intent, outcome = of_call(log, result.call_id)
    expected_intent: dict[str, Any] = {
        "kind": "intent",
        "call_id": result.call_id,
        "subject": "alice",
        "tool": "echo",
        "action": "call",
        "effect": "allow",
        "rule": "tools-ok",
        "reason": "tools are fine",
    }
    assert intent.items() >= expected_intent.items(), intent
    # no paths, no command: left out rather than written empty (every byte is hashed)
    assert "paths" not in intent
    assert "command" not in intent
    # who asked and what was decided live in the intent; the outcome says how the call ended
    expected_outcome = {
        "kind": "outcome",
        "call_id": result.call_id,
        "tool": "echo",
        "status": "ok",
        "attempts": 1,
    }
    assert outcome.items() >= expected_outcome.items(), outcome
    assert "error" not in outcome  # written only when there was one
    assert 0 <= outcome["duration_s"] < 5
    assert intent["time"] <= outcome["time"]
    assert outcome["seq"] == intent["seq"] + 1
    assert verify_audit(log.path).ok


async def test_a_failing_tool_leaves_an_error_outcome(log: AuditLog) -> None:
    result = await call(make_engine(log), "boom")
    assert result.status == "error"
    intent, outcome = of_call(log, result.call_id)
    assert intent["effect"] == "allow"
    assert (outcome["status"], outcome["error"], outcome["attempts"]) == ("error", "ValueError", 1)


async def test_a_denied_call_leaves_a_deny_intent_and_a_denied_outcome(log: AuditLog) -> None:
    result = await call(make_engine(log), "poke")
    assert result.status == "denied"
    assert ran == []
    intent, outcome = of_call(log, result.call_id)
    assert (intent["effect"], intent["rule"], intent["reason"]) == (
        "deny",
        "no-poke",
        "poking is off",
    )
    expected = {"status": "denied", "attempts": 0}
    assert outcome.items() >= expected.items(), outcome
    assert outcome["error"] == "PermissionDeniedError"


async def test_a_timed_out_call_leaves_a_timeout_outcome(log: AuditLog) -> None:
    result = await call(make_engine(log), "sleepy")
    assert result.status == "timeout"
    _, outcome = of_call(log, result.call_id)
    expected = {"status": "timeout", "error": "ToolTimeoutError", "attempts": 1}
    assert outcome.items() >= expected.items(), outcome
    assert outcome["duration_s"] >= 0.05  # never early


async def test_a_cancelled_call_leaves_a_cancelled_outcome(log: AuditLog) -> None:
    entered = asyncio.Event()

    @tool()
    async def hang() -> str:
        """Wait until cancelled."""
        entered.set()
        await asyncio.sleep(30)
        return "never"

    engine = make_engine(log, hang)
    the_call = ToolCall(name="hang", arguments={})
    task = asyncio.ensure_future(engine.call(the_call))
    await asyncio.wait_for(entered.wait(), 5)  # cancelled mid-call, not before it began
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    intent, outcome = of_call(log, the_call.id)
    assert intent["effect"] == "allow"
    assert (outcome["status"], outcome["error"]) == ("cancelled", "CancelledError")


async def test_a_file_write_records_paths_bytes_and_hashes(log: AuditLog, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    toolkit = Toolkit()
    add_file_tools(toolkit)
    with VirtualFS([Mount("/workspace", workspace)]) as fs:
        engine = Engine(toolkit, fs=fs, audit=log)
        # spelled relative and with "..": the intent must hold the canonical path
        first = await engine.call(
            ToolCall(name="write_file", arguments={"path": "sub/../notes.txt", "content": "one"})
        )
        second = await engine.call(
            ToolCall(name="write_file", arguments={"path": "notes.txt", "content": "second!"})
        )
    assert (first.status, second.status) == ("ok", "ok")
    assert (workspace / "notes.txt").read_bytes() == b"second!"

    intent, outcome = of_call(log, first.call_id)
    assert intent["paths"] == [["/workspace/notes.txt", "write"]]
    assert intent["effect"] == "allow"
    expected = {
        "path": "/workspace/notes.txt",
        "bytes": 3,
        "sha256_before": None,  # it did not exist
        "sha256_after": hashlib.sha256(b"one").hexdigest(),
    }
    assert outcome.items() >= expected.items(), outcome

    _, outcome = of_call(log, second.call_id)
    expected = {
        "bytes": 7,
        "sha256_before": hashlib.sha256(b"one").hexdigest(),
        "sha256_after": hashlib.sha256(b"second!").hexdigest(),
    }
    assert outcome.items() >= expected.items(), outcome
    assert verify_audit(log.path).ok


async def test_a_call_whose_intent_cannot_be_written_is_denied(log: AuditLog) -> None:
    engine = make_engine(log)
    assert (await call(engine, "echo", text="before")).status == "ok"
    log.close()  # from now on record() raises AuditError

    result = await call(engine, "echo", text="unaudited")

    assert result.status == "denied"
    assert result.decision is not None
    assert result.decision.rule == "audit"
    assert "closed" in result.decision.reason
    assert ran == ["echo"]  # only the call before: the unaudited one never ran
    assert [r["kind"] for r in read_audit(log.path)] == ["intent", "outcome"]


# -- 5. many calls at once ---------------------------------------------------------------------


def assert_whole_lines(path: Path, calls: int) -> None:
    """2 records a call, every line whole JSON, every call id exactly twice, the chain intact."""
    lines = lines_of(path)
    assert len(lines) == 2 * calls
    parsed = [orjson.loads(line) for line in lines]  # an interleaved line would not parse
    assert all(line.endswith(b'"}\n') for line in lines)
    ids = Counter(r["call_id"] for r in parsed)
    assert len(ids) == calls
    assert set(ids.values()) == {2}
    kinds = {(r["call_id"], r["kind"]) for r in parsed}
    assert len(kinds) == 2 * calls  # one intent and one outcome each, not two of either
    report = verify_audit(path)
    assert report.ok, str(report)
    assert report.records == 2 * calls


async def test_ten_thousand_concurrent_calls_leave_whole_chained_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        engine = make_engine(log, nop)
        results = await asyncio.gather(*(call(engine, "nop") for _ in range(10_000)))
    assert {r.status for r in results} == {"ok"}
    assert_whole_lines(path, 10_000)
    assert {r["call_id"] for r in read_audit(path)} == {r.call_id for r in results}


def test_engines_in_several_threads_share_one_log(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    threads, per_thread = 4, 500
    errors: list[BaseException] = []
    statuses: list[str] = []
    start = threading.Barrier(threads)

    def worker(log: AuditLog) -> None:
        async def calls() -> list[ToolResult]:
            engine = make_engine(log, nop)
            return await asyncio.gather(*(call(engine, "nop") for _ in range(per_thread)))

        try:
            start.wait()  # all at once, so the threads really contend for the log
            statuses.extend(r.status for r in asyncio.run(calls()))
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    # a small batch, so the threads (and the flusher thread) write often and race
    with AuditLog(path, max_batch=16, max_delay_s=0.01) as log:
        workers = [threading.Thread(target=worker, args=(log,)) for _ in range(threads)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(60)
    assert errors == []
    assert statuses == ["ok"] * threads * per_thread
    assert_whole_lines(path, threads * per_thread)


# -- 6. SIGKILL mid-run ------------------------------------------------------------------------

CHILD = """
import asyncio, sys
from stockade.engine import Engine, ToolCall, Toolkit, tool
from stockade.engine.observe import AuditLog

@tool(read_only=True)
async def echo(text: str) -> str:
    "Echo."
    return text

async def main() -> None:
    toolkit = Toolkit()
    toolkit.add(echo)
    log = AuditLog(sys.argv[1], max_batch=64, max_delay_s=0.01, rotate_bytes=64 * 1024)
    engine = Engine(toolkit, audit=log)
    n = 0
    while True:
        await asyncio.gather(
            *(engine.call(ToolCall(name="echo", arguments={"text": "x" * (i * 7)}))
              for i in range(10))
        )
        n += 10
        if n == 300:
            print("running", flush=True)

asyncio.run(main())
"""


def test_a_process_killed_mid_run_leaves_a_log_that_verifies_and_continues(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    errors = tmp_path / "child-stderr.txt"
    # stderr to a file, not a pipe: a chatty child must not block on a full pipe
    with errors.open("wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=ROOT,
        )
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 30)
        line = child.stdout.readline() if ready else b""
        if line == b"running\n":
            time.sleep(0.2)  # let it run on, writing and rotating, when the kill lands
        child.send_signal(signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
        assert line == b"running\n", errors.read_text()  # it really got going before the kill
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

    report = verify_audit(path)
    assert report.ok, str(report)
    assert report.records >= 100  # what was written before the kill is there
    assert len(report.files) >= 2  # it rotated (64 KiB) while running

    with AuditLog(path) as log:
        log.record("intent", {"call_id": "after-kill"})
    after = verify_audit(path)
    assert after.ok, str(after)
    assert not after.partial_tail
    assert after.records > report.records
    assert [r["call_id"] for r in read_audit(path, call_id="after-kill")] == ["after-kill"]


# -- 7. read_audit filters ---------------------------------------------------------------------


async def test_read_audit_filters(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = tmp_path / "audit.jsonl"
    toolkit = Toolkit()
    add_file_tools(toolkit)
    toolkit.add(echo)
    toolkit.add(poke)
    policy = Policy.from_dict(
        {
            "rules": [
                {"id": "no-poke", "effect": "deny", "tools": ["poke"], "reason": "poking is off"},
            ],
            "dangerous_paths": {"replace": []},
        }
    )
    with AuditLog(path) as log, VirtualFS([Mount("/workspace", workspace)]) as fs:
        engine = Engine(toolkit, fs=fs, policy=policy, audit=log)
        echoed = await call(engine, "echo", text="hi")
        poked = await call(engine, "poke")
        log.flush()
        await asyncio.sleep(0.01)  # records after `mark` are strictly later
        mark = time.time()
        await asyncio.sleep(0.01)
        wrote_a = await call(engine, "write_file", path="a.txt", content="a")
        wrote_b = await call(engine, "write_file", path="docs/b.md", content="b")
    everything = list(read_audit(path))
    assert len(everything) == 8

    def ids(**filters: Any) -> list[tuple[str, str]]:
        return [(r["call_id"], r["kind"]) for r in read_audit(path, **filters)]

    both = ("intent", "outcome")
    assert ids(tool="write_*") == [(c.call_id, k) for c in (wrote_a, wrote_b) for k in both]
    assert ids(tool="echo") == [(echoed.call_id, k) for k in both]
    assert ids(tool="nothing*") == []
    assert ids(kind="intent") == [(c.call_id, "intent") for c in (echoed, poked, wrote_a, wrote_b)]
    assert ids(kind="outcome", tool="poke") == [(poked.call_id, "outcome")]
    # the decision is the intent's (an outcome may repeat it, but need not)
    assert (poked.call_id, "intent") in ids(effect="deny")
    assert {i for i, _ in ids(effect="deny")} == {poked.call_id}
    assert ids(status="denied") == [(poked.call_id, "outcome")]
    assert ids(status="ok", tool="write_file") == [
        (c.call_id, "outcome") for c in (wrote_a, wrote_b)
    ]
    # path globs match the intent's canonical paths
    assert (wrote_b.call_id, "intent") in ids(path_glob="/workspace/docs/*")
    assert {i for i, _ in ids(path_glob="/workspace/docs/*")} == {wrote_b.call_id}
    assert {i for i, _ in ids(path_glob="/workspace/*.txt")} == {wrote_a.call_id}
    assert ids(path_glob="/etc/*") == []
    assert ids(call_id=echoed.call_id) == [(echoed.call_id, k) for k in both]
    assert ids(call_id="call_unknown") == []
    assert {i for i, _ in ids(since=mark)} == {wrote_a.call_id, wrote_b.call_id}
    assert {i for i, _ in ids(until=mark)} == {echoed.call_id, poked.call_id}
    assert ids(since=mark, until=mark) == []
    assert ids(since=mark, kind="intent", effect="allow", path_glob="**/b.md") == [
        (wrote_b.call_id, "intent")
    ]


def test_read_audit_of_a_missing_log_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "audit.jsonl"
    with pytest.raises(AuditError, match="no audit log") as caught:
        list(read_audit(missing))
    assert str(missing) in str(caught.value)


def test_read_audit_skips_a_half_written_last_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    make_log(path, 3)
    with path.open("ab") as handle:
        handle.write(HALF_LINE)
    assert [r["seq"] for r in read_audit(path)] == [1, 2, 3]


# -- 8. bad input ------------------------------------------------------------------------------


def test_a_folder_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    target = blocker / "logs" / "audit.jsonl"
    with pytest.raises(AuditError, match="cannot open the audit log") as caught:
        AuditLog(target)
    assert str(target) in str(caught.value)
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"meeting notes\nbuy milk\n", id="text"),
        pytest.param(b"meeting notes\nbuy milk", id="text-without-final-newline"),
        pytest.param(b'{"a": 1}\n{"b": 2}\n', id="other-json-lines"),
        # one line, no newline: a small config or note file; it is not a half-written record
        pytest.param(b"KEY=value", id="one-line-without-newline"),
    ],
)
def test_a_foreign_file_is_refused_and_left_alone(tmp_path: Path, content: bytes) -> None:
    foreign = tmp_path / "notes.txt"
    foreign.write_bytes(content)
    opened: AuditLog | None = None
    try:
        with pytest.raises(AuditError) as caught:
            opened = AuditLog(foreign)
    finally:
        if opened is not None:
            opened.close()
    assert str(foreign) in str(caught.value)
    assert foreign.read_bytes() == content  # refused, and not a byte changed


def test_an_unknown_durability_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="durability"):
        AuditLog(tmp_path / "audit.jsonl", durability="sometimes")  # type: ignore[arg-type]
    assert not (tmp_path / "audit.jsonl").exists()


@pytest.mark.parametrize("name", ["seq", "prev"])
def test_a_field_named_like_the_chain_cannot_break_it(tmp_path: Path, name: str) -> None:
    """``record(kind, fields)`` is public: a caller's field that happens to be called ``seq``
    or ``prev`` must not overwrite the chain's own (refusing such a field is fine too)."""
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        log.record("intent", {"call_id": "a"})
        with contextlib.suppress(ValueError, AuditError):
            log.record("note", {name: "from the caller"})
        log.record("intent", {"call_id": "b"})
    report = verify_audit(path)
    assert report.ok, str(report)


# -- one odd record costs nothing around it --------------------------------------------------------


def test_a_record_json_cannot_hold_natively_is_kept_and_the_others_too(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, max_batch=100, max_delay_s=0.05) as log:
        log.record("note", {"n": 1})
        log.record("note", {"n": 2**70})  # past 64 bits: orjson cannot write it
        nested: dict[str, object] = {}
        deepest = nested
        for _ in range(300):  # past orjson's depth
            deepest["down"] = {}
            deepest = deepest["down"]  # type: ignore[assignment]
        log.record("note", {"n": 3, "deep": nested})
        log.record("note", {"n": 4})
        wait_for(lambda: len(list(read_audit(path))) == 4)  # the flusher wrote them all
        log.record("note", {"n": 5})  # and it is still alive to write more
        wait_for(lambda: len(list(read_audit(path))) == 5)
    assert [r["n"] for r in read_audit(path)] == [1, 2**70, 3, 4, 5]
    assert verify_audit(path).ok
