"""The audit store (engine/observe/audit_store.py) against a real PostgreSQL: records of real
calls reach the table and verify; every kind of tampering is reported for the right writer; a
batch shipped twice is never doubled and a different row under the same number is refused; a
spool left behind ships from the next store on the folder; records of any content round-trip
byte for byte; deny mode refuses calls while the store is unreachable.

The outages of a running server, writer processes and SIGKILL are in test_audit_store_slow.py.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Any

import pytest
from audit_store_support import call, kinds, make_engine, sql
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.engine.observe import (
    AuditError,
    AuditStore,
    read_audit,
    read_store,
    verify_audit,
    verify_store,
)
from stockade.engine.observe import _store_sql as store_sql
from stockade.engine.observe.audit_read import AuditFilter
from stockade.errors import ConfigurationError


def dead_url() -> str:
    """A PostgreSQL URL where nothing listens (connections refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://stockade:s3cret-pw@127.0.0.1:{port}/stockade"


def store(url: str, folder: Path, **options: Any) -> AuditStore:
    options.setdefault("ship_every_s", 0.05)
    return AuditStore(url, folder=folder, **options)


def test_calls_reach_the_store_and_it_verifies(postgres_url: str, tmp_path: Path) -> None:
    audit = store(postgres_url, tmp_path / "state")
    engine = make_engine(audit)

    async def calls() -> list[str]:
        done = [await call(engine, "echo", text=f"hi {n}") for n in range(10)]
        done += [await call(engine, "boom"), await call(engine, "poke")]
        return [r.status for r in done]

    statuses = asyncio.run(calls())
    assert statuses == ["ok"] * 10 + ["error", "denied"]
    assert audit.wait_shipped(20)
    assert kinds(postgres_url, audit.writer) == {"intent": 12, "outcome": 12}
    report = verify_store(postgres_url)
    assert report.ok, str(report)
    (only,) = report.writers
    assert only.writer == audit.writer
    assert only.records == 24
    assert only.note == "still running"
    denied = list(read_store(postgres_url, AuditFilter(status="denied")))
    assert [(r["tool"], r["writer"]) for r in denied] == [("poke", audit.writer)]
    # the spool is the writer's own file, protected from calls like a file log
    assert audit.path.parent == tmp_path / "state"
    assert audit.writer in audit.path.name
    spool = audit.path
    audit.close()
    assert not spool.exists(), "a spool shipped and closed is deleted"
    closed = verify_store(postgres_url)
    assert closed.ok
    assert closed.writers[0].closed
    assert closed.writers[0].note is None


def test_a_records_lines_are_shipped_byte_for_byte(postgres_url: str, tmp_path: Path) -> None:
    with store(postgres_url, tmp_path, keep_spool=True) as audit:
        for n in range(300):
            audit.record("custom", {"n": n, "tool": "t"})
        assert audit.wait_shipped(20)
        spool = audit.path
    lines = spool.read_bytes().splitlines()
    stored = sql(postgres_url, "SELECT line FROM stockade_audit ORDER BY seq")
    assert [row[0].encode() for row in stored] == lines
    assert verify_audit(spool).ok


def tamper_cases() -> dict[str, tuple[str, str]]:
    """What is done to writer A's rows (20 of them), and what its report must say."""
    return {
        "edit": (
            "UPDATE stockade_audit SET line = replace(line, 'hi 3', 'hi 9') "
            "WHERE writer = %(w)s AND seq = 4",
            "record 4: its content does not match its hash",
        ),
        "delete": ("DELETE FROM stockade_audit WHERE writer = %(w)s AND seq = 5", "record 5 is "),
        "cut tail": (
            "DELETE FROM stockade_audit WHERE writer = %(w)s AND seq > 17",
            "records 18..20 are missing: the tail was deleted",
        ),
        "cut tail and head": (
            "DELETE FROM stockade_audit WHERE writer = %(w)s AND seq > 17; UPDATE "
            "stockade_audit_writers SET head_seq = 17 WHERE writer = %(w)s",
            "record 17: it is not the record the writers table names",
        ),
        "insert at end": (
            "INSERT INTO stockade_audit (writer, seq, line) SELECT writer, 21, line "
            "FROM stockade_audit WHERE writer = %(w)s AND seq = 20",
            "record 21: ",
        ),
        "edit column": (
            "UPDATE stockade_audit SET tool = 'other' WHERE writer = %(w)s AND seq = 3",
            "record 3: its columns do not say what its line says",
        ),
    }


@pytest.mark.parametrize("case", sorted(tamper_cases()))
def test_tampering_is_reported_for_the_right_writer(
    postgres_url: str, tmp_path: Path, case: str
) -> None:
    writers = []
    for host in ("host-a", "host-b"):
        with store(postgres_url, tmp_path / host, host=host) as audit:
            for n in range(20):
                audit.record("intent", {"tool": "echo", "text": f"hi {n}", "call_id": f"c{n}"})
            writers.append(audit.writer)
    assert verify_store(postgres_url).ok
    statement, said = tamper_cases()[case]
    sql(postgres_url, statement % {"w": "'" + writers[0] + "'"})
    report = verify_store(postgres_url)
    assert not report.ok
    bad, good = report.writers
    assert bad.writer == writers[0]
    assert not bad.ok
    assert said in (bad.problem or ""), bad
    assert good.writer == writers[1]
    assert good.ok
    assert good.records == 20
    assert said in str(report)
    assert "NOT intact: 1 of 2 writer(s) bad" in str(report)


def test_rows_of_an_unknown_writer_are_reported(postgres_url: str, tmp_path: Path) -> None:
    with store(postgres_url, tmp_path) as audit:
        audit.record("intent", {"tool": "echo"})
    sql(postgres_url, "INSERT INTO stockade_audit (writer, seq, line) VALUES ('ghost', 1, '{}')")
    report = verify_store(postgres_url)
    assert not report.ok
    ghost = next(w for w in report.writers if w.writer == "ghost")
    assert "the writers table does not know" in (ghost.problem or "")


def test_a_batch_shipped_twice_is_not_doubled_and_another_row_is_refused(
    postgres_url: str, tmp_path: Path
) -> None:
    with store(postgres_url, tmp_path, keep_spool=True) as audit:
        for n in range(5):
            audit.record("intent", {"tool": "echo", "n": n})
        assert audit.wait_shipped(20)
        spool, writer = audit.path, audit.writer
    me = store_sql.Writer(writer, "h", 1, 0.0)
    lines = spool.read_bytes().splitlines()
    rows = [(n + 1, None, None, None, None, None, None, None, line.decode())
            for n, line in enumerate(lines)]  # fmt: skip
    conn = store_sql.connect(postgres_url)
    try:
        store_sql.ship(conn, me, rows, "ignored")  # the crash after the commit: sent again
        assert kinds(postgres_url) == {"intent": 5}
        changed = [*rows[:-1], (*rows[-1][:-1], rows[-1][-1].replace('"n":4', '"n":5'))]
        with pytest.raises(store_sql.StoreConflict, match="record 5 of writer"):
            store_sql.ship(conn, me, changed, "ignored")
    finally:
        conn.close()
    assert verify_store(postgres_url).ok


def test_a_spool_left_while_the_store_was_down_ships_from_the_next_store(
    postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    down = dead_url()
    caplog.set_level(logging.WARNING, "stockade.audit")
    left = store(down, tmp_path, close_timeout_s=0.3)
    for n in range(30):
        left.record("intent", {"tool": "echo", "n": n})
    assert not left.wait_shipped(0.3)
    assert left.unshipped == 30
    assert left.down_since is not None
    left.close()
    assert left.path.exists(), "what could not be shipped stays in the spool"
    said = caplog.text
    assert "cannot reach the audit store" in said
    assert "did not get the last 30" in said
    assert "s3cret-pw" not in said
    assert "stockade:***@" in said
    with store(postgres_url, tmp_path) as taker:
        assert taker.wait_shipped(20)
    assert not left.path.exists()
    assert kinds(postgres_url, left.writer) == {"intent": 30}
    report = verify_store(postgres_url, writer=left.writer)
    assert report.ok
    assert "closed, its last records shipped by" in (report.writers[0].note or "")


def test_deny_mode_refuses_calls_while_the_store_cannot_be_reached(tmp_path: Path) -> None:
    audit = store(dead_url(), tmp_path, when_down="deny", down_after_s=0.0, close_timeout_s=0)
    engine = make_engine(audit)
    try:
        deadline = asyncio.run(asyncio.sleep(0.5))
        assert deadline is None
        assert audit.down_since is not None
        result = asyncio.run(call(engine, "echo", text="hi"))
        assert result.status == "denied"
        assert "the audit store postgresql://stockade:***@127.0.0.1" in str(result.error)
        assert "s3cret-pw" not in str(result.error)
        with pytest.raises(AuditError, match="no call is admitted until it is back"):
            audit.admit()
    finally:
        audit.close()
    spool_mode = store(dead_url(), tmp_path / "spool", down_after_s=0.0, close_timeout_s=0)
    try:
        assert asyncio.run(call(make_engine(spool_mode), "echo", text="hi")).status == "ok"
    finally:
        spool_mode.close()


def test_bad_settings_and_urls_are_refused_with_the_password_masked(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not a PostgreSQL URL") as caught:
        AuditStore("mysql://u:topsecret@h/db", folder=tmp_path)
    assert "topsecret" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="when_down"):
        AuditStore(dead_url(), folder=tmp_path, when_down="drop")  # type: ignore[arg-type]
    with pytest.raises(AuditError, match="cannot reach the audit store"):
        list(read_store(dead_url()))
    report = verify_store(dead_url())
    assert not report.ok
    assert "cannot reach" in str(report)
    assert "s3cret-pw" not in str(report)


TEXT = st.text(st.characters(codec=None), max_size=40)  # surrogates and NULs included
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)  # fmt: skip


@pytest.fixture
def shared_store(postgres_url: str, tmp_path: Path) -> Any:
    audit = store(postgres_url, tmp_path, keep_spool=True)
    yield audit
    audit.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(fields=st.dictionaries(TEXT.filter(lambda k: k not in ("seq", "prev", "hash", "writer")),
                              VALUES, max_size=4), tool=TEXT)  # fmt: skip
def test_any_record_round_trips_through_the_store_and_verifies(
    shared_store: AuditStore, postgres_url: str, fields: dict[str, Any], tool: str
) -> None:
    shared_store.record("custom", {**fields, "tool": tool, "call_id": tool * 20})
    assert shared_store.wait_shipped(20)
    spooled = list(read_audit(shared_store.path))[-1]
    stored = list(read_store(postgres_url, writer=shared_store.writer))
    assert len(stored) == len(list(read_audit(shared_store.path)))
    last = next(r for r in stored if r["seq"] == spooled["seq"])
    assert {k: v for k, v in last.items() if k != "writer"} == spooled
    assert verify_store(postgres_url).ok


def test_every_spool_in_the_folder_is_out_of_every_calls_reach(
    postgres_url: str, tmp_path: Path
) -> None:
    """The folder of an audit store holds the spools of processes that ended, waiting to be
    shipped: a tool on host paths may touch none of them (not only this process's own)."""
    from stockade.engine import Engine, Toolkit
    from stockade.policies import Effect, Policy, Request

    folder = tmp_path / "state"
    with store(postgres_url, folder) as audit:
        engine = Engine(Toolkit(), policy=Policy.preset("permissive"), audit=audit)
        other = folder / "audit-web2-4242-20260101T000000000000.jsonl"
        for path, access in ((str(other), "write"), (f"{other}.seal", "delete")):
            request = Request(
                subject="agent", tool="host_write", action="call", paths=((path, access),)
            )
            decision = engine.policy.decide(request)
            assert decision.effect is Effect.DENY, path
            assert decision.rule == "stockade-state"
        beside = Request(
            subject="agent",
            tool="host_write",
            action="call",
            paths=((str(tmp_path / "elsewhere.txt"), "write"),),
        )
        assert engine.policy.decide(beside).effect is Effect.ALLOW
