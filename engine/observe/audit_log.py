"""The audit log: a hash-chained JSONL file of what every call was about to do and what it did.

    audit = AuditLog()                     # .stockade/audit.jsonl; durability="batch" (the default)
    engine = Engine(toolkit, audit=audit)
    report = verify_audit(".stockade/audit.jsonl")       # report.ok, report.problem
    for record in read_audit(".stockade/audit.jsonl", tool="write_file", status="denied"): ...

Every call leaves two records: ``intent`` when it is decided (who, which tool, the canonical
paths and how, the command, the decision and its rule and reason) and ``outcome`` when it ends
(status, duration, attempts, error type, bytes written and the sha256 of a file before and after,
the isolation a command ran under). Each record is one line of JSON ending in its own ``hash``
(the sha256 of the line without it) and carrying ``prev``, the hash of the record before it, and
``seq``, its number. So editing any record breaks its own hash, and deleting, inserting or
reordering records breaks the chain; `verify_audit` names the first bad record and why.

Durability: ``"fsync"`` writes and flushes every record to disk before the call goes on, and
records that arrive while one flush runs share the next (group commit: a thousand concurrent
calls cost a few flushes, not a thousand); ``"batch"`` keeps records in memory and writes them
together when ``max_batch`` are waiting or ``max_delay_s`` has passed (a background thread sees
to the second), so a crash loses at most that much. A crash can leave a torn tail, a record
cut off part way or a run of zeros: verification reports it and tolerates it, and the next
`AuditLog` on the file cuts it off into a ``recovered`` record so the chain goes on. Records
are written whole, one writer at a time, so concurrent calls never interleave their bytes;
several processes may share one log (each write holds a lock and follows the chain's end as
the others left it).

Nothing is lost when the log cannot be written (a full disk): the file is cut back to its last
whole record, the records wait in memory, the engine refuses new calls (`admit`), and the
writer tries again; once it can, an ``audit_unwritable`` record says since when and why, and
the waiting records follow. Any string is data: one that cannot be written as UTF-8 (a lone
surrogate) is escaped, and the record says ``"escaped": true``. Past ``rotate_bytes`` the
file is renamed ``<name>.000001`` (then ``.000002`` ...) and a new one begun; the chain runs on
across files.

The seal. The chain shows a record edited, deleted, inserted or moved, but not a cut-off end: a
log truncated after record N, or emptied, is a perfect chain of N records (or of none), and a
deleted log is simply not there. So after every write of the log the chain's head, the last
record's number and hash, is written to a seal kept apart from it (``<name>.seal`` beside it
unless ``seal=`` names another file), one fixed-size record rewritten in place::

    {"stockade_audit_seal":1,"seq":240,"hash":"9f2c..."}

`verify_audit` holds the log to its seal: a log that stops short of it has lost its end
("records N+1..M are missing: the log was truncated"), one whose sealed record is another was
rewritten, and a missing log whose seal exists was deleted. A new `AuditLog` refuses to open
such a log, rather than start a fresh chain over the evidence. `AuditLog.verify` also holds the
file to the head this process keeps in memory, which no write to any file can reach. The seal
lies in Stockade's state folder, which the engine's policy protects from every call wherever it
is and which the commands keep outside the workspace by default; someone who can write both
the log and its seal can still rewrite both. Its cost is one ``pwrite`` per write of the log (a
batch, or a record in fsync mode), after the log's own write, so a crash between the two leaves
the seal behind the log, never ahead of it (only a machine crash in batch mode, where nothing is
fsynced, can keep the seal and lose the log's last records; verification then says they are
missing, which they are).
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from stockade.engine.observe._audit_chain import Chain, Durability
from stockade.engine.observe._audit_chain import log as chain_log
from stockade.engine.observe._audit_seal import rotated_files, seal_path
from stockade.engine.observe._audit_tail import AuditError
from stockade.engine.observe.audit_read import AuditReport, verify_log
from stockade.errors import ConfigurationError

DEFAULT_PATH = Path(".stockade") / "audit.jsonl"  # in the working directory
_CHAIN_FIELDS = frozenset({"seq", "prev", "hash"})


class AuditLog:
    """An append-only, hash-chained JSONL audit log (see the module docstring).

    Use one `AuditLog` per file and process. ``record`` is safe from any thread; `close`
    (or leaving a ``with`` block) writes what is waiting. A log that is never closed writes what
    is waiting when it is collected, or at the latest when the interpreter exits (a finaliser,
    not a hook per log: nothing keeps a forgotten log alive). ``seal`` is where the log's seal
    is kept (``<path>.seal`` when None). Raises `AuditError` for a log that cannot be opened,
    or that does not reach its seal (truncated, emptied, deleted or rewritten).
    """

    def __init__(
        self,
        path: str | Path = DEFAULT_PATH,
        *,
        durability: Durability = "batch",
        max_batch: int = 512,
        max_delay_s: float = 0.2,
        rotate_bytes: int = 64 * 1024 * 1024,
        seal: str | Path | None = None,
    ) -> None:
        if durability not in ("batch", "fsync"):
            raise ConfigurationError(f"durability must be 'batch' or 'fsync', not {durability!r}")
        if max_batch < 1 or not max_delay_s > 0 or rotate_bytes < 1024:
            raise ConfigurationError(
                "max_batch must be at least 1, max_delay_s positive, rotate_bytes >= 1024"
            )
        self.path = Path(path)
        self.seal = Path(seal) if seal is not None else seal_path(self.path)
        self.durability = durability
        self.max_batch = 1 if durability == "fsync" else max_batch
        self.max_delay_s = max_delay_s
        self.rotate_bytes = rotate_bytes
        self._chain = Chain(
            self.path, durability=durability, rotate_bytes=rotate_bytes, seal=self.seal
        )
        self._wake = threading.Event()
        threading.Thread(
            target=_write_loop, args=(self._chain, self._wake, max_delay_s), daemon=True,
            name=f"stockade-audit:{self.path.name}",
        ).start()  # fmt: skip
        self._finalizer = weakref.finalize(self, _close, self._chain, self._wake)

    # -- writing -----------------------------------------------------------------------------

    def record(self, kind: str, fields: Mapping[str, Any]) -> None:
        """Append a record of ``kind`` (``intent``, ``outcome`` ...) with ``fields``. The
        chain's own fields cannot be given."""
        taken = _CHAIN_FIELDS.intersection(fields)
        if taken:
            raise ConfigurationError(
                f"field(s) {', '.join(sorted(taken))} belong to the audit chain; rename them"
            )
        self.append({"kind": kind, "time": time.time(), **fields})

    def append(self, entry: Mapping[str, Any]) -> None:
        """Append a record already holding its ``kind`` and ``time`` (no copy is made, so the
        mapping must not change afterwards). In ``fsync`` mode, returns once it is on disk, and
        raises AuditError when it cannot be written."""
        ticket = self._submit(entry, in_loop=False)  # this thread waits: never its loop
        if ticket is not None:
            ticket.result()

    def submit(self, entry: Mapping[str, Any]) -> Future[None] | None:
        """Append a record without waiting (the engine's path): in ``fsync`` mode, returns the
        ticket of the write that will carry it, done once it is on disk (concurrent records
        share one write and one fsync); in ``batch`` mode, None. Raises AuditError when the log
        is closed, or has kept as many records as it will while it cannot be written. From
        a running event loop, await the ticket (``asyncio.wrap_future``), never block on it:
        the write is made by that loop."""
        return self._submit(entry, in_loop=True)

    def _submit(self, entry: Mapping[str, Any], *, in_loop: bool) -> Future[None] | None:
        chain = self._chain
        if chain.durability == "batch" and chain.failure is None and not chain.closed:
            pending = chain.pending  # the hot path, in line: two records for every call
            pending.append(entry)
            if len(pending) >= self.max_batch:
                chain.write_waiting()
            return None
        ticket = chain.append(entry)
        if ticket is None:
            return None
        try:
            loop = asyncio.get_running_loop() if in_loop else None
        except RuntimeError:
            loop = None
        if loop is None:  # the writer's thread writes it
            self._wake.set()
            return ticket
        if not chain.loop_will_write:  # one write for all records of this loop iteration
            chain.loop_will_write = True
            loop.call_soon(self._write_from_loop)
        return ticket

    def _write_from_loop(self) -> None:
        """In the event loop, after the records of its iteration: write them (the loop holds
        the GIL anyway), and leave the fsync to the writer's thread."""
        self._chain.loop_will_write = False
        self._chain.write_waiting(sync=False)
        self._wake.set()

    def admit(self) -> None:
        """Raise AuditError while the log cannot be written (a full disk): the engine refuses
        calls then, rather than run them unrecorded. The writer tries again every
        ``max_delay_s``; the records waiting meanwhile are kept, and written when it can."""
        self._chain.admit()

    def flush(self) -> None:
        """Write every waiting record now (and fsync them, in ``fsync`` mode). Raises
        AuditError when they cannot be written (they stay waiting)."""
        self._chain.write_waiting()
        self._chain.admit()

    @property
    def failure(self) -> str | None:
        """Why the log cannot be written now (None: it can)."""
        return self._chain.failure

    def close(self) -> None:
        """Write what is waiting and close the file. Safe to call twice."""
        self._finalizer()

    def verify(self) -> AuditReport:
        """Write what is waiting, then verify the log: every record, the chain, the seal, and
        the head of the chain as this process holds it (which no write to a file can reach, so
        even a log rewritten together with its seal does not verify)."""
        self.flush()
        return verify_log(self.path, self.seal, self._chain.head())

    @property
    def closed(self) -> bool:
        """Whether the log was closed (nothing more can be appended)."""
        return self._chain.closed

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close(chain: Chain, wake: threading.Event) -> None:
    """The log's finaliser: write what waits, close the file, end the flusher thread."""
    try:
        chain.close()
    finally:
        wake.set()


def _write_loop(chain: Chain, wake: threading.Event, delay: float) -> None:
    """Write what is waiting when woken (fsync mode: a record came) or every ``delay`` seconds
    (batch mode; and any mode while the log cannot be written); ends when the log is closed.
    `Chain.write_waiting` never raises for the file's fault, so this thread outlives it."""
    while not chain.closed:
        wake.wait(delay)
        wake.clear()  # before the write: a record appended from here on wakes the next round
        try:
            chain.sync_written()  # what a loop wrote
            if not chain.loop_will_write:
                chain.write_waiting()  # what no loop will write (or a retry while failing)
        except Exception:  # a bug, not the file: said, and the thread goes on
            chain_log.exception("the audit log writer of %s failed", chain.path)


__all__ = ["DEFAULT_PATH", "AuditError", "AuditLog", "Durability", "rotated_files", "seal_path"]
