"""The audit store under what a real deployment does to it: writer processes of two hosts at
once, the database stopped and restarted under load (spool mode and deny mode), and a writer
killed with SIGKILL mid-stream. Real processes, a real PostgreSQL server of the test's own."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from audit_store_support import call, kinds, make_engine, start_writer
from postgres_server import PostgresServer
from support import stockade_cli

from stockade.engine.observe import AuditStore, verify_store
from stockade.engine.observe._store_spool import host_name

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PostgresServer]:
    with PostgresServer.start(tmp_path / "pg") as own:
        yield own


def test_writer_processes_of_two_hosts_verify_together(postgres_url: str, tmp_path: Path) -> None:
    procs = [
        start_writer(postgres_url, tmp_path / host, host, 150)
        for host in ("alpha", "beta")
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outputs]
    writers = [out.splitlines()[0] for out, _ in outputs]
    report = verify_store(postgres_url)
    assert report.ok, str(report)
    assert sorted(w.writer for w in report.writers) == sorted(writers)
    assert all(w.records == 300 and w.closed for w in report.writers)
    assert kinds(postgres_url) == {"intent": 600, "outcome": 600}
    shown = stockade_cli("audit", "show", "--store", postgres_url, "--host", "beta",
                         "--kind", "intent", "-n", "1000", "--json", cwd=tmp_path)  # fmt: skip
    lines = shown.stdout.splitlines()
    assert len(lines) == 300
    assert all('"writer": "beta-' in line for line in lines)


def test_calls_go_on_while_the_database_is_down_and_nothing_is_lost(
    server: PostgresServer, tmp_path: Path
) -> None:
    url = server.new_database()
    audit = AuditStore(url, folder=tmp_path / "state", ship_every_s=0.05, max_delay_s=0.05)
    engine = make_engine(audit)
    results: list[str] = []
    stop = threading.Event()

    def load() -> None:
        async def calls() -> None:
            while not stop.is_set():
                results.append((await call(engine, "echo", text="x")).status)
                await asyncio.sleep(0.002)

        asyncio.run(calls())

    worker = threading.Thread(target=load)
    worker.start()
    time.sleep(0.5)
    server.stop()
    while audit.down_since is None:
        time.sleep(0.05)
    during = len(results)
    time.sleep(1.5)
    assert len(results) > during + 50, "calls go on while the store is down"
    assert audit.unshipped > 0
    server.boot()
    time.sleep(0.5)
    stop.set()
    worker.join()
    assert audit.wait_shipped(30)
    assert audit.down_since is None
    assert set(results) == {"ok"}
    assert kinds(url, audit.writer) == {"intent": len(results), "outcome": len(results)}
    audit.close()
    assert verify_store(url).ok


def test_deny_mode_denies_while_down_and_admits_after(
    server: PostgresServer, tmp_path: Path
) -> None:
    url = server.new_database()
    audit = AuditStore(url, folder=tmp_path, when_down="deny", down_after_s=0.3,
                       ship_every_s=0.05)  # fmt: skip
    engine = make_engine(audit)
    assert asyncio.run(call(engine, "echo", text="before")).status == "ok"
    server.stop()
    deadline = time.monotonic() + 20
    while (result := asyncio.run(call(engine, "echo", text="down"))).status == "ok":
        assert time.monotonic() < deadline, "never denied"
        time.sleep(0.1)
    assert result.status == "denied"
    assert "the audit store postgresql://" in str(result.error)
    assert "stockade-test" not in str(result.error)
    server.boot()
    deadline = time.monotonic() + 20
    while (result := asyncio.run(call(engine, "echo", text="back"))).status != "ok":
        assert time.monotonic() < deadline, "never admitted again"
        time.sleep(0.1)
    audit.close()
    report = verify_store(url)
    assert report.ok
    assert report.writers[0].closed


def test_a_writer_killed_mid_stream_is_shipped_by_the_next_store(
    postgres_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "state"
    here = host_name()  # this host: verification can see the process is gone
    proc = start_writer(postgres_url, folder, here, 100_000)
    assert proc.stdout is not None
    writer = proc.stdout.readline().strip()
    spool = folder / f"audit-{writer}.jsonl"
    while not spool.exists() or spool.stat().st_size < 200_000:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = verify_store(postgres_url)
    (dead,) = before.writers
    assert not before.ok
    assert not dead.ok
    assert f"ended without closing: records after {dead.records} may be lost" in str(dead)
    on_disk = spool.read_bytes().count(b"\n")  # whole records: every one must be shipped
    taker = AuditStore(postgres_url, folder=folder, host=here)
    assert taker.wait_shipped(30)
    taker.close()
    assert not spool.exists()
    report = verify_store(postgres_url, writer=writer)
    assert report.ok, str(report)
    (shipped,) = report.writers
    assert shipped.closed
    assert "ended without closing after record" in (shipped.note or "")
    assert shipped.records >= dead.records
    assert shipped.records >= on_disk > 500
