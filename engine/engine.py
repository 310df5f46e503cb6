"""The engine: every tool call goes through the same eight steps, and none escapes them.

    resolve -> validate -> classify -> decide -> schedule -> run -> result -> record

Each step is a method named for it. `call` runs them in line (it is the hot path, measured in
benchmarks/); `stream` runs the same steps but delivers chunks while the tool works; `call_many`
and `submit` are built on `call`. A tool's failure of any kind becomes a `ToolResult`; only the
caller's own cancellation propagates (after the cancelled call is recorded).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import math
import os
import random
import shlex
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from time import perf_counter
from typing import Any, cast

import orjson
import pydantic_core
from opentelemetry import context as context_api
from opentelemetry.sdk.trace import TracerProvider

from stockade.engine import outcomes
from stockade.engine.audit import AuditError, AuditLog
from stockade.engine.callcontext import CallContext
from stockade.engine.calls import ErrorInfo, Status, ToolCall, ToolChunk, ToolResult
from stockade.engine.content import Block, merge_blocks, to_content
from stockade.engine.context import (
    SILENT_EMITTER,
    ContextLevel,
    ContextLike,
    Emitter,
    ToolContext,
)
from stockade.engine.deadline import Watchdog
from stockade.engine.errors import (
    ArgumentError,
    CallError,
    PermissionDeniedError,
    ToolTimeoutError,
    UnknownToolError,
)
from stockade.engine.outcomes import Admitted, RunFailed
from stockade.engine.record import intent_fields, outcome_fields
from stockade.engine.retry import DEFAULT_RETRY, RetryPolicy
from stockade.engine.scheduler import Gates, Scheduler
from stockade.engine.schema import REQUIRED
from stockade.engine.tool import Access, Mode, RegisteredTool
from stockade.engine.toolkit import Toolkit
from stockade.engine.tracing import CallTracer
from stockade.engine.workers import WorkerPool
from stockade.policies import (
    Decision,
    Effect,
    PathSpellingError,
    Policy,
    ProcessSpec,
    Request,
    canonical,
    strictest,
)
from stockade.sandbox import PathEscapeError, SandboxError, VirtualFS, isolation_available

log = logging.getLogger("stockade.engine")

Approver = Callable[[ToolCall, Decision], "bool | Awaitable[bool]"]


class Engine:
    """Runs tool calls from a `Toolkit` safely.

    ``policy`` decides every call (the ``default`` preset when none is given) and sets the
    concurrency limits. ``context`` objects are injected by type (agent level: beats the
    toolkit's, loses to a call's). ``approver(call, decision)`` answers "ask" decisions (it may
    be async; raising `PermissionDeniedError` refuses with that message as the reason); without
    one, "ask" means deny. ``audit`` keeps an intent and an outcome record
    of every call (a call whose intent cannot be written is denied). ``tracer_provider`` gets
    one OpenTelemetry span per call (arguments and results in it only with ``record_content``,
    redacted); `run_span` opens a parent span for many. ``default_timeout``
    applies to tools that declare none; ``retry`` is the policy for tools that declare none.
    Sync tools run in a pool of ``max_workers`` threads. Use as ``async with Engine(...) as
    engine:`` or call `aclose` to stop submitted calls and worker threads.
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
        approver: Approver | None = None,
        context: ContextLike = None,
        default_timeout: float = 30.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        max_argument_bytes: int = 1_000_000,
        max_result_chars: int = 1_000_000,
        max_workers: int = 32,
        history: int = 10_000,
        rng: random.Random | None = None,
    ) -> None:
        if not math.isfinite(default_timeout) or default_timeout <= 0:
            raise ValueError(f"default_timeout must be a positive number, got {default_timeout}")
        self.toolkit = toolkit
        # no engine runs without a policy: none given means the default preset
        self.policy = policy if policy is not None else Policy.preset("default")
        self.approver = approver
        self.audit = audit
        # no provider, no spans: the hot path then only checks this for None
        self._tracing = (
            CallTracer(tracer_provider, record_content=record_content)
            if tracer_provider is not None
            else None
        )
        self.context = ContextLevel(context)
        # the file system is how file tools reach files: injected by type like any context
        self.fs = fs
        if fs is not None:
            self.context.put(fs, VirtualFS)
        # how commands may run (isolation, network, limits) is the policy's to say
        self.context.put(self.policy.process, ProcessSpec)
        self.default_timeout = default_timeout
        self.retry = retry
        self.max_argument_bytes = max_argument_bytes
        self.max_result_chars = max_result_chars
        self.calls = CallContext(history=history)
        self._scheduler = Scheduler()
        self._gates = Gates()
        self._has_limits = self.policy.has_limits
        self._waiting_external: dict[str, tuple[Admitted, float]] = {}
        self._rng = rng or random.Random()
        self._max_workers = max_workers
        self._executor: WorkerPool | None = None
        self._submitted: set[asyncio.Task[ToolResult]] = set()
        self._requests: dict[tuple[RegisteredTool, str], Request] = {}
        self._trusted = self.policy.trusted_origins
        self._watchdog: Watchdog | None = None
        self._closed = False

    def _finish(self, call: ToolCall, result: ToolResult) -> None:
        """Step 8: the result reaches the call context (and its listeners) and the audit log.
        An audit log that cannot be written is reported, and the call still gets its result."""
        self.calls.record(result)
        if self.audit is not None:
            try:
                self.audit.append(outcome_fields(call, result))
            except AuditError as exc:
                log.error("call %s was not audited: %s", call.id, exc)
        if self._tracing is not None:
            self._tracing.finish(call, result)

    def _limit(self, tool: RegisteredTool) -> float:
        """Seconds an attempt of ``tool`` may take."""
        return tool.spec.timeout or self.default_timeout

    def _watch(self) -> Watchdog:
        loop = asyncio.get_running_loop()
        watchdog = self._watchdog
        if watchdog is None or watchdog.loop is not loop:
            watchdog = self._watchdog = Watchdog(loop)
        return watchdog

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
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # -- public entry points -----------------------------------------------------------------

    async def call(self, call: ToolCall, *, context: ContextLike = None) -> ToolResult:
        """Run one call through every step and return its result. Never raises for a tool's
        fault; re-raises the caller's own cancellation after recording the call as cancelled."""
        tracing = self._tracing
        if tracing is None:
            return await self._call(call, context)
        # the call's span is current while it runs, so spans the tool makes nest under it
        tool = self.toolkit.resolve(call.name)
        token = tracing.start(call, tool.description if tool else None, current=True)
        try:
            return await self._call(call, context)
        finally:
            context_api.detach(token)

    async def _call(self, call: ToolCall, context: ContextLike) -> ToolResult:
        started = perf_counter()
        self.calls.track(call)
        admitted: Admitted | None = None
        try:
            outcome = self._admit(call, context, SILENT_EMITTER, started)
            if not isinstance(outcome, (Admitted, ToolResult)):
                outcome = await outcome  # an "ask" decision waiting for the approver
            if isinstance(outcome, ToolResult):
                result = outcome
            else:
                admitted = outcome
                result = await self._execute(call, admitted, started)
        except asyncio.CancelledError:
            self._finish(call, outcomes.cancelled(call, admitted, started))
            raise
        except Exception as exc:  # a bug in Stockade itself: still answer, and say so loudly
            result = outcomes.internal_error(call, admitted, exc, started)
        self._finish(call, result)
        return result

    async def call_many(
        self, calls: Iterable[ToolCall], *, context: ContextLike = None
    ) -> list[ToolResult]:
        """Run calls and return their results in input order. Consecutive concurrency-safe
        calls run together; any other call runs alone, after those before it."""
        batch_calls = list(calls)
        if self._tracing is not None:
            with self._tracing.run("call_many", {"calls": len(batch_calls)}):
                return await self._call_many(batch_calls, context)
        return await self._call_many(batch_calls, context)

    async def _call_many(
        self, batch_calls: list[ToolCall], context: ContextLike
    ) -> list[ToolResult]:
        results: list[ToolResult | None] = [None] * len(batch_calls)
        batch: list[int] = []

        async def flush() -> None:
            if len(batch) == 1:
                results[batch[0]] = await self.call(batch_calls[batch[0]], context=context)
            elif batch:
                done = await asyncio.gather(
                    *(self.call(batch_calls[i], context=context) for i in batch)
                )
                for i, r in zip(batch, done, strict=True):
                    results[i] = r
            batch.clear()

        started = perf_counter()
        try:
            for index, item in enumerate(batch_calls):
                tool = self.toolkit.resolve(item.name)
                if tool is None or not self._exclusive(tool, item.subject):
                    batch.append(index)
                    continue
                await flush()
                results[index] = await self.call(item, context=context)
            await flush()
        except asyncio.CancelledError:
            for item in batch_calls:  # calls that never started are cancelled too
                if self.calls.result(item.id) is None:
                    self.calls.track(item)
                    self._finish(item, outcomes.cancelled(item, None, started))
            raise
        return [r for r in results if r is not None]

    @contextlib.contextmanager
    def run_span(self, name: str, **attributes: Any) -> Iterator[None]:
        """A parent span for the calls made inside it (a session, a replayed transcript):
        ``with engine.run_span("session", agent="planner"): ...``. Nothing without tracing."""
        if self._tracing is None:
            yield
            return
        with self._tracing.run(name, attributes):
            yield

    def submit(self, call: ToolCall, *, context: ContextLike = None) -> asyncio.Task[ToolResult]:
        """Start a call in the background and return its task at once. The call is pending in
        `calls` immediately; its result reaches `calls` listeners and `calls.wait(id)`."""
        if self._closed:
            raise RuntimeError("this engine is closed; create a new Engine to submit calls")
        self.calls.track(call)
        task = asyncio.get_running_loop().create_task(
            self.call(call, context=context), name=f"stockade:{call.name}:{call.id}"
        )
        self._submitted.add(task)
        started = perf_counter()

        def finished(done: asyncio.Task[ToolResult]) -> None:
            self._submitted.discard(done)
            if done.cancelled() and self.calls.result(call.id) is None:
                # cancelled before the call began: record it, or it would stay pending forever
                self._finish(call, outcomes.cancelled(call, None, started))

        task.add_done_callback(finished)
        return task

    async def stream(
        self, call: ToolCall, *, context: ContextLike = None
    ) -> AsyncGenerator[ToolChunk, None]:
        """Run one call and yield its chunks as they come; the last chunk has ``is_last`` set and
        carries the result. Generator tools' yields and `Emitter` progress arrive as chunks.
        Closing the iterator early stops the tool and records the call as cancelled; use
        ``contextlib.aclosing`` so that happens promptly."""
        started = perf_counter()
        self.calls.track(call)
        if self._tracing is not None:
            # not made current: a generator cannot hold a context across its yields
            tool = self.toolkit.resolve(call.name)
            self._tracing.start(call, tool.description if tool else None, current=False)
        queue: asyncio.Queue[list[Block]] = asyncio.Queue()
        admitted: Admitted | None = None
        result: ToolResult | None = None
        try:
            outcome = self._admit(call, context, Emitter(queue.put_nowait), started)
            if not isinstance(outcome, (Admitted, ToolResult)):
                outcome = await outcome
            if isinstance(outcome, Admitted):
                admitted = outcome
                async with contextlib.aclosing(
                    self._stream_run(call, admitted, queue, started)
                ) as run:
                    async for chunk in run:
                        if chunk.is_last:
                            result = chunk.result
                        else:
                            yield chunk
            else:
                result = outcome
        except (asyncio.CancelledError, GeneratorExit):
            self._finish(call, outcomes.cancelled(call, admitted, started))
            raise
        except Exception as exc:  # a bug in Stockade itself: still answer, and say so loudly
            result = outcomes.internal_error(call, admitted, exc, started)
        assert result is not None
        self._finish(call, result)
        yield ToolChunk(
            call.id, result.tool, result.content if admitted is None else [], True, result
        )

    async def _stream_run(
        self, call: ToolCall, admitted: Admitted, queue: asyncio.Queue[list[Block]], started: float
    ) -> AsyncGenerator[ToolChunk, None]:
        """Steps 5-7 for a streamed call: chunks as they come, then one chunk with the result."""
        tool = admitted.tool
        if tool.mode is Mode.EXTERNAL:
            yield ToolChunk(call.id, tool.name, [], True, self._pending(admitted, started))
            return
        exclusive, gates = self._slot(tool, call.subject)
        timeout = self._limit(tool)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not await self._acquire(exclusive, gates, timeout):
            waited = self._waited(tool, call.subject)
            result = outcomes.timed_out(admitted, started, 0, timeout, waited=waited)
            yield ToolChunk(call.id, tool.name, [], True, result)
            return
        producer = loop.create_task(self._produce(admitted, queue, deadline))
        getter: asyncio.Task[list[Block]] | None = None
        try:
            while True:
                getter = loop.create_task(queue.get())
                await asyncio.wait(
                    (getter, producer),
                    timeout=max(0.0, deadline - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if getter.done():
                    yield ToolChunk(call.id, tool.name, getter.result())
                    continue
                getter.cancel()
                if not producer.done():
                    result = outcomes.timed_out(admitted, started, 1, timeout)
                    break
                while not queue.empty():  # chunks put just before the tool finished
                    yield ToolChunk(call.id, tool.name, queue.get_nowait())
                result = self._finish_from_task(call, admitted, started, producer)
                break
        finally:
            self._release(exclusive, gates)
            for task in (getter, producer):
                if task is not None and not task.done():
                    task.cancel()
            await asyncio.gather(producer, return_exceptions=True)
        yield ToolChunk(call.id, tool.name, [], True, result)

    # -- steps 1-4: resolve, validate, classify, decide ---------------------------------------

    def preview(self, call: ToolCall) -> tuple[Request, Decision]:
        """What the policy would decide on ``call``, without running it, asking anyone or
        recording anything: steps 1-4 only. Raises `CallError` (an unknown tool, bad
        arguments) where `call` would return an error result."""
        tool = self.toolkit.resolve(call.name)
        if tool is None:
            raise UnknownToolError(self.toolkit.unavailable_reason(call.name))
        kwargs, ctx, _ = self._validate(tool, call, None, SILENT_EMITTER)
        return self._judge(tool, call, kwargs, ctx)

    def _judge(
        self,
        tool: RegisteredTool,
        call: ToolCall,
        kwargs: dict[str, Any],
        ctx: ToolContext | None,
    ) -> tuple[Request, Decision]:
        """Steps 3-4: classify, then decide."""
        try:
            request = self._classify(tool, call, kwargs)
        except PathEscapeError as exc:  # a path that leads outside: nothing to ask a policy about
            request = Request(call.subject, tool.name, "call", (), None, self._read_only(tool))
            return request, Decision(Effect.DENY, "sandbox", str(exc), "call", exc.path)
        return request, self._decide(tool, request, kwargs, ctx)

    def _admit(
        self, call: ToolCall, context: ContextLike, emitter: Emitter, started: float
    ) -> Admitted | ToolResult | Awaitable[Admitted | ToolResult]:
        tool = self.toolkit.resolve(call.name)
        if tool is None:
            return outcomes.failure(
                call, None, UnknownToolError(self.toolkit.unavailable_reason(call.name)), started
            )
        try:
            kwargs, ctx, metadata = self._validate(tool, call, context, emitter)
        except CallError as exc:
            return outcomes.failure(call, tool, exc, started)
        request, decision = self._judge(tool, call, kwargs, ctx)
        if self.audit is not None:
            try:
                self.audit.append(intent_fields(call, request, decision))
            except AuditError as exc:  # nothing runs that the audit log cannot keep
                decision = Decision(Effect.DENY, "audit", str(exc), "call", None)
        if self._tracing is not None:
            self._tracing.decided(call, request, decision)
        admitted = Admitted(call, tool, kwargs, ctx, decision, request, metadata)
        effect = decision.effect
        if effect is Effect.ALLOW:
            return admitted
        if effect is Effect.ASK:
            return self._ask(admitted, started)
        return self._verdict(admitted, started)

    def _validate(
        self, tool: RegisteredTool, call: ToolCall, context: ContextLike, emitter: Emitter
    ) -> tuple[dict[str, Any], ToolContext | None, dict[str, Any]]:
        """Step 2: parse and validate arguments, apply presets, inject context by type."""
        arguments = self._parse_arguments(call.arguments)
        metadata: dict[str, Any] = {}
        if tool.hidden:
            ignored = [k for k in arguments if k in tool.hidden]
            if ignored:
                arguments = {k: v for k, v in arguments.items() if k not in tool.hidden}
                metadata["ignored_arguments"] = ignored
                metadata.setdefault("warnings", []).append(
                    f"argument(s) {', '.join(ignored)} are preset by the toolkit; the values "
                    "given in the call were ignored"
                )
        kwargs = tool.validate(arguments)
        if not tool.needs_context:
            return kwargs, None, metadata
        levels: tuple[ContextLevel, ...] = (self.context, self.toolkit.context)
        if context is not None:  # call level first: call > engine (agent) > toolkit
            levels = (ContextLevel(context), *levels)
        ctx = ToolContext(call, tool.name, emitter, levels)
        for injection in tool.injections:
            wanted = injection.type
            if issubclass(wanted, Emitter):
                value: Any = emitter
            elif issubclass(wanted, ToolContext):
                value = ctx
            elif issubclass(wanted, ToolCall):
                value = call
            else:
                value = ctx.get(wanted, REQUIRED)
                if value is REQUIRED:
                    if injection.default is REQUIRED:
                        ctx.require(wanted)  # raises ContextMissingError with the full story
                    value = injection.default
            kwargs[injection.name] = value
        return kwargs, ctx, metadata

    def _parse_arguments(self, arguments: Mapping[str, Any] | str) -> Mapping[str, Any]:
        limit = self.max_argument_bytes
        if isinstance(arguments, str):
            # a character is at most 4 bytes in UTF-8: count bytes only when it could matter
            size = len(arguments) if len(arguments) * 4 <= limit else len(arguments.encode())
            if size > limit:
                raise ArgumentError(
                    f"arguments are {size} bytes, over the limit of {limit}; "
                    "send less data (write large content to a file first)"
                )
            try:
                parsed = orjson.loads(arguments) if arguments.strip() else {}
            except orjson.JSONDecodeError as exc:
                raise ArgumentError(
                    f"arguments are not valid JSON ({exc}); send a JSON object"
                ) from None
            if not isinstance(parsed, dict):
                raise ArgumentError(f"arguments must be a JSON object, not {type(parsed).__name__}")
            return parsed
        if type(arguments) is not dict and not isinstance(arguments, Mapping):
            raise ArgumentError(
                f"arguments must be a mapping or a JSON string, not {type(arguments).__name__}"
            )
        try:
            size = len(orjson.dumps(arguments, default=str, option=orjson.OPT_NON_STR_KEYS))
        except (orjson.JSONEncodeError, TypeError):
            try:  # orjson stops at 64-bit integers and 254 levels of nesting; pydantic does not
                size = len(pydantic_core.to_json(arguments, fallback=str))
            except (ValueError, RecursionError) as exc:
                raise ArgumentError(
                    f"arguments cannot be read as JSON ({exc}); send plain JSON data"
                ) from None
        if size > limit:
            raise ArgumentError(
                f"arguments are {size} bytes as JSON, over the limit of {limit}; send less data"
            )
        return arguments

    def _classify(self, tool: RegisteredTool, call: ToolCall, kwargs: Mapping[str, Any]) -> Request:
        """Step 3: the facts the policy decides on: who calls which tool, whether it is
        read-only, the paths it will touch and how (canonical; resolved lexically against
        /workspace until a virtual filesystem is attached), and the command it will run."""
        spec = tool.spec
        if not spec.paths and spec.command is None:
            key = (tool, call.subject)
            request = self._requests.get(key)
            if request is None:
                if len(self._requests) >= 4096:
                    self._requests.clear()
                request = self._requests[key] = Request(
                    call.subject,
                    tool.name,
                    "call",
                    (),
                    None,
                    self._read_only(tool),
                    spec.dangerous_paths,
                )
            return request
        paths: list[tuple[str, Access]] = []
        for name, access in spec.paths.items():
            value = kwargs.get(name)
            values = value if isinstance(value, list | tuple | set | frozenset) else [value]
            for item in values:
                if item is None:
                    continue  # an optional path left out touches nothing
                # a pydantic Path, or anything else: judge its text, never skip it
                text = os.fsdecode(item) if isinstance(item, os.PathLike) else str(item)
                paths.extend((where, access) for where in self._where(text, spec.path_space))
        command = None
        if spec.command is not None:
            given = kwargs.get(spec.command)
            command = given if isinstance(given, str) else str(given)
            if spec.command_prefix:
                command = shlex.join([*spec.command_prefix, command])
            else:
                # the files its redirections open, resolved like any path argument
                for target, opened in self.policy.command_line(command).paths():
                    paths.extend((where, opened) for where in self._where(target, "logical"))
        return Request(
            call.subject,
            tool.name,
            "execute" if spec.command is not None else "call",
            tuple(paths),
            command,
            self._read_only(tool),
            spec.dangerous_paths,
        )

    def _read_only(self, tool: RegisteredTool) -> bool:
        """Whether the policy treats ``tool`` as read-only: its own word, or the claim of a
        source (an MCP server) the policy trusts."""
        spec = tool.spec
        return spec.read_only or (spec.read_only_hint and spec.origin in self._trusted)

    def _where(self, path: str, space: str) -> list[str]:
        """Where a path argument really is, for the policy. When its last component is a
        symlink, both the link (what a delete or a rename acts on) and its target (what a read
        or a write reaches) are judged, so a link can neither launder a protected target nor
        hide a protected name. Logical paths resolve through the virtual filesystem (lexically
        without one), host paths through the host (raw tools). A path that leads out of the
        sandbox raises PathEscapeError, which denies the call."""
        if space == "host":
            spelled = _canonical(path)
            return list(dict.fromkeys((spelled, os.path.realpath(spelled))))
        if self.fs is None:
            return [_canonical(path)]
        try:
            name = self.fs.canonical(path, follow_last=False)
            target = self.fs.canonical(path)
        except PathEscapeError:
            raise
        except SandboxError:
            # not a refusal but a plain mistake (a file used as a folder, a link loop): judge
            # the spelling, and let the tool report the real error when it runs
            return [_canonical(path)]
        return [name] if name == target else [name, target]

    def _decide(
        self,
        tool: RegisteredTool,
        request: Request,
        kwargs: dict[str, Any],
        ctx: ToolContext | None,
    ) -> Decision:
        """Step 4: the policy decides; the tool's own permission hook can only make the
        decision stricter. A hook that fails denies: a permission check never fails open."""
        decision = self.policy.decide(request)
        if (
            request.action == "execute"
            and self.policy.process.require_isolation
            and not isolation_available()
        ):
            return Decision(
                Effect.DENY,
                "require-isolation",
                "the policy requires isolation for commands, and bubblewrap is not available "
                "here: install the 'bubblewrap' package (and allow unprivileged user namespaces)",
                "execute",
                request.command,
            )
        check = tool.permission_check
        if check is not None and ctx is not None:
            try:
                verdict = check(kwargs, ctx)
            except Exception as exc:
                return Decision(
                    Effect.DENY,
                    f"{tool.name}.check_permissions",
                    f"the permission check failed ({type(exc).__name__}: {exc}), so the call is "
                    "denied",
                )
            if verdict is not None and not isinstance(verdict, Decision):
                return Decision(
                    Effect.DENY,
                    f"{tool.name}.check_permissions",
                    f"the permission check returned {type(verdict).__name__}, not a Decision",
                )
            decision = strictest(decision, verdict)
        return decision

    async def _ask(self, admitted: Admitted, started: float) -> Admitted | ToolResult:
        """An "ask" decision: the approver answers, and its answer becomes the decision."""
        asked = admitted.decision
        answer: object = False
        if self.approver is None:
            if asked.shadow:  # a trial rollout blocks nothing it would only have asked about
                admitted.decision = asked._replace(
                    effect=Effect.WARN,
                    reason=f"shadow mode: would ask for approval ({asked.reason}); none configured",
                )
                return self._verdict(admitted, started)
            reason = f"{asked.reason} — approval needed, and no approver is configured"
        else:
            verdict = ""
            try:
                answer = self.approver(admitted.call, asked)
                if inspect.isawaitable(answer):
                    answer = await answer
            except PermissionDeniedError as exc:  # a refusal that says why
                answer, verdict = False, str(exc)
            except Exception as exc:
                answer = False  # a failing approver refuses
                admitted.metadata.setdefault("warnings", []).append(
                    f"the approver failed ({type(exc).__name__}: {exc}); treated as a refusal"
                )
            if not verdict:
                verdict = (
                    "approved by the approver" if answer is True else "refused by the approver"
                )
            reason = f"{asked.reason} — {verdict}"
        approved = answer is True
        # keep what the decision was about (rule, path or command, shadow): only the verdict changes
        admitted.decision = asked._replace(
            effect=Effect.ALLOW if approved else Effect.DENY, reason=reason
        )
        admitted.metadata["approval"] = "approved" if approved else "refused"
        return self._verdict(admitted, started)

    def _verdict(self, admitted: Admitted, started: float) -> Admitted | ToolResult:
        """Deny stops the call here; warn is noted and logged; allow passes."""
        decision = admitted.decision
        if decision.effect is Effect.DENY:
            return ToolResult(
                call_id=admitted.call.id,
                tool=admitted.tool.name,
                status="denied",
                error=ErrorInfo(PermissionDeniedError.__name__, decision.reason),
                decision=decision,
                duration_s=perf_counter() - started,
                metadata=admitted.metadata,
            )
        if decision.effect is Effect.WARN:
            admitted.metadata.setdefault("warnings", []).append(decision.reason)
            log.warning(
                "tool %s (call %s) runs with a warning: %s",
                admitted.tool.name,
                admitted.call.id,
                decision.reason,
            )
        return admitted

    # -- steps 5-7: schedule, run, result ----------------------------------------------------

    async def _execute(self, call: ToolCall, admitted: Admitted, started: float) -> ToolResult:
        tool = admitted.tool
        if tool.mode is Mode.EXTERNAL:
            return self._pending(admitted, started)
        timeout = tool.spec.timeout or self.default_timeout
        if self._has_limits:
            exclusive, gates = self._slot(tool, call.subject)
        else:
            exclusive, gates = not tool.spec.shares, _NO_GATES
        if (gates or not self._scheduler.try_acquire(exclusive)) and not await self._acquire(
            exclusive, gates, timeout
        ):
            waited = self._waited(admitted.tool, call.subject)
            return outcomes.timed_out(admitted, started, 0, timeout, waited=waited)
        try:
            value, attempts = await self._run(admitted, timeout)
        except RunFailed as failed:
            return outcomes.run_failure(admitted, started, failed)
        finally:
            self._release(exclusive, gates)
        return outcomes.success(admitted, started, value, attempts, self.max_result_chars)

    def _exclusive(self, tool: RegisteredTool, subject: str) -> bool:
        """Whether calls of ``tool`` must run alone: not concurrency-safe, or made exclusive by
        the policy's limits."""
        if not tool.spec.shares:
            return True
        return self._has_limits and self.policy.limits_for(tool.name, subject).exclusive

    def _slot(self, tool: RegisteredTool, subject: str) -> tuple[bool, Sequence[asyncio.Semaphore]]:
        """Step 5: whether the call must run alone, and which caps it must hold."""
        if not self._has_limits:
            return not tool.spec.shares, []
        limits = self.policy.limits_for(tool.name, subject)
        gates = self._gates.for_call(
            tool.name, subject, (limits.global_cap, limits.subject_cap, limits.tool_cap)
        )
        return self._exclusive(tool, subject), gates

    def _waited(self, tool: RegisteredTool, subject: str) -> str:
        """What a call that timed out waiting for a slot was waiting for."""
        if not self._has_limits:
            return "other calls held the engine"
        limits = self.policy.limits_for(tool.name, subject)
        caps = [
            f"{what} {cap}"
            for what, cap in (
                ("the engine's cap of", limits.global_cap),
                (f"the cap for {subject} of", limits.subject_cap),
                (f"the cap for {tool.name} of", limits.tool_cap),
            )
            if cap is not None
        ]
        if not caps:
            return "other calls held the engine"
        return "the policy's limits were reached: " + ", ".join(caps)

    async def _acquire(
        self, exclusive: bool, gates: Sequence[asyncio.Semaphore], limit_s: float
    ) -> bool:
        """Step 5 (slow path): wait for the caps and a slot, at most ``limit_s`` seconds in
        all. False when the time ran out (nothing is held then)."""
        deadline = self._watch().arm(limit_s)
        held: list[asyncio.Semaphore] = []
        try:
            for gate in gates:
                await gate.acquire()
                held.append(gate)
            await self._scheduler.acquire(exclusive)
        except asyncio.CancelledError:
            for gate in reversed(held):
                gate.release()
            if deadline.stop():
                return False
            raise
        deadline.stop()
        return True

    def _release(self, exclusive: bool, gates: Sequence[asyncio.Semaphore]) -> None:
        self._scheduler.release(exclusive)
        for gate in reversed(gates):
            gate.release()

    async def _run(self, admitted: Admitted, limit_s: float) -> tuple[Any, int]:
        """Step 6: attempts, each under its own deadline, retried per the retry policy."""
        tool = admitted.tool
        watchdog = self._watch()
        attempt = 0
        while True:
            attempt += 1
            deadline = watchdog.arm(limit_s)
            try:
                value = await self._work(admitted)
                if tool.mode is Mode.SYNC and inspect.isawaitable(value):
                    value = await value  # a sync callable that returned a coroutine
            except asyncio.CancelledError:
                if not deadline.stop():
                    raise
                error: BaseException = self._timed_out(admitted, limit_s)
            except (Exception, SystemExit) as exc:
                deadline.stop()
                error = exc
            else:
                deadline.stop()
                if deadline.cancel_requested():
                    # the caller was cancelled while the tool ran, and the tool swallowed the
                    # CancelledError: deliver it anyway, cancellation must never be lost
                    raise asyncio.CancelledError
                return value, attempt
            await self._backoff(admitted, error, attempt)

    def _work(self, admitted: Admitted) -> Awaitable[Any]:
        """The awaitable that does one attempt's work, by how the tool runs."""
        tool = admitted.tool
        mode = tool.mode
        if mode is Mode.ASYNC:
            return cast(Awaitable[Any], tool.invoke(admitted.kwargs, admitted.ctx))
        if mode is Mode.SYNC:
            return self._in_thread(tool.invoke, admitted.kwargs, admitted.ctx)
        if mode is Mode.ASYNC_GEN:
            return _drain_async(tool.invoke(admitted.kwargs, admitted.ctx))
        return self._in_thread(_drain_sync, tool.invoke, admitted.kwargs, admitted.ctx)

    def _timed_out(self, admitted: Admitted, limit_s: float) -> ToolTimeoutError:
        if admitted.tool.mode in (Mode.SYNC, Mode.SYNC_GEN):
            admitted.metadata.setdefault("warnings", []).append(
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
            status: Status = "timeout" if isinstance(error, ToolTimeoutError) else "error"
            raise RunFailed(error, attempt, status)
        delay = policy.delay(attempt, self._rng)
        admitted.metadata.setdefault("retries", []).append(
            {"attempt": attempt, "error": str(ErrorInfo.of(error)), "delay_s": round(delay, 4)}
        )
        log.info(
            "retrying %s after %s (attempt %d, waiting %.3fs)", tool.name, error, attempt, delay
        )
        await asyncio.sleep(delay)

    def _in_thread(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        executor = self._executor
        if executor is None:
            executor = self._executor = WorkerPool(self._max_workers)
        context = contextvars.copy_context()
        return asyncio.get_running_loop().run_in_executor(
            executor, functools.partial(context.run, fn, *args)
        )

    def _pending(self, admitted: Admitted, started: float) -> ToolResult:
        """An external tool's call: admitted, then left for someone outside to complete."""
        self._waiting_external[admitted.call.id] = (admitted, started)
        return outcomes.pending(admitted, started)

    def complete(self, call_id: str, value: Any) -> ToolResult:
        """Complete a pending call of an external tool with what was done outside (content, a
        `ToolOutput`, or an exception for a failure). Returns the final result, which also
        reaches `calls` listeners and `calls.wait`. Raises LookupError for an unknown id."""
        entry = self._waiting_external.pop(call_id, None)
        if entry is None:
            waiting = ", ".join(self._waiting_external) or "(none)"
            raise LookupError(f"no external call {call_id!r} is pending; pending: {waiting}")
        admitted, started = entry
        if isinstance(value, BaseException):
            result = outcomes.run_failure(admitted, started, RunFailed(value, 1, "error"))
        else:
            result = outcomes.success(admitted, started, value, 1, self.max_result_chars)
        self._finish(admitted.call, result)
        return result

    @property
    def pending_external(self) -> list[str]:
        """Ids of external calls waiting for `complete`."""
        return list(self._waiting_external)

    async def _produce(
        self, admitted: Admitted, queue: asyncio.Queue[list[Block]], deadline: float
    ) -> tuple[Any, int]:
        """The streaming run: generator yields go to ``queue`` as they come. Retries happen
        only while nothing has been delivered, so a consumer never sees a chunk twice."""
        tool = admitted.tool
        if tool.mode not in (Mode.ASYNC_GEN, Mode.SYNC_GEN):
            remaining = max(0.001, deadline - asyncio.get_running_loop().time())
            return await self._run(admitted, remaining)
        attempt = 0
        while True:
            attempt += 1
            collected: list[Block] = []
            try:
                if tool.mode is Mode.ASYNC_GEN:
                    agen = tool.invoke(admitted.kwargs, admitted.ctx)
                    try:
                        async for item in agen:
                            blocks = to_content(item)
                            collected.extend(blocks)
                            queue.put_nowait(blocks)
                    finally:
                        await agen.aclose()
                else:
                    gen = tool.invoke(admitted.kwargs, admitted.ctx)  # creating it runs nothing
                    try:
                        while True:
                            done, item = await self._in_thread(_next_or_done, gen)
                            if done:
                                break
                            blocks = to_content(item)
                            collected.extend(blocks)
                            queue.put_nowait(blocks)
                    finally:
                        await self._in_thread(gen.close)
                return merge_blocks(collected), attempt
            except asyncio.CancelledError:
                raise
            except (Exception, SystemExit) as exc:
                if collected:
                    raise RunFailed(exc, attempt, "error") from None
                await self._backoff(admitted, exc, attempt)

    def _finish_from_task(
        self,
        call: ToolCall,
        admitted: Admitted,
        started: float,
        producer: asyncio.Task[tuple[Any, int]],
    ) -> ToolResult:
        error = producer.exception()
        if isinstance(error, RunFailed):
            return outcomes.run_failure(admitted, started, error)
        if error is not None:
            return outcomes.run_failure(admitted, started, RunFailed(error, 1, "error"))
        value, attempts = producer.result()
        return outcomes.success(admitted, started, value, attempts, self.max_result_chars)


_NO_GATES: tuple[asyncio.Semaphore, ...] = ()  # what a call holds when the policy sets no caps


async def _drain_async(agen: AsyncIterator[Any]) -> list[Block]:
    collected: list[Block] = []
    try:
        async for item in agen:
            collected.extend(to_content(item))
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


def _next_or_done(gen: Any) -> tuple[bool, Any]:
    try:
        return False, next(gen)
    except StopIteration:
        return True, None


def _canonical(path: str) -> str:
    """A path as the policy sees it without a filesystem: absolute, normalised, POSIX. A path
    no file can have (NUL, empty) is passed on as written, and the policy refuses it."""
    try:
        return canonical(path)
    except PathSpellingError:
        return path
