"""Step 6, run: a call's attempts, each under its own deadline, retried per the retry policy.

One loop serves `Engine.call` and `Engine.stream`. Whatever the tool is (a coroutine function,
a plain function run in a worker thread, a generator of either kind), an attempt runs it to the
end and returns its value; a generator's items are turned into content as they come and, when
the call is streamed, handed to ``deliver`` at once (as are the tool's `Emitter` chunks). A
failed attempt is retried only while nothing has been delivered, so a consumer never sees a
chunk twice. Whatever an attempt raises, `BaseException`s included, is the call's error
(`_faults`); only the caller's own cancellation propagates. While a call runs here, the stall
monitor (`_stalls`) knows its task, so that a tool holding the event loop is named.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import random
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from time import monotonic
from typing import Any, TypeVar

from stockade.engine.content import Block, merge_blocks, to_content
from stockade.engine.errors import ToolTimeoutError
from stockade.engine.messages import ErrorInfo, Retry, Status
from stockade.engine.pipeline._deadline import Watchdog
from stockade.engine.pipeline._faults import in_worker, unwrapped
from stockade.engine.pipeline._stalls import StallMonitor, stall_warning
from stockade.engine.pipeline._state import Admitted, RunFailed
from stockade.engine.pipeline._workers import WorkerPool
from stockade.engine.tools import Mode, RetryPolicy

log = logging.getLogger("stockade.engine")
T = TypeVar("T")


class Delivery:
    """Where a streamed call's chunks go as they come (generator items and `Emitter` progress
    alike), and how many went: an attempt is retried only while none has."""

    __slots__ = ("_put", "sent")

    def __init__(self, put: Callable[[list[Block]], None]) -> None:
        self._put = put
        self.sent = 0

    def __call__(self, blocks: list[Block]) -> None:
        self.sent += 1
        self._put(blocks)


class Attempts:
    """Runs admitted calls for one engine: deadlines, retries and the worker threads."""

    def __init__(
        self,
        retry: RetryPolicy,
        rng: random.Random,
        max_workers: int,
        stall_threshold: float | None = None,
    ) -> None:
        self.retry = retry
        self._rng = rng
        self._max_workers = max_workers
        self._pool: WorkerPool | None = None
        self._watchdog: Watchdog | None = None
        self._stall_threshold = stall_threshold
        self._monitor: StallMonitor | None = None

    def watchdog(self) -> Watchdog:
        """The deadlines of the running event loop (and its stall monitor, started with it)."""
        loop = asyncio.get_running_loop()
        watchdog = self._watchdog
        if watchdog is None or watchdog.loop is not loop:
            watchdog = self._watchdog = Watchdog(loop)
            if self._stall_threshold is not None:
                if self._monitor is not None:
                    self._monitor.stop()
                self._monitor = StallMonitor(loop, self._stall_threshold)
                # an engine dropped without being closed takes its monitor's thread with it
                weakref.finalize(self, self._monitor.abandon)
        return watchdog

    def close(self) -> None:
        """Stop the stall monitor and release the worker threads (a thread still running a
        tool finishes first)."""
        if self._monitor is not None:
            self._monitor.stop()
            self._monitor = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def run(
        self, admitted: Admitted, limit_s: float, deliver: Delivery | None = None
    ) -> tuple[Any, int]:
        """The value of the first attempt that succeeds, and how many attempts it took; raises
        `RunFailed` when the last one fails, and re-raises the caller's own cancellation."""
        watchdog = self.watchdog()
        deadline = watchdog.arm(limit_s)
        monitor = self._monitor
        if monitor is not None:  # the stall monitor learns which task runs which call, since when
            monitor.running[deadline.task] = (admitted, monotonic())
        attempt = 0
        try:
            while True:
                attempt += 1
                if attempt > 1:
                    deadline = watchdog.arm(limit_s)
                error: BaseException | None = None
                try:
                    value = await self._attempt(admitted, deliver)
                except asyncio.CancelledError as exc:
                    if deadline.stop():
                        error = self._timed_out(admitted, limit_s)
                    elif deadline.cancel_requested():
                        raise  # the caller's own cancellation
                    else:
                        error = exc  # nobody cancelled the call: the tool raised it itself
                except BaseException as exc:  # any fault of a tool is its call's error (_faults)
                    deadline.stop()
                    error = unwrapped(exc)
                else:
                    deadline.stop()
                if deadline.cancel_requested():
                    # the caller was cancelled while the tool ran, and the tool swallowed the
                    # CancelledError (or turned it into an error): cancellation is never lost
                    raise asyncio.CancelledError
                if error is None:
                    return value, attempt
                if deliver is not None and deliver.sent:
                    raise RunFailed(error, attempt, _status(error))
                await self._backoff(admitted, error, attempt)
        finally:
            if monitor is not None:
                monitor.running.pop(deadline.task, None)
                stalls = monitor.stalls and monitor.held(deadline.task)
                if stalls:
                    for seconds in stalls:
                        admitted.warn(stall_warning(seconds, monitor.threshold_s))

    def _attempt(self, admitted: Admitted, deliver: Delivery | None) -> Any:
        """The awaitable that does one attempt's work, by how the tool runs."""
        tool = admitted.tool
        mode = tool.mode
        if mode is Mode.ASYNC:
            return tool.invoke(admitted.kwargs, admitted.ctx)
        if mode is Mode.SYNC:
            return self._sync(admitted)
        if mode is Mode.ASYNC_GEN:
            return _drain_async(tool.invoke(admitted.kwargs, admitted.ctx), deliver)
        if deliver is None:  # nobody waits for the items: one trip to a worker thread
            return self.in_thread(_drain_sync, tool.invoke, admitted.kwargs, admitted.ctx)
        gen = tool.invoke(admitted.kwargs, admitted.ctx)  # creating it runs nothing
        return self._step_sync(gen, deliver)

    async def _sync(self, admitted: Admitted) -> Any:
        value = await self.in_thread(admitted.tool.invoke, admitted.kwargs, admitted.ctx)
        if inspect.isawaitable(value):
            value = await value  # a sync callable that returned a coroutine
        return value

    async def _step_sync(self, gen: Iterator[Any], deliver: Delivery) -> list[Block]:
        """A sync generator streamed: each step in a worker thread, each item delivered. A
        generator cannot be closed while a step runs, so one stopped mid-step (a timeout, a
        cancellation) is closed by the thread once that step returns."""
        collected: list[Block] = []
        step: Future[tuple[bool, Any]] | None = None
        try:
            while True:
                step = self._submit(_next_or_done, gen)
                done, item = await asyncio.wrap_future(step)
                if done:
                    return merge_blocks(collected)
                blocks = to_content(item)
                collected.extend(blocks)
                deliver(blocks)
        finally:
            if step is not None and not step.done():
                closing = getattr(gen, "close", _nothing)
                step.add_done_callback(lambda _: self._submit(closing))
            else:
                await self.in_thread(getattr(gen, "close", _nothing))

    def _timed_out(self, admitted: Admitted, limit_s: float) -> ToolTimeoutError:
        if admitted.tool.mode in (Mode.SYNC, Mode.SYNC_GEN):
            admitted.warn(
                "the tool's worker thread was still running at the timeout; a thread cannot be "
                "killed, so it keeps running until the tool returns"
            )
        return ToolTimeoutError(f"tool {admitted.tool.name!r} did not finish within {limit_s:g}s")

    async def _backoff(self, admitted: Admitted, error: BaseException, attempt: int) -> None:
        """Wait before the next attempt, or raise `RunFailed` if there is none."""
        tool = admitted.tool
        policy = tool.spec.retry or self.retry
        safe = tool.spec.idempotent or tool.spec.read_only
        if not policy.should_retry(error, attempt, safe_tool=safe):
            raise RunFailed(error, attempt, _status(error))
        delay = policy.delay(attempt, self._rng)
        said = str(ErrorInfo.of(error))  # never raises, whatever the tool's exception does
        admitted.note().retries.append(Retry(attempt, said, round(delay, 4)))
        log.info(
            "retrying %s after %s (attempt %d, waiting %.3fs)", tool.name, said, attempt, delay
        )
        await asyncio.sleep(delay)

    def in_thread(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """``fn(*args)`` in a worker thread, with the caller's context variables."""
        return asyncio.wrap_future(self._submit(fn, *args))

    def _submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        pool = self._pool
        if pool is None:
            pool = self._pool = WorkerPool(self._max_workers)
        return pool.submit(contextvars.copy_context().run, in_worker, fn, *args)


def _status(error: BaseException) -> Status:
    return "timeout" if isinstance(error, ToolTimeoutError) else "error"


async def _drain_async(agen: AsyncIterator[Any], deliver: Delivery | None) -> list[Block]:
    collected: list[Block] = []
    try:
        async for item in agen:
            blocks = to_content(item)
            collected.extend(blocks)
            if deliver is not None:
                deliver(blocks)
    finally:
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            await aclose()
    return merge_blocks(collected)


def _drain_sync(fn: Callable[..., Any], *args: Any) -> list[Block]:
    collected: list[Block] = []
    for item in fn(*args):
        collected.extend(to_content(item))
    return merge_blocks(collected)


def _next_or_done(gen: Iterator[Any]) -> tuple[bool, Any]:
    try:
        return False, next(gen)
    except StopIteration:
        return True, None


def _nothing() -> None:
    return None
