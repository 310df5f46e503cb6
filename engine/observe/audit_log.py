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

Durability: ``"fsync"`` writes and flushes every record to disk before the call goes on;
``"batch"`` keeps records in memory and writes them together when ``max_batch`` are waiting or
``max_delay_s`` has passed (a background thread sees to the second), so a crash loses at most
that much, and at most the last line is left half-written: verification reports it and
tolerates it, and the next `AuditLog` on the file moves it into a ``recovered`` record so the
chain goes on. Records are written whole, one writer at a time, so concurrent calls never
interleave their bytes. Past ``rotate_bytes`` the file is renamed ``<name>.000001`` (then
``.000002`` ...) and a new one begun; the chain runs on across files.

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

import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stockade.engine.observe._audit_chain import (
    AuditError,
    Chain,
    Durability,
    rotated_files,
    seal_path,
)
from stockade.engine.observe._audit_chain import log as chain_log
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
        if durability == "batch":
            threading.Thread(
                target=_flush_loop, args=(self._chain, self._wake, max_delay_s), daemon=True,
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
        """Append a record already holding its ``kind`` and ``time`` (the engine's fast path:
        no copy is made, so the mapping must not change afterwards)."""
        chain = self._chain
        if chain.closed:
            raise AuditError(f"the audit log {self.path} is closed; open a new AuditLog")
        pending = chain.pending
        pending.append(entry)
        if len(pending) >= self.max_batch:
            chain.write_waiting()

    def flush(self) -> None:
        """Write every waiting record now (and fsync them, in ``fsync`` mode)."""
        self._chain.write_waiting()

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


def _flush_loop(chain: Chain, wake: threading.Event, delay: float) -> None:
    """Write what is waiting every ``delay`` seconds (so no record waits longer); ends when the
    log is closed."""
    while not chain.closed:
        wake.wait(delay)
        try:
            chain.write_waiting()
        except Exception as exc:  # the flusher must outlive any one failure
            if not chain.failing:  # said once, not every 0.2 s
                chain_log.error("%s", exc)
            chain.failing = True
        else:
            chain.failing = False


__all__ = ["DEFAULT_PATH", "AuditError", "AuditLog", "Durability", "rotated_files", "seal_path"]
