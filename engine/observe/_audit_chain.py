"""The chain of an audit log's file: numbering, chaining, sealing and writing records, rotating
the file, and keeping the chain whole when anything fails.

`Chain` owns the file descriptors and the state of the chain, and nothing else: the `AuditLog`
in front of it can be collected, and its finaliser still writes what is waiting (see
``audit_log``). What it promises:

* A record waits in ``pending`` until it is on disk: a write that fails (a full disk) leaves
  every record waiting and the file cut back to where it was, so no half record is ever
  followed by another. The chain is then *failing*: said loudly once, refused to new calls
  (`AuditLog.admit`), retried by the writer thread, and, once the log can be written again,
  recorded in an ``audit_unwritable`` record before the records that waited.
* Many processes may write one log: each write holds an exclusive lock on the seal (whose
  file, unlike the log's, never rotates) and first catches up with what the others wrote,
  so the chain stays one chain.
* In ``fsync`` mode records that arrive while one fsync runs are written and fsynced together
  by the next (group commit); each `append` gets the ticket of the write that will carry its
  record.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from itertools import islice
from pathlib import Path
from typing import Any, Literal

from stockade.engine.observe._audit_json import dumps
from stockade.engine.observe._audit_seal import (
    ROTATED,
    SEAL_SIZE,
    Head,
    check_seal,
    rotated_files,
)
from stockade.engine.observe._audit_tail import AuditError, read_tail, torn_record

log = logging.getLogger("stockade.audit")

Durability = Literal["batch", "fsync"]
MAX_WAITING = 100_000  # records kept in memory while the log cannot be written
_SHA256 = hashlib.sha256()  # never updated: copied for each record


class Chain:
    """One audit log file and its chain: records wait in ``pending`` (a deque: appends and pops
    are atomic, so no lock on the batch mode's hot path) and ``lock`` makes one writer at a time
    in this process own the chain and the file (the seal's lock, one across processes)."""

    def __init__(
        self, path: Path, *, durability: Durability, rotate_bytes: int, seal: Path
    ) -> None:
        self.path = path
        self.seal = seal
        self.durability = durability
        self.rotate_bytes = rotate_bytes
        self.lock = threading.Lock()
        # records, or (fsync mode) their JSON bodies already made by the thread that gave them
        self.pending: deque[Mapping[str, Any] | bytes] = deque()
        self.closed = False
        self.failure: str | None = None  # why the log cannot be written now
        self._failed_at = 0.0
        self._dropped = 0  # records refused while failing, past MAX_WAITING
        self._seal_failing = False
        self._tickets = threading.Lock()  # fsync mode: a record and its ticket go together
        self.ticket: Future[None] = Future()
        # fsync mode: writes made without their fsync (ticket, last seq, last hash), and
        # whether an event loop has a write of the waiting records scheduled
        self._unsynced: list[tuple[Future[None], int, bytes]] = []
        self.loop_will_write = False
        self._seq, self._prev, self._size = 0, "", 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.seal.parent.mkdir(parents=True, exist_ok=True)
            self._seal_fd = os.open(self.seal, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise AuditError(
                f"cannot open the audit log {self.path} (or its seal {seal}): {exc.strerror}; "
                "check the folder exists and is writable, or give another path"
            ) from exc
        try:
            with self._file_lock():
                tail = read_tail([*rotated_files(self.path), self.path])
                # a log that does not reach its seal is evidence: never chain on over it
                check_seal(self.path, seal, Head(tail.seq, tail.hash), tail.torn)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                self._size = os.fstat(self._fd).st_size
                self._seq, self._prev = tail.seq, tail.hash
                self._seal_head(tail.seq, tail.hash.encode())  # a log from before seals: one
                if tail.torn is not None:
                    self._cut_torn(tail.torn)
        except OSError as exc:
            os.close(self._seal_fd)
            raise AuditError(
                f"cannot open the audit log {self.path}: {exc.strerror}; check the folder "
                "exists and is writable, or give another path"
            ) from exc
        except BaseException:
            os.close(self._seal_fd)
            raise

    def head(self) -> Head:
        """Where the chain stands: its last written record's number and hash."""
        with self.lock:
            return Head(self._seq, self._prev)

    # -- taking records ----------------------------------------------------------------------

    def append(self, entry: Mapping[str, Any]) -> Future[None] | None:
        """Keep ``entry`` until it is written; in fsync mode, the ticket of the write that will
        carry it. Refused when closed, or past `MAX_WAITING` while the log cannot be written."""
        if self.closed:
            raise AuditError(f"the audit log {self.path} is closed; open a new AuditLog")
        if self.failure is not None and len(self.pending) >= MAX_WAITING:
            self._dropped += 1
            raise AuditError(self._failing_message())
        if self.durability == "batch":
            self.pending.append(entry)
            return None
        body = dumps(entry)[1:-1]  # here, not in the writer: it would hold the GIL longer
        with self._tickets:
            self.pending.append(body)
            return self.ticket

    def admit(self) -> None:
        """Raise AuditError while the log cannot be written (a call must not run unrecorded)."""
        if self.failure is not None:
            raise AuditError(self._failing_message())

    def _failing_message(self) -> str:
        return (
            f"the audit log {self.path} cannot be written ({self.failure}), so no call is "
            "admitted until it can: free space or fix the file; the records waiting are kept"
        )

    # -- writing -----------------------------------------------------------------------------

    def write_waiting(self, *, sync: bool = True) -> None:
        """Write what is waiting now, unless closed (takes the lock). Never raises for the
        file's fault: a failure is the chain's state (``failure``) until a write succeeds.
        In fsync mode, ``sync=False`` leaves the fsync (and the tickets) to `sync_written`:
        an event loop writes, and the writer's thread, whose system calls would each wait for
        the busy loop to let go of the GIL, only fsyncs."""
        with self.lock:
            if self.pending and not self.closed:
                self._write_pending(sync=sync)

    def sync_written(self) -> None:
        """Fsync what was written with ``sync=False``, then seal it and tell its tickets."""
        with self.lock:  # close takes them under the same lock: each write is settled once
            with self._tickets:
                written, self._unsynced = self._unsynced, []
            if not written:
                return
            fd = os.dup(self._fd)  # a copy, which stays open if the file rotates meanwhile
        try:
            self._settle(written, fd)
        finally:
            os.close(fd)

    def _settle(self, written: list[tuple[Future[None], int, bytes]], fd: int) -> None:
        """Fsync ``fd``, which holds ``written``; then seal the last and tell every ticket."""
        try:
            os.fsync(fd)
        except OSError as exc:
            log.error("cannot fsync the audit log %s: %s", self.path, exc.strerror)
            for ticket, _, _ in written:
                ticket.set_exception(AuditError(f"cannot fsync the audit log: {exc.strerror}"))
            return
        _, seq, digest = written[-1]
        self._seal_head(seq, digest)
        for ticket, _, _ in written:
            ticket.set_result(None)

    def close(self) -> None:
        """Write what is waiting and close the file. Safe to call twice, and from a finaliser.
        Records that still cannot be written are reported (they are lost with the process)."""
        with self.lock:
            if self.closed:
                return
            if self.pending:
                self._write_pending()
            self.closed = True
            if self.pending:  # appended by another thread while the first write ran
                self._write_pending()
            with self._tickets:
                written, self._unsynced = self._unsynced, []
            if written:
                self._settle(written, self._fd)
            if self.pending:
                log.error(
                    "%d audit records could not be written to %s before it was closed: %s",
                    len(self.pending), self.path, self.failure,
                )  # fmt: skip
            self.ticket.set_exception(AuditError(f"the audit log {self.path} was closed"))
            os.close(self._fd)
            os.close(self._seal_fd)

    def _write_pending(self, *, sync: bool = True) -> None:
        """Number, chain, seal and write the waiting records as one write (lock held); on
        success they leave ``pending``, on failure they stay and the file is cut back."""
        if self.durability == "fsync":
            with self._tickets:
                count, ticket = len(self.pending), self.ticket
                self.ticket = Future()
        else:
            count, ticket = len(self.pending), None
        if self.failure is not None:
            count += 1
            self.pending.appendleft(self._unwritable_record())
        bodies = [
            entry if isinstance(entry, bytes) else dumps(entry)[1:-1]
            for entry in islice(self.pending, count)
        ]
        try:
            with self._file_lock():
                self._catch_up()
                out, seq, prev = _chained(bodies, self._seq, self._prev.encode())
                try:
                    _write_all(self._fd, out)
                    if self.durability == "fsync" and sync:
                        os.fsync(self._fd)
                except OSError:
                    os.ftruncate(self._fd, self._size)  # never half a record before the next
                    raise
                self._seq, self._prev = seq, prev.decode()
                self._size += len(out)
                later = ticket is not None and not sync
                if not later:
                    self._seal_head(seq, prev)
                if self._size >= self.rotate_bytes:
                    if later:  # what the file holds is fsynced before it is let go
                        os.fsync(self._fd)
                    self._rotate()
        except (OSError, AuditError) as exc:
            self._failed(exc)
            if ticket is not None:
                ticket.set_exception(AuditError(self._failing_message()))
            return
        for _ in range(count):
            self.pending.popleft()
        if self.failure is not None:
            log.warning("the audit log %s is written again", self.path)
            self.failure, self._dropped = None, 0
        if ticket is not None and not sync:
            with self._tickets:
                self._unsynced.append((ticket, seq, prev))
        elif ticket is not None:
            ticket.set_result(None)

    def _failed(self, exc: OSError | AuditError) -> None:
        if self.failure is not None:
            self.pending.popleft()  # the audit_unwritable record: made again on the next try
        else:
            self._failed_at = time.time()
            log.error(
                "cannot write the audit log %s: %s; calls are refused until it can be written",
                self.path, _why(exc),
            )  # fmt: skip
        self.failure = _why(exc)

    def _unwritable_record(self) -> dict[str, Any]:
        return {
            "kind": "audit_unwritable",
            "time": time.time(),
            "since": self._failed_at,
            "error": self.failure,
            "dropped": self._dropped,
        }

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """The lock every process writing this log takes around each write (on the seal: the
        log's own file is renamed away when it rotates)."""
        fcntl.flock(self._seal_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._seal_fd, fcntl.LOCK_UN)

    def _catch_up(self) -> None:
        """Under the file lock: follow what other processes did since this one last wrote (a
        rotation, records, a torn record of one that died mid-write)."""
        try:
            moved = not os.path.samestat(os.fstat(self._fd), os.stat(self.path))
        except FileNotFoundError:
            moved = True
        if moved:
            os.close(self._fd)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._size = -1
        size = os.fstat(self._fd).st_size
        if size == self._size:
            return
        tail = read_tail([*rotated_files(self.path), self.path])
        self._seq, self._prev, self._size = tail.seq, tail.hash, size
        if tail.torn is not None:  # one that died mid-write
            self._cut_torn(tail.torn)

    def _seal_head(self, seq: int, digest: bytes) -> None:
        """Rewrite the seal in place with the chain's head (after the log: a crash between the
        two leaves the seal behind, which is no alarm). A seal that cannot be written is said
        once, and does not fail the records the log did keep."""
        body = b'{"stockade_audit_seal":1,"seq":%d,"hash":"%s"}' % (seq, digest)
        try:
            os.pwrite(self._seal_fd, body.ljust(SEAL_SIZE - 1) + b"\n", 0)
        except OSError as exc:
            if not self._seal_failing:
                log.error("cannot write the audit log's seal %s: %s", self.seal, exc.strerror)
            self._seal_failing = True
        else:
            self._seal_failing = False

    def _rotate(self) -> None:
        numbers = [
            int(m.group(1)) for p in rotated_files(self.path) if (m := ROTATED.search(p.name))
        ]
        target = self.path.with_name(f"{self.path.name}.{max(numbers, default=0) + 1:06d}")
        try:
            os.rename(self.path, target)
        except OSError as exc:  # the records were written: go on in this file, say so once
            log.error("cannot rotate the audit log %s: %s", self.path, exc.strerror)
            return
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = 0

    def _cut_torn(self, torn: bytes) -> None:
        """Under the file lock: cut off a torn tail (a crash mid-write, or the zeros a lost
        power left) and keep it, as text, in a ``recovered`` record, so the chain goes on and
        nothing is hidden."""
        os.ftruncate(self._fd, self._size - len(torn))
        self._size -= len(torn)
        body = dumps({"kind": "recovered", "time": time.time(), **torn_record(torn)})
        out, seq, prev = _chained([body[1:-1]], self._seq, self._prev.encode())
        _write_all(self._fd, out)
        self._seq, self._prev, self._size = seq, prev.decode(), self._size + len(out)
        self._seal_head(seq, prev)


def _chained(bodies: list[bytes], seq: int, prev: bytes) -> tuple[bytes, int, bytes]:
    """The lines of records whose JSON bodies (without braces) are ``bodies``, after record
    ``seq`` of hash ``prev``: each ``{"seq":..,"prev":..,<body>,"hash":..}``, the hash being
    the sha256 of the line without it. Returns the lines, the last seq and the last hash. The
    loop is written out, because it runs for every record."""
    lines: list[bytes] = []
    add, fresh = lines.append, _SHA256.copy
    for body in bodies:
        seq += 1
        line = b'{"seq":%d,"prev":"%s",%s' % (seq, prev, body)
        digest = fresh()  # a copy of a ready sha256 is cheaper than a new one (OpenSSL 3)
        digest.update(line)
        digest.update(b"}")
        prev = digest.hexdigest().encode()
        add(b'%s,"hash":"%s"}\n' % (line, prev))
    return b"".join(lines), seq, prev


def _why(exc: OSError | AuditError) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
