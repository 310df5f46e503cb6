"""The engine: every tool call goes through the same eight steps, and none escapes them.

    resolve -> validate -> classify -> decide -> schedule -> run -> result -> record

`Engine` only orchestrates: each step with substance has its module beside this one, and
recording is the observers' (audit log, tracing). `call` runs the steps in line (the hot path,
measured in benchmarks/); `stream` runs the same steps and attempt loop, delivering chunks as
the tool works. A tool's failure of any kind becomes a `ToolResult`; only the caller's own
cancellation propagates, after the cancelled call is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, Awaitable, Iterable, Iterator, Sequence
from pathlib import Path
from time import perf_counter, time
from typing import TYPE_CHECKING, Any

from stockade.engine.content import Block
from stockade.engine.errors import CallError, EngineClosedError, UnknownToolError
from stockade.engine.injection import SILENT_EMITTER, ContextLevel, ContextLike, Emitter
from stockade.engine.messages import ToolCall, ToolChunk, ToolResult
from stockade.engine.observe.audit_log import AuditLog
from stockade.engine.observe.observer import CallObserver, Observers
from stockade.engine.pipeline import _results as results
from stockade.engine.pipeline._attempts import Attempts, Delivery
from stockade.engine.pipeline._decide import ask, decide
from stockade.engine.pipeline._egress import HostApprovals
from stockade.engine.pipeline._judge import admit_call, refused, verdict
from stockade.engine.pipeline._judging import Judging
from stockade.engine.pipeline._prompt_state import PendingCall, pending_calls, prompt_state
from stockade.engine.pipeline._refusal import refuse
from stockade.engine.pipeline._running import Runner
from stockade.engine.pipeline._schedule import Admission, in_batches
from stockade.engine.pipeline._state import Admitted, Approver, positive
from stockade.engine.pipeline._validate import validate
from stockade.engine.pipeline.history import CallContext
from stockade.engine.toolkit import Toolkit
from stockade.engine.tools import RegisteredTool
from stockade.engine.tools.retry import DEFAULT_RETRY, RetryPolicy
from stockade.policies import Decision, Effect, Policy, Request
from stockade.sandbox import Bubblewrap, PathEscapeError, VirtualFS

if TYPE_CHECKING:  # the OpenTelemetry SDK loads only when tracing is used
    from opentelemetry.sdk.trace import TracerProvider


class Engine:
    """Runs tool calls from a `Toolkit` safely.

    ``policy`` decides every call (the ``default`` preset when none is given) and sets the
    concurrency limits. ``context`` objects are injected by type (agent level: beats the
    toolkit's, loses to a call's). ``approver(call, decision)`` answers "ask" decisions (sync or
    async; raising `PermissionDeniedError` refuses, saying why); a call may bring its own.
    ``audit`` keeps an intent and an outcome record of every call (one whose intent cannot be
    written is denied); ``tracer_provider`` gets a span per call (content only with
    ``record_content``, redacted); ``observers`` hear every call too. ``bubblewrap`` is what
    this machine offers for boxing commands (probed once, off the loop, when not given).
    ``default_timeout`` and ``retry`` apply to tools that declare none; sync tools run in
    ``max_workers`` threads. An approver has ``approval_timeout`` seconds to answer (then the
    ask is refused; None: no limit); hosts it approves "always" are kept in ``approved_hosts``
    (a JSON file). A tool holding the loop over ``loop_stall_threshold`` seconds is named in the
    log, its result and its span (None: not watched). Use ``async with Engine(...)``, or
    `aclose`, to stop submitted calls and the threads.
    """

    def __init__(
        self,
        toolkit: Toolkit,
        *,
        policy: Policy | None = None,
        fs: VirtualFS | None = None,
        audit: AuditLog | None = None,
        tracer_provider: TracerProvider | None = None,
        record_content: bool = False,
        observers: Sequence[CallObserver] = (),
        approver: Approver | None = None,
        context: ContextLike = None,
        bubblewrap: Bubblewrap | None = None,
        default_timeout: float = 30.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        max_argument_bytes: int = 1_000_000,
        max_result_chars: int = 1_000_000,
        max_workers: int = 32,
        history: int = 10_000,
        rng: random.Random | None = None,
        approval_timeout: float | None = 300.0,
        loop_stall_threshold: float | None = 1.0,
        approved_hosts: str | Path | None = None,
    ) -> None:
        positive(
            default_timeout=default_timeout,
            approval_timeout=approval_timeout,
            loop_stall_threshold=loop_stall_threshold,
        )
        self.toolkit = toolkit
        # the policy (own files protected) and what is built on it, renewed when its store
        # publishes a new one (`_judging`)
        hosts = HostApprovals(approved_hosts)
        self._judging = Judging.first(policy, fs, audit, tracer_provider, hosts)
        self.approver = approver
        self.audit = audit
        self.fs = fs
        self.context = ContextLevel(context)
        # What the engine judges calls by and runs them with: the file system, how commands
        # run (the policy's [process] table) and the machine's bubblewrap. Injected by type like
        # any context, but first in every chain, so no call can hand a tool other ones than
        # those its call was judged by.
        self._own = ContextLevel()  # (and before it the call's policy's [process]: `_levels`)
        if fs is not None:
            self._own.put(fs, VirtualFS)
        self._judging.chain = (self._judging.process, self._own, self.context, toolkit.context)
        self.default_timeout = default_timeout
        self.approval_timeout = approval_timeout
        self.max_argument_bytes = max_argument_bytes
        self.max_result_chars = max_result_chars
        self.calls = CallContext(history=history)
        # no audit log, no tracing, no observer: the hot path then only checks this for None
        self._observers = Observers.of(audit, tracer_provider, record_content, observers)
        attempts = Attempts(retry, rng or random.Random(), max_workers, loop_stall_threshold)
        self._runner = Runner(Admission(self.policy), attempts, default_timeout, max_result_chars)
        self._admission, self._attempts = self._runner.admission, attempts
        self._bubblewrap: Bubblewrap | None = None
        if bubblewrap is not None:
            self._use(bubblewrap)
        self._probing: asyncio.Task[Bubblewrap] | None = None
        self._external = self._runner.external
        # submitted calls still running: their call id and since when (Unix time)
        self._submitted: dict[asyncio.Task[ToolResult], tuple[str, float]] = {}
        self._closed = False

    # -- public entry points -----------------------------------------------------------------

    async def call(
        self, call: ToolCall, *, context: ContextLike = None, approver: Approver | None = None
    ) -> ToolResult:
        """Run one call through every step and return its result. ``approver`` answers this
        call's "ask" decision instead of the engine's. Never raises for a tool's fault; re-raises
        the caller's own cancellation after recording the call as cancelled."""
        started = perf_counter()
        self.calls.track(call)
        observers = self._observers
        token: object = None
        if observers is not None and observers.hears_begin:
            # the call's span is current while it runs, so spans the tool makes nest under it
            tool = self.toolkit.resolve(call.name)
            token = observers.began(call, tool.description if tool else None, current=True)
        admitted: Admitted | None = None
        judging = self._judging if self._judging.feed is None else self._now()
        try:
            outcome = self._admit(call, context, SILENT_EMITTER, started, judging)
            if not isinstance(outcome, (Admitted, ToolResult)):
                outcome = await outcome  # a probe to wait for
            if isinstance(outcome, ToolResult):
                result = outcome
            else:
                admitted = outcome
                admitted.approver = approver or self.approver
                admitted.approval_timeout = self.approval_timeout
                if admitted.decision.effect is Effect.ASK:
                    await ask(admitted, judging.policy, judging.lasting)
                result = verdict(admitted, started) or await self._runner.execute(
                    admitted, started, judging
                )
        except asyncio.CancelledError:
            self._finish(call, results.cancelled(call, admitted, started))
            raise
        except Exception as exc:  # a bug in Stockade itself: still answer, and say so loudly
            result = results.internal_error(call, admitted, exc, started)
        finally:
            if token is not None:  # whatever happened: a KeyboardInterrupt in an approver too
                observers.leave(token)  # type: ignore[union-attr]
        kept = self._finish(call, result)
        if kept is not None:  # an fsync audit log: the outcome on disk before the call returns
            await kept
        return result

    async def call_many(
        self, calls: Iterable[ToolCall], *, context: ContextLike = None
    ) -> list[ToolResult]:
        """Run calls and return their results in input order. Consecutive concurrency-safe
        calls run together; any other call runs alone, after those before it."""
        batch_calls, started = list(calls), perf_counter()

        def unstarted(item: ToolCall) -> None:  # a call cancelled before it began is recorded
            if self.calls.result(item.id) is None:
                self.calls.track(item)
                self._finish(item, results.cancelled(item, None, started))

        with self.run_span("call_many", calls=len(batch_calls)):
            return await in_batches(
                batch_calls, self._runs_alone, lambda c: self.call(c, context=context), unstarted
            )

    def submit(self, call: ToolCall, *, context: ContextLike = None) -> asyncio.Task[ToolResult]:
        """Start a call in the background and return its task at once. The call is pending in
        `calls` immediately; its result reaches `calls` listeners and `calls.wait(id)`."""
        if self._closed:
            raise EngineClosedError("this engine is closed; create a new Engine to submit calls")
        self.calls.track(call)
        task = asyncio.get_running_loop().create_task(
            self.call(call, context=context), name=f"stockade:{call.name}:{call.id}"
        )
        self._submitted[task] = (call.id, time())
        started = perf_counter()

        def finished(done: asyncio.Task[ToolResult]) -> None:
            self._submitted.pop(done, None)
            if done.cancelled() and self.calls.result(call.id) is None:
                # cancelled before the call began: record it, or it would stay pending forever
                self._finish(call, results.cancelled(call, None, started))

        task.add_done_callback(finished)
        return task

    async def stream(
        self, call: ToolCall, *, context: ContextLike = None, approver: Approver | None = None
    ) -> AsyncGenerator[ToolChunk, None]:
        """Run one call and yield its chunks as they come; the last chunk has ``is_last`` set and
        carries the result. Generator tools' yields and `Emitter` progress arrive as chunks.
        Closing the iterator early stops the tool and records the call as cancelled; use
        ``contextlib.aclosing`` so that happens promptly."""
        started = perf_counter()
        self.calls.track(call)
        if self._observers is not None and self._observers.hears_begin:
            # not made current: a generator cannot hold a context across its yields
            tool = self.toolkit.resolve(call.name)
            self._observers.began(call, tool.description if tool else None, current=False)
        queue: asyncio.Queue[list[Block]] = asyncio.Queue()
        delivery = Delivery(queue.put_nowait)  # the tool's chunks and its progress alike
        admitted: Admitted | None = None
        result: ToolResult | None = None
        judging = self._judging if self._judging.feed is None else self._now()
        try:
            outcome = self._admit(call, context, Emitter(delivery), started, judging)
            if not isinstance(outcome, (Admitted, ToolResult)):
                outcome = await outcome
            if isinstance(outcome, Admitted):
                admitted = outcome
                admitted.approver = approver or self.approver
                admitted.approval_timeout = self.approval_timeout
                if admitted.decision.effect is Effect.ASK:
                    await ask(admitted, judging.policy, judging.lasting)
                result = verdict(admitted, started)
                if result is None:
                    chunks = self._runner.chunks(admitted, queue, delivery, started, judging)
                    async with contextlib.aclosing(chunks) as run:
                        async for chunk in run:
                            if chunk.is_last:
                                result = chunk.result
                            else:
                                yield chunk
            else:
                result = outcome
        except (asyncio.CancelledError, GeneratorExit):
            self._finish(call, results.cancelled(call, admitted, started))
            raise
        except Exception as exc:  # a bug in Stockade itself: still answer, and say so loudly
            result = results.internal_error(call, admitted, exc, started)
        assert result is not None
        self._finish(call, result)
        content = result.content if admitted is None or result.status == "denied" else []
        yield ToolChunk(call.id, result.tool, content, True, result)

    refuse = refuse  # a call its caller refused, recorded and not run: see `_refusal`

    def preview(self, call: ToolCall) -> tuple[Request, Decision]:
        """What the policy would decide on ``call``, without running it, asking anyone or
        recording anything: steps 1-4, as an approver would meet it (`_lasting`). Raises
        `CallError` where `call` would return an error result. Probes for bubblewrap here, in
        this thread, if a command call needs it and it was not probed yet."""
        tool = self.toolkit.resolve(call.name)
        if tool is None:
            raise UnknownToolError(self.toolkit.unavailable_reason(call.name))
        judging = self._judging if self._judging.feed is None else self._now()
        if tool.spec.command is not None and self._bubblewrap is None:
            self._use(judging.commands.probe_with(Bubblewrap.probe))
        kwargs, ctx, _ = validate(
            tool, call, self._levels(None, judging), SILENT_EMITTER, self.max_argument_bytes
        )
        request, decision = self._judge(tool, call, kwargs, ctx, judging)
        return request, judging.lasting.question(request, decision)

    async def isolation(self) -> Bubblewrap:
        """What this machine offers for boxing commands, probed once (off the event loop)."""
        if self._bubblewrap is not None:
            return self._bubblewrap
        loop = asyncio.get_running_loop()
        if self._probing is None or self._probing.get_loop() is not loop:
            # one probe for the calls that arrive while it runs (an engine used from another
            # event loop later starts its own)
            probe = self._judging.commands.probe_with
            self._probing = loop.create_task(asyncio.to_thread(probe, Bubblewrap.probe))
        found = await asyncio.shield(self._probing)
        if self._bubblewrap is None:
            self._use(found)
        return found

    def complete(self, call_id: str, value: Any) -> ToolResult:
        """Complete a pending call of an external tool with what was done outside (content, a
        `ToolOutput`, or an exception for a failure). Returns the final result, which also
        reaches `calls` listeners and `calls.wait`. Raises LookupError for an unknown id."""
        call, result = self._external.complete(call_id, value, self.max_result_chars)
        self._finish(call, result)
        return result

    @property
    def pending_external(self) -> list[str]:
        """Ids of external calls waiting for `complete`."""
        return self._external.ids()

    def pending_calls(self) -> list[PendingCall]:
        """Every call without a final result yet, oldest first: external ones waiting for
        `complete`, submitted ones running in the background, others in flight."""
        submitted = dict(self._submitted.values())
        return pending_calls(self.calls.pending, self._external.since(), submitted)

    def prompt_state(self, *, now: float | None = None) -> str:
        """The tool state for the agent's system prompt: active groups and their notes, and
        `pending_calls` with since when each waits; "" when there is nothing to say."""
        return prompt_state(self.toolkit, self.pending_calls(), now)

    @contextlib.contextmanager
    def run_span(self, name: str, **attributes: Any) -> Iterator[None]:
        """A parent span for the calls made inside it (a session, a replayed transcript):
        ``with engine.run_span("session", agent="planner"): ...``. Nothing without tracing."""
        if self._observers is None:
            yield
            return
        with self._observers.run(name, attributes):
            yield

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel submitted calls still running, wait for them, release worker threads."""
        self._closed = True
        for task in list(self._submitted):
            task.cancel()
        if self._submitted:
            await asyncio.gather(*self._submitted, return_exceptions=True)
        self._attempts.close()

    @property
    def policy(self) -> Policy:
        """The policy calls are decided by now (the engine's own files protected)."""
        return self._judging.policy

    def _now(self) -> Judging:
        """What this call is judged by: the newest policy (its store may have published one)."""
        judging = self._judging
        newest = judging.newest()
        if newest is not judging:
            newest.chain = (newest.process, *judging.chain[1:])
            self._judging = newest
            self._admission.follow(newest.policy)
        return newest

    # -- steps 1-4: resolve, validate, classify, decide ----------------------------------------

    def _admit(
        self,
        call: ToolCall,
        context: ContextLike,
        emitter: Emitter,
        started: float,
        judging: Judging,
    ) -> Admitted | ToolResult | Awaitable[Admitted | ToolResult]:
        tool = self.toolkit.resolve(call.name)
        if tool is None:
            return results.failure(
                call, None, UnknownToolError(self.toolkit.unavailable_reason(call.name)), started
            )
        if tool.spec.command is not None and self._bubblewrap is None:
            return self._admit_after_probe(call, context, emitter, started, judging)
        try:
            kwargs, ctx, ignored = validate(
                tool, call, self._levels(context, judging), emitter, self.max_argument_bytes
            )
        except CallError as exc:
            return refused(call, tool, exc, started)
        request, decision = self._judge(tool, call, kwargs, ctx, judging)
        kept: Decision | Awaitable[Decision] = decision
        if self._observers is not None:
            kept = self._observers.decided(call, request, decision)
        if isinstance(kept, Decision):
            what = (call, tool, kwargs, ctx, kept, request, ignored)
            return admit_call(*what, judging.lasting, judging.feed)
        return self._when_kept(kept, (call, tool, kwargs, ctx), request, ignored, judging)

    async def _when_kept(
        self,
        kept: Awaitable[Decision],
        what: _Judged,
        request: Request,
        ignored: list[str],
        judging: Judging,
    ) -> Admitted:
        """An fsync audit log: the call goes on once its intent is on disk."""
        return admit_call(*what, await kept, request, ignored, judging.lasting, judging.feed)

    async def _admit_after_probe(
        self,
        call: ToolCall,
        context: ContextLike,
        emitter: Emitter,
        started: float,
        judging: Judging,
    ) -> Admitted | ToolResult:
        await self.isolation()
        outcome = self._admit(call, context, emitter, started, judging)
        return outcome if isinstance(outcome, (Admitted, ToolResult)) else await outcome

    def _judge(
        self,
        tool: RegisteredTool,
        call: ToolCall,
        kwargs: dict[str, Any],
        ctx: Any,
        judging: Judging,
    ) -> tuple[Request, Decision]:
        """Steps 3-4: classify, then decide."""
        isolated = self._bubblewrap is not None and self._bubblewrap.available
        try:
            request = judging.classifier.request(tool, call, kwargs, isolated)
        except PathEscapeError as exc:  # a path that leads outside: nothing to ask a policy about
            return judging.classifier.bare(tool, call), Decision(
                Effect.DENY, "sandbox", str(exc), "call", exc.path
            )
        return request, decide(judging.policy, tool, request, kwargs, ctx)

    def _levels(self, context: ContextLike, judging: Judging) -> tuple[ContextLevel, ...]:
        """The context chain, nearest first: how the call's policy runs commands, the engine's
        own objects, then call > engine (agent) > toolkit."""
        if context is None:
            return judging.chain
        own = (judging.process, self._own)
        return (*own, ContextLevel(context), self.context, self.toolkit.context)

    def _use(self, bubblewrap: Bubblewrap) -> None:
        """Take ``bubblewrap`` as the machine's answer: classify judges commands by it, and the
        command tools run by it (injected by type), so the two cannot disagree."""
        self._bubblewrap = bubblewrap
        self._runner.boxed = bubblewrap.available
        self._own.put(bubblewrap, Bubblewrap)

    # -- step 8: record ------------------------------------------------------------------------

    def _finish(self, call: ToolCall, result: ToolResult) -> Awaitable[None] | None:
        """The result reaches the call context (and its listeners) and the observers (the
        audit log, tracing); what to await for its record to be on disk (an fsync log). An
        audit log that cannot be written is reported, and the call still gets its result."""
        self.calls.record(result)
        return None if self._observers is None else self._observers.ended(call, result)

    def _runs_alone(self, call: ToolCall) -> bool:
        tool = self.toolkit.resolve(call.name)
        return tool is not None and self._admission.exclusive(tool, call.subject)


_Judged = tuple[ToolCall, RegisteredTool, dict[str, Any], Any]  # call, tool, arguments, context

__all__ = ["Approver", "Engine"]
