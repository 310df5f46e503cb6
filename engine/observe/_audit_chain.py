"""The chain of an audit log's file: numbering, chaining, sealing and writing records, rotating
the file, keeping its seal (the chain's head, apart from the log: see ``audit_log``), and finding
where the chain stands when a log is opened again.

`Chain` owns the file descriptors and the state of the chain, and nothing else: the `AuditLog`
in front of it can be collected, and its finaliser still writes what is waiting (see
``audit_log``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from stockade.errors import StockadeError

log = logging.getLogger("stockade.audit")

Durability = Literal["batch", "fsync"]
GENESIS = "0" * 64
HASH_TAIL = re.compile(rb',"hash":"([0-9a-f]{64})"\}$')
_ROTATED = re.compile(r"\.(\d{6})$")
_SHA256 = hashlib.sha256()  # never updated: copied for each record
SEAL_SUFFIX = ".seal"
_SEAL_SIZE = 160  # bytes with the newline: a seal is padded to this, so it is rewritten whole
_SEAL = re.compile(rb'^\{"stockade_audit_seal":1,"seq":(\d+),"hash":"([0-9a-f]{64})"\} *\n?$')


class AuditError(StockadeError):
    """The audit log cannot be opened or written; the message names the file and what to do."""


@dataclass(frozen=True, slots=True)
class Head:
    """Where a chain stands: its last record's number and hash."""

    seq: int
    hash: str


def seal_path(log: Path) -> Path:
    """Where the seal of ``log`` is kept unless told otherwise: beside it, ``<name>.seal``."""
    return log.with_name(log.name + SEAL_SUFFIX)


def read_seal(path: Path) -> Head | None:
    """The head a seal names, or None when there is no seal. Raises AuditError for a seal that
    cannot be read or is not one."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AuditError(f"cannot read the audit log's seal {path}: {exc.strerror}") from exc
    found = _SEAL.match(data)
    if found is None:
        raise AuditError(
            f"the audit log's seal {path} is damaged: it does not hold a Stockade seal, so "
            "something other than Stockade changed it"
        )
    return Head(int(found.group(1)), found.group(2).decode())


class Chain:
    """One audit log file and its chain: records wait in ``pending`` (a deque: appends and pops
    are atomic, so no lock on the hot path) and the lock makes one writer at a time own the
    chain and the file."""

    def __init__(
        self, path: Path, *, durability: Durability, rotate_bytes: int, seal: Path
    ) -> None:
        self.path = path
        self.seal = seal
        self.durability = durability
        self.rotate_bytes = rotate_bytes
        self.lock = threading.Lock()
        self.pending: deque[Mapping[str, Any]] = deque()
        self.closed = False
        self.failing = False
        self._seal_failing = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._seq, self._prev, partial = _tail(self.path)
            # a log that does not reach its seal is evidence: never chain on over it
            check_seal(self.path, seal, Head(self._seq, self._prev), partial)
            self.seal.parent.mkdir(parents=True, exist_ok=True)
            self._seal_fd = os.open(self.seal, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise AuditError(
                f"cannot open the audit log {self.path} (or its seal {seal}): {exc.strerror}; "
                "check the folder exists and is writable, or give another path"
            ) from exc
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            os.close(self._seal_fd)
            raise AuditError(
                f"cannot open the audit log {self.path}: {exc.strerror}; check the folder "
                "exists and is writable, or give another path"
            ) from exc
        self._size = os.fstat(self._fd).st_size
        self._seal_head(self._seq, self._prev.encode())  # a log from before seals gets one
        if partial is not None:
            self._recover(partial)

    def head(self) -> Head:
        """Where the chain stands: its last written record's number and hash."""
        with self.lock:
            return Head(self._seq, self._prev)

    def write_waiting(self) -> None:
        """Write what is waiting now, unless closed (takes the lock)."""
        with self.lock:
            if self.pending and not self.closed:
                self._write_pending()

    def close(self) -> None:
        """Write what is waiting and close the file. Safe to call twice, and from a finaliser."""
        with self.lock:
            if self.closed:
                return
            if self.pending:
                self._write_pending()
            self.closed = True
            if self.pending:  # appended by another thread while the first write ran
                self._write_pending()
            os.close(self._fd)
            os.close(self._seal_fd)

    def _write_pending(self) -> None:
        """Number, chain, seal and write the waiting records as one write (lock held). Each
        line is ``{"seq":..,"prev":..,<entry>,"hash":..}``, the hash being the sha256 of the
        line without it; the head is formatted rather than merged into a new dict, and the
        loop is written out, because it runs for every record."""
        pending = self.pending
        seq, prev = self._seq, self._prev.encode()
        lines: list[bytes] = []
        add, dumps, fresh = lines.append, _dumps, _SHA256.copy
        # as many as are waiting now; what others append meanwhile waits for the next write
        for _ in range(len(pending)):
            seq += 1
            body = b'{"seq":%d,"prev":"%s",%s' % (
                seq,
                prev,
                dumps(pending.popleft())[1:-1],
            )
            digest = fresh()  # a copy of a ready sha256 is cheaper than a new one (OpenSSL 3)
            digest.update(body)
            digest.update(b"}")
            prev = digest.hexdigest().encode()
            add(b'%s,"hash":"%s"}\n' % (body, prev))
        out = b"".join(lines)
        try:
            _write_all(self._fd, out)
            if self.durability == "fsync":
                os.fsync(self._fd)
        except OSError as exc:
            raise AuditError(
                f"cannot write the audit log {self.path}: {exc.strerror}; the calls are not "
                "recorded until it is writable again"
            ) from exc
        self._seq, self._prev = seq, prev.decode()
        self._seal_head(seq, prev)
        self._size += len(out)
        if self._size >= self.rotate_bytes:
            try:
                self._rotate()
            except OSError as exc:
                raise AuditError(
                    f"cannot rotate the audit log {self.path}: {exc.strerror}; records go on "
                    "into it until it can be"
                ) from exc

    def _seal_head(self, seq: int, digest: bytes) -> None:
        """Rewrite the seal in place with the chain's head (after the log: a crash between the
        two leaves the seal behind, which is no alarm). A seal that cannot be written is said
        once, and does not fail the records the log did keep."""
        body = b'{"stockade_audit_seal":1,"seq":%d,"hash":"%s"}' % (seq, digest)
        try:
            os.pwrite(self._seal_fd, body.ljust(_SEAL_SIZE - 1) + b"\n", 0)
        except OSError as exc:
            if not self._seal_failing:
                log.error("cannot write the audit log's seal %s: %s", self.seal, exc.strerror)
            self._seal_failing = True
        else:
            self._seal_failing = False

    def _rotate(self) -> None:
        os.close(self._fd)
        numbers = [
            int(m.group(1)) for p in rotated_files(self.path) if (m := _ROTATED.search(p.name))
        ]
        target = self.path.with_name(f"{self.path.name}.{max(numbers, default=0) + 1:06d}")
        os.rename(self.path, target)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = 0

    def _recover(self, partial: bytes) -> None:
        """A half-written last line (a crash mid-write) is cut off and kept, as text, in a
        ``recovered`` record, so the chain goes on and nothing is hidden."""
        os.ftruncate(self._fd, self._size - len(partial))
        self._size -= len(partial)
        self.pending.append(
            {
                "kind": "recovered",
                "time": time.time(),
                "partial_line": partial.decode("utf-8", "replace"),
            }
        )
        self._write_pending()


def missing(have: int, sealed: int) -> str:
    """``records 5..9 are missing`` (or ``record 5 is missing``)."""
    if sealed == have + 1:
        return f"record {sealed} is missing"
    return f"records {have + 1}..{sealed} are missing"


def check_seal(path: Path, seal: Path, head: Head, partial: bytes | None) -> None:
    """Raise AuditError when the log at ``path``, whose chain ends at ``head``, does not reach
    what its seal says was written (truncated, emptied, deleted) or is not what was sealed
    (rewritten). A seal behind the log is no alarm when the sealed record is still there (a
    crash between the two writes); nor is the sealed last record half on disk (a machine
    crash, where nothing was fsynced)."""
    sealed = read_seal(seal)
    if sealed is None or sealed == head:
        return
    what = "deleted or emptied" if head.seq == 0 else "truncated"
    keep = (
        "It is left as it is: check it with `stockade audit verify`, move the log and its seal "
        "aside to keep them, and start again"
    )
    if sealed.seq > head.seq:
        if partial is not None and sealed.seq == head.seq + 1:
            return
        raise AuditError(
            f"the audit log {path} ends at record {head.seq}, but its seal {seal} says "
            f"{sealed.seq} were written: {missing(head.seq, sealed.seq)} (the log was {what}). "
            + keep
        )
    if sealed.seq == head.seq or hash_at(path, sealed.seq) != sealed.hash:
        raise AuditError(
            f"record {sealed.seq} of the audit log {path} is not the record its seal {seal} "
            f"names: the log was rewritten. {keep}"
        )


def hash_at(path: Path, seq: int) -> str | None:
    """The hash of record ``seq`` of the log (its rotated files too), or None if it has none."""
    prefix = b'{"seq":%d,' % seq
    for current in [*rotated_files(path), path]:
        if not current.exists():
            continue
        with current.open("rb") as handle:
            for line in handle:
                if line.startswith(prefix):
                    found = HASH_TAIL.search(line.rstrip(b"\n"))
                    return found.group(1).decode() if found else None
    return None


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _tail(path: Path) -> tuple[int, str, bytes | None]:
    """Where the chain stands at the end of ``path`` and its rotated files: the last seq, the
    last hash, and a half-written last line of ``path`` (a crash mid-write), if any. Raises
    AuditError for a file that is not a Stockade audit log."""
    partial: bytes | None = None
    for current in reversed([*rotated_files(path), path]):
        if not current.exists():
            continue
        data = _read_end(current)
        if current == path and data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            partial, data = data[cut:], data[:cut]
            if not partial.startswith(b'{"seq":'):
                raise AuditError(
                    f"{current} does not end in a Stockade audit record; it was not written "
                    "by Stockade or was damaged: run verify_audit on it, and use another path"
                )
        lines = data.splitlines()
        if not lines:
            continue  # nothing complete here (new, or only a half line): look further back
        try:
            record = orjson.loads(lines[-1])
            return int(record["seq"]), str(record["hash"]), partial
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise AuditError(
                f"{current} does not end in a Stockade audit record; it was not written by "
                "Stockade or was damaged: run verify_audit on it, and use another path"
            ) from None
    return 0, GENESIS, partial


def _read_end(path: Path, size: int = 1 << 20) -> bytes:
    with path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        end = handle.tell()
        handle.seek(max(0, end - size))
        return handle.read()


def _dumps(entry: Mapping[str, Any]) -> bytes:
    """A record as JSON, whatever it holds: what orjson cannot write (an integer past 64 bits,
    nesting past 254 levels) goes through the standard library, and what nothing can write is
    kept as its text, so one odd record never costs the ones around it."""
    try:
        return orjson.dumps(entry, default=str)
    except (TypeError, orjson.JSONEncodeError):
        pass
    try:
        return json.dumps(entry, default=str, ensure_ascii=False, separators=(",", ":")).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        kept = {"kind": str(entry.get("kind")), "time": entry.get("time"), "unwritable": repr(exc)}
        kept["text"] = repr(dict(entry))[:4000]
        return orjson.dumps(kept, default=str)


def rotated_files(path: Path) -> list[Path]:
    """The rotated files of ``path``, oldest first."""
    if not path.parent.exists():
        return []
    found = [p for p in path.parent.glob(f"{path.name}.*") if _ROTATED.search(p.name)]
    return sorted(found, key=lambda p: p.name)
