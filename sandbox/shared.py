"""What a file system and every guarded view of it share: one write quota for all of them, and
the per-path locks (a view's write waits for the original's)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from stockade.sandbox.errors import QuotaError

_MAX_IDLE_LOCKS = 10_000  # past this many locks, the idle ones are forgotten


class Shared:
    """The bytes written so far and the per-path locks of one `VirtualFS` and its views."""

    __slots__ = ("_count_lock", "_path_locks", "_path_locks_guard", "written")

    def __init__(self) -> None:
        self.written = 0
        self._count_lock = threading.Lock()
        self._path_locks: dict[str, threading.Lock] = {}
        self._path_locks_guard = threading.Lock()

    def charge(self, size: int, logical: str, max_file_bytes: int, max_write_bytes: int) -> None:
        """Count ``size`` bytes about to be written to ``logical``; `QuotaError` past a limit
        (and then nothing is counted)."""
        if size > max_file_bytes:
            raise QuotaError(
                f"writing {size} bytes to {logical} is over the {max_file_bytes}-byte limit "
                "for one file",
                logical,
            )
        with self._count_lock:
            if self.written + size > max_write_bytes:
                raise QuotaError(
                    f"writing {size} bytes to {logical} would pass the {max_write_bytes}-byte "
                    f"limit on all writes ({self.written} written so far)",
                    logical,
                )
            self.written += size

    def refund(self, size: int) -> None:
        """Give back what `charge` counted for a write that did not happen."""
        with self._count_lock:
            self.written -= size

    @contextmanager
    def locked(self, logical: str) -> Iterator[None]:
        """Hold the lock of one logical path."""
        with self._path_locks_guard:
            lock = self._path_locks.get(logical)
            if lock is None:
                if len(self._path_locks) > _MAX_IDLE_LOCKS:  # keep memory bounded
                    for key in [k for k, v in self._path_locks.items() if not v.locked()]:
                        del self._path_locks[key]
                lock = self._path_locks[logical] = threading.Lock()
        with lock:
            yield
