"""The audit store's shipper: the thread that sends a writer's spooled records to PostgreSQL,
and the spools of writers that died before theirs were sent.

    shipper = Shipper(url, me, chain, path, settings)   # starts its thread
    shipper.wait(timeout_s=10)             # True once every record written is in the database
    shipper.close(timeout_s=10)            # ship what remains, mark the writer closed

What it promises (see ``audit_store``): records leave the spool in order, in batches, each
batch and the writer's head in one transaction; a batch sent again (a crash between the commit
and the next read) is recognised row by row and never doubled. The database going away is said
once, and its coming back once, with how long and how many records were shipped; the records
wait in the spool meanwhile. Nothing here raises into the engine: the state (``down_since``,
``conflict``) is read by `AuditStore.admit`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stockade.engine.observe import _store_spool as spool
from stockade.engine.observe import _store_sql as sql
from stockade.engine.observe._audit_chain import Chain
from stockade.engine.observe._audit_seal import HASH_TAIL, rotated_files, seal_path
from stockade.engine.observe._audit_tail import AuditError

log = logging.getLogger("stockade.audit")
_RETRY_S = 0.5  # between attempts while the database is down


@dataclass(frozen=True, slots=True)
class Settings:
    batch: int
    every_s: float
    connect_timeout_s: float
    keep_spool: bool
    rotate_bytes: int


class Shipper:
    """Ships one writer's spool (and the spools of dead writers of its folder, on this host)."""

    def __init__(
        self, url: str, me: sql.Writer, chain: Chain, path: Path, lock: int, settings: Settings
    ) -> None:
        self.url, self.shown = url, sql.mask(url)
        self.me, self.chain, self.path, self.settings = me, chain, path, settings
        self.shipped = 0  # the last record of this writer in the database
        self.down_since: float | None = None
        self.down_reason: str | None = None
        self.conflict: str | None = None
        self._lock = lock
        self._reader = spool.SpoolReader(path, 0)
        self._conn: Any = None
        self._shipped_when_down = 0
        self._wake = threading.Event()
        self._changed = threading.Condition()
        self._closing: float | None = None  # the deadline of close
        self._orphans = self._find_orphans(path.parent)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"stockade-audit-ship:{me.writer}")  # fmt: skip
        self._thread.start()

    # -- the engine's side -------------------------------------------------------------------

    def unshipped(self) -> int:
        """Records written to the spool or waiting in memory, not yet in the database."""
        return self.chain.head().seq - self.shipped + len(self.chain.pending)

    def wait(self, timeout_s: float) -> bool:
        """Wait until every record written so far is in the database (and the dead writers'
        spools found at the start); False when ``timeout_s`` passed first."""
        target = self.chain.head().seq
        deadline = time.monotonic() + timeout_s
        self._wake.set()
        with self._changed:
            while self.shipped < target or self._orphans:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._changed.wait(min(left, 0.1))
        return True

    def close(self, timeout_s: float) -> None:
        """Ship what remains (waiting at most ``timeout_s``), mark the writer closed, let go of
        the spool (deleted once shipped, unless kept). Safe to call twice."""
        if self._closing is None:
            self._closing = time.monotonic() + timeout_s
            self._wake.set()
        self._thread.join(timeout_s + self.settings.connect_timeout_s + 5)

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                try:
                    done = self._round()
                except Exception:  # a bug, not the database: said, and the thread goes on
                    log.exception("the audit store shipper of %s failed", self.me.writer)
                    done = False
                if self._closing is not None and (done or time.monotonic() > self._closing):
                    self._finish(done)
                    return
                pause = _RETRY_S if self.down_since is not None else self.settings.every_s
                self._wake.wait(0.05 if self._closing is not None else pause)
                self._wake.clear()
        finally:
            self._reader.close()
            if self._conn is not None:
                self._conn.close()
            for _, _, fd in self._orphans:
                spool.release(fd)
            spool.release(self._lock)

    def _round(self) -> bool:
        """One round: ship what can be; True when nothing is left (and the log is closed)."""
        if self.conflict is not None:
            return False
        try:
            conn = self._connection()
            while self._orphans:
                self._adopt_or_leave(conn, *self._orphans[0])
                with self._changed:
                    spool.release(self._orphans.pop(0)[2])
                    self._changed.notify_all()
            self._ship_own(conn)
        except sql.StoreConflict as exc:
            self.conflict = str(exc)
            log.error("the audit store %s: %s", self.shown, exc)
            return False
        except sql.db_errors() as exc:
            self._went_down(exc)
            return False
        if self.down_since is not None:
            log.warning(
                "the audit store %s is reached again after %.1f s: %d records shipped from the "
                "spool %s", self.shown, time.time() - self.down_since,
                self.shipped - self._shipped_when_down, self.path,
            )  # fmt: skip
            self.down_since, self.down_reason = None, None
        return self.chain.closed and not self.chain.pending and self.shipped >= self._head()

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            conn = sql.connect(self.url, timeout_s=self.settings.connect_timeout_s)
            try:
                sql.ensure_schema(conn)
                if self.shipped == 0:  # a writer's first connection: the database's head
                    self.shipped = self._reader.after = sql.head_of(conn, self.me.writer)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _went_down(self, exc: BaseException) -> None:
        # the batch in flight may not have been committed: read again from the last that was
        # (one that was after all is recognised when sent again)
        self._reader.close()
        self._reader = spool.SpoolReader(self.path, self.shipped)
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
        if self.down_since is None:
            self.down_since = time.time()
            self.down_reason = sql.scrub(str(exc).strip() or type(exc).__name__, self.url)
            self._shipped_when_down = self.shipped
            log.error(
                "cannot reach the audit store %s (%s): records wait in the spool %s and are "
                "shipped when it is back (%d waiting now)",
                self.shown, self.down_reason, self.path, self.unshipped(),
            )  # fmt: skip

    def _head(self) -> int:
        return self.chain.head().seq

    def _ship_own(self, conn: Any) -> None:
        while True:
            lines = self._reader.take(self._head(), self.settings.batch)
            if not lines:
                return
            _send(conn, self.me, lines)
            with self._changed:
                self.shipped = self._reader.after
                self._changed.notify_all()

    def _finish(self, done: bool) -> None:
        """The end of close: the writer marked closed, the spool deleted (or kept, said)."""
        if done:
            try:
                sql.end_writer(self._connection(), self.me, "closed")
            except sql.db_errors() as exc:
                self._went_down(exc)
                done = False
        if done:
            if not self.settings.keep_spool:
                self._reader.close()
                spool.remove(self.path)
            return
        Path(f"{self.path}{spool.CLOSED}").touch()
        why = self.conflict or self.down_reason or "the database is slow"
        if not self.unshipped():
            log.error(
                "the audit store %s could not mark writer %s closed (%s): the next AuditStore "
                "opened on %s does", self.shown, self.me.writer, why, self.path.parent,
            )  # fmt: skip
            return
        log.error(
            "the audit store %s did not get the last %d records of writer %s before it was "
            "closed (%s): they stay in the spool %s, and the next AuditStore opened on %s ships "
            "them", self.shown, self.unshipped(), self.me.writer, why, self.path, self.path.parent,
        )  # fmt: skip

    # -- the spools of dead writers ----------------------------------------------------------

    def _find_orphans(self, folder: Path) -> list[tuple[Path, sql.Writer, int]]:
        """The spools of writers of this host that are gone (their lock is free), locked."""
        found = []
        for path in spool.spools(folder):
            writer = spool.spool_writer(path)
            if writer is None or path == self.path or writer.host != self.me.host:
                continue
            fd = spool.try_hold(path)
            if fd is not None:
                found.append((path, writer, fd))
        return found

    def _adopt_or_leave(self, conn: Any, path: Path, writer: sql.Writer, fd: int) -> None:
        """Ship a dead writer's spool; one the store refuses (or that cannot be read) is said
        once and left where it is, and this writer's own shipping goes on."""
        try:
            self._adopt(conn, path, writer, fd)
        except sql.db_errors():
            raise  # the database went away: the same spool is tried again when it is back
        except Exception as exc:
            log.error(
                "the audit store %s: the spool %s of writer %s, which has ended, is not "
                "shipped (%s); it stays there to be looked into, and this process's own records "
                "are shipped", self.shown, path, writer.writer, exc,
            )  # fmt: skip

    def _adopt(self, conn: Any, path: Path, writer: sql.Writer, _fd: int) -> None:
        """Ship a dead writer's spool (a torn tail first kept as a ``recovered`` record, as
        a new `AuditLog` on it would), then mark it ended and delete it."""
        if not any(f.exists() for f in [*rotated_files(path), path]):
            return  # shipped and deleted by another store since this one listed it
        damaged = False
        if path.exists():
            try:
                Chain(path, durability="batch", rotate_bytes=self.settings.rotate_bytes,
                      seal=seal_path(path)).close()  # fmt: skip
            except AuditError as exc:  # cut short or rewritten: ship what it holds, say so
                log.error("the spool %s of writer %s is damaged: %s; what it holds is shipped, "
                          "and it is kept", path, writer.writer, exc)  # fmt: skip
                damaged = True
        after = sql.head_of(conn, writer.writer)
        reader = spool.SpoolReader(path, after)
        try:
            while lines := reader.take(1 << 62, self.settings.batch):
                _send(conn, writer, lines)
        finally:
            reader.close()
        last = reader.after  # its last complete record, shipped now or before
        how = (
            "closed, its last records shipped by " + self.me.writer
            if Path(f"{path}{spool.CLOSED}").exists()
            else f"ended without closing after record {max(last, after)}; its spool was "
            f"shipped by {self.me.writer}"
        )
        if damaged:
            how += f" (its spool was damaged: kept as {path.name})"
        sql.end_writer(conn, writer, how)
        log.warning("the audit store %s: writer %s %s", self.shown, writer.writer, how)
        if not self.settings.keep_spool and not damaged:
            spool.remove(path)


def _send(conn: Any, writer: sql.Writer, lines: list[bytes]) -> None:
    """Ship ``lines`` of ``writer`` in one transaction."""
    rows = []
    for line in lines:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            record = {}
        if not isinstance(record, dict):
            record = {}
        rows.append((spool.seq_of(line), *sql.columns(record), line.decode("utf-8", "replace")))
    tail = HASH_TAIL.search(lines[-1])
    sql.ship(conn, writer, rows, tail.group(1).decode() if tail else "")
