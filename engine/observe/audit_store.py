"""The audit store: one audit trail in PostgreSQL for many engine processes on many hosts.

    audit = AuditStore("postgresql://stockade:PASSWORD@db:5432/stockade", folder=state_folder)
    engine = Engine(toolkit, audit=audit)  # an AuditLog like any other
    ...
    audit.close()                          # ships what remains, marks this writer closed
    report = verify_store(url)             # every writer's chain, and the database's seal
    for record in read_store(url, AuditFilter(tool="write_file"), host="web1"): ...

An `AuditStore` is an `AuditLog` whose file is this process's spool: every record is first
written to it exactly as to a file log (same durability, chain, seal and torn-tail recovery),
and a shipper thread sends the records, as their very line bytes, in batches to PostgreSQL
(tables ``stockade_audit`` and ``stockade_audit_writers``, made on first use). Each process is
one *writer*, with its own chain and its own spool ``<folder>/audit-<writer>.jsonl``; the
writer id is ``<host>-<pid>-<start time, UTC to the microsecond>``. Each batch moves the
writer's head in the writers table in the same transaction, so rows deleted from the end of a
chain are seen. A batch sent again after a crash is recognised row by row, never doubled (a
different row under the same number is reported loudly, and shipping stops for that writer).

When the database is down: ``when_down="spool"`` keeps calls running and the records in the
spool, shipped when it is back (said once when it goes, once when it is back, with counts);
``when_down="deny"`` refuses new calls (`admit` raises AuditError, as a file log on a full
disk) once the outage is older than ``down_after_s`` or more than ``max_unshipped`` records
wait, and admits them again once it is back.

What can be lost: what a file log loses, no more. In ``batch`` mode a crash loses the records
still in memory (at most ``max_batch``, or ``max_delay_s`` of them); in ``fsync`` mode none.
Whatever reached the spool reaches the database: by this process, or, if it dies first (or
closes while the database is down), by the next `AuditStore` opened on the same folder on the
same host, which ships the spools of writers that are gone (each writer holds a lock on its
spool for its life, so one still running is never taken, nor one being shipped by another).
`close` waits at most ``close_timeout_s`` for the shipping and says when it could not finish.
A spool is deleted once shipped and closed (``keep_spool=True`` keeps it).
"""

from __future__ import annotations

import threading
import time
import weakref
from pathlib import Path
from typing import Literal

from stockade.engine.observe import _store_spool as spool
from stockade.engine.observe._audit_chain import Chain, Durability
from stockade.engine.observe._store_ship import Settings, Shipper
from stockade.engine.observe._store_sql import check_url, mask
from stockade.engine.observe.audit_log import AuditError, AuditLog, _close
from stockade.errors import ConfigurationError

WhenDown = Literal["spool", "deny"]
ENV = "STOCKADE_AUDIT_STORE"  # the variable the commands read a store's URL from


class AuditStore(AuditLog):
    """An audit log shipped to PostgreSQL (see the module docstring). ``url`` is a PostgreSQL
    URL (``postgresql://user:password@host:port/database``; shown with its password masked
    everywhere); ``folder`` is the state folder the spool is kept in (made if missing; keep it
    out of every workspace, as for a file log). ``host`` names this host in the writer id
    (default: the machine's name). Raises ConfigurationError for a bad setting, AuditError
    when the spool cannot be opened. The database need not be up to open one."""

    def __init__(
        self,
        url: str,
        *,
        folder: str | Path,
        durability: Durability = "batch",
        when_down: WhenDown = "spool",
        max_unshipped: int = 100_000,
        down_after_s: float = 30.0,
        host: str | None = None,
        ship_batch: int = 1000,
        ship_every_s: float = 0.2,
        close_timeout_s: float = 10.0,
        connect_timeout_s: float = 5.0,
        keep_spool: bool = False,
        max_batch: int = 512,
        max_delay_s: float = 0.2,
        rotate_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        check_url(url)
        if when_down not in ("spool", "deny"):
            raise ConfigurationError(f"when_down must be 'spool' or 'deny', not {when_down!r}")
        if max_unshipped < 1 or not down_after_s >= 0 or ship_batch < 1:
            raise ConfigurationError(
                "max_unshipped and ship_batch must be at least 1, down_after_s not negative"
            )
        if not ship_every_s > 0 or not close_timeout_s >= 0 or not connect_timeout_s > 0:
            raise ConfigurationError(
                "ship_every_s and connect_timeout_s must be positive, close_timeout_s not negative"
            )
        self.url = mask(url)  # as it may be shown; the password stays with the shipper
        self.when_down: WhenDown = when_down
        self.max_unshipped = max_unshipped
        self.down_after_s = down_after_s
        self.close_timeout_s = close_timeout_s
        identity = spool.new_writer(host)
        self.writer, self.host = identity.writer, identity.host
        folder = Path(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = spool.spool_path(folder, self.writer)
            lock = spool.hold(path)  # before the spool exists: nobody may take it for a dead one
        except OSError as exc:
            raise AuditError(
                f"cannot open the audit store's spool in {folder}: {exc.strerror}; check the "
                "folder is writable, or give another folder"
            ) from exc
        try:
            super().__init__(path, durability=durability, max_batch=max_batch,
                             max_delay_s=max_delay_s, rotate_bytes=rotate_bytes)  # fmt: skip
        except BaseException:
            spool.release(lock)
            raise
        settings = Settings(ship_batch, ship_every_s, connect_timeout_s, keep_spool, rotate_bytes)
        self._shipper = Shipper(url, identity, self._chain, path, lock, settings)
        # closes the spool first, then ships what it holds (a finaliser, as the log's own)
        self._store_finalizer = weakref.finalize(
            self, _close_store, self._chain, self._wake, self._shipper, close_timeout_s
        )

    def admit(self) -> None:
        """Raise AuditError while the spool cannot be written (as a file log), and, with
        ``when_down="deny"``, while the database has been unreachable past the bound."""
        self._chain.admit()
        shipper = self._shipper
        if self.when_down == "spool" or (shipper.down_since is None and not shipper.conflict):
            return
        if shipper.conflict is not None:
            raise AuditError(
                f"the audit store {self.url} refuses this writer's records "
                f"({shipper.conflict}), so no call is admitted (when_down='deny')"
            )
        down_for = time.time() - shipper.down_since  # type: ignore[operator]
        waiting = shipper.unshipped()
        if down_for > self.down_after_s or waiting > self.max_unshipped:
            raise AuditError(
                f"the audit store {self.url} cannot be reached for {down_for:.0f} s "
                f"({shipper.down_reason}); {waiting} records wait in the spool {self.path}, so "
                "no call is admitted until it is back (when_down='deny'): check the database "
                "and the network"
            )

    @property
    def unshipped(self) -> int:
        """Records written or waiting that are not in the database yet."""
        return self._shipper.unshipped()

    @property
    def down_since(self) -> float | None:
        """Since when the database cannot be reached (None: it can)."""
        return self._shipper.down_since

    def wait_shipped(self, timeout_s: float = 10.0) -> bool:
        """Write what waits, then wait until every record so far is in the database (and
        the dead writers' spools this store took on); False when ``timeout_s`` passed first."""
        self._chain.write_waiting()
        return self._shipper.wait(timeout_s)

    def close(self) -> None:
        """Write what waits to the spool, ship it (waiting at most ``close_timeout_s``; what
        is left is said, and shipped by the next AuditStore on the folder), and mark this
        writer closed. Safe to call twice."""
        self._store_finalizer()

    def __enter__(self) -> AuditStore:
        return self

    def __repr__(self) -> str:
        return f"AuditStore({self.url!r}, writer={self.writer!r})"


def _close_store(chain: Chain, wake: threading.Event, shipper: Shipper, timeout_s: float) -> None:
    try:
        _close(chain, wake)
    finally:
        shipper.close(timeout_s)


def store_url(url: str | None, env: dict[str, str] | None = None) -> str | None:
    """The store's URL a command uses: ``url`` when given, else the environment's `ENV`."""
    import os

    return url or (env if env is not None else os.environ).get(ENV) or None


__all__ = ["ENV", "AuditStore", "WhenDown", "check_url", "mask", "store_url"]
