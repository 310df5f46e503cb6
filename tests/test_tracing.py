"""OpenTelemetry tracing (engine/observe/tracing.py, fed by the engine's observers), end to end
with the real OpenTelemetry SDK: real tracer providers, real processors, real exporters, a real
`Engine`.

What a user of the traces relies on, and so what is tested here:

* every call is exactly one finished span, ``execute_tool {tool}``, with the GenAI attributes
  (operation, tool name, call id, description, ``error.type``) and Stockade's own (subject,
  status, attempts, the decision's effect and rule), whatever way the call ends: ok, error,
  denied, timeout, cancelled, unknown tool; no span is left open;
* retries, approvals and warnings are span events; the paths a call touched, the bytes it
  wrote, the command it ran and the isolation it ran under are attributes;
* run spans (`Engine.run_span`, `Engine.call_many`) parent the calls made inside them, and a
  span the tool itself starts nests under its call's span; streamed calls are spans too;
* arguments and results appear only with ``record_content=True``, redacted (`redact` is also
  tested on its own, with cases that must be redacted and ordinary text that must be kept),
  cut when huge, and never able to break a call;
* the exporters (JSON lines, console, OTLP) work, and one that fails or hangs never slows or
  breaks a call: a failure is logged once;
* an engine without a tracer provider makes no spans at all.

Spans are read from `InMemorySpanExporter` (`memory_provider`), which sees a span only once it
has ended: "finished spans == calls" is how a leaked, never-ended span would show.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import random
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from support import collect, require_bubblewrap, until

from stockade.engine import Engine, RetryPolicy, ToolCall, Toolkit, ToolResult, tool
from stockade.engine.builtin.files import add_file_tools
from stockade.engine.builtin.shell import add_shell_tools
from stockade.engine.observe.tracing import (
    MAX_RECORDED_CHARS,
    REDACTED,
    memory_provider,
    redact,
    tracer_provider,
)
from stockade.policies import Policy
from stockade.sandbox import VirtualFS

FAST_RETRY = RetryPolicy(initial_delay_s=0.001)

# What tools did, so a test can wait until a tool is running (and tell whether it ran).
ran: list[str] = []
# How many times `flaky` has been called: it fails the first time only.
FLAKY = {"calls": 0}


@pytest.fixture(autouse=True)
def _fresh_state() -> None:
    ran.clear()
    FLAKY["calls"] = 0


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A memory provider, shut down after the test so no processor outlives it."""
    provider, exporter = memory_provider()
    yield provider, exporter
    provider.shutdown()


# -- tools and the policy that decides them ----------------------------------------------------


@tool(read_only=True)
async def echo(text: str) -> str:
    """Echo the text back."""
    ran.append("echo")
    return text


@tool(retry=False)
async def boom() -> str:
    """Always fail."""
    ran.append("boom")
    raise ValueError("boom")


@tool()
async def poke() -> str:
    """A tool the policy denies."""
    ran.append("poke")
    return "poked"


@tool(timeout=0.05, retry=False)
async def sleepy() -> str:
    """Take far longer than its timeout."""
    ran.append("sleepy")
    await asyncio.sleep(10)
    return "never"


@tool()
async def blocker() -> str:
    """Run until cancelled."""
    ran.append("blocker")
    await asyncio.sleep(10)
    return "never"


@tool(idempotent=True)
async def flaky() -> str:
    """Fail with a transient error the first time, then succeed."""
    FLAKY["calls"] += 1
    if FLAKY["calls"] == 1:
        raise ConnectionError("connection reset")
    return "ok at last"


@tool()
async def guarded() -> str:
    """A tool the policy asks about."""
    ran.append("guarded")
    return "ran"


@tool()
async def risky() -> str:
    """A tool the policy warns about."""
    ran.append("risky")
    return "ran"


@tool()
async def login(
    user: str, password: str, api_key: str, token: str, headers: dict[str, str], note: str
) -> str:
    """Log in (arguments full of secrets); answer with the note."""
    return note


@tool()
async def huge() -> str:
    """A result far larger than a span should hold."""
    return "x" * 100_000


@tool()
async def opaque() -> object:
    """A result that cannot be turned into content."""
    return object()


@tool()
async def countdown() -> Any:
    """Stream three chunks."""
    for n in (3, 2, 1):
        yield str(n)


@tool()
async def endless() -> Any:
    """Stream one chunk, then wait forever (the consumer stops it)."""
    yield "first"
    await asyncio.sleep(10)
    yield "never"


TOOLS = (echo, boom, poke, sleepy, blocker, flaky, guarded, risky, login, huge, opaque)

# Named rules for everything, so spans carry known rules; no built-in dangerous paths.
POLICY = Policy.from_dict(
    {
        "rules": [
            {"id": "no-poke", "effect": "deny", "tools": ["poke"], "reason": "poking is off"},
            {"id": "ask-guarded", "effect": "ask", "tools": ["guarded"], "reason": "sure?"},
            {"id": "mind-risky", "effect": "warn", "tools": ["risky"], "reason": "careful"},
            {"id": "tools-ok", "effect": "allow", "tools": ["*"], "reason": "tools are fine"},
        ],
        "dangerous_paths": {"replace": []},
    }
)


def make_engine(provider: TracerProvider | None, *tools: Any, **kwargs: Any) -> Engine:
    """An engine over ``tools`` (all of `TOOLS` when none), tracing to ``provider``."""
    toolkit = Toolkit()
    for item in tools or TOOLS:
        toolkit.add(item)
    kwargs.setdefault("policy", POLICY)
    kwargs.setdefault("retry", FAST_RETRY)
    kwargs.setdefault("rng", random.Random(0))
    return Engine(toolkit, tracer_provider=provider, **kwargs)


async def run(engine: Engine, name: str, **arguments: Any) -> ToolResult:
    return await engine.call(ToolCall(name=name, arguments=arguments, subject="alice"))


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    """The one finished span, after checking there is exactly one."""
    spans = exporter.get_finished_spans()
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def no_open_spans(engine: Engine) -> None:
    """The engine's tracer holds no span still waiting for its result (a leaked span)."""
    assert engine._observers is not None
    assert engine._observers._tracer.spans == {}


# -- 1 & 2. one span per call, with its attributes, for every way a call ends ------------------


async def test_a_call_is_one_span_with_the_genai_and_stockade_attributes(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    engine = make_engine(provider)
    call = ToolCall(name="echo", arguments={"text": "hi"}, subject="alice")
    result = await engine.call(call)
    assert result.status == "ok"
    span = only_span(exporter)
    assert span.name == "execute_tool echo"
    assert attrs(span) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Echo the text back.",
        "stockade.subject": "alice",
        "stockade.status": "ok",
        "stockade.attempts": 1,
        "stockade.decision.effect": "allow",
        "stockade.decision.rule": "tools-ok",
    }
    assert span.status.status_code in (StatusCode.UNSET, StatusCode.OK)
    assert span.end_time is not None
    assert span.start_time is not None
    assert span.end_time >= span.start_time
    # the call's span is no longer current once the call returned: nothing leaks to the caller
    assert not trace.get_current_span().get_span_context().is_valid
    no_open_spans(engine)


@pytest.mark.parametrize(
    ("name", "status", "error_type", "effect", "rule"),
    [
        pytest.param("boom", "error", "ValueError", "allow", "tools-ok", id="error"),
        pytest.param("poke", "denied", "PermissionDeniedError", "deny", "no-poke", id="denied"),
        pytest.param("sleepy", "timeout", "ToolTimeoutError", "allow", "tools-ok", id="timeout"),
    ],
)
async def test_a_failed_call_is_an_error_span_naming_the_error_type(
    traced: tuple[TracerProvider, InMemorySpanExporter],
    name: str,
    status: str,
    error_type: str,
    effect: str,
    rule: str,
) -> None:
    provider, exporter = traced
    engine = make_engine(provider)
    result = await run(engine, name)
    assert result.status == status
    span = only_span(exporter)
    values = attrs(span)
    assert span.name == f"execute_tool {name}"
    assert values["stockade.status"] == status
    assert values["error.type"] == error_type
    assert values["stockade.decision.effect"] == effect
    assert values["stockade.decision.rule"] == rule
    assert span.status.status_code is StatusCode.ERROR
    assert (span.status.description or "").startswith(f"{status}:")
    no_open_spans(engine)


async def test_a_denied_call_never_ran_and_its_span_says_so(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    await run(make_engine(provider), "poke")
    assert ran == []  # the span describes a refusal, not a run
    assert attrs(only_span(exporter))["stockade.attempts"] == 0


async def test_a_cancelled_call_still_ends_its_span(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    engine = make_engine(provider)
    task = asyncio.create_task(run(engine, "blocker"))
    await until(lambda: "blocker" in ran)
    assert exporter.get_finished_spans() == ()  # running: the span is still open
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    span = only_span(exporter)
    values = attrs(span)
    assert values["stockade.status"] == "cancelled"
    assert values["error.type"] == "CancelledError"
    assert span.status.status_code is StatusCode.ERROR
    no_open_spans(engine)


async def test_an_unknown_tool_is_a_span_too(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    engine = make_engine(provider)
    call = ToolCall(name="no_such_tool")
    result = await engine.call(call)
    assert result.status == "error"
    span = only_span(exporter)
    values = attrs(span)
    assert span.name == "execute_tool no_such_tool"
    assert values["gen_ai.tool.call.id"] == call.id
    assert values["error.type"] == "UnknownToolError"
    assert "gen_ai.tool.description" not in values  # no tool, nothing to describe
    assert "stockade.decision.effect" not in values  # never reached the policy
    assert span.status.status_code is StatusCode.ERROR
    no_open_spans(engine)


async def test_every_call_ends_exactly_one_span_whatever_its_outcome(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """All outcomes on one engine, some at once: as many finished spans as calls, one per
    call id, none left open."""
    provider, exporter = traced
    engine = make_engine(provider, approver=lambda call, decision: True)
    outcomes: list[tuple[str, dict[str, Any]]] = [
        ("echo", {"text": "a"}),
        ("boom", {}),
        ("poke", {}),
        ("sleepy", {}),
        ("nope", {}),
        ("flaky", {}),
        ("guarded", {}),
        ("risky", {}),
        ("echo", {"wrong": 1}),  # invalid arguments
    ]
    calls = [ToolCall(name=name, arguments=args) for name, args in outcomes]
    results = await asyncio.gather(*(engine.call(c) for c in calls))
    cancelled = asyncio.create_task(run(engine, "blocker"))
    await until(lambda: "blocker" in ran)
    cancelled.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await cancelled
    spans = exporter.get_finished_spans()
    assert len(spans) == len(calls) + 1
    ids = [attrs(s)["gen_ai.tool.call.id"] for s in spans]
    assert len(set(ids)) == len(ids)
    assert {c.id for c in calls} <= set(ids)
    by_id = {attrs(s)["gen_ai.tool.call.id"]: attrs(s) for s in spans}
    for call, result in zip(calls, results, strict=True):
        assert by_id[call.id]["stockade.status"] == result.status
    no_open_spans(engine)


# -- 3. retries, approvals and warnings are events -------------------------------------------


async def test_a_retry_is_an_event_and_attempts_are_counted(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    result = await run(make_engine(provider), "flaky")
    assert (result.status, result.attempts) == ("ok", 2)
    span = only_span(exporter)
    assert attrs(span)["stockade.attempts"] == 2
    retries = [e for e in span.events if e.name == "retry"]
    assert len(retries) == 1
    event = dict(retries[0].attributes or {})
    assert event["attempt"] == "1"
    assert "ConnectionError" in str(event["error"])
    assert span.status.status_code in (StatusCode.UNSET, StatusCode.OK)


@pytest.mark.parametrize(
    ("answer", "status", "effect", "approval"),
    [
        pytest.param(True, "ok", "allow", "approved", id="approved"),
        pytest.param(False, "denied", "deny", "refused", id="refused"),
    ],
)
async def test_an_approval_is_an_event(
    traced: tuple[TracerProvider, InMemorySpanExporter],
    answer: bool,
    status: str,
    effect: str,
    approval: str,
) -> None:
    provider, exporter = traced
    engine = make_engine(provider, approver=lambda call, decision: answer)
    assert (await run(engine, "guarded")).status == status
    span = only_span(exporter)
    values = attrs(span)
    # the span tells the final decision, and which rule asked
    assert values["stockade.decision.effect"] == effect
    assert values["stockade.decision.rule"] == "ask-guarded"
    approvals = [e for e in span.events if e.name == "approval"]
    assert len(approvals) == 1
    scope = {"scope": "once"} if approval == "approved" else {}  # how far a yes reaches
    assert dict(approvals[0].attributes or {}) == {"answer": approval, **scope}


async def test_a_warning_is_an_event(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    assert (await run(make_engine(provider), "risky")).status == "ok"
    span = only_span(exporter)
    assert attrs(span)["stockade.decision.effect"] == "warn"
    assert attrs(span)["stockade.decision.rule"] == "mind-risky"
    warnings = [e for e in span.events if e.name == "warning"]
    assert [dict(e.attributes or {}) for e in warnings] == [{"message": "careful"}]


async def test_a_plain_call_has_no_events(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    await run(make_engine(provider), "echo", text="hi")
    assert list(only_span(exporter).events) == []


# -- 4. paths, bytes, commands, isolation -----------------------------------------------------


async def test_a_file_write_names_its_canonical_path_and_bytes(
    traced: tuple[TracerProvider, InMemorySpanExporter], fs: VirtualFS, workspace: Path
) -> None:
    provider, exporter = traced
    toolkit = Toolkit()
    add_file_tools(toolkit)
    engine = Engine(toolkit, fs=fs, policy=POLICY, tracer_provider=provider)
    # a relative path: the span must carry the canonical one the policy judged
    result = await engine.call(
        ToolCall(name="write_file", arguments={"path": "docs/notes.md", "content": "hello"})
    )
    assert result.status == "ok", result
    assert (workspace / "docs" / "notes.md").read_text() == "hello"
    values = attrs(only_span(exporter))
    assert "write:/workspace/docs/notes.md" in values["stockade.paths"]
    assert values["stockade.bytes_written"] == 5


async def test_a_file_read_names_its_path_and_writes_no_bytes(
    traced: tuple[TracerProvider, InMemorySpanExporter], fs: VirtualFS, workspace: Path
) -> None:
    provider, exporter = traced
    (workspace / "a.txt").write_text("abc")
    toolkit = Toolkit()
    add_file_tools(toolkit)
    engine = Engine(toolkit, fs=fs, policy=POLICY, tracer_provider=provider)
    result = await engine.call(
        ToolCall(name="read_text_file", arguments={"path": "/workspace/a.txt"})
    )
    assert result.status == "ok", result
    values = attrs(only_span(exporter))
    assert "read:/workspace/a.txt" in values["stockade.paths"]
    assert "stockade.bytes_written" not in values


async def test_a_shell_command_names_the_command_and_its_isolation(
    traced: tuple[TracerProvider, InMemorySpanExporter], fs: VirtualFS
) -> None:
    require_bubblewrap()
    provider, exporter = traced
    toolkit = Toolkit()
    add_shell_tools(toolkit)
    async with Engine(
        toolkit, fs=fs, policy=Policy.preset("permissive"), tracer_provider=provider
    ) as engine:
        result = await engine.call(ToolCall(name="run_shell", arguments={"command": "echo hi"}))
    assert result.status == "ok", result
    values = attrs(only_span(exporter))
    assert values["stockade.command"] == "echo hi"
    assert values["stockade.isolation"] == "bubblewrap+layers"
    assert values["stockade.decision.effect"] == "allow"


# -- 5. run spans, nesting, streams -------------------------------------------------------------


async def test_calls_in_a_run_span_are_its_children(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    engine = make_engine(provider)
    with engine.run_span("session", agent="planner", turn=3):
        await run(engine, "echo", text="a")
        await run(engine, "boom")
    await run(engine, "echo", text="after")  # outside: a trace of its own
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == [
        "execute_tool echo",
        "execute_tool boom",
        "run session",
        "execute_tool echo",
    ]
    first, second, session, after = spans
    assert attrs(session) == {
        "stockade.run.name": "session",
        "stockade.run.agent": "planner",
        "stockade.run.turn": 3,
    }
    assert session.parent is None
    for child in (first, second):
        assert child.context is not None
        assert session.context is not None
        assert child.context.trace_id == session.context.trace_id
        assert child.parent is not None
        assert child.parent.span_id == session.context.span_id
    # the run span is no parent of what comes after it
    assert after.parent is None
    assert after.context is not None
    assert after.context.trace_id != session.context.trace_id


async def test_call_many_is_a_run_span_over_the_batch(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    engine = make_engine(provider)
    # echo is read-only (the calls run together), boom runs alone: both paths of call_many
    calls = [
        ToolCall(name="echo", arguments={"text": "a"}),
        ToolCall(name="echo", arguments={"text": "b"}),
        ToolCall(name="boom"),
        ToolCall(name="echo", arguments={"text": "c"}),
    ]
    results = await engine.call_many(calls)
    assert [r.status for r in results] == ["ok", "ok", "error", "ok"]
    spans = exporter.get_finished_spans()
    (batch,) = [s for s in spans if s.name == "run call_many"]
    children = [s for s in spans if s is not batch]
    assert attrs(batch)["stockade.run.calls"] == len(calls)
    assert batch.context is not None
    assert sorted(attrs(s)["gen_ai.tool.call.id"] for s in children) == sorted(c.id for c in calls)
    for child in children:
        assert child.parent is not None
        assert child.parent.span_id == batch.context.span_id
    no_open_spans(engine)


def nesting_tool(provider: TracerProvider, *, sync: bool) -> Any:
    """A tool that makes a span of its own, with a tracer from the engine's provider (through
    the closure: a global provider would hide whether the context reaches the tool)."""
    tracer = provider.get_tracer("test-tool")
    if sync:

        @tool(name="nested")
        def nested_sync() -> str:
            """Make a span of its own, in a worker thread."""
            with tracer.start_as_current_span("tool work"):
                return "done"

        return nested_sync

    @tool(name="nested")
    async def nested_async() -> str:
        """Make a span of its own."""
        with tracer.start_as_current_span("tool work"):
            await asyncio.sleep(0)
        return "done"

    return nested_async


@pytest.mark.parametrize("sync", [False, True], ids=["async-tool", "sync-tool"])
async def test_a_span_the_tool_makes_nests_under_its_call(
    traced: tuple[TracerProvider, InMemorySpanExporter], sync: bool
) -> None:
    provider, exporter = traced
    engine = make_engine(provider, nesting_tool(provider, sync=sync))
    with engine.run_span("session"):
        assert (await run(engine, "nested")).status == "ok"
    work, call, session = exporter.get_finished_spans()
    assert (work.name, call.name, session.name) == (
        "tool work",
        "execute_tool nested",
        "run session",
    )
    assert call.context is not None
    assert session.context is not None
    assert work.parent is not None
    assert work.parent.span_id == call.context.span_id
    assert call.parent is not None
    assert call.parent.span_id == session.context.span_id
    assert work.context is not None
    assert work.context.trace_id == session.context.trace_id
    await engine.aclose()


async def test_a_streamed_call_is_one_span(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    engine = make_engine(provider, echo, countdown)
    with engine.run_span("session"):
        plain = await collect(engine, ToolCall(name="echo", arguments={"text": "hi"}))
        counted = await collect(engine, ToolCall(name="countdown"))
    assert len(counted) == 4  # three chunks and the result
    final = counted[-1].result
    assert final is not None
    assert final.status == "ok"
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["execute_tool echo", "execute_tool countdown", "run session"]
    streamed, session = spans[:2], spans[2]
    assert [attrs(s)["gen_ai.tool.call.id"] for s in streamed] == [
        plain[-1].call_id,
        counted[-1].call_id,
    ]
    assert session.context is not None
    for span in streamed:
        assert attrs(span)["stockade.status"] == "ok"
        # a stream's span is not made current, but it still belongs to the run it started in
        assert span.parent is not None
        assert span.parent.span_id == session.context.span_id
    no_open_spans(engine)


async def test_a_stream_closed_early_ends_its_span_as_cancelled(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    engine = make_engine(provider, endless)
    async with contextlib.aclosing(engine.stream(ToolCall(name="endless"))) as stream:
        async for chunk in stream:
            assert not chunk.is_last
            break
    span = only_span(exporter)
    assert attrs(span)["stockade.status"] == "cancelled"
    assert span.status.status_code is StatusCode.ERROR
    no_open_spans(engine)


async def test_a_submitted_call_cancelled_before_it_began_is_a_span_too(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """A call cancelled before it began still has a result (cancelled, in `calls` and the
    audit log); the trace must not lose it."""
    provider, exporter = traced
    engine = make_engine(provider)
    call = ToolCall(name="echo", arguments={"text": "never"})
    task = engine.submit(call)
    task.cancel()  # before the task ever ran
    with pytest.raises(asyncio.CancelledError):
        await task
    result = engine.calls.result(call.id)
    assert result is not None
    assert result.status == "cancelled"
    assert ran == []
    span = only_span(exporter)
    assert attrs(span)["gen_ai.tool.call.id"] == call.id
    assert attrs(span)["stockade.status"] == "cancelled"


async def test_call_many_cancelled_mid_batch_ends_one_span_per_call(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """blocker is exclusive, so the batch runs one call at a time: cancelling during the first
    leaves two that never began, which call_many records as cancelled; each is a span."""
    provider, exporter = traced
    engine = make_engine(provider)
    calls = [ToolCall(name="blocker") for _ in range(3)]
    task = asyncio.create_task(engine.call_many(calls))
    await until(lambda: "blocker" in ran)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [r.status for r in (engine.calls.result(c.id) for c in calls) if r] == ["cancelled"] * 3
    call_spans = [s for s in exporter.get_finished_spans() if s.name == "execute_tool blocker"]
    assert sorted(attrs(s)["gen_ai.tool.call.id"] for s in call_spans) == sorted(
        c.id for c in calls
    )


# -- 6. content: only when asked, redacted, cut, never breaking a call ---------------------------

SECRETS = {
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "github": "ghp_" + "a1B2c3D4e5" * 3 + "abcdef",  # ghp_ and 36 characters
    "openai": "sk-" + "abcDEF123456ghiJKL789012",  # sk- and 24 characters
    "jwt": (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    ),
    "pem": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq9\nq8Zr3yT0\n"
        "-----END RSA PRIVATE KEY-----"
    ),
    "bearer": "Bearer abcdefghijklmnopqrstuvwx",
}


async def test_content_is_not_recorded_by_default(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    await run(make_engine(provider), "echo", text="something private")
    values = attrs(only_span(exporter))
    assert "gen_ai.tool.call.arguments" not in values
    assert "gen_ai.tool.call.result" not in values
    assert "something private" not in json.dumps(values)


async def test_recorded_content_is_there_with_secrets_redacted(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    engine = make_engine(provider, record_content=True)
    note = "keys: " + " | ".join(f"{kind}={value}" for kind, value in SECRETS.items())
    note += " -- the token count of the passenger list is 42"
    arguments = {
        "user": "alice",
        "password": "hunter2-hunter2",
        "api_key": "plain-looking-value",
        "token": "also-plain",
        "headers": {"Authorization": "Basic dXNlcjpwYXNz", "Accept": "text/plain"},
        "note": note,
    }
    result = await run(engine, "login", **arguments)
    assert result.status == "ok", result
    values = attrs(only_span(exporter))
    recorded_args = json.loads(str(values["gen_ai.tool.call.arguments"]))
    assert recorded_args["user"] == "alice"
    for key in ("password", "api_key", "token"):
        assert recorded_args[key] == REDACTED
    assert recorded_args["headers"] == {"Authorization": REDACTED, "Accept": "text/plain"}
    recorded_result = json.loads(str(values["gen_ai.tool.call.result"]))
    for field in (recorded_args["note"], recorded_result):
        assert field.startswith("keys: aws=[REDACTED] | github=[REDACTED] | openai=[REDACTED]")
        assert field.endswith("-- the token count of the passenger list is 42")
        assert field.count(REDACTED) == len(SECRETS)
    # no secret survives anywhere in the span, in any attribute
    everything = json.dumps(values)
    for secret in [*SECRETS.values(), "hunter2", "plain-looking-value", "dXNlcjpwYXNz"]:
        assert secret.split("\n")[0] not in everything


async def test_a_huge_result_is_cut_with_its_full_length(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    result = await run(make_engine(provider, record_content=True), "huge")
    assert result.status == "ok"
    text = str(attrs(only_span(exporter))["gen_ai.tool.call.result"])
    full = len(json.dumps("x" * 100_000))  # the JSON text of the result, quotes included
    assert text.endswith(f"... [{full:,} characters in all]")
    assert len(text) < MAX_RECORDED_CHARS + 100


async def test_a_result_that_cannot_be_serialised_does_not_break_the_call(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    result = await run(make_engine(provider, record_content=True), "opaque")
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "OutputError"
    span = only_span(exporter)
    assert attrs(span)["error.type"] == "OutputError"
    assert span.status.status_code is StatusCode.ERROR


def cyclic_arguments() -> dict[str, Any]:
    arguments: dict[str, Any] = {"text": "hi"}
    arguments["again"] = arguments
    return arguments


def deep_arguments() -> dict[str, Any]:
    nested: list[Any] = []
    for _ in range(5_000):
        nested = [nested]
    return {"text": "hi", "deep": nested}


@pytest.mark.parametrize("make", [cyclic_arguments, deep_arguments], ids=["cyclic", "deep"])
async def test_arguments_that_cannot_be_serialised_do_not_break_the_call(
    traced: tuple[TracerProvider, InMemorySpanExporter], make: Any
) -> None:
    """Recording content must not change what a call does: arguments the engine refuses (a
    mapping that contains itself, nesting thousands deep) are an error result with tracing as
    without it, not an exception out of `Engine.call`."""
    provider, exporter = traced
    arguments = make()
    untraced = await make_engine(None).call(ToolCall(name="echo", arguments=arguments))
    assert untraced.status == "error"
    engine = make_engine(provider, record_content=True)
    call = ToolCall(name="echo", arguments=arguments)
    traced_result = await engine.call(call)  # must return a result, not raise
    assert (traced_result.status, traced_result.error) == (untraced.status, untraced.error)
    span = only_span(exporter)
    assert attrs(span)["gen_ai.tool.call.id"] == call.id
    assert isinstance(attrs(span)["gen_ai.tool.call.arguments"], str)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # secrets inside longer text: only the secret goes
        *(
            pytest.param(f"use {s} here", f"use {REDACTED} here", id=f"value-{kind}")
            for kind, s in SECRETS.items()
        ),
        pytest.param("bearer ABCDEFGHIJKLMNOPQRSTUV.x", f"{REDACTED}", id="bearer-lowercase"),
        pytest.param(
            "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n(cut off)",
            REDACTED,
            id="pem-without-end",
        ),
        pytest.param("xoxb-1234567890-abcdefghij", REDACTED, id="slack"),
        # secret-looking keys: the whole value, whatever it is
        pytest.param({"password": "x"}, {"password": REDACTED}, id="key-password"),
        pytest.param({"api_key": "x"}, {"api_key": REDACTED}, id="key-api_key"),
        pytest.param({"apiKey": 12345}, {"apiKey": REDACTED}, id="key-apiKey-number"),
        pytest.param({"token": ["a", "b"]}, {"token": REDACTED}, id="key-token-list"),
        pytest.param({"Authorization": "Basic x"}, {"Authorization": REDACTED}, id="key-authz"),
        pytest.param({"client_secret": None}, {"client_secret": REDACTED}, id="key-secret"),
        pytest.param({"Cookie": "sid=1"}, {"Cookie": REDACTED}, id="key-cookie"),
        pytest.param(
            {"users": [{"name": "ann", "passwd": "x"}, ("tuple", SECRETS["aws"])]},
            {"users": [{"name": "ann", "passwd": REDACTED}, ["tuple", REDACTED]]},
            id="nested",
        ),
        # ordinary text stays, whatever words it uses
        *(
            pytest.param(text, text, id=f"keep-{text[:24]}")
            for text in [
                "token count",
                "passenger",
                "the bearer of bad news",
                "authentication failed: bad password",
                "my secret recipe uses a skeleton key",
                "sk-short",
                "ghp_short",
                "AKIA is a prefix",
                "commit 3f786850e387550fdab836ed7e6dc881de23001b",
                "id 123e4567-e89b-12d3-a456-426614174000",
                "https://example.com/docs/api/tokens?page=2",
                # hyphenated words: "sk-" inside a word is no OpenAI key
                "see risk-assessment-for-q3-planning.md",
                "the task-runner-configuration-file is missing",
            ]
        ),
        pytest.param({"note": "token count"}, {"note": "token count"}, id="keep-value-under-key"),
        pytest.param({"who": "passenger"}, {"who": "passenger"}, id="keep-passenger-value"),
        pytest.param([1, 2.5, True, None], [1, 2.5, True, None], id="keep-scalars"),
        # keys are judged by their words: these only contain a secret word's letters
        pytest.param({"author": "Ada"}, {"author": "Ada"}, id="keep-key-author"),
        pytest.param({"passenger": "Bo"}, {"passenger": "Bo"}, id="keep-key-passenger"),
        pytest.param({"max_tokens": 512}, {"max_tokens": 512}, id="keep-key-max_tokens"),
        pytest.param({"apiKey": "k"}, {"apiKey": "[REDACTED]"}, id="redact-key-camelCase"),
        pytest.param({"X-Auth-Token": "t"}, {"X-Auth-Token": "[REDACTED]"}, id="redact-key-header"),
        pytest.param({"db_password": "p"}, {"db_password": "[REDACTED]"}, id="redact-key-suffix"),
    ],
)
def test_redact(value: Any, expected: Any) -> None:
    assert redact(value) == expected


def test_redact_with_a_secret_key_given_redacts_the_whole_value() -> None:
    assert redact("anything at all", key="password") == REDACTED
    assert redact({"a": 1}, key="X-Api-Key") == REDACTED
    assert redact("anything at all", key="note") == "anything at all"


# -- 7. exporters --------------------------------------------------------------------------------


async def test_the_jsonl_exporter_writes_one_line_per_span(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "t.jsonl"  # missing folders are created
    provider = tracer_provider("jsonl", path=path)
    try:
        engine = make_engine(provider)
        with engine.run_span("session"):
            calls = [ToolCall(name="echo", arguments={"text": str(n)}) for n in range(3)]
            for call in calls:
                await engine.call(call)
        assert provider.force_flush(5_000)
        lines = path.read_text(encoding="utf-8").splitlines()
        assert len(lines) == 4
        spans = [json.loads(line) for line in lines]
        assert [s["name"] for s in spans] == ["execute_tool echo"] * 3 + ["run session"]
        assert [s["attributes"]["gen_ai.tool.call.id"] for s in spans[:3]] == [c.id for c in calls]
        trace_ids = {s["context"]["trace_id"] for s in spans}
        assert len(trace_ids) == 1
    finally:
        provider.shutdown()


async def test_the_console_exporter_prints_spans(capsys: pytest.CaptureFixture[str]) -> None:
    """The console is the process's stdout as it is when the provider is made (capsys here;
    contextlib.redirect_stdout, a notebook's stream elsewhere), not whatever stream was
    sys.stdout when OpenTelemetry was first imported."""
    provider = tracer_provider("console")
    try:
        await run(make_engine(provider), "echo", text="hi")
        assert provider.force_flush(5_000)
    finally:
        provider.shutdown()
    out = capsys.readouterr().out
    assert '"name": "execute_tool echo"' in out
    assert '"gen_ai.tool.name": "echo"' in out


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def test_the_otlp_exporter_needs_its_extra() -> None:
    if _installed("opentelemetry.exporter.otlp.proto.http.trace_exporter"):
        provider = tracer_provider("otlp", endpoint="http://127.0.0.1:4318/v1/traces")
        provider.shutdown()
        return
    with pytest.raises(ValueError, match=r"stockade\[otlp\]"):
        tracer_provider("otlp")


def test_an_unknown_exporter_name_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown exporter"):
        tracer_provider("zipkin")  # type: ignore[arg-type]


class FailingExporter(SpanExporter):
    """An exporter whose backend is down: every export raises (or, with ``report``, returns
    FAILURE the way a well-behaved exporter does) until ``healthy`` is set."""

    def __init__(self, *, report: bool = False) -> None:
        self.report = report
        self.healthy = False
        self.exports = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exports += 1
        if self.healthy:
            return SpanExportResult.SUCCESS
        if self.report:
            return SpanExportResult.FAILURE
        raise RuntimeError("collector unreachable")

    def shutdown(self) -> None:
        return None


def tracing_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == "stockade.tracing" and r.levelno == logging.ERROR
    ]


@pytest.mark.parametrize("report", [False, True], ids=["raises", "returns-failure"])
async def test_a_failing_exporter_is_logged_once_and_never_reaches_a_call(
    caplog: pytest.LogCaptureFixture, report: bool
) -> None:
    caplog.set_level(logging.ERROR, logger="stockade.tracing")
    exporter = FailingExporter(report=report)
    provider = tracer_provider(exporter)
    try:
        engine = make_engine(provider)
        # several rounds, each flushed: the exporter fails on several exports, not just one
        for _ in range(4):
            results = await asyncio.gather(*(run(engine, "echo", text="x") for _ in range(10)))
            assert [r.status for r in results] == ["ok"] * 10
            provider.force_flush(5_000)
        assert exporter.exports >= 4
        errors = tracing_errors(caplog)
        assert len(errors) == 1
        assert "FailingExporter" in errors[0].getMessage()
        # once it recovered and failed again, that is news worth one more line
        exporter.healthy = True
        await run(engine, "echo", text="x")
        provider.force_flush(5_000)
        exporter.healthy = False
        for _ in range(3):
            await run(engine, "echo", text="x")
            provider.force_flush(5_000)
        assert len(tracing_errors(caplog)) == 2
    finally:
        provider.shutdown()


class HangingExporter(SpanExporter):
    """An exporter whose backend never answers: export blocks for 5 s, or until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(5.0)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


async def test_a_hanging_exporter_delays_no_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # export early and keep a tiny queue: the hang starts during the test, and the queue
    # fills while it lasts, so both a busy exporter and a full queue are met by calls
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    exporter = HangingExporter()
    provider = tracer_provider(exporter)
    try:
        engine = make_engine(provider)
        await run(engine, "echo", text="first")
        await until(exporter.entered.is_set)  # the exporter is now stuck
        started = time.monotonic()
        results = [await run(engine, "echo", text=str(n)) for n in range(20)]
        elapsed = time.monotonic() - started
        assert [r.status for r in results] == ["ok"] * 20
        assert elapsed < 1.0, f"20 calls took {elapsed:.2f}s behind a hanging exporter"
        assert exporter.release.is_set() is False  # it really was hanging all along
    finally:
        # let the stuck export return, so that shutdown does not wait out the 5 s
        exporter.release.set()
        provider.shutdown()


# -- 8. no tracer provider, no spans -------------------------------------------------------------


async def test_an_engine_without_a_tracer_provider_makes_no_spans(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced  # exists, but is not given to the engine
    engine = make_engine(None, echo, boom, countdown, nesting_tool(provider, sync=False))
    assert engine._observers is None
    with engine.run_span("session", agent="planner"):  # works, and is nothing
        await run(engine, "echo", text="hi")
        await run(engine, "boom")
        await engine.call_many([ToolCall(name="echo", arguments={"text": t}) for t in "ab"])
        await collect(engine, ToolCall(name="countdown"))
    assert exporter.get_finished_spans() == ()
    # the only span is the one the tool itself made, and it is a root: nothing else exists
    assert (await run(engine, "nested")).status == "ok"
    (own,) = exporter.get_finished_spans()
    assert own.name == "tool work"
    assert own.parent is None


# -- the current span is given back whatever happens -----------------------------------------------


async def test_an_approver_that_interrupts_leaves_no_span_current(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """Ctrl-C at an approval prompt ends the call abruptly; the call's span must not stay the
    current one, or every later call (and span) would nest under it."""
    provider, _ = traced

    def interrupted(call: ToolCall, decision: Any) -> bool:
        raise KeyboardInterrupt

    engine = make_engine(
        provider,
        echo,
        policy=Policy.from_dict({"rules": [{"id": "ask", "effect": "ask", "tools": ["echo"]}]}),
        approver=interrupted,
    )
    before = trace.get_current_span()
    with pytest.raises(KeyboardInterrupt):
        await engine.call(ToolCall(name="echo", arguments={"text": "hi"}))
    assert trace.get_current_span() is before


async def test_the_same_call_object_run_twice_at_once_ends_two_spans(
    traced: tuple[TracerProvider, InMemorySpanExporter],
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider, exporter = traced
    engine = make_engine(provider, echo)
    call = ToolCall(name="echo", arguments={"text": "twice"})
    with caplog.at_level(logging.ERROR):
        await asyncio.gather(engine.call(call), engine.call(call))
    assert len(exporter.get_finished_spans()) == 2
    assert not [r for r in caplog.records if "detach" in r.getMessage()]
    no_open_spans(engine)
