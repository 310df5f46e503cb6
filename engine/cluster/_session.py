"""One cluster session, driver side: `ClusterSession` sends calls to its Ray actor and matches
results to calls by id (never by order), keeps the calls in flight and the results, tells
listeners of each result as it arrives, and turns every fault of Ray or of the node into a
`ToolResult`: a call never raises for a lost node and never hangs on one.

Opened by `ClusterSessions.open`, never built by hand:

    result = await session.call(ToolCall(name="read_text_file", arguments={"path": "a.txt"}))
    session.on_result(print)                       # each result as it arrives
    session.submit(call)                           # at once; then:
    result = await session.result(call.id)
    async for chunk in session.stream(call): ...   # chunks as the tool makes them

A session is ``open``, then ``draining`` (no new call; those in flight finish), ``closed`` or
``dead`` (its actor or node was lost: the calls then in flight end as errors saying their
outcome is unknown and that they were not re-run; later calls are refused at once).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from time import perf_counter
from typing import Any

from stockade.engine.cluster import _outcomes as outcomes
from stockade.engine.cluster._actor import CONTROL
from stockade.engine.cluster._spec import SessionInfo, SessionSpec, SessionState
from stockade.engine.errors import UnknownCallError
from stockade.engine.messages import ToolCall, ToolChunk, ToolResult

log = logging.getLogger("stockade.cluster")

Listener = Callable[[ToolResult], None]
HISTORY = 10_000  # results kept for `result(id)`, as an engine's call context keeps them


class ClusterSession:
    """One engine in one Ray actor on one worker node, seen from the driver."""

    def __init__(self, sid: str, spec: SessionSpec, actor: Any, node_id: str, node_ip: str) -> None:
        self.id = sid
        self.spec = spec
        self.node_id = node_id
        self.node_ip = node_ip
        self.state: SessionState = "open"
        self.reason: str | None = None  # why the session was lost
        self._actor = actor
        self._calls: dict[str, ToolCall] = {}  # in flight
        self._waiting: dict[str, asyncio.Future[ToolResult]] = {}
        self._refs: dict[str, Any] = {}  # the Ray object ref (or generator) of each call
        self._results: OrderedDict[str, ToolResult] = OrderedDict()
        self._listeners: list[Listener] = []
        self._watchers: set[asyncio.Task[None]] = set()
        self._done = 0
        self._misses = 0  # health checks in a row that found the ping unanswered
        self._ping: asyncio.Future[Any] | None = None
        self._ping_sent = 0.0
        self._lost = asyncio.Event()

    # -- reading -----------------------------------------------------------------------------

    def info(self) -> SessionInfo:
        """This session's row in `ClusterSessions.list`."""
        return SessionInfo(
            id=self.id,
            node_id=self.node_id,
            node_ip=self.node_ip,
            state=self.state,
            in_flight=len(self._waiting),
            done=self._done,
            workspace=self.spec.workspace,
            reason=self.reason,
        )

    @property
    def in_flight(self) -> list[str]:
        """Ids of the calls sent and still without a result, oldest first."""
        return list(self._waiting)

    def on_result(self, listener: Listener) -> None:
        """Call ``listener(result)`` for every result from now on, as each arrives (refusals
        and losses included). A listener that raises is logged and never breaks a call."""
        self._listeners.append(listener)

    async def result(self, call_id: str) -> ToolResult:
        """The result of a call sent to this session, waiting for it if it is in flight.
        Raises UnknownCallError for an id this session never received (or forgot: it keeps
        the last 10,000)."""
        done = self._results.get(call_id)
        if done is not None:
            return done
        future = self._waiting.get(call_id)
        if future is None:
            raise UnknownCallError(f"no call with id {call_id!r} was sent to session {self.id}")
        return await asyncio.shield(future)

    # -- calling -----------------------------------------------------------------------------

    async def call(self, call: ToolCall) -> ToolResult:
        """Run one call on the node and return its result. Never raises for Ray's or the
        node's fault; cancelling the caller cancels the call on the node (recorded there)."""
        future = self._begin(call)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            self._cancel_remote(call.id)
            raise

    def submit(self, call: ToolCall) -> asyncio.Task[ToolResult]:
        """Send a call and return at once; it is in flight from now (`in_flight`, `result`),
        and its result reaches the listeners. The task returned resolves to the result."""
        future = self._begin(call)
        return asyncio.get_running_loop().create_task(self._await(future))

    async def stream(self, call: ToolCall) -> AsyncIterator[ToolChunk]:
        """Run one call, yielding its chunks as the node sends them (a Ray streaming
        generator); the last chunk has ``is_last`` set and carries the result. Leaving early
        (use ``contextlib.aclosing``) cancels the call on the node."""
        future = self._begin(call, streamed=True)
        if future.done():  # refused
            yield _last(future.result())
            return
        generator = self._refs[call.id]
        try:
            while True:
                step = await self._unless_ended(generator.__anext__(), future)
                if step is _LOST:
                    break
                chunk = await self._unless_ended(step, future)
                if chunk is _LOST:
                    break
                if chunk.is_last:
                    self._deliver(chunk.result)
                    yield chunk
                    return
                yield chunk
        except StopAsyncIteration:
            self._deliver(outcomes.made(call, "error", "SessionError", "the stream ended early"))
        except Exception as exc:
            await self._failed(call, exc)
        finally:
            if not future.done():  # the reader left early: stop the call on the node
                self._cancel_remote(call.id)
                self._deliver(outcomes.closed(call, self.id))
        yield _last(future.result())

    # -- draining and closing (`ClusterSessions` drives these) -------------------------------

    async def drained(self) -> None:
        """Take no new calls and wait for those in flight."""
        if self.state == "open":
            self.state = "draining"
        if self._waiting:
            await asyncio.wait([asyncio.shield(f) for f in self._waiting.values()])

    async def close(self, grace: float) -> None:
        """Take no new calls; have the node cancel those in flight (each recorded there as
        cancelled) within ``grace`` seconds; kill the actor; any call still without a result
        ends as cancelled."""
        if self.state in ("closed", "dead"):
            return
        self.state = "closed"
        try:
            await asyncio.wait_for(self._actor.close.remote(), grace)
            if self._waiting:  # the cancelled results are on their way back
                waits = [asyncio.shield(f) for f in self._waiting.values()]
                await asyncio.wait(waits, timeout=grace)
        except Exception as exc:  # a lost node: nothing left to cancel there
            log.info("session %s: closing on the node failed (%s)", self.id, outcomes.said(exc))
        finally:  # even when the closer is cancelled: no actor kept, no call left waiting
            self._kill()
            for call in list(self._calls.values()):
                self._deliver(outcomes.closed(call, self.id))

    async def check(
        self, wait_s: float, misses: int, node_alive: Callable[[str], Awaitable[bool]]
    ) -> None:
        """One health check. A ping is kept out until answered (never cancelled: Ray says
        an actor is lost by failing it, and the session is lost at once then); one unanswered
        past ``wait_s`` seconds asks Ray whether the node is alive (a dead node loses the
        session), and ``misses`` checks in a row finding it unanswered lose it too (the actor
        is then killed, so nothing it still runs can finish unseen)."""
        if self.state not in ("open", "draining"):
            return
        ping = self._ping
        if ping is None or ping.done():
            self._misses = 0
            self._ping = asyncio.ensure_future(
                self._actor.ping.options(concurrency_group=CONTROL).remote()
            )
            self._ping.add_done_callback(self._pinged)
            self._ping_sent = perf_counter()
            return
        if perf_counter() - self._ping_sent < wait_s:
            return
        self._misses += 1
        if not await node_alive(self.node_id):
            self.lose("its node died (Ray reports the node dead)")
        elif self._misses >= misses:
            waited = perf_counter() - self._ping_sent
            self.lose(f"its actor did not answer a health check for {waited:.1f} s")

    def _pinged(self, ping: asyncio.Future[Any]) -> None:
        if ping.cancelled():
            return
        if (exc := ping.exception()) is not None:
            self.lose(self._why(exc))

    def lose(self, why: str) -> None:
        """The session is dead: every call in flight ends as an error saying its outcome is
        unknown and that it was not re-run; later calls are refused at once."""
        if self.state in ("dead", "closed"):
            return
        self.state = "dead"
        self.reason = f"session {self.id} on node {self.node_id} ({self.node_ip}) is lost: {why}"
        log.warning("%s", self.reason)
        for call in list(self._calls.values()):
            self._deliver(outcomes.lost(call, self.reason))
        self._lost.set()
        current = asyncio.current_task()
        for watcher in list(self._watchers):  # their answers can no longer matter
            if watcher is not current:
                watcher.cancel()
        self._kill()

    # -- the driver's side of one call ------------------------------------------------------

    def _begin(self, call: ToolCall, *, streamed: bool = False) -> asyncio.Future[ToolResult]:
        """Register ``call`` and send it (or refuse it): its future resolves to its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ToolResult] = loop.create_future()
        if call.id in self._waiting:
            future.set_result(outcomes.duplicate(call, self.id))
            return future
        self._waiting[call.id] = future
        self._calls[call.id] = call
        # an id used again names this call from now on: `result` waits for its own result
        self._results.pop(call.id, None)
        if self.state != "open":
            self._deliver(outcomes.refused(call, self.id, self.state, self.reason))
            return future
        if streamed:
            self._refs[call.id] = self._actor.stream.options(num_returns="streaming").remote(call)
            return future
        ref = self._actor.call.remote(call)
        self._refs[call.id] = ref
        watcher = loop.create_task(self._watch(call, ref))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        return future

    async def _watch(self, call: ToolCall, ref: Any) -> None:
        try:
            result = await ref
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._failed(call, exc)
            return
        self._deliver(result)

    async def _failed(self, call: ToolCall, exc: Exception) -> None:
        """Ray's error for a call, as results: a lost actor loses the whole session."""
        from ray.exceptions import RayActorError, TaskCancelledError

        if isinstance(exc, RayActorError):
            self.lose(self._why(exc))
        elif isinstance(exc, TaskCancelledError):
            self._deliver(outcomes.closed(call, self.id))
        else:
            self._deliver(outcomes.failed(call, self.id, exc))

    def _why(self, exc: BaseException) -> str:
        """What Ray says of a lost actor, naming the node's death when Ray knows of it."""
        text = str(exc)
        if "node has died" in text or "NodeDiedError" in type(exc).__name__:
            return f"its node died ({outcomes.said(exc)})"
        return f"its actor or its node died ({outcomes.said(exc)})"

    async def _unless_ended(self, awaitable: Awaitable[Any], ended: asyncio.Future[Any]) -> Any:
        """``awaitable``'s value, or `_LOST` as soon as the call has ended without it (its
        session lost or closed: a node cut off may never answer the step itself)."""
        work = asyncio.ensure_future(awaitable)
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            await asyncio.wait({work, lost, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if work.done():
            return work.result()
        work.cancel()
        return _LOST

    async def _await(self, future: asyncio.Future[ToolResult]) -> ToolResult:
        return await future

    def _deliver(self, result: ToolResult | None) -> None:
        """The first result for a call ends it: stored, its waiters woken, listeners told."""
        if result is None:
            return
        future = self._waiting.pop(result.call_id, None)
        if future is None:  # already ended (lost or closed first): a late answer is dropped
            return
        self._calls.pop(result.call_id, None)
        self._refs.pop(result.call_id, None)
        self._results[result.call_id] = result
        if len(self._results) > HISTORY:
            self._results.popitem(last=False)
        self._done += 1
        if not future.done():
            future.set_result(result)
        for listener in list(self._listeners):
            try:
                listener(result)
            except Exception:
                log.exception("session %s: result listener %r failed", self.id, listener)

    def _cancel_remote(self, call_id: str) -> None:
        ref = self._refs.get(call_id)
        if ref is None:
            return
        import ray

        try:
            ray.cancel(ref)
        except Exception as exc:  # already finished, or the actor is gone
            log.debug("session %s: cancelling %s: %s", self.id, call_id, outcomes.said(exc))

    def _kill(self) -> None:
        import ray

        try:
            ray.kill(self._actor, no_restart=True)
        except Exception as exc:  # a dead actor: nothing to kill
            log.debug("session %s: kill: %s", self.id, outcomes.said(exc))


class _Lost:
    """The session was lost while a step waited."""


_LOST = _Lost()


def _last(result: ToolResult) -> ToolChunk:
    return ToolChunk(result.call_id, result.tool, [], True, result)


__all__ = ["ClusterSession", "Listener"]
