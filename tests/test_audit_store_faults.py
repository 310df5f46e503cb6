"""The audit store when things go wrong around it: a spool left behind that the store refuses or
that was damaged must not stop the next store's own shipping; verifying while writers ship is
no tamper alarm; a row that is not JSON is reported, not a crash. About 6 s in all."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from audit_store_support import kinds, sql
from test_audit_store import dead_url

from stockade.engine.observe import AuditError, AuditStore, read_store, verify_store
from stockade.engine.observe import _store_sql as store_sql


def store(url: str, folder: Path, **options: Any) -> AuditStore:
    options.setdefault("ship_every_s", 0.05)
    options.setdefault("max_delay_s", 0.02)
    return AuditStore(url, folder=folder, **options)


def left_behind(folder: Path, records: int = 5) -> AuditStore:
    """A store that closed while its database was down: its spool waits in ``folder``."""
    left = store(dead_url(), folder, close_timeout_s=0.2)
    for n in range(records):
        left.record("intent", {"tool": "echo", "n": n})
    left.close()
    assert left.path.exists()
    return left


def test_a_spool_the_store_refuses_does_not_stop_the_next_stores_own(
    postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A dead writer's spool whose first record is already in the store as another record: it
    is said, and kept, and the next store still ships its own records (and denies nothing)."""
    left = left_behind(tmp_path)
    with store(postgres_url, tmp_path / "elsewhere") as other:
        other.record("intent", {"tool": "echo"})
        assert other.wait_shipped(20)  # the tables exist
    sql(postgres_url, "INSERT INTO stockade_audit_writers (writer, host, pid, started) "
        "VALUES (%s, 'h', 1, 0)", left.writer)  # fmt: skip
    sql(postgres_url, "INSERT INTO stockade_audit (writer, seq, line) VALUES (%s, 1, 'other')",
        left.writer)  # fmt: skip
    caplog.set_level(logging.WARNING, "stockade.audit")
    taker = store(postgres_url, tmp_path, when_down="deny")
    try:
        for n in range(3):
            taker.record("intent", {"tool": "echo", "n": n})
        assert taker.wait_shipped(10), caplog.text
        taker.admit()
        assert kinds(postgres_url, taker.writer) == {"intent": 3}
    finally:
        taker.close()
    assert left.path.exists(), "the refused spool is kept, for someone to look into"
    assert f"record 1 of writer {left.writer}" in caplog.text


def test_a_damaged_spool_left_behind_is_said_once_and_the_next_store_ships(
    postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    left = left_behind(tmp_path)
    with left.path.open("ab") as spool:
        spool.write(b"not a record at all\n")
    caplog.set_level(logging.WARNING, "stockade.audit")
    caplog.clear()
    taker = store(postgres_url, tmp_path)
    try:
        taker.record("intent", {"tool": "echo"})
        assert taker.wait_shipped(10), caplog.text
        time.sleep(0.5)  # rounds go on: the damage is not said again in each
    finally:
        taker.close()
    assert kinds(postgres_url, left.writer) == {"intent": 5}, "what it held is shipped"
    assert kinds(postgres_url, taker.writer) == {"intent": 1}
    damaged = [r for r in caplog.records if left.writer in r.getMessage()]
    assert len(damaged) == 2, [r.getMessage() for r in damaged]  # damaged; ended
    assert left.path.exists(), "a damaged spool is kept, to be looked into"
    assert "Traceback" not in caplog.text


def test_verifying_while_writers_ship_is_no_tamper_alarm(postgres_url: str, tmp_path: Path) -> None:
    """A writer with many records is checked first, while another ships all along: the
    second's head and rows are read as of one moment, so nothing is 'added afterwards'."""
    with store(postgres_url, tmp_path / "a", ship_batch=5000) as big:
        for n in range(8000):
            big.record("intent", {"tool": "echo", "n": n})
        assert big.wait_shipped(30)
    busy = store(postgres_url, tmp_path / "b", ship_every_s=0.005)
    done = threading.Event()

    def write() -> None:
        n = 0
        while not done.is_set():
            busy.record("intent", {"tool": "echo", "n": n})
            n += 1
            time.sleep(0.001)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        reports = [verify_store(postgres_url) for _ in range(8)]
    finally:
        done.set()
        writer.join()
        busy.close()
    for report in reports:
        assert report.ok, str(report)
    assert verify_store(postgres_url).ok


def test_a_row_that_is_not_json_is_an_audit_error_when_shown(
    postgres_url: str, tmp_path: Path
) -> None:
    with store(postgres_url, tmp_path) as audit:
        audit.record("intent", {"tool": "echo"})
        assert audit.wait_shipped(20)
    sql(postgres_url, "UPDATE stockade_audit SET line = 'garbage' WHERE writer = %s", audit.writer)
    with pytest.raises(AuditError, match=f"record 1 of writer {audit.writer}"):
        list(read_store(postgres_url))
    assert not verify_store(postgres_url).ok


def test_a_password_with_a_slash_or_an_at_sign_is_masked() -> None:
    for url in ("postgresql://u:pa/ss@h/db", "postgresql://u:p@ss@h:5432/db?sslmode=require"):
        shown = store_sql.mask(url)
        assert "ss@" not in shown, shown
        assert shown.startswith("postgresql://u:***@h"), shown
