"""Steps 5-7 of an engine's calls: schedule, run, result.

A call waits for its slot (alone, or beside others; the policy's caps), then runs its attempts
(`_attempts`), a boxed command's on a staged view whose changes the call's own judging settles
(`_commands`), and its value becomes the result (`_results`). `call` runs `execute`; `stream`
runs `chunks`, which delivers the tool's chunks as they come.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Coroutine
from typing import Any

from stockade.engine.content import Block
from stockade.engine.messages import ToolChunk, ToolResult
from stockade.engine.pipeline import _results as results
from stockade.engine.pipeline._attempts import Attempts, Delivery
from stockade.engine.pipeline._external import ExternalCalls
from stockade.engine.pipeline._judging import Judging
from stockade.engine.pipeline._schedule import Admission
from stockade.engine.pipeline._state import Admitted, RunFailed
from stockade.engine.tools import Mode


class Runner:
    """Steps 5-7 for one engine: its slots, its attempts, its external calls."""

    __slots__ = (
        "admission",
        "attempts",
        "boxed",
        "default_timeout",
        "external",
        "max_result_chars",
    )

    def __init__(
        self,
        admission: Admission,
        attempts: Attempts,
        default_timeout: float,
        max_result_chars: int,
    ) -> None:
        self.admission = admission
        self.attempts = attempts
        self.external = ExternalCalls()
        self.default_timeout = default_timeout
        self.max_result_chars = max_result_chars
        self.boxed = False  # whether commands run in a box here (the engine's bubblewrap says)

    async def execute(self, admitted: Admitted, started: float, judging: Judging) -> ToolResult:
        tool = admitted.tool
        if tool.mode is Mode.EXTERNAL:
            return self.external.pending(admitted, started)
        timeout = tool.spec.timeout or self.default_timeout
        admission, policy = self.admission, judging.policy  # the caps of the call's own policy
        if judging.has_limits:
            exclusive, gates = admission.slot(tool, admitted.call.subject, policy)
            acquired = await admission.acquire(exclusive, gates, timeout, self.attempts.watchdog())
        else:  # the hot path: no caps, and usually a free slot
            exclusive, gates = not tool.spec.shares, ()
            acquired = admission.scheduler.try_acquire(exclusive) or await admission.acquire(
                exclusive, gates, timeout, self.attempts.watchdog()
            )
        if not acquired:
            waited = admission.waited(tool, admitted.call.subject, policy)
            return results.timed_out(admitted, started, 0, timeout, waited=waited)
        try:
            value, attempts = await self.run(admitted, timeout, judging)
        except RunFailed as failed:
            return results.run_failure(admitted, started, failed)
        finally:
            admission.release(exclusive, gates)
        return results.success(admitted, started, value, attempts, self.max_result_chars)

    async def chunks(
        self,
        admitted: Admitted,
        queue: asyncio.Queue[list[Block]],
        delivery: Delivery,
        started: float,
        judging: Judging,
    ) -> AsyncGenerator[ToolChunk, None]:
        """Steps 5-7 for a streamed call: chunks as they come, then one chunk with the result."""
        call, tool = admitted.call, admitted.tool
        if tool.mode is Mode.EXTERNAL:
            yield ToolChunk(call.id, tool.name, [], True, self.external.pending(admitted, started))
            return
        admission, policy = self.admission, judging.policy
        exclusive, gates = admission.slot(tool, call.subject, policy)
        timeout = tool.spec.timeout or self.default_timeout
        if not await admission.acquire(exclusive, gates, timeout, self.attempts.watchdog()):
            waited = admission.waited(tool, call.subject, policy)
            result = results.timed_out(admitted, started, 0, timeout, waited=waited)
            yield ToolChunk(call.id, tool.name, [], True, result)
            return
        loop = asyncio.get_running_loop()
        producer = loop.create_task(self.run(admitted, timeout, judging, delivery))
        getter: asyncio.Task[list[Block]] | None = None
        try:
            while True:
                getter = loop.create_task(queue.get())
                await asyncio.wait((getter, producer), return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield ToolChunk(call.id, tool.name, getter.result())
                    continue
                getter.cancel()
                while not queue.empty():  # chunks put just before the tool finished
                    yield ToolChunk(call.id, tool.name, queue.get_nowait())
                break
        finally:
            admission.release(exclusive, gates)
            for task in (getter, producer):
                if task is not None and not task.done():
                    task.cancel()
            await asyncio.gather(producer, return_exceptions=True)
        result = results.produced(admitted, started, producer, self.max_result_chars)
        yield ToolChunk(call.id, tool.name, [], True, result)

    def run(
        self, admitted: Admitted, timeout: float, judging: Judging, delivery: Delivery | None = None
    ) -> Coroutine[Any, Any, tuple[Any, int]]:
        """Step 6: the attempts; a boxed command's on a staged view, its changes settled after."""
        attempt = self.attempts.run(admitted, timeout, delivery)
        if admitted.tool.spec.command is None or not self.boxed:
            return attempt
        return judging.commands.run(admitted, attempt)
