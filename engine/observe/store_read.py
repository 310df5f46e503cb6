"""Reading the audit store back: `verify_store` checks every writer's chain in PostgreSQL and
holds it to the writer's head (the database's seal); `read_store` yields the records of all
writers that pass filters, by time.

    report = verify_store(url)             # report.ok; report.writers[i].problem
    print(report)                          # one line per writer
    for record in read_store(url, AuditFilter(status="denied"), host="web1"):
        record["writer"]                   # which writer's chain it is in

A writer's chain is checked as a file log is (`verify_audit`): each record's hash, the link to
the record before it, no number skipped; then its head: a chain that stops short of it lost its
tail, a record past it was added afterwards, a head record of another hash was rewritten; and
each row's filtering columns must say what its line says. A writer never closed whose process
is gone (this host only: another host's processes cannot be seen from here) may have lost
records after its last; one whose spool another writer shipped lost at most what was in its
memory (said, and not a failure). Given the ``folder`` of spools, those not fully shipped are
said too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stockade.engine.observe import _store_spool as spool
from stockade.engine.observe import _store_sql as sql
from stockade.engine.observe._audit_seal import HASH_TAIL, missing, rotated_files
from stockade.engine.observe._audit_tail import GENESIS, AuditError, read_tail
from stockade.engine.observe.audit_read import AuditFilter, _check


@dataclass(frozen=True, slots=True)
class WriterReport:
    """One writer's verdict: ``ok``, or ``problem`` and ``bad_record`` (the first bad record,
    or the first missing). ``note`` says what is not a failure (still running, ended and
    shipped by another, records waiting in a spool). ``records`` counts the good rows."""

    writer: str
    host: str | None
    pid: int | None
    ok: bool
    records: int
    head: int
    closed: bool
    problem: str | None = None
    bad_record: int | None = None
    note: str | None = None
    unshipped: int = 0

    def __str__(self) -> str:
        verdict = "intact" if self.ok else "NOT intact"
        text = f"{self.writer}: {verdict}, {self.records} records"
        if self.problem:
            text += f"; {self.problem}"
        if self.note:
            text += f" ({self.note})"
        return text


@dataclass(frozen=True, slots=True)
class StoreReport:
    """What `verify_store` found: ``ok`` when every writer is; ``problem`` when the store
    itself cannot be read (then there are no writers)."""

    ok: bool
    url: str
    writers: tuple[WriterReport, ...]
    problem: str | None = None

    @property
    def records(self) -> int:
        return sum(w.records for w in self.writers)

    def __str__(self) -> str:
        if self.problem:
            return f"audit store NOT intact: {self.problem}"
        bad = [w for w in self.writers if not w.ok]
        head = (
            f"audit store intact: {self.records} records of {len(self.writers)} writer(s)"
            if self.ok
            else f"audit store NOT intact: {len(bad)} of {len(self.writers)} writer(s) bad"
        )
        return "\n".join([head, *(f"  {w}" for w in self.writers)])


def verify_store(
    url: str,
    *,
    writer: str | None = None,
    host: str | None = None,
    folder: str | Path | None = None,
) -> StoreReport:
    """Check every writer's chain in the store at ``url`` (or those of ``writer``/``host``);
    with ``folder``, also say what its spools hold that is not shipped yet. Never raises for
    the store's state: a store that cannot be reached is a report with a ``problem``."""
    shown = sql.mask(url)
    try:
        conn = sql.connect(url)
    except sql.db_errors() as exc:
        return StoreReport(False, shown, (), f"cannot reach {shown}: {sql.scrub(str(exc), url)}")
    try:
        sql.snapshot(conn)  # a writer's head and its rows as of one moment (it may be shipping)
        if not sql.has_schema(conn):
            return StoreReport(
                False, shown, (), f"{shown} holds no audit store (no table {sql.RECORDS})"
            )
        waiting = _spooled(Path(folder), conn) if folder is not None else {}
        found = [_verify(conn, row, waiting) for row in sql.writers(conn, writer=writer, host=host)]
    except sql.db_errors() as exc:
        return StoreReport(False, shown, (), f"cannot read {shown}: {sql.scrub(str(exc), url)}")
    finally:
        conn.close()
    return StoreReport(all(w.ok for w in found), shown, tuple(found))


def _verify(conn: Any, row: dict[str, Any], waiting: dict[str, int]) -> WriterReport:
    name = row["writer"]
    if row.get("unknown"):
        count = sum(1 for _ in sql.rows_of(conn, name))
        return WriterReport(
            name, None, None, False, 0, 0, False,
            f"{count} record(s) of a writer the writers table does not know: they were "
            "inserted by something other than Stockade", 1,
        )  # fmt: skip
    chain = sql.chain_of(conn, name)
    row = next(chain) or row  # the head as of the moment its rows are read
    head, head_hash = int(row["head_seq"]), row["head_hash"]
    base = {"writer": name, "host": row["host"], "pid": row["pid"], "head": head,
            "closed": row["closed"], "unshipped": waiting.get(name, 0)}  # fmt: skip
    prev, count, at_head = GENESIS, 0, None
    for seq, *cells, line in chain:
        problem = None
        if seq != count + 1:
            problem = (
                f"{missing(count, seq - 1)}: rows were deleted"
                if seq > count + 1
                else f"its number {seq} comes twice"
            )
            seq = count + 1
        else:
            problem = _check(line.encode(), prev, seq) or _columns(line, cells)
        if problem is not None:
            chain.close()
            return WriterReport(**base, ok=False, records=count, bad_record=seq,
                                problem=f"record {seq}: {problem}")  # fmt: skip
        count = seq
        prev = HASH_TAIL.search(line.encode()).group(1).decode()  # type: ignore[union-attr]
        if seq == head:
            at_head = prev
    if head > count:
        problem = (
            f"{missing(count, head)}: the tail was deleted (the chain ends at record {count}, "
            f"and the writers table says {head} were shipped)"
        )
        return WriterReport(**base, ok=False, records=count, bad_record=count + 1,
                            problem=problem)  # fmt: skip
    if count > head:
        problem = (
            f"record {head + 1}: past the head the writers table holds ({head}): "
            f"{'it was' if count == head + 1 else 'they were'} added afterwards"
        )
        return WriterReport(**base, ok=False, records=head, bad_record=head + 1,
                            problem=problem)  # fmt: skip
    if head > 0 and at_head != head_hash:
        problem = f"record {head}: it is not the record the writers table names: rewritten"
        return WriterReport(**base, ok=False, records=count, bad_record=head,
                            problem=problem)  # fmt: skip
    return _ending(conn, base, row, count)


def _ending(conn: Any, base: dict[str, Any], row: dict[str, Any], count: int) -> WriterReport:
    """The verdict on an intact chain: how its writer ended (or that it runs)."""
    note = None
    waiting = base["unshipped"]
    if waiting:
        note = f"{waiting} record(s) in its spool not shipped yet"
    if row["closed"]:
        ended = row["ended"] or "closed"
        if ended != "closed":
            note = ", ".join(x for x in (ended, note) if x)
        return WriterReport(**base, ok=True, records=count, note=note)
    if (
        row["host"] == spool.host_name()
        and not _alive(int(row["pid"]))
        and not _closed_since(conn, row["writer"])
    ):
        problem = (
            f"ended without closing: records after {count} may be lost (its process "
            f"{row['pid']} is gone; an AuditStore opened on its folder ships what its spool "
            "holds)"
        )
        return WriterReport(**base, ok=False, records=count, bad_record=count + 1,
                            problem=problem, note=note)  # fmt: skip
    running = "still running" if row["host"] == spool.host_name() else (
        f"not closed: running on {row['host']}, or ended without closing"
    )  # fmt: skip
    note = ", ".join(x for x in (running, note) if x)
    return WriterReport(**base, ok=True, records=count, note=note)


def _columns(line: str, cells: list[Any]) -> str | None:
    """Whether a row's filtering columns say what its line says."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return "it is not valid JSON"
    if not isinstance(record, dict) or tuple(cells) != sql.columns(record):
        return "its columns do not say what its line says: the row was edited"
    return None


def _closed_since(conn: Any, writer: str) -> bool:
    """Whether ``writer`` is closed now (it may have closed, and its process ended, since its
    rows were read)."""
    return any(found.get("closed") for found in sql.writers(conn, writer=writer))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _spooled(folder: Path, conn: Any) -> dict[str, int]:
    """Per writer, how many records its spool in ``folder`` holds past its head in the store."""
    found: dict[str, int] = {}
    for path in spool.spools(folder):
        writer = spool.spool_writer(path)
        files = [f for f in [*rotated_files(path), path] if f.exists()]
        if writer is None or not files:
            continue
        try:
            last = read_tail(files).seq
        except AuditError:
            continue
        left = last - sql.head_of(conn, writer.writer)
        if left > 0:
            found[writer.writer] = left
    return found


def read_store(
    url: str,
    wanted: AuditFilter | None = None,
    *,
    writer: str | None = None,
    host: str | None = None,
) -> Iterator[dict[str, Any]]:
    """The records of the store at ``url`` that pass ``wanted`` (and are of ``writer``, or of a
    writer on ``host``), by time, each with its ``writer`` added. Does not verify: use
    `verify_store`. Raises AuditError when the store cannot be read."""
    wanted = wanted if wanted is not None else AuditFilter()
    shown = sql.mask(url)
    exact = {k: v for k in ("kind", "status", "effect", "call_id")
             if (v := getattr(wanted, k)) is not None and len(v) < sql.MAX_COLUMN}  # fmt: skip
    if (
        wanted.tool is not None
        and not any(c in wanted.tool for c in "*?[")
        and len(wanted.tool) < sql.MAX_COLUMN
    ):
        exact["tool"] = wanted.tool
    try:
        conn = sql.connect(url)
    except sql.db_errors() as exc:
        raise AuditError(
            f"cannot reach the audit store {shown}: {sql.scrub(str(exc), url)}"
        ) from exc
    try:
        if not sql.has_schema(conn):
            raise AuditError(
                f"{shown} holds no audit store (no table {sql.RECORDS}); check the URL"
            )
        rows = sql.lines(conn, exact=exact, since=wanted.since, until=wanted.until,
                         writer=writer, host=host)  # fmt: skip
        try:
            for name, seq, line in rows:
                record = _record(name, seq, line)
                if wanted.keeps(record):
                    record["writer"] = name
                    yield record
        finally:
            rows.close()  # its server-side cursor, before the connection goes
    except sql.db_errors() as exc:
        raise AuditError(
            f"cannot read the audit store {shown}: {sql.scrub(str(exc), url)}"
        ) from exc
    finally:
        conn.close()


def _record(writer: str, seq: int, line: str) -> dict[str, Any]:
    """A row's line as its record; AuditError naming it when it is not one."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        record = None
    if not isinstance(record, dict):
        raise AuditError(
            f"record {seq} of writer {writer} in the audit store is not a record (not a JSON "
            "object): the store was changed; `stockade audit verify --store` says what else"
        )
    return record


__all__ = ["StoreReport", "WriterReport", "read_store", "verify_store"]
