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
"""

from __future__ import annotations

import atexit
import fnmatch
import hashlib
import logging
import os
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

_log = logging.getLogger("stockade.audit")

Durability = Literal["batch", "fsync"]
GENESIS = "0" * 64
DEFAULT_PATH = Path(".stockade") / "audit.jsonl"  # in the working directory
_CHAIN_FIELDS = frozenset({"seq", "prev", "hash"})
_HASH_TAIL = re.compile(rb',"hash":"([0-9a-f]{64})"\}$')
_ROTATED = re.compile(r"\.(\d{6})$")
_SHA256 = hashlib.sha256()  # never updated: copied for each record


class AuditError(Exception):
    """The audit log cannot be opened or written; the message names the file and what to do."""


class AuditLog:
    """An append-only, hash-chained JSONL audit log (see the module docstring).

    Use one `AuditLog` per file and process. ``record`` is safe from any thread; `close`
    (or leaving a ``with`` block) writes what is waiting. ``clock`` gives record times (seconds
    since the epoch).
    """

    def __init__(
        self,
        path: str | Path = DEFAULT_PATH,
        *,
        durability: Durability = "batch",
        max_batch: int = 512,
        max_delay_s: float = 0.2,
        rotate_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        if durability not in ("batch", "fsync"):
            raise ValueError(f"durability must be 'batch' or 'fsync', not {durability!r}")
        if max_batch < 1 or not max_delay_s > 0 or rotate_bytes < 1024:
            raise ValueError(
                "max_batch must be at least 1, max_delay_s positive, rotate_bytes >= 1024"
            )
        self.path = Path(path)
        self.durability = durability
        self.max_batch = 1 if durability == "fsync" else max_batch
        self.max_delay_s = max_delay_s
        self.rotate_bytes = rotate_bytes
        # records wait in a deque (appends and pops are atomic: no lock on the hot path); the
        # lock makes one writer at a time own the chain and the file
        self._lock = threading.Lock()
        self._pending: deque[dict[str, Any]] = deque()
        self._closed = False
        self._failing = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._seq, self._prev, partial = _tail(self.path)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            raise AuditError(
                f"cannot open the audit log {self.path}: {exc.strerror}; check the folder "
                "exists and is writable, or give another path"
            ) from None
        self._size = os.fstat(self._fd).st_size
        if partial is not None:
            self._recover(partial)
        self._wake = threading.Event()
        self._flusher: threading.Thread | None = None
        if durability == "batch":
            ref = weakref.ref(self)
            self._flusher = threading.Thread(
                target=_flush_loop, args=(ref, self._wake, max_delay_s), daemon=True,
                name=f"stockade-audit:{self.path.name}",
            )  # fmt: skip
            self._flusher.start()
        atexit.register(self.close)

    # -- writing -----------------------------------------------------------------------------

    def record(self, kind: str, fields: Mapping[str, Any]) -> None:
        """Append a record of ``kind`` (``intent``, ``outcome`` ...) with ``fields``. The
        chain's own fields cannot be given."""
        taken = _CHAIN_FIELDS.intersection(fields)
        if taken:
            raise ValueError(
                f"field(s) {', '.join(sorted(taken))} belong to the audit chain; rename them"
            )
        self.append({"kind": kind, "time": time.time(), **fields})

    def append(self, entry: dict[str, Any]) -> None:
        """Append a record already holding its ``kind`` and ``time`` (the engine's fast path:
        no copy is made, so the dict must not change afterwards)."""
        if self._closed:
            raise AuditError(f"the audit log {self.path} is closed; open a new AuditLog")
        pending = self._pending
        pending.append(entry)
        if len(pending) >= self.max_batch:
            with self._lock:
                if not self._closed:
                    self._write_pending()

    def flush(self) -> None:
        """Write every waiting record now (and fsync them, in ``fsync`` mode)."""
        with self._lock:
            if self._pending and not self._closed:
                self._write_pending()

    def close(self) -> None:
        """Write what is waiting and close the file. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            if self._pending:
                self._write_pending()
            self._closed = True
            if self._pending:  # appended by another thread while the first write ran
                self._write_pending()
            os.close(self._fd)
        self._wake.set()
        atexit.unregister(self.close)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_pending(self) -> None:
        """Number, chain, seal and write the waiting records as one write (lock held). Each
        line is ``{"seq":..,"prev":..,<entry>,"hash":..}``, the hash being the sha256 of the
        line without it; the head is formatted rather than merged into a new dict, and the
        loop is written out, because it runs for every record."""
        pending = self._pending
        seq, prev = self._seq, self._prev.encode()
        lines: list[bytes] = []
        add, dumps, fresh = lines.append, orjson.dumps, _SHA256.copy
        # as many as are waiting now; what others append meanwhile waits for the next write
        for _ in range(len(pending)):
            seq += 1
            body = b'{"seq":%d,"prev":"%s",%s' % (
                seq,
                prev,
                dumps(pending.popleft(), default=str)[1:-1],
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
            ) from None
        self._seq, self._prev = seq, prev.decode()
        self._size += len(out)
        if self._size >= self.rotate_bytes:
            self._rotate()

    def _rotate(self) -> None:
        os.close(self._fd)
        numbers = [int(m.group(1)) for p in _rotated(self.path) if (m := _ROTATED.search(p.name))]
        target = self.path.with_name(f"{self.path.name}.{max(numbers, default=0) + 1:06d}")
        os.rename(self.path, target)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = 0

    def _recover(self, partial: bytes) -> None:
        """A half-written last line (a crash mid-write) is cut off and kept, as text, in a
        ``recovered`` record, so the chain goes on and nothing is hidden."""
        os.ftruncate(self._fd, self._size - len(partial))
        self._size -= len(partial)
        self._pending.append(
            {
                "kind": "recovered",
                "time": time.time(),
                "partial_line": partial.decode("utf-8", "replace"),
            }
        )
        self._write_pending()


def _flush_loop(ref: weakref.ref[AuditLog], wake: threading.Event, delay: float) -> None:
    """Write what is waiting every ``delay`` seconds (so no record waits longer); ends when the
    log is closed or collected."""
    while True:
        wake.wait(delay)
        log = ref()
        if log is None or log._closed:
            return
        with log._lock:
            if log._pending and not log._closed:
                try:
                    log._write_pending()
                except AuditError as exc:
                    if not log._failing:  # said once, not every 0.1 s
                        _log.error("%s", exc)
                    log._failing = True
                else:
                    log._failing = False
        del log


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _tail(path: Path) -> tuple[int, str, bytes | None]:
    """Where the chain stands at the end of ``path`` and its rotated files: the last seq, the
    last hash, and a half-written last line of ``path`` (a crash mid-write), if any. Raises
    AuditError for a file that is not a Stockade audit log."""
    partial: bytes | None = None
    for current in reversed([*_rotated(path), path]):
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


def _rotated(path: Path) -> list[Path]:
    """The rotated files of ``path``, oldest first."""
    if not path.parent.exists():
        return []
    found = [p for p in path.parent.glob(f"{path.name}.*") if _ROTATED.search(p.name)]
    return sorted(found, key=lambda p: p.name)


# -- reading and verifying ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What `verify_audit` found. ``ok`` when every record is intact and chained; otherwise
    ``problem`` says what and ``bad_record`` which (its line, counted across files from 1)
    and ``bad_file``. A half-written last line is reported in ``partial_tail`` and tolerated."""

    ok: bool
    records: int
    files: tuple[str, ...]
    problem: str | None = None
    bad_record: int | None = None
    bad_file: str | None = None
    partial_tail: bool = False

    def __str__(self) -> str:
        if self.ok:
            tail = "; the last line was half-written (a crash) and is ignored" * self.partial_tail
            return f"audit log intact: {self.records} records in {len(self.files)} file(s){tail}"
        return f"audit log NOT intact: {self.problem}"


def verify_audit(path: str | Path) -> AuditReport:
    """Check every record's own hash and the chain between them, across rotated files."""
    path = Path(path)
    files = [*_rotated(path), path] if path.exists() else _rotated(path)
    names = tuple(str(f) for f in files)
    if not files:
        return AuditReport(False, 0, (), f"no audit log at {path}", None, str(path))
    prev = GENESIS
    count = 0
    for index, current in enumerate(files):
        data = current.read_bytes()
        lines = data.split(b"\n")
        last_file = index == len(files) - 1
        for number, line in enumerate(lines, start=1):
            if number == len(lines):
                if line and last_file:  # no newline: a half-written last record
                    return AuditReport(True, count, names, partial_tail=True)
                if line:
                    return _bad(names, count + 1, current, "a half-written record inside")
                break
            count += 1
            problem = _check(line, prev, count)
            if problem is not None:
                return _bad(names, count, current, problem)
            prev = _HASH_TAIL.search(line).group(1).decode()  # type: ignore[union-attr]
    return AuditReport(True, count, names)


def _check(line: bytes, prev: str, seq: int) -> str | None:
    tail = _HASH_TAIL.search(line)
    if tail is None:
        return "it is not a Stockade audit record (no hash at its end)"
    body = line[: tail.start()] + b"}"
    if hashlib.sha256(body).hexdigest() != tail.group(1).decode():
        return "its content does not match its hash: it was edited"
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return "it is not valid JSON"
    if record.get("prev") != prev:
        return (
            "it does not follow the record before it (its 'prev' is not that record's hash): "
            "records were deleted, inserted or reordered before it"
        )
    if record.get("seq") != seq:
        return f"its number is {record.get('seq')!r} where {seq} was due: records are missing"
    return None


def _bad(files: tuple[str, ...], record: int, current: Path, problem: str) -> AuditReport:
    return AuditReport(
        False, record - 1, files, f"record {record} (in {current}): {problem}", record, str(current)
    )


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """What `read_audit` keeps: tool and path are shell-style globs, the others exact."""

    tool: str | None = None
    kind: str | None = None
    effect: str | None = None
    status: str | None = None
    path: str | None = None
    call_id: str | None = None
    since: float | None = None
    until: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def keeps(self, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` passes every condition given."""
        if self.tool is not None and not fnmatch.fnmatchcase(str(record.get("tool")), self.tool):
            return False
        for key in ("kind", "effect", "status", "call_id"):
            wanted = getattr(self, key)
            if wanted is not None and record.get(key) != wanted:
                return False
        moment = record.get("time")
        if self.since is not None and (not isinstance(moment, float) or moment < self.since):
            return False
        if self.until is not None and (not isinstance(moment, float) or moment > self.until):
            return False
        if self.path is not None:
            paths = [p[0] for p in record.get("paths") or ()] + [record.get("path") or ""]
            if not any(fnmatch.fnmatchcase(str(p), self.path) for p in paths if p):
                return False
        return all(record.get(k) == v for k, v in self.extra.items())


def read_audit(
    path: str | Path,
    *,
    tool: str | None = None,
    kind: str | None = None,
    effect: str | None = None,
    status: str | None = None,
    path_glob: str | None = None,
    call_id: str | None = None,
    since: float | None = None,
    until: float | None = None,
) -> Iterator[dict[str, Any]]:
    """The records of the log (rotated files first), oldest first, that pass the filters.
    A half-written last line is skipped. Does not verify: use `verify_audit` for that."""
    wanted = AuditFilter(tool, kind, effect, status, path_glob, call_id, since, until)
    path = Path(path)
    if not path.exists() and not _rotated(path):
        raise AuditError(f"no audit log at {path}; check the path (.stockade/audit.jsonl?)")
    for current in [*_rotated(path), path]:
        if not current.exists():
            continue
        with current.open("rb") as handle:
            for line in handle:
                if not line.endswith(b"\n"):
                    break  # a half-written last line
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(record, dict) and wanted.keeps(record):
                    yield record
