"""Per-attempt timeouts cheap enough for the hot path.

`asyncio.timeout` costs about 6 µs a use and a timer handle per call costs about 4 µs (a heap
push, a cancel, and a heap that fills with cancelled handles). A `Watchdog` instead files each
deadline in a bucket of `RESOLUTION` seconds; one loop timer per bucket, shared by every call
ending in it, cancels whatever is still in the bucket when it fires. Arming and disarming are a
dict insert and a dict pop. The price is precision: a deadline fires up to `RESOLUTION` late,
never early. Cancellations that did not come from a deadline are always re-raised: `Task.uncancel`
tells ours from anyone else's, as `asyncio.timeout` does.
"""

from __future__ import annotations

import asyncio
from asyncio import current_task

RESOLUTION = 0.01
_SLOTS_PER_SECOND = round(1 / RESOLUTION)


class Deadline:
    """One armed deadline for the task that armed it (``task``, which it cancels)."""

    __slots__ = ("_baseline", "_bucket", "_fired", "task")

    def __init__(self, task: asyncio.Task[object], bucket: dict[Deadline, None]) -> None:
        self.task = task
        self._bucket = bucket
        self._fired = False
        self._baseline = task.cancelling()

    def stop(self) -> bool:
        """Disarm. True if the deadline fired and no other cancellation is pending, meaning the
        `CancelledError` the task saw was ours and should become a timeout."""
        self._bucket.pop(self, None)
        if not self._fired:
            return False
        self._fired = False
        return self.task.uncancel() == 0

    def cancel_requested(self) -> bool:
        """After `stop`: whether someone asked to cancel the task while the deadline was armed
        and that request is still pending (the awaited code swallowed the CancelledError)."""
        return self.task.cancelling() > self._baseline

    def _expire(self) -> None:
        self._fired = True
        self.task.cancel()


class Watchdog:
    """Deadlines for one event loop.

    Use exactly like this::

        deadline = watchdog.arm(seconds)
        try:
            value = await work
        except asyncio.CancelledError:
            if deadline.stop():
                raise TimeoutError from None  # our deadline, nobody else's cancellation
            raise
        deadline.stop()
    """

    __slots__ = ("_buckets", "_loop", "_now")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._now = loop.time
        self._buckets: dict[int, dict[Deadline, None]] = {}

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop this watchdog's timers run on."""
        return self._loop

    def arm(self, seconds: float) -> Deadline:
        """Cancel the current task after ``seconds`` (rounded up to the resolution)."""
        task = current_task(self._loop)
        if task is None:
            raise RuntimeError("deadlines must be armed inside a task")
        slot = int((self._now() + seconds) * _SLOTS_PER_SECOND) + 1  # rounds up: never early
        bucket = self._buckets.get(slot)
        if bucket is None:
            bucket = self._buckets[slot] = {}
            self._loop.call_at(slot * RESOLUTION, self._fire, slot)
        deadline = Deadline(task, bucket)
        bucket[deadline] = None
        return deadline

    def _fire(self, slot: int) -> None:
        bucket = self._buckets.pop(slot, None)
        if bucket:
            for deadline in list(bucket):
                deadline._expire()
            bucket.clear()

    @property
    def armed(self) -> int:
        """Deadlines currently armed (for tests and diagnostics)."""
        return sum(len(b) for b in self._buckets.values())
