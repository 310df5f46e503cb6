"""Who may run now: concurrency-safe calls share the engine, every other call runs alone.

A first-come-first-served reader/writer lock. Shared holders run together; an exclusive holder
runs with nobody else; a waiting exclusive call blocks later shared calls, so calls are admitted
in the order they arrived and no exclusive call starves. The uncontended path takes no await.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class Scheduler:
    """Admission of calls into the engine: shared or exclusive slots, first come first served."""

    __slots__ = ("_exclusive", "_shared", "_waiters")

    def __init__(self) -> None:
        self._shared = 0
        self._exclusive = False
        self._waiters: deque[tuple[bool, asyncio.Future[None]]] = deque()

    @property
    def running(self) -> int:
        """Calls holding a slot now."""
        return self._shared + (1 if self._exclusive else 0)

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot."""
        return sum(1 for _, f in self._waiters if not f.done())

    def try_acquire(self, exclusive: bool) -> bool:
        """Take a slot without waiting, if one is free and nobody is queued ahead."""
        if self._waiters or self._exclusive:
            return False
        if exclusive:
            if self._shared:
                return False
            self._exclusive = True
        else:
            self._shared += 1
        return True

    async def acquire(self, exclusive: bool) -> None:
        """Wait for a slot. Cancellation while waiting leaves the queue as if never joined."""
        if self.try_acquire(exclusive):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (exclusive, future)
        self._waiters.append(entry)
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                self.release(exclusive)  # granted just as we were cancelled: give it back
            else:
                with contextlib.suppress(ValueError):  # already granted and popped
                    self._waiters.remove(entry)
                self._wake()
            raise

    def release(self, exclusive: bool) -> None:
        """Give a slot back and admit whoever is next."""
        if exclusive:
            self._exclusive = False
        else:
            self._shared -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            exclusive, future = self._waiters[0]
            if future.done():
                self._waiters.popleft()
                continue
            if exclusive:
                if self._shared or self._exclusive:
                    return
                self._waiters.popleft()
                self._exclusive = True
                future.set_result(None)
                return
            if self._exclusive:
                return
            self._waiters.popleft()
            self._shared += 1
            future.set_result(None)


class Gates:
    """Caps on calls in flight, from the policy's limits: one for the whole engine, one per
    subject, one per tool. Each cap is an `asyncio.Semaphore` created on first use; calls take
    them always in the same order (engine, subject, tool), so no two calls can deadlock."""

    __slots__ = ("_gates",)

    def __init__(self) -> None:
        self._gates: dict[str, asyncio.Semaphore] = {}

    def for_call(
        self, tool: str, subject: str, caps: tuple[int | None, int | None, int | None]
    ) -> list[asyncio.Semaphore]:
        """The semaphores a call must hold, in acquisition order."""
        global_cap, subject_cap, tool_cap = caps
        gates = []
        for key, cap in (
            ("*", global_cap),
            (f"subject:{subject}", subject_cap),
            (f"tool:{tool}", tool_cap),
        ):
            if cap is not None:
                gate = self._gates.get(key)
                if gate is None:
                    gate = self._gates[key] = asyncio.Semaphore(cap)
                gates.append(gate)
        return gates
