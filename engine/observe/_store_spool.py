"""An audit store's spool: the local file each writer (one process) keeps its chain in before
it is shipped, named after the writer, and read back record by record for shipping.

    me = new_writer(None)                  # Writer("web1-4242-20260512T101530123456", ...)
    path = spool_path(folder, me.writer)   # folder/audit-web1-4242-20260512T101530123456.jsonl
    lock = hold(path)                      # held while the process lives: nobody adopts it
    reader = SpoolReader(path, after=0)
    lines = reader.take(upto=head_seq, most=1000)

A spool's name says whose it is (``audit-<host>-<pid>-<start>.jsonl``: the pid and the start
have no ``-``, so the host is what is left). Its writer holds an exclusive lock on
``<spool>.lock`` for as long as it runs; the kernel lets go of it when the process ends,
however it ends, so a lock that can be taken is a writer that is gone (a pid alone could be
another process's by now).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from stockade.engine.observe._audit_seal import rotated_files, seal_path
from stockade.engine.observe._store_sql import Writer

PREFIX, SUFFIX, LOCK, CLOSED = "audit-", ".jsonl", ".lock", ".closed"
_NAME = re.compile(r"^audit-(?P<host>.+)-(?P<pid>\d+)-(?P<stamp>\d{8}T\d{12})\.jsonl$")
_SEQ = re.compile(rb'^\{"seq":(\d+),')
_CHUNK = 1 << 20


def host_name(host: str | None = None) -> str:
    """``host`` (this machine's name when None) as it may stand in a file name."""
    name = host if host is not None else socket.gethostname()
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "host"


def new_writer(host: str | None) -> Writer:
    """This process's writer id: host, pid and start time (to the microsecond)."""
    now = time.time()
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%S%f")
    name = host_name(host)
    return Writer(f"{name}-{os.getpid()}-{stamp}", name, os.getpid(), now)


def spool_path(folder: Path, writer: str) -> Path:
    """Where ``writer`` keeps its spool in ``folder``."""
    return folder / f"{PREFIX}{writer}{SUFFIX}"


def spool_writer(path: Path) -> Writer | None:
    """The writer a spool's name names (None: not a spool's name)."""
    found = _NAME.match(path.name)
    if found is None:
        return None
    started = datetime.strptime(found["stamp"], "%Y%m%dT%H%M%S%f").replace(tzinfo=UTC)
    return Writer(path.name[len(PREFIX) : -len(SUFFIX)], found["host"], int(found["pid"]),
                  started.timestamp())  # fmt: skip


def spools(folder: Path) -> list[Path]:
    """The spools in ``folder`` (their live files), oldest writer first."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.glob(f"{PREFIX}*{SUFFIX}") if spool_writer(p) is not None]
    return sorted(found, key=lambda p: (spool_writer(p).started, p.name))  # type: ignore[union-attr]


def hold(path: Path) -> int:
    """Take ``<path>.lock`` for good (the writer's life); its descriptor."""
    fd = os.open(f"{path}{LOCK}", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def try_hold(path: Path) -> int | None:
    """Take ``<path>.lock`` if nobody holds it (its writer is gone); its descriptor, or None."""
    try:
        fd = os.open(f"{path}{LOCK}", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def release(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def remove(path: Path) -> None:
    """Delete a spool that is shipped: its files, its seal, its marks, then its lock."""
    for part in [*rotated_files(path), path, seal_path(path), Path(f"{path}{CLOSED}"),
                 Path(f"{path}{LOCK}")]:  # fmt: skip
        with contextlib.suppress(FileNotFoundError):
            part.unlink()


def seq_of(line: bytes) -> int | None:
    found = _SEQ.match(line)
    return int(found.group(1)) if found else None


class SpoolReader:
    """Reads a spool's complete records in order, across its rotations, from after record
    ``after``. Only its own thread uses it."""

    def __init__(self, path: Path, after: int) -> None:
        self.path = path
        self.after = after  # the last record taken
        self._file: Path | None = None
        self._fd: int | None = None
        self._buffer = b""
        self._final = False  # the file was rotated away: what it holds is all it will

    def take(self, upto: int, most: int) -> list[bytes]:
        """The next records (their lines without the newline), numbered up to ``upto``, at
        most ``most`` of them."""
        out: list[bytes] = []
        while len(out) < most and self.after < upto:
            if self._fd is None and not self._open(self._first()):
                break
            line = self._line()
            if line is None:
                if not self._final and self._rotated():
                    self._final = True  # read once more: the rename follows its last write
                    continue
                if self._final and self._open(self._following()):
                    continue
                break
            seq = seq_of(line)
            if seq is None or seq <= self.after:
                continue
            if seq > upto:  # written, but not yet sealed as written: next time
                self._buffer = line + b"\n" + self._buffer
                break
            out.append(line)
            self.after = seq
        return out

    def close(self) -> None:
        if self._fd is not None:
            release(self._fd)
            self._fd = None

    def _first(self) -> Path | None:
        files = [*rotated_files(self.path), self.path]
        return next((f for f in files if f.exists()), None)

    def _following(self) -> Path | None:
        """The file after the one read (found by identity: names shift as files rotate)."""
        files = [f for f in [*rotated_files(self.path), self.path] if f.exists()]
        assert self._fd is not None
        mine = os.fstat(self._fd)
        for index, current in enumerate(files):
            with contextlib.suppress(OSError):
                if os.path.samestat(mine, os.stat(current)):
                    return files[index + 1] if index + 1 < len(files) else None
        return files[0] if files else None

    def _open(self, path: Path | None) -> bool:
        if path is None:
            return False
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return False
        self.close()
        self._file, self._fd, self._buffer, self._final = path, fd, b"", False
        return True

    def _line(self) -> bytes | None:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
                return line
            assert self._fd is not None
            more = os.read(self._fd, _CHUNK)
            if not more:
                return None
            self._buffer += more

    def _rotated(self) -> bool:
        assert self._fd is not None
        try:
            return not os.path.samestat(os.fstat(self._fd), os.stat(self.path))
        except FileNotFoundError:
            return True


def lines_after(path: Path, after: int) -> Iterator[bytes]:
    """Every complete record of a spool numbered after ``after`` (a finished spool)."""
    reader = SpoolReader(path, after)
    try:
        while batch := reader.take(upto=1 << 62, most=1000):
            yield from batch
    finally:
        reader.close()
