"""The audit store's tables in PostgreSQL, and the statements that write and read them.

    conn = connect(url)                    # psycopg2, loaded here only (``stockade[postgres]``)
    ensure_schema(conn)
    ship(conn, writer, rows)               # one transaction: the rows and the writer's head

Two tables. ``stockade_audit`` holds every record as its exact line (``line``, so its hash
verifies byte for byte) under ``(writer, seq)``, with a few columns copied out of it for
filtering (``time``, ``kind``, ``tool``, ``status``, ``effect``, ``subject``, ``call_id``).
``stockade_audit_writers`` holds one row per writer (one process's chain): where it runs, and
its head (the last shipped record's number and hash), updated in the same transaction as the
records, so that rows deleted from the end of a chain are seen (the database's seal).

Written with psycopg2 directly (no SQLAlchemy): a handful of statements, and the batch insert
must return which rows it skipped as already there (``ON CONFLICT DO NOTHING RETURNING``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from stockade.engine.observe._audit_tail import GENESIS, AuditError
from stockade.errors import ConfigurationError

WRITERS = "stockade_audit_writers"
RECORDS = "stockade_audit"
COLUMNS = ("time", "kind", "tool", "status", "effect", "subject", "call_id")
MAX_COLUMN = 256  # characters of a text column (an index row must stay small); the line is whole
_SCHEME = re.compile(r"^postgres(?:ql)?(?:\+\w+)?://", re.IGNORECASE)
_SCHEMA_LOCK = 0x53544B41  # the advisory lock two writers creating the tables at once take
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {WRITERS} (
    writer text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    started double precision NOT NULL,
    head_seq bigint NOT NULL DEFAULT 0,
    head_hash text NOT NULL DEFAULT '{GENESIS}',
    closed boolean NOT NULL DEFAULT false,
    ended text,
    shipped_at double precision
);
CREATE TABLE IF NOT EXISTS {RECORDS} (
    writer text NOT NULL,
    seq bigint NOT NULL,
    time double precision,
    kind text,
    tool text,
    status text,
    effect text,
    subject text,
    call_id text,
    line text NOT NULL,
    PRIMARY KEY (writer, seq)
);
CREATE INDEX IF NOT EXISTS {RECORDS}_by_time ON {RECORDS} (time);
CREATE INDEX IF NOT EXISTS {RECORDS}_by_tool ON {RECORDS} (tool, time);
CREATE INDEX IF NOT EXISTS {RECORDS}_by_call ON {RECORDS} (call_id);
"""


class StoreConflict(AuditError):
    """A record already in the store under the same writer and number is another record."""


@dataclass(frozen=True, slots=True)
class Writer:
    """One writer: one process's chain (``writer`` is ``<host>-<pid>-<start time>``)."""

    writer: str
    host: str
    pid: int
    started: float


def check_url(url: str) -> str:
    """``url`` when it is a PostgreSQL URL; a ConfigurationError (password masked) if not."""
    if not isinstance(url, str) or not _SCHEME.match(url):
        raise ConfigurationError(
            f"{mask(str(url))!r} is not a PostgreSQL URL: give "
            "postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
        )
    return url


def mask(url: str) -> str:
    """``url`` with its password shown as ``***`` (in the authority and in a query)."""
    # up to the last ``@``: a password may hold a raw ``/`` or ``@`` (hiding too much is safe)
    url = re.sub(r"(://[^/@:]*:).*@", r"\1***@", url)
    return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", url)


def scrub(text: str, url: str) -> str:
    """``text`` (an error message) with the password of ``url`` nowhere in it."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    text = text.replace(url, mask(url))
    if password:
        for form in {password, unquote(password)}:
            text = text.replace(form, "***")
    return " ".join(text.split())  # libpq's messages span lines


def connect(url: str, *, timeout_s: float = 5.0) -> Any:
    """A psycopg2 connection to ``url`` (text as UTF-8 whatever the server's default)."""
    try:
        import psycopg2
    except ImportError as exc:
        raise ConfigurationError(
            "the audit store needs psycopg2: pip install 'stockade[postgres]'"
        ) from exc
    dsn = _SCHEME.sub("postgresql://", check_url(url), count=1)
    return psycopg2.connect(
        dsn,
        connect_timeout=max(1, math.ceil(timeout_s)),
        client_encoding="UTF8",
        application_name="stockade-audit",
    )


def db_errors() -> tuple[type[BaseException], ...]:
    """What a database that went away (or refuses) raises."""
    import psycopg2

    return (psycopg2.Error, OSError)


def ensure_schema(conn: Any) -> None:
    """Create the tables and indexes if they are not there (two writers at once: one does)."""
    with conn, conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        cur.execute(_SCHEMA)


def has_schema(conn: Any) -> bool:
    """Whether the store's tables exist."""
    with conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                    (RECORDS, WRITERS))  # fmt: skip
        return bool(cur.fetchone()[0])


def column(value: Any) -> str | None:
    """A record's field as its filtering column: text, at most `MAX_COLUMN` characters, without
    NULs or lone surrogates (which PostgreSQL's text refuses)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    text = text[:MAX_COLUMN].encode("utf-8", "backslashreplace").decode()
    return text.replace("\x00", "\\x00")


def moment(value: Any) -> float | None:
    """A record's ``time`` as the ``time`` column (None when it is not a finite number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def columns(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """The filtering columns of a parsed record, in `COLUMNS` order."""
    return (moment(record.get("time")), *(column(record.get(k)) for k in COLUMNS[1:]))


def head_of(conn: Any, writer: str) -> int:
    """The last record of ``writer`` the store holds, as its writers table says (0: none)."""
    with conn, conn.cursor() as cur:
        cur.execute(f"SELECT head_seq FROM {WRITERS} WHERE writer = %s", (writer,))
        found = cur.fetchone()
    return int(found[0]) if found else 0


def ship(conn: Any, writer: Writer, rows: Sequence[tuple[Any, ...]], head: str) -> None:
    """In one transaction: register ``writer``, insert ``rows`` ((seq, time, kind, tool, status,
    effect, subject, call_id, line), numbers rising, ``head`` the last one's hash) unless they
    are there already, and move the writer's head to the last. A row already there that is not
    the same line raises StoreConflict (nothing is written)."""
    from psycopg2.extras import execute_values

    last = rows[-1][0]
    with conn, conn.cursor() as cur:
        cur.execute(
            f"INSERT INTO {WRITERS} (writer, host, pid, started) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (writer) DO NOTHING",
            (writer.writer, writer.host, writer.pid, writer.started),
        )
        inserted = execute_values(
            cur,
            f"INSERT INTO {RECORDS} (writer, seq, {', '.join(COLUMNS)}, line) VALUES %s "
            "ON CONFLICT (writer, seq) DO NOTHING RETURNING seq",
            [(writer.writer, *row) for row in rows],
            page_size=len(rows),
            fetch=True,
        )
        if len(inserted) < len(rows):
            _check_same(cur, writer.writer, rows, {r[0] for r in inserted})
        cur.execute(
            f"UPDATE {WRITERS} SET head_seq = %s, head_hash = %s, "
            "shipped_at = extract(epoch from clock_timestamp()) "
            "WHERE writer = %s AND head_seq < %s",
            (last, head, writer.writer, last),
        )


def _check_same(cur: Any, writer: str, rows: Sequence[tuple[Any, ...]], new: set[int]) -> None:
    """The rows not inserted are there already: each must be the very line (a re-ship after a
    crash between the commit and its bookkeeping); another line is a conflict."""
    ours = {row[0]: row[-1] for row in rows if row[0] not in new}
    cur.execute(
        f"SELECT seq, line FROM {RECORDS} WHERE writer = %s AND seq = ANY(%s)",
        (writer, list(ours)),
    )
    for seq, line in cur.fetchall():
        if line != ours[seq]:
            raise StoreConflict(
                f"record {seq} of writer {writer} is already in the audit store as another "
                "record: two writers share an id, or the store was changed; nothing more of "
                "this writer is shipped until it is looked into (`stockade audit verify "
                "--store`); its records are kept in its spool"
            )


def end_writer(conn: Any, writer: Writer, ended: str) -> None:
    """Mark ``writer`` closed, saying how it ended (registering it if it never shipped)."""
    with conn, conn.cursor() as cur:
        cur.execute(
            f"INSERT INTO {WRITERS} (writer, host, pid, started) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (writer) DO NOTHING",
            (writer.writer, writer.host, writer.pid, writer.started),
        )
        cur.execute(
            f"UPDATE {WRITERS} SET closed = true, ended = %s WHERE writer = %s",
            (ended, writer.writer),
        )


def writers(
    conn: Any, *, writer: str | None = None, host: str | None = None
) -> list[dict[str, Any]]:
    """The writers table's rows (and the writers only the records table names), by start."""
    where, args = _where(writer=writer, host=host)
    with conn, conn.cursor() as cur:
        cur.execute(
            f"SELECT writer, host, pid, started, head_seq, head_hash, closed, ended "
            f"FROM {WRITERS} {where} ORDER BY started, writer",
            args,
        )
        names = [d[0] for d in cur.description]
        found = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        if host is None:
            cur.execute(
                f"SELECT DISTINCT writer FROM {RECORDS} r WHERE NOT EXISTS (SELECT 1 FROM "
                f"{WRITERS} w WHERE w.writer = r.writer)" + (" AND writer = %s" if writer else ""),
                (writer,) if writer else (),
            )
            found += [{"writer": row[0], "unknown": True} for row in cur.fetchall()]
    return found


def chain_of(conn: Any, writer: str) -> Generator[Any, None, None]:
    """A writer's row of the writers table (a dict as `writers` gives, None when there is
    none), then its rows by number as `rows_of` gives them, all in one transaction: on a
    connection in REPEATABLE READ (`snapshot`) the head and the rows are of one moment, however
    the writer ships meanwhile."""
    with conn:
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT writer, host, pid, started, head_seq, head_hash, closed, ended "
                f"FROM {WRITERS} WHERE writer = %s",
                (writer,),
            )
            names = [d[0] for d in cur.description]
            found = cur.fetchone()
        yield None if found is None else dict(zip(names, found, strict=True))
        with conn.cursor(name="stockade_audit_chain") as named:
            named.itersize = 2000
            named.execute(
                f"SELECT seq, {', '.join(COLUMNS)}, line FROM {RECORDS} WHERE writer = %s "
                "ORDER BY seq",
                (writer,),
            )
            yield from named


def snapshot(conn: Any) -> None:
    """Make each transaction on ``conn`` read the store as of one moment, and write nothing."""
    conn.set_session(isolation_level="REPEATABLE READ", readonly=True)


def rows_of(conn: Any, writer: str) -> Iterator[tuple[Any, ...]]:
    """A writer's rows by number, (seq, time, kind, ..., line), streamed from the server."""
    with conn, conn.cursor(name="stockade_audit_rows") as cur:
        cur.itersize = 2000
        cur.execute(
            f"SELECT seq, {', '.join(COLUMNS)}, line FROM {RECORDS} WHERE writer = %s ORDER BY seq",
            (writer,),
        )
        yield from cur


def lines(
    conn: Any,
    *,
    exact: Mapping[str, str],
    since: float | None,
    until: float | None,
    writer: str | None,
    host: str | None,
) -> Generator[tuple[str, int, str], None, None]:
    """(writer, seq, line) of the records passing the exact column filters, by time,
    streamed."""
    where = [f"r.{k} = %s" for k in exact]
    args: list[Any] = list(exact.values())
    if since is not None:
        where.append("r.time >= %s")
        args.append(since)
    if until is not None:
        where.append("r.time <= %s")
        args.append(until)
    if writer is not None:
        where.append("r.writer = %s")
        args.append(writer)
    if host is not None:
        where.append("r.writer IN (SELECT writer FROM " + WRITERS + " WHERE host = %s)")
        args.append(host)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    with conn, conn.cursor(name="stockade_audit_lines") as cur:
        cur.itersize = 2000
        cur.execute(
            f"SELECT r.writer, r.seq, r.line FROM {RECORDS} r {clause} "
            "ORDER BY r.time NULLS FIRST, r.writer, r.seq",
            args,
        )
        yield from cur


def _where(**given: str | None) -> tuple[str, tuple[str, ...]]:
    used = {k: v for k, v in given.items() if v is not None}
    if not used:
        return "", ()
    return "WHERE " + " AND ".join(f"{k} = %s" for k in used), tuple(used.values())
