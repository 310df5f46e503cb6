"""The audit log when things go wrong: odd input, a full disk, a crash's torn tail, several
processes on one log, kills at random moments. Real files, a real tmpfs, real processes.

What a user relies on: every record given is written or still waiting (never dropped with
others), the file never holds half a record before another, a log a crash left opens again and
says what it cut off, `verify` calls a log intact exactly when nobody changed it, and while the
log cannot be written no call runs unrecorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.engine import Engine, ToolCall, Toolkit, tool
from stockade.engine.observe import AuditError, AuditLog, read_audit, verify_audit

ROOT = Path(__file__).resolve().parents[1]

# any code point, lone surrogates included (hypothesis leaves them out unless told)
ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=40)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | ANY_TEXT
    | st.integers(min_value=2**64, max_value=2**400),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def wait_for(predicate: Any, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


# -- 1. any string is data -------------------------------------------------------------------


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(fields=st.lists(st.dictionaries(ANY_TEXT, JSONISH, max_size=4), min_size=1, max_size=6))
def test_any_record_is_written_and_the_log_verifies(tmp_path: Path, fields: list[dict]) -> None:
    path = tmp_path / f"{time.monotonic_ns()}.jsonl"
    with AuditLog(path) as log:
        for n, extra in enumerate(fields):
            log.append({"kind": "note", "time": 1.0, "n": n, "extra": extra})
    assert verify_audit(path).ok, verify_audit(path)
    kept = list(read_audit(path))
    assert [r["n"] for r in kept] == list(range(len(fields)))


def test_surrogates_huge_numbers_and_deep_nesting_cost_no_record(tmp_path: Path) -> None:
    """A record no JSON writer takes as it is keeps its shape, with only the odd parts turned
    to text, says ``escaped``, and the records around it are written with it."""
    deep: Any = "bottom"
    for _ in range(1000):
        deep = [deep]
    odd = [
        {"kind": "\ud800intent", "time": 1.0},
        {"kind": "intent", "time": 1.0, "call_id": "\udcff", "path": "/workspace/\udc80.txt"},
        {"kind": "intent", "time": 1.0, "\ud800key": 1},
        {"kind": "intent", "time": 1.0, "big": 10**5000, "wide": 2**80},
        {"kind": "intent", "time": 1.0, "deep": deep},
    ]
    path = tmp_path / "audit.jsonl"
    for durability in ("batch", "fsync"):
        with AuditLog(path, durability=durability) as log:  # type: ignore[arg-type]
            for entry in odd:
                log.append({"kind": "note", "time": 1.0})
                log.append(entry)
    assert verify_audit(path).ok
    kept = list(read_audit(path))
    assert len(kept) == 4 * len(odd)
    shown = [r for r in kept if r.get("escaped")]
    assert {r["kind"] for r in shown} >= {"\\ud800intent", "intent"}
    by_id = {r.get("call_id"): r for r in shown}
    assert by_id["\\udcff"]["path"] == "/workspace/\\udc80.txt"
    assert any(r.get("wide") == 2**80 for r in kept)
    assert any(str(r.get("big", "")).startswith("<an integer of") for r in kept)


def test_an_object_whose_str_raises_is_recorded(tmp_path: Path) -> None:
    class Sullen:
        def __str__(self) -> str:
            raise RuntimeError("no")

        def __repr__(self) -> str:
            raise RuntimeError("no")

    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        log.append({"kind": "note", "time": 1.0, "what": Sullen()})
        log.append({"kind": "note", "time": 1.0})
    kept = list(read_audit(path))
    assert len(kept) == 2
    assert "Sullen" in kept[0]["what"]


@tool
def echo(text: str) -> str:
    """Say ``text`` back."""
    return text


def test_calls_whose_names_ids_and_subjects_hold_surrogates_lose_no_record(
    tmp_path: Path,
) -> None:
    """Every call leaves its intent and its outcome, in both modes, the odd ones among 200
    ordinary ones; the log verifies and nothing escapes the engine."""
    toolkit = Toolkit()
    toolkit.add(echo)
    for durability in ("batch", "fsync"):
        path = tmp_path / f"{durability}.jsonl"
        calls = []
        for n in range(200):
            calls.append(ToolCall(name="echo", arguments={"text": f"t{n}"}))
            if n % 50 == 0:
                calls += [
                    ToolCall(id=f"call_\ud800{n}", name="echo", arguments={"text": "x"}),
                    ToolCall(name="echo\udcff", arguments={"text": "x"}),
                    ToolCall(name="echo", arguments={"text": "x"}, subject="\ud800"),
                ]

        async def run(log: AuditLog, calls: list[ToolCall] = calls) -> None:
            engine = Engine(toolkit, audit=log)
            await asyncio.gather(*(engine.call(c) for c in calls))

        with AuditLog(path, durability=durability, max_batch=64) as log:  # type: ignore[arg-type]
            asyncio.run(run(log))
        assert verify_audit(path).ok
        kept = list(read_audit(path))
        outcomes = [r for r in kept if r["kind"] == "outcome"]
        assert len(outcomes) == len(calls), durability


# -- 2. a full disk --------------------------------------------------------------------------


@contextlib.contextmanager
def small_disk(where: Path, size: str = "256k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` for the test (root only)."""
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte with a file; remove it to make room again."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("durability", ["batch", "fsync"])
def test_a_full_disk_refuses_calls_loses_no_record_and_leaves_no_half_line(
    tmp_path: Path, durability: str
) -> None:
    toolkit = Toolkit()
    toolkit.add(echo)
    with small_disk(tmp_path / "disk") as disk:
        path = disk / "audit.jsonl"
        log = AuditLog(path, durability=durability, max_delay_s=0.05)  # type: ignore[arg-type]
        engine = Engine(toolkit, audit=log)

        async def calls(count: int) -> list[str]:
            done = await asyncio.gather(
                *(engine.call(ToolCall(name="echo", arguments={"text": "y" * 300}))
                  for _ in range(count))
            )  # fmt: skip
            return [r.status for r in done]

        assert set(asyncio.run(calls(20))) == {"ok"}
        log.flush()
        filler = fill(disk)
        statuses = asyncio.run(calls(200))
        with contextlib.suppress(AuditError):
            log.flush()
        wait_for(lambda: log.failure is not None)
        if durability == "fsync":  # no call runs before its intent is on disk
            assert set(statuses) == {"denied"}
        # batch mode: calls admitted before the first write failed ran; their records waited
        later = asyncio.run(calls(10))
        assert set(later) == {"denied"}
        # the file is whole lines only, though writes ran out of space part way: read under
        # the lock every writer holds from its write to its cut-back (the writer thread
        # retries meanwhile, and a retry in flight is, for that moment, half written)
        with Path(f"{path}.seal").open("rb") as seal:
            fcntl.flock(seal, fcntl.LOCK_EX)
            assert path.read_bytes().endswith(b"\n")
        filler.unlink()
        wait_for(lambda: log.failure is None)
        assert set(asyncio.run(calls(5))) == {"ok"}
        log.close()
        report = verify_audit(path)
        assert report.ok, report
        kept = list(read_audit(path))
        gaps = [r for r in kept if r["kind"] == "audit_unwritable"]
        assert len(gaps) == 1
        assert gaps[0]["error"]
        assert len([r for r in kept if r["kind"] == "outcome"]) == 20 + 200 + 10 + 5
        assert len([r for r in kept if r["kind"] == "intent"]) == 20 + 200 + 10 + 5


# -- 3. a torn tail --------------------------------------------------------------------------

TORN = st.one_of(
    st.binary(min_size=1, max_size=6).map(lambda b: b'{"seq":'[: len(b)] or b"{"),
    st.integers(min_value=1, max_value=6).map(lambda n: b'{"seq":12,"prev":"'[:n]),
    st.integers(min_value=1, max_value=8192).map(lambda n: b"\0" * n),
    st.binary(min_size=1, max_size=300).filter(lambda b: b"\n" not in b),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(torn=TORN, sealed_too=st.booleans())
def test_a_torn_tail_of_any_length_is_cut_off_and_recorded(
    tmp_path: Path, torn: bytes, sealed_too: bool
) -> None:
    """What a crash or a power loss leaves at the end (a record cut off, zeros): `verify`
    tolerates it, and the next `AuditLog` opens, cuts it off into a ``recovered`` record and
    chains on, as a write-ahead log would."""
    path = tmp_path / f"{time.monotonic_ns()}.jsonl"
    with AuditLog(path) as log:
        for n in range(5):
            log.record("note", {"n": n})
    with path.open("ab") as handle:
        handle.write(torn)
    if not sealed_too:
        Path(f"{path}.seal").unlink()
    assert verify_audit(path).ok
    with AuditLog(path) as log:
        log.record("note", {"n": 5})
    report = verify_audit(path)
    assert report.ok, report
    assert not report.partial_tail
    kept = list(read_audit(path))
    recovered = [r for r in kept if r["kind"] == "recovered"]
    assert len(recovered) == 1
    assert recovered[0]["torn_bytes"] == len(torn)
    assert [r["n"] for r in kept if r["kind"] == "note"] == list(range(6))


def test_a_torn_tail_longer_than_any_read_is_cut_off_whole(tmp_path: Path) -> None:
    """Megabytes of zeros after the last record (a large write that never reached the disk):
    the chain is found before them, and they are cut off, not taken for the log's start."""
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        for n in range(3):
            log.record("note", {"n": n})
    with path.open("ab") as handle:
        handle.write(b"\0" * (3 << 20))
    with AuditLog(path) as log:
        log.record("note", {"n": 3})
    assert verify_audit(path).ok
    kept = list(read_audit(path))
    assert [r["seq"] for r in kept] == [1, 2, 3, 4, 5]
    assert kept[3]["kind"] == "recovered"
    assert kept[3]["torn_bytes"] == 3 << 20


def test_a_file_that_is_not_a_log_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"shopping list")
    with pytest.raises(AuditError, match="not written by Stockade"):
        AuditLog(path)
    assert path.read_bytes() == b"shopping list"


# -- 4. several processes on one log, and kills ----------------------------------------------

WRITER = textwrap.dedent(
    """
    import os, sys, time
    from stockade.engine.observe import AuditLog
    path, who, count, durability, rotate, go = sys.argv[1:7]
    with AuditLog(path, durability=durability, max_batch=7, rotate_bytes=int(rotate)) as log:
        while not os.path.exists(go):  # all start together
            time.sleep(0.001)
        for n in range(int(count)):
            log.record("note", {"who": who, "n": n, "pad": "p" * 50})
            if n % 10 == 0:
                time.sleep(0.002)  # so that the writers take turns
    """
)


@pytest.mark.parametrize("durability", ["batch", "fsync"])
def test_several_processes_share_one_log_as_one_chain(tmp_path: Path, durability: str) -> None:
    path = tmp_path / "state" / "audit.jsonl"
    count = 300 if durability == "batch" else 100
    go = tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(who), str(count), durability, "20000",
             str(go)]
        )
        for who in range(3)
    ]  # fmt: skip
    time.sleep(1.5)  # the three have started and opened the log
    go.touch()
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    report = verify_audit(path)
    assert report.ok, report
    kept = list(read_audit(path))
    for who in range(3):
        assert [r["n"] for r in kept if r.get("who") == str(who)] == list(range(count))
    assert list(path.parent.glob("audit.jsonl.0*"))  # it rotated, across the processes too


KILLED = textwrap.dedent(
    """
    import sys
    from stockade.engine.observe import AuditLog
    path, durability = sys.argv[1:3]
    log = AuditLog(path, durability=durability, max_batch=5, max_delay_s=0.01)
    print("open", flush=True)
    n = 0
    while True:
        log.record("note", {"n": n, "pad": "q" * (n % 300)})
        n += 1
    """
)


def test_kill_9_at_random_moments_then_reopen_and_verify(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    chance = random.Random(1234)
    for round_number in range(12):
        durability = "fsync" if round_number % 3 == 0 else "batch"
        writer = subprocess.Popen(
            [sys.executable, "-c", KILLED, str(path), durability],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert writer.stdout is not None
        assert writer.stdout.readline() == b"open\n", writer.stderr.read() if writer.stderr else ""
        time.sleep(chance.uniform(0.0, 0.3))
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=10)
        report = verify_audit(path)
        assert report.ok, (round_number, report)
    with AuditLog(path) as log:
        log.record("note", {"n": "last"})
    assert verify_audit(path).ok
    for line in lines(path):
        orjson.loads(line)  # every line whole


def test_records_appended_from_many_threads_in_fsync_mode_are_committed_together(
    tmp_path: Path,
) -> None:
    """Group commit: records that arrive while one flush runs share the next. 2,000 records
    from 8 threads are all on disk, chained, in far fewer writes than records."""
    import threading

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, durability="fsync")
    writes = 0
    original = os.fsync

    def counting(fd: int) -> None:
        nonlocal writes
        writes += 1
        original(fd)

    def work(who: int) -> None:
        tickets = [log.submit({"kind": "note", "time": 1.0, "who": who, "n": n})
                   for n in range(250)]  # fmt: skip
        for ticket in tickets:
            assert ticket is not None
            ticket.result(timeout=60)

    os.fsync = counting  # type: ignore[assignment]
    try:
        threads = [threading.Thread(target=work, args=(who,)) for who in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        os.fsync = original
        log.close()
    assert verify_audit(path).ok
    assert len(list(read_audit(path))) == 2000
    assert writes < 200, writes


def test_fsync_records_from_a_running_loop_are_on_disk_when_awaited(tmp_path: Path) -> None:
    """In a loop the write is the loop's own (one per iteration) and only the fsync is the
    writer's; a blocking `append` from inside a loop is written by the writer, so it returns."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, durability="fsync")

    async def main() -> None:
        tickets = [log.submit({"kind": "note", "time": 1.0, "n": n}) for n in range(300)]
        await asyncio.gather(*(asyncio.wrap_future(t) for t in tickets if t is not None))
        assert len(lines(path)) == 300  # on disk when awaited
        log.append({"kind": "note", "time": 1.0, "n": 300})  # blocks this loop: no deadlock
        assert len(lines(path)) == 301

    asyncio.run(main())
    log.close()
    assert verify_audit(path).ok
