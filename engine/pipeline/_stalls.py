"""Noticing an event loop blocked by a call's tool, and saying which call blocked it.

An async tool that calls blocking code (``time.sleep``, a synchronous HTTP client, a long
computation) holds the event loop: every other call on it waits, the deadlines included, and
nothing says why. A `StallMonitor` watches one loop from a thread of its own. The loop beats: a
timer sets a timestamp every ``period`` seconds. The thread checks that timestamp as often;
when the next beat is overdue by more than the threshold, the loop is blocked, and the task
running on it then (`asyncio.current_task`) names the call, when that task is one of the
engine's calls and has been in its run step for longer than the threshold. The thread logs a
warning at once (the block may never end); the call's result gets a warning, with how long the
loop was held, when its run step ends, and with it the call's audit record and span (warnings
are span events).

On the hot path a call costs a dict insert and a pop (``running``, with when it entered its
run step); the timer and the thread cost a wake-up a ``period`` each, whatever the traffic.
`stop` ends the thread, and so do the loop's closing and the engine's being dropped unclosed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from time import monotonic
from typing import Any

from stockade.engine.messages import escaped
from stockade.engine.pipeline._state import Admitted

log = logging.getLogger("stockade.engine")

_LONGEST_PERIOD = 0.25  # how late a stop, or a closed loop, is noticed at most
_SHORTEST_PERIOD = 0.005


class Stall:
    """One time the loop was held by one call: since when, and (once over) for how long."""

    __slots__ = ("ended", "seconds", "started")

    def __init__(self, started: float, seconds: float) -> None:
        self.started = started
        self.seconds = seconds
        self.ended = False

    def end(self, now: float) -> None:
        if not self.ended:
            self.ended = True
            self.seconds = max(self.seconds, now - self.started)


class StallMonitor:
    """Watches one event loop for blocks longer than ``threshold_s`` (see the module
    docstring). Made on the loop it watches, from inside it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold_s: float) -> None:
        self.loop = loop
        self.threshold_s = threshold_s
        self._period = min(max(threshold_s / 4, _SHORTEST_PERIOD), _LONGEST_PERIOD)
        # the loop's side writes these, the thread reads them (single dict operations)
        self.running: dict[asyncio.Task[Any], tuple[Admitted, float]] = {}
        self.stalls: dict[asyncio.Task[Any], list[Stall]] = {}
        self._ongoing: Stall | None = None
        self._lock = threading.Lock()  # over stalls and _ongoing, which both threads change
        self._stopped = threading.Event()
        self._beat = monotonic()
        self._timer = loop.call_later(self._period, self._tick)
        self._thread = threading.Thread(target=self._watch, name="stockade-loop-watch", daemon=True)
        self._thread.start()

    # -- the loop's side ---------------------------------------------------------------------

    def held(self, task: asyncio.Task[Any]) -> list[float] | None:
        """After ``task`` left its run step (``running``): the seconds of each time it held
        the loop, if any. A hold still going on ends now: this code runs on the loop it held."""
        with self._lock:
            stalls = self.stalls.pop(task, None)
            if stalls is None:
                return None
            now = monotonic()
            for stall in stalls:
                stall.end(now)
            if self._ongoing is not None and self._ongoing.ended:
                self._ongoing = None
        return [stall.seconds for stall in stalls]

    def _tick(self) -> None:
        now = self._beat = monotonic()
        if self._ongoing is not None:
            with self._lock:
                if self._ongoing is not None:
                    self._ongoing.end(now)
                    self._ongoing = None
        if not self._stopped.is_set():
            self._timer = self.loop.call_later(self._period, self._tick)

    def abandon(self) -> None:
        """End the thread and the timer soon, from any thread, without waiting: for an engine
        dropped unclosed (it ends at its loop's next beat, and within a period)."""
        self._stopped.set()

    def stop(self) -> None:
        """End the thread and the timer (from the loop's thread, or once the loop is closed)."""
        self._stopped.set()
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self.loop or self.loop.is_closed():  # a timer is cancelled on its loop only
            self._timer.cancel()
        if self._thread is not threading.current_thread():
            self._thread.join()

    # -- the watching thread -----------------------------------------------------------------

    def _watch(self) -> None:
        loop = self.loop
        while not self._stopped.wait(self._period):
            if loop.is_closed():
                return
            if self._ongoing is not None or not self.running or not loop.is_running():
                continue
            beat = self._beat
            late = monotonic() - beat - self._period
            if late > self.threshold_s:
                self._blocked(beat)

    def _blocked(self, beat: float) -> None:
        # The loop is held, by its current task. That task is to blame when it is a call of
        # this engine in its run step, and has been for longer than the threshold: a caller
        # running many short calls without ever yielding is not held up by any one of them.
        now = monotonic()
        task = asyncio.current_task(self.loop)
        entry = self.running.get(task) if task is not None else None
        if task is None or entry is None or self._beat != beat:
            return
        admitted, entered = entry
        since = max(entered, beat + self._period)  # the loop missed its beat at beat + period
        if now - since <= self.threshold_s:
            return
        with self._lock:
            stall = self._ongoing = Stall(since, now - since)
            self.stalls.setdefault(task, []).append(stall)
        log.warning(
            "the event loop has been held for %.1fs so far, over the %gs threshold, by tool %s "
            "(call %s); every other call on the loop waits until it lets go. %s",
            stall.seconds,
            self.threshold_s,
            admitted.tool.name,
            escaped(admitted.call.id),
            ADVICE,
        )


ADVICE = (
    "An async tool must not run blocking code: make it a plain function (it then runs in a "
    "worker thread) or await non-blocking calls"
)


def stall_warning(seconds: float, threshold_s: float) -> str:
    """The warning on a call whose tool held the loop for ``seconds``."""
    return (
        f"the tool blocked the event loop for {seconds:.1f}s (over the {threshold_s:g}s "
        f"threshold), holding up every other call meanwhile. {ADVICE}"
    )
