"""The engine pipeline end to end: resolve, validate, classify, decide, schedule, run, result and
record, with real `Toolkit` and `Engine` objects on a real event loop.

Time-based tests use short sleeps and generous upper bounds (a loaded 2-core CI machine can be
slow, never fast): lower bounds are exact where the engine promises them ("never early").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import collect, until

from stockade.engine import (
    Emitter,
    Engine,
    ImageBlock,
    RetryableError,
    RetryPolicy,
    TextBlock,
    ToolBase,
    ToolCall,
    ToolChunk,
    ToolContext,
    Toolkit,
    ToolOutput,
    ToolResult,
    tool,
)
from stockade.engine.pipeline._deadline import Watchdog
from stockade.engine.pipeline._schedule import Scheduler
from stockade.policies import Decision, Effect

FAST_RETRY = RetryPolicy(initial_delay_s=0.001)

# Everything tools do is logged here, so a test can tell whether (and how often) a tool ran.
ran: list[Any] = []
# Concurrency seen by the tracking tools: calls inside a tool now, and the most at once.
ACTIVE = {"now": 0, "max": 0}
# Set after every test so that worker threads of hanging sync tools finish.
RELEASE = threading.Event()
# Opened by a streaming consumer once it has seen the first chunk.
STREAM_GATE: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    ran.clear()
    ACTIVE.update(now=0, max=0)
    RELEASE.clear()
    STREAM_GATE.clear()
    yield
    RELEASE.set()


def make_engine(*tools: Any, **kwargs: Any) -> Engine:
    """An engine over a fresh toolkit holding ``tools``; fast retries and a seeded rng."""
    toolkit = Toolkit()
    for item in tools:
        toolkit.add(item)
    kwargs.setdefault("retry", FAST_RETRY)
    kwargs.setdefault("rng", random.Random(0))
    return Engine(toolkit, **kwargs)


async def run(engine: Engine, name: str, arguments: Any = None, **kwargs: Any) -> ToolResult:
    args = {} if arguments is None else arguments
    return await engine.call(ToolCall(name=name, arguments=args, **kwargs))


def texts(chunks: list[ToolChunk]) -> list[str]:
    """The text of every non-final chunk."""
    return ["".join(b.text for b in c.content if isinstance(b, TextBlock)) for c in chunks[:-1]]


def final(chunks: list[ToolChunk]) -> ToolResult:
    """The result carried by the last chunk, after checking only the last chunk is final."""
    assert [c.is_last for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert all(c.result is None for c in chunks[:-1])
    result = chunks[-1].result
    assert result is not None
    return result


# -- tools ---------------------------------------------------------------------------------------


@tool(read_only=True)
async def echo(text: str) -> str:
    """Echo the text back."""
    ran.append("echo")
    return text


def ping() -> str:
    """Answer pong."""
    ran.append("ping")
    return "pong"


def typed(a: int, b: str = "x") -> str:
    """A tool with typed arguments."""
    ran.append(("typed", a, b))
    return f"{a}:{b}"


def grouped() -> str:
    """A tool in a group that is not active."""
    ran.append("grouped")
    return "grouped"


def sleepy_sync(seconds: float) -> str:
    """Block the calling thread for a while."""
    ran.append(("thread", threading.get_ident()))
    time.sleep(seconds)
    return "slept"


async def agen_words(n: int) -> AsyncIterator[str]:
    """Yield n words, asynchronously."""
    ran.append("agen_words")
    for i in range(n):
        await asyncio.sleep(0)
        yield f"w{i} "


def sync_gen_words(n: int) -> Iterator[str]:
    """Yield n words."""
    ran.append(("thread", threading.get_ident()))
    for i in range(n):
        yield f"s{i} "


class Point(BaseModel):
    x: int
    y: int


PNG = ImageBlock.from_bytes(b"\x89PNG\r\n\x1a\nnot really a png", "image/png")


@dataclass(frozen=True)
class Json:
    """Expected content: one text block holding this value as JSON."""

    value: Any


RETURN_VALUES: dict[str, tuple[Any, Any]] = {
    "str": ("hello", [TextBlock("hello")]),
    "empty str": ("", [TextBlock("")]),
    "int": (42, Json(42)),
    "float": (2.5, Json(2.5)),
    "bool": (True, Json(True)),
    "dict": ({"a": 1, "b": [1, 2], "c": None}, Json({"a": 1, "b": [1, 2], "c": None})),
    "list": ([1, "two", {"three": 3}], Json([1, "two", {"three": 3}])),
    "pydantic model": (Point(x=1, y=2), Json({"x": 1, "y": 2})),
    "None": (None, []),
    "text block": (TextBlock("block"), [TextBlock("block")]),
    "blocks": ([TextBlock("see:"), PNG], [TextBlock("see:"), PNG]),
    "image only": ([PNG], [PNG]),
}


async def give(kind: str) -> Any:
    """Return a value of the named kind."""
    ran.append("give")
    return RETURN_VALUES[kind][0]


async def with_metadata() -> ToolOutput:
    """Return content with metadata."""
    return ToolOutput({"rows": 3}, {"source": "cache", "rows": 3})


async def raises_value_error() -> str:
    """Fail with a ValueError."""
    ran.append("raises_value_error")
    raise ValueError("the widget is out of range")


async def raises_system_exit() -> str:
    """Try to exit the process."""
    ran.append("raises_system_exit")
    raise SystemExit(3)


def raises_system_exit_sync() -> str:
    """Try to exit the process from a worker thread."""
    ran.append("raises_system_exit_sync")
    raise SystemExit(4)


async def returns_object() -> Any:
    """Return something with no content form."""
    ran.append("returns_object")
    return object()


async def returns_bytes() -> Any:
    """Return raw bytes."""
    ran.append("returns_bytes")
    return b"\x00\x01binary"


@tool(timeout=0.2)
async def hang() -> str:
    """Never finish (within reason)."""
    ran.append("hang:start")
    try:
        await asyncio.sleep(30)
    finally:
        ran.append("hang:cleanup")
    return "late"


@tool(timeout=0.2)
def sync_hang() -> str:
    """Block a worker thread until the test is over."""
    ran.append("sync_hang:start")
    RELEASE.wait(10)
    return "late"


async def untimed_sleep(seconds: float) -> str:
    """Sleep, with no timeout of its own."""
    ran.append("untimed_sleep")
    await asyncio.sleep(seconds)
    return "rested"


@tool(timeout=0.2)
async def nap(seconds: float) -> str:
    """Sleep briefly under a 0.2 s timeout."""
    await asyncio.sleep(seconds)
    return "rested"


def _attempt(fail_times: int, error: type[BaseException], label: str) -> str:
    """Log an attempt and fail the first ``fail_times`` attempts with ``error``."""
    ran.append(label)
    number = ran.count(label)
    if number <= fail_times:
        raise error(f"connection reset (attempt {number})")
    return f"recovered after {number} attempts"


@tool(idempotent=True)
async def flaky_idempotent(fail_times: int) -> str:
    """Idempotent, fails with ConnectionError at first."""
    return _attempt(fail_times, ConnectionError, "attempt")


@tool(read_only=True)
async def flaky_read_only(fail_times: int) -> str:
    """Read-only, fails with ConnectionError at first."""
    return _attempt(fail_times, ConnectionError, "attempt")


@tool
async def flaky_plain(fail_times: int) -> str:
    """Neither idempotent nor read-only, fails with ConnectionError at first."""
    return _attempt(fail_times, ConnectionError, "attempt")


@tool
async def flaky_retryable(fail_times: int) -> str:
    """Not idempotent, but vouches its failures are safe to retry."""
    return _attempt(fail_times, RetryableError, "attempt")


@tool(idempotent=True)
async def idempotent_value_error(fail_times: int) -> str:
    """Idempotent, fails with a ValueError at first."""
    return _attempt(fail_times, ValueError, "attempt")


@tool(idempotent=True)
def flaky_sync(fail_times: int) -> str:
    """A sync idempotent tool failing with ConnectionError at first."""
    return _attempt(fail_times, ConnectionError, "attempt")


@tool(idempotent=True, retry=1)
async def flaky_no_retry(fail_times: int) -> str:
    """Idempotent, but its own policy says never retry."""
    return _attempt(fail_times, ConnectionError, "attempt")


FIVE_ATTEMPTS = RetryPolicy(attempts=5, initial_delay_s=0.001)


@tool(idempotent=True, retry=FIVE_ATTEMPTS)
async def flaky_five(fail_times: int) -> str:
    """Idempotent with a five-attempt policy."""
    return _attempt(fail_times, ConnectionError, "attempt")


@tool(idempotent=True, timeout=0.1)
async def hangs_once() -> str:
    """Hang on the first attempt, answer at once on the next."""
    ran.append("attempt")
    if ran.count("attempt") == 1:
        await asyncio.sleep(30)
    return "second time lucky"


@tool(
    idempotent=True,
    timeout=0.1,
    retry=RetryPolicy(initial_delay_s=0.001, retry_on_timeout=True),
)
async def hangs_once_retried() -> str:
    """Hang on the first attempt, answer at once on the next; timeouts are retried."""
    ran.append("attempt")
    if ran.count("attempt") == 1:
        await asyncio.sleep(30)
    return "second time lucky"


async def _tracked(label: str, seconds: float) -> str:
    ran.append(f"start:{label}")
    ACTIVE["now"] += 1
    ACTIVE["max"] = max(ACTIVE["max"], ACTIVE["now"])
    try:
        await asyncio.sleep(seconds)
    finally:
        ACTIVE["now"] -= 1
        ran.append(f"end:{label}")
    return label


@tool(read_only=True)
async def shared_work(label: str, seconds: float = 0.05) -> str:
    """Read-only: may share the engine."""
    return await _tracked(label, seconds)


@tool
async def exclusive_work(label: str, seconds: float = 0.05) -> str:
    """Changes things: runs alone."""
    return await _tracked(label, seconds)


@tool(concurrency_safe=True)
async def safe_writer(label: str, seconds: float = 0.05) -> str:
    """Writes, but declared safe to run alongside others."""
    return await _tracked(label, seconds)


@tool(timeout=0.1)
async def impatient(label: str) -> str:
    """Exclusive, with a short timeout."""
    return await _tracked(label, 0)


@tool(read_only=True)
async def slow_shared(label: str) -> str:
    """Sleep for long, noting cancellation."""
    ran.append(f"start:{label}")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        ran.append(f"cancelled:{label}")
        raise
    return label


@tool(timeout=0.25)
async def slow_with_deadline(label: str) -> str:
    """Sleep past its own deadline, noting cancellation."""
    return await slow_shared(label)


async def swallows_cancel() -> str:
    """Catch the cancellation and return anyway (a badly behaved tool)."""
    ran.append("swallow:start")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        ran.append("swallow:caught")
        return "swallowed"
    return "finished"


@tool(read_only=True)
async def stream_words(n: int) -> AsyncIterator[str]:
    """Yield n words, one at a time."""
    for i in range(n):
        await asyncio.sleep(0.005)
        yield f"w{i} "


async def gated_stream() -> AsyncIterator[str]:
    """Yield once, wait for the consumer to have seen it, yield again."""
    yield "first"
    await STREAM_GATE["gate"].wait()
    yield "second"


def sync_stream_words(n: int) -> Iterator[str]:
    """Yield n words from a worker thread."""
    for i in range(n):
        yield f"s{i} "


async def with_progress(steps: int, emit: Emitter) -> str:
    """Report progress while working."""
    ran.append(("emitter active", emit.active))
    for i in range(steps):
        emit.emit(f"step {i}")
        await asyncio.sleep(0.005)
    return "done"


def sync_with_progress(steps: int, emit: Emitter) -> str:
    """Report progress from a worker thread."""
    ran.append(("thread", threading.get_ident()))
    for i in range(steps):
        emit.emit(f"tick {i}")
        time.sleep(0.005)
    return "finished"


async def endless_stream() -> AsyncIterator[str]:
    """Yield forever, noting when it is stopped."""
    try:
        i = 0
        while True:
            yield f"chunk {i}"
            i += 1
            await asyncio.sleep(0.01)
    finally:
        ran.append("endless:finally")


@tool(idempotent=True, retry=FAST_RETRY)
async def flaky_stream(fail_times: int) -> AsyncIterator[str]:
    """Fail before yielding anything at first, then stream."""
    ran.append("attempt")
    if ran.count("attempt") <= fail_times:
        raise ConnectionError("not yet")
    yield "a"
    yield "b"


@tool(idempotent=True, retry=FAST_RETRY)
async def fails_midway() -> AsyncIterator[str]:
    """Yield something, then fail."""
    ran.append("attempt")
    yield "partial"
    raise ConnectionError("dropped mid-stream")


@tool(timeout=0.2)
async def stalls_stream() -> AsyncIterator[str]:
    """Yield once, then stall past the timeout."""
    yield "early"
    await asyncio.sleep(30)
    yield "never"


@tool(read_only=True)
async def labelled(label: str, seconds: float) -> str:
    """Sleep, then answer with the label (read-only: calls overlap)."""
    await asyncio.sleep(seconds)
    return label


@tool(timeout=0.3)
async def blocked(label: str) -> str:
    """Wait until the test releases it."""
    ran.append(f"start:{label}")
    try:
        await asyncio.sleep(30)
    finally:
        ran.append(f"cleanup:{label}")
    return label


@tool(external=True, timeout=0.3)
def remote_job(query: str) -> str:
    """Runs somewhere else; the result is delivered."""
    ran.append("remote_job ran locally")
    raise AssertionError("an external tool must not run locally")


class QueryArgs(BaseModel):
    query: str


class RemoteBase(ToolBase):
    """An external tool defined as a class."""

    name = "remote_base"
    args_model = QueryArgs
    external = True
    timeout = 0.3


async def long_text(n: int, char: str = "x") -> str:
    """Return n characters."""
    return char * n


async def three_blocks() -> list[TextBlock]:
    """Return three text blocks of 60 characters each."""
    return [TextBlock("a" * 60), TextBlock("b" * 60), TextBlock("c" * 60)]


def hyp_target(a: int, b: str = "x") -> str:
    """The target of the property test."""
    ran.append((a, b))
    return f"{a}:{b}"


# -- 1. happy paths ------------------------------------------------------------------------------


async def test_async_tool_result_fields() -> None:
    engine = make_engine(echo)
    result = await run(engine, "echo", {"text": "hi"}, id="call-1")
    assert isinstance(result, ToolResult)
    assert result.call_id == "call-1"
    assert result.tool == "echo"
    assert result.status == "ok"
    assert result.ok
    assert result.content == [TextBlock("hi")]
    assert result.error is None
    assert result.attempts == 1
    assert result.duration_s > 0
    assert result.decision is not None
    assert result.decision.effect is Effect.ALLOW
    assert result.decision.allowed
    assert ran == ["echo"]


async def test_sync_tool_runs_in_a_worker_thread_while_the_loop_keeps_running() -> None:
    engine = make_engine(sleepy_sync)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    try:
        result = await run(engine, "sleepy_sync", {"seconds": 0.2})
    finally:
        ticking.cancel()
    assert result.status == "ok"
    assert result.text == "slept"
    [(_, tool_thread)] = ran
    assert tool_thread != threading.get_ident()  # not the event loop's thread
    assert tool_thread != threading.main_thread().ident
    # A blocked loop would have ticked at most once or twice during the 0.2 s sleep.
    assert ticks >= 5


async def test_async_generator_tool_content_is_the_merged_yields() -> None:
    engine = make_engine(agen_words)
    result = await run(engine, "agen_words", {"n": 3})
    assert result.status == "ok"
    assert result.content == [TextBlock("w0 w1 w2 ")]
    assert result.attempts == 1


async def test_sync_generator_tool_runs_off_the_loop_and_merges_its_yields() -> None:
    engine = make_engine(sync_gen_words)
    result = await run(engine, "sync_gen_words", {"n": 4})
    assert result.status == "ok"
    assert result.content == [TextBlock("s0 s1 s2 s3 ")]
    [(_, tool_thread)] = ran
    assert tool_thread != threading.get_ident()


@pytest.mark.parametrize("kind", list(RETURN_VALUES))
async def test_return_values_become_content(kind: str) -> None:
    engine = make_engine(give)
    result = await run(engine, "give", {"kind": kind})
    assert result.status == "ok", result.error
    expected = RETURN_VALUES[kind][1]
    if isinstance(expected, Json):
        [block] = result.content
        assert isinstance(block, TextBlock)
        assert json.loads(block.text) == expected.value
    else:
        assert result.content == expected


async def test_tool_output_merges_its_metadata_into_the_result() -> None:
    engine = make_engine(with_metadata)
    result = await run(engine, "with_metadata")
    assert result.status == "ok"
    assert json.loads(result.text) == {"rows": 3}
    assert result.metadata["source"] == "cache"
    assert result.metadata["rows"] == 3


async def test_emitter_is_silent_under_call() -> None:
    engine = make_engine(with_progress)
    result = await run(engine, "with_progress", {"steps": 2})
    assert result.status == "ok"
    assert result.content == [TextBlock("done")]
    assert ran == [("emitter active", False)]


# -- 2. bad input: always a ToolResult, never an exception ---------------------------------------


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def _nested_json(depth: int, key: str = "a") -> str:
    """Arguments whose ``key`` is ``depth`` levels of nested lists, as JSON text."""
    return f'{{"{key}": ' + "[" * depth + "]" * depth + "}"


@dataclass(frozen=True)
class Bad:
    tool: str
    arguments: Any
    error_type: str
    mentions: tuple[str, ...]
    ran: list[Any] = field(default_factory=list)
    max_argument_bytes: int | None = None


BAD_INPUTS = [
    pytest.param(
        Bad("nope", {}, "UnknownToolError", ("'nope'", "available tools", "typed", "echo")),
        id="unknown tool",
    ),
    pytest.param(
        Bad("grouped", {}, "UnknownToolError", ("'grouped'", "inactive", "'extra'")),
        id="tool in inactive group",
    ),
    pytest.param(
        Bad("typed", '{"a": 1', "ArgumentError", ("not valid JSON",)), id="malformed JSON"
    ),
    pytest.param(Bad("typed", "[1, 2]", "ArgumentError", ("JSON object", "list")), id="JSON list"),
    pytest.param(Bad("typed", "42", "ArgumentError", ("JSON object", "int")), id="JSON number"),
    pytest.param(
        Bad("typed", '"a string"', "ArgumentError", ("JSON object", "str")), id="JSON string"
    ),
    pytest.param(Bad("typed", "null", "ArgumentError", ("JSON object",)), id="JSON null"),
    pytest.param(Bad("typed", [("a", 1)], "ArgumentError", ("mapping", "list")), id="python list"),
    pytest.param(
        Bad("typed", "", "ArgumentError", ("'typed'", "a", "required")),
        id="empty string is {} so a is missing",
    ),
    pytest.param(
        Bad("typed", {"a": "abc"}, "ArgumentError", ("'typed'", "a", "integer", "abc")),
        id="wrong type",
    ),
    pytest.param(
        Bad("typed", {"a": 1, "b": 5}, "ArgumentError", ("b", "string")), id="wrong type of b"
    ),
    pytest.param(
        Bad("typed", '{"a": [1]}', "ArgumentError", ("a", "integer")), id="wrong type in JSON"
    ),
    pytest.param(
        Bad("typed", {"b": "y"}, "ArgumentError", ("a", "required")), id="missing required"
    ),
    pytest.param(
        Bad("typed", {"a": 1, "zzz": 2}, "ArgumentError", ("zzz", "not permitted")),
        id="extra field",
    ),
    pytest.param(
        Bad("typed", {"a": 1, "b": "x" * 200}, "ArgumentError", ("over the limit", "100"), [], 100),
        id="too large dict",
    ),
    pytest.param(
        Bad(
            "typed",
            json.dumps({"a": 1, "b": "x" * 200}),
            "ArgumentError",
            ("over the limit", "100"),
            [],
            100,
        ),
        id="too large JSON string",
    ),
    pytest.param(
        Bad("typed", {"a": 1, "deep": _nested(600)}, "ArgumentError", ("arguments",)),
        id="600 levels of nesting in a dict",
    ),
    pytest.param(
        Bad("typed", _nested_json(600), "ArgumentError", ("a",)),
        id="600 levels of nesting in JSON",
    ),
    pytest.param(
        Bad("typed", _nested_json(1000), "ArgumentError", ("a",)),
        id="1000 levels of nesting in JSON",
    ),
    pytest.param(
        Bad(
            "raises_value_error",
            {},
            "ValueError",
            ("the widget is out of range",),
            ["raises_value_error"],
        ),
        id="tool raises ValueError",
    ),
    pytest.param(
        Bad("raises_system_exit", {}, "SystemExit", ("3",), ["raises_system_exit"]),
        id="async tool raises SystemExit",
    ),
    pytest.param(
        Bad("raises_system_exit_sync", {}, "SystemExit", ("4",), ["raises_system_exit_sync"]),
        id="sync tool raises SystemExit",
    ),
    pytest.param(
        Bad("returns_object", {}, "OutputError", ("object",), ["returns_object"]),
        id="unserialisable return value",
    ),
    pytest.param(
        Bad("returns_bytes", {}, "OutputError", ("bytes",), ["returns_bytes"]),
        id="bytes return value",
    ),
]


@pytest.mark.parametrize("bad", BAD_INPUTS)
async def test_bad_input_becomes_an_error_result(bad: Bad) -> None:
    toolkit = Toolkit()
    toolkit.create_group("extra", "Extra tools, off by default")
    toolkit.add(grouped, group="extra")
    for item in (
        echo,
        typed,
        raises_value_error,
        raises_system_exit,
        raises_system_exit_sync,
        returns_object,
        returns_bytes,
    ):
        toolkit.add(item)
    limit = {"max_argument_bytes": bad.max_argument_bytes} if bad.max_argument_bytes else {}
    engine = Engine(toolkit, **limit)
    call = ToolCall(name=bad.tool, arguments=bad.arguments)

    result = await engine.call(call)

    assert isinstance(result, ToolResult)
    assert result.status == "error"
    assert result.call_id == call.id
    assert result.tool == bad.tool
    assert result.error is not None
    assert result.error.type == bad.error_type
    for fragment in bad.mentions:
        assert fragment in result.error.message
    assert ran == bad.ran
    assert engine.calls.result(call.id) is result
    assert engine.calls.pending == []
    # the engine is still fine afterwards
    after = await run(engine, "typed", {"a": 7})
    assert after.status == "ok"
    assert after.text == "7:x"


@pytest.mark.parametrize("arguments", ["", "   ", "\n"])
async def test_empty_string_arguments_mean_no_arguments(arguments: str) -> None:
    engine = make_engine(ping)
    result = await run(engine, "ping", arguments)
    assert result.status == "ok"
    assert result.text == "pong"


async def test_argument_size_limit_is_in_bytes_for_strings_and_dicts_alike() -> None:
    # 80 euro signs: under 100 characters of JSON, but 248 bytes of UTF-8.
    engine = make_engine(typed, max_argument_bytes=100)
    arguments = {"a": 1, "b": "€" * 80}
    as_dict = await run(engine, "typed", arguments)
    as_text = await run(engine, "typed", json.dumps(arguments, ensure_ascii=False))
    assert as_dict.status == "error"
    assert as_text.status == "error", "a JSON string is measured in characters, not bytes"
    assert as_text.error is not None
    assert "over the limit" in as_text.error.message
    assert ran == []


async def test_hanging_async_tool_times_out_and_is_cancelled() -> None:
    engine = make_engine(hang)
    started = time.perf_counter()
    result = await run(engine, "hang")
    elapsed = time.perf_counter() - started
    assert result.status == "timeout"
    assert result.error is not None
    assert result.error.type == "ToolTimeoutError"
    assert "0.2s" in result.error.message
    assert result.attempts == 1
    assert 0.2 <= elapsed < 1.5
    assert ran == ["hang:start", "hang:cleanup"]


async def test_hanging_sync_tool_times_out_and_warns_about_its_thread() -> None:
    engine = make_engine(sync_hang)
    started = time.perf_counter()
    result = await run(engine, "sync_hang")
    elapsed = time.perf_counter() - started
    assert result.status == "timeout"
    assert result.error is not None
    assert result.error.type == "ToolTimeoutError"
    assert 0.2 <= elapsed < 1.5
    assert any("worker thread" in w for w in result.metadata["warnings"])
    assert ran == ["sync_hang:start"]


# -- 3. timeouts ---------------------------------------------------------------------------------


async def test_engine_default_timeout_applies_to_tools_without_one() -> None:
    engine = make_engine(untimed_sleep, default_timeout=0.2)
    started = time.perf_counter()
    result = await run(engine, "untimed_sleep", {"seconds": 30})
    assert result.status == "timeout"
    assert result.error is not None
    assert "0.2s" in result.error.message
    assert 0.2 <= time.perf_counter() - started < 1.5


async def test_tool_timeout_beats_the_engine_default() -> None:
    engine = make_engine(hang, default_timeout=60)
    started = time.perf_counter()
    result = await run(engine, "hang")
    assert result.status == "timeout"
    assert time.perf_counter() - started < 1.5


async def test_timeout_never_fires_early() -> None:
    engine = make_engine(nap, untimed_sleep, default_timeout=0.2)
    assert (await run(engine, "nap", {"seconds": 0.05})).status == "ok"
    assert (await run(engine, "untimed_sleep", {"seconds": 0.05})).status == "ok"


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf])
def test_engine_rejects_a_non_positive_or_non_finite_default_timeout(bad: float) -> None:
    with pytest.raises(ValueError, match="default_timeout"):
        Engine(Toolkit(), default_timeout=bad)


async def test_waiting_for_a_slot_counts_against_the_timeout() -> None:
    engine = make_engine(exclusive_work, impatient)
    holder = asyncio.create_task(run(engine, "exclusive_work", {"label": "h", "seconds": 0.6}))
    await until(lambda: "start:h" in ran)
    started = time.perf_counter()
    result = await run(engine, "impatient", {"label": "late"})
    assert result.status == "timeout"
    assert result.error is not None
    assert "slot" in result.error.message
    assert result.attempts == 0
    assert time.perf_counter() - started < 0.5
    assert "start:late" not in ran
    assert (await holder).status == "ok"


# -- 4. retries ----------------------------------------------------------------------------------


async def test_idempotent_tool_is_retried_on_connection_errors() -> None:
    engine = make_engine(flaky_idempotent)
    result = await run(engine, "flaky_idempotent", {"fail_times": 2})
    assert result.status == "ok"
    assert result.text == "recovered after 3 attempts"
    assert result.attempts == 3
    retries = result.metadata["retries"]
    assert [r["attempt"] for r in retries] == [1, 2]
    for number, entry in enumerate(retries, start=1):
        assert "ConnectionError" in entry["error"]
        assert f"connection reset (attempt {number})" in entry["error"]
        base = FAST_RETRY.initial_delay_s * FAST_RETRY.multiplier ** (number - 1)
        assert base * 0.75 - 1e-4 <= entry["delay_s"] <= base * 1.25 + 1e-4


async def test_read_only_tool_is_retried_on_connection_errors() -> None:
    engine = make_engine(flaky_read_only)
    result = await run(engine, "flaky_read_only", {"fail_times": 1})
    assert result.status == "ok"
    assert result.attempts == 2


async def test_sync_idempotent_tool_is_retried() -> None:
    engine = make_engine(flaky_sync)
    result = await run(engine, "flaky_sync", {"fail_times": 2})
    assert result.status == "ok"
    assert result.attempts == 3


async def test_non_idempotent_tool_is_not_retried() -> None:
    engine = make_engine(flaky_plain)
    result = await run(engine, "flaky_plain", {"fail_times": 1})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ConnectionError"
    assert result.attempts == 1
    assert ran == ["attempt"]
    assert "retries" not in result.metadata


async def test_retryable_error_is_retried_for_any_tool() -> None:
    engine = make_engine(flaky_retryable)
    result = await run(engine, "flaky_retryable", {"fail_times": 2})
    assert result.status == "ok"
    assert result.attempts == 3
    assert all("RetryableError" in r["error"] for r in result.metadata["retries"])


async def test_value_error_is_not_retried_even_for_idempotent_tools() -> None:
    engine = make_engine(idempotent_value_error)
    result = await run(engine, "idempotent_value_error", {"fail_times": 1})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ValueError"
    assert result.attempts == 1
    assert ran == ["attempt"]


async def test_validation_errors_are_never_retried() -> None:
    engine = make_engine(flaky_idempotent)
    result = await run(engine, "flaky_idempotent", {"fail_times": "often"})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ArgumentError"
    assert result.attempts == 0
    assert ran == []


async def test_retry_1_disables_retries() -> None:
    engine = make_engine(flaky_no_retry)
    result = await run(engine, "flaky_no_retry", {"fail_times": 1})
    assert result.status == "error"
    assert result.attempts == 1
    assert ran == ["attempt"]


async def test_tool_retry_policy_is_honoured() -> None:
    engine = make_engine(flaky_five)
    result = await run(engine, "flaky_five", {"fail_times": 4})
    assert result.status == "ok"
    assert result.attempts == 5
    assert len(result.metadata["retries"]) == 4


@pytest.mark.parametrize(
    ("name", "attempts"), [("flaky_idempotent", FAST_RETRY.attempts), ("flaky_five", 5)]
)
async def test_exhausted_retries_end_in_an_error(name: str, attempts: int) -> None:
    engine = make_engine(flaky_idempotent, flaky_five)
    result = await run(engine, name, {"fail_times": 100})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ConnectionError"
    assert f"attempt {attempts}" in result.error.message  # the last attempt's error
    assert result.attempts == attempts
    assert ran.count("attempt") == attempts
    assert len(result.metadata["retries"]) == attempts - 1


async def test_timeouts_are_not_retried_by_default() -> None:
    engine = make_engine(hangs_once)
    result = await run(engine, "hangs_once")
    assert result.status == "timeout"
    assert result.attempts == 1
    assert ran == ["attempt"]


async def test_timeouts_are_retried_when_the_policy_says_so() -> None:
    engine = make_engine(hangs_once_retried)
    result = await run(engine, "hangs_once_retried")
    assert result.status == "ok"
    assert result.text == "second time lucky"
    assert result.attempts == 2
    [entry] = result.metadata["retries"]
    assert "ToolTimeoutError" in entry["error"]


def test_retry_delay_is_the_capped_backoff_spread_by_jitter() -> None:
    policy = RetryPolicy(initial_delay_s=0.1, multiplier=3, max_delay_s=2.0, jitter=0.25)
    rng = random.Random(1234)
    for attempt in range(1, 9):
        base = min(2.0, 0.1 * 3 ** (attempt - 1))
        delays = [policy.delay(attempt, rng) for _ in range(200)]
        assert all(base * 0.75 <= d <= base * 1.25 for d in delays), (attempt, base)
        assert max(delays) - min(delays) > base * 0.25  # jitter really spreads them
    assert policy.delay(1, random.Random(0)) == policy.delay(1, random.Random(0))


def test_retry_delay_without_jitter_is_exact() -> None:
    policy = RetryPolicy(initial_delay_s=0.5, multiplier=2, max_delay_s=3, jitter=0)
    rng = random.Random(0)
    assert [policy.delay(n, rng) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": -1}, "attempts"),
        ({"jitter": 2}, "jitter"),
        ({"jitter": -0.1}, "jitter"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"initial_delay_s": -1}, "negative"),
        ({"max_delay_s": -1}, "negative"),
    ],
)
def test_retry_policy_rejects_bad_settings(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RetryPolicy(**kwargs)


# -- 5. permission hook --------------------------------------------------------------------------


class GuardArgs(BaseModel):
    mode: str


class Guarded(ToolBase):
    """A tool whose permission hook does what the call's ``mode`` says."""

    name = "guarded"
    args_model = GuardArgs

    def check_permissions(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        ran.append(("hook", args["mode"], ctx.tool_name))
        mode = args["mode"]
        if mode == "deny":
            return Decision(Effect.DENY, "rule.no-secrets", "secrets are off limits")
        if mode == "warn":
            return Decision(Effect.WARN, "rule.careful", "this touches shared state")
        if mode == "ask":
            return Decision(Effect.ASK, "rule.confirm", "a human must confirm")
        if mode == "raise":
            raise RuntimeError("hook exploded")
        if mode == "weird":
            return "yes, fine"
        return None

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        ran.append("guarded ran")
        return "ran"


def guarded_engine(**kwargs: Any) -> Engine:
    return make_engine(Guarded(), **kwargs)


async def test_hook_deny_refuses_the_call() -> None:
    result = await run(guarded_engine(), "guarded", {"mode": "deny"})
    assert result.status == "denied"
    assert result.error is not None
    assert result.error.type == "PermissionDeniedError"
    assert result.error.message == "secrets are off limits"
    assert result.decision == Decision(Effect.DENY, "rule.no-secrets", "secrets are off limits")
    assert "guarded ran" not in ran
    assert ran == [("hook", "deny", "guarded")]


async def test_hook_warn_runs_with_a_warning() -> None:
    result = await run(guarded_engine(), "guarded", {"mode": "warn"})
    assert result.status == "ok"
    assert result.text == "ran"
    assert "this touches shared state" in result.metadata["warnings"]
    assert result.decision is not None
    assert result.decision.effect is Effect.WARN
    assert result.decision.rule == "rule.careful"


async def test_hook_without_opinion_allows() -> None:
    result = await run(guarded_engine(), "guarded", {"mode": "none"})
    assert result.status == "ok"
    assert result.decision is not None
    assert result.decision.effect is Effect.ALLOW
    assert "warnings" not in result.metadata


async def test_ask_without_approver_is_denied() -> None:
    result = await run(guarded_engine(), "guarded", {"mode": "ask"})
    assert result.status == "denied"
    assert result.error is not None
    assert result.error.type == "PermissionDeniedError"
    assert "no approver" in result.error.message
    assert result.decision is not None
    assert result.decision.effect is Effect.DENY
    assert result.decision.rule == "rule.confirm"
    assert "guarded ran" not in ran


async def test_ask_with_sync_approver_saying_yes_runs() -> None:
    asked: list[tuple[ToolCall, Decision]] = []

    def approver(call: ToolCall, decision: Decision) -> bool:
        asked.append((call, decision))
        return True

    engine = guarded_engine(approver=approver)
    result = await run(engine, "guarded", {"mode": "ask"}, id="ask-1")
    assert result.status == "ok"
    assert result.metadata["approval"] == "approved"
    assert "guarded ran" in ran
    [(call, decision)] = asked
    assert call.id == "ask-1"
    assert decision.effect is Effect.ASK
    assert decision.rule == "rule.confirm"
    assert result.decision is not None
    assert result.decision.effect is Effect.ALLOW


async def test_ask_with_async_approver_saying_no_is_denied() -> None:
    async def approver(call: ToolCall, decision: Decision) -> bool:
        await asyncio.sleep(0.001)
        return False

    result = await run(guarded_engine(approver=approver), "guarded", {"mode": "ask"})
    assert result.status == "denied"
    assert result.metadata["approval"] == "refused"
    assert result.error is not None
    assert result.error.type == "PermissionDeniedError"
    assert "guarded ran" not in ran


async def test_ask_with_failing_approver_is_denied_with_a_warning() -> None:
    def approver(call: ToolCall, decision: Decision) -> bool:
        raise RuntimeError("approval service down")

    result = await run(guarded_engine(approver=approver), "guarded", {"mode": "ask"})
    assert result.status == "denied"
    assert any("approval service down" in w for w in result.metadata["warnings"])
    assert "guarded ran" not in ran


async def test_ask_approver_must_say_exactly_true() -> None:
    result = await run(
        guarded_engine(approver=lambda call, decision: "yes"), "guarded", {"mode": "ask"}
    )
    assert result.status == "denied"
    assert "guarded ran" not in ran


@pytest.mark.parametrize(
    ("mode", "mentions"),
    [("raise", ("hook exploded", "RuntimeError")), ("weird", ("str", "not a Decision"))],
)
async def test_broken_hook_fails_closed(mode: str, mentions: tuple[str, ...]) -> None:
    result = await run(guarded_engine(), "guarded", {"mode": mode})
    assert result.status == "denied"
    assert result.error is not None
    assert result.error.type == "PermissionDeniedError"
    assert result.decision is not None
    assert result.decision.effect is Effect.DENY
    assert result.decision.rule == "guarded.check_permissions"
    for fragment in mentions:
        assert fragment in result.decision.reason
    assert "guarded ran" not in ran


async def test_hook_is_not_consulted_when_arguments_are_invalid() -> None:
    result = await run(guarded_engine(), "guarded", {"mode": 3})
    assert result.status == "error"
    assert ran == []


# -- 6. scheduling -------------------------------------------------------------------------------


async def test_call_many_keeps_input_order() -> None:
    engine = make_engine(shared_work, exclusive_work, echo)
    calls = [
        ToolCall(name="shared_work", arguments={"label": "s0", "seconds": 0.04}),
        ToolCall(name="shared_work", arguments={"label": "s1", "seconds": 0.0}),
        ToolCall(name="nope", arguments={}),
        ToolCall(name="exclusive_work", arguments={"label": "x", "seconds": 0.0}),
        ToolCall(name="shared_work", arguments={"label": "s2", "seconds": 0.02}),
        ToolCall(name="echo", arguments={"text": "e"}),
    ]
    results = await engine.call_many(calls)
    assert [r.call_id for r in results] == [c.id for c in calls]
    assert [r.text for r in results if r.ok] == ["s0", "s1", "x", "s2", "e"]
    assert results[2].status == "error"


async def test_read_only_calls_share_the_engine() -> None:
    engine = make_engine(shared_work)
    calls = [
        ToolCall(name="shared_work", arguments={"label": str(i), "seconds": 0.1}) for i in range(20)
    ]
    started = time.perf_counter()
    results = await engine.call_many(calls)
    elapsed = time.perf_counter() - started
    assert all(r.ok for r in results)
    assert elapsed < 1.0  # one at a time would take 2 s
    assert ACTIVE["max"] == 20


async def test_exclusive_calls_in_call_many_run_one_at_a_time_in_order() -> None:
    engine = make_engine(exclusive_work)
    labels = ["a", "b", "c", "d"]
    calls = [
        ToolCall(name="exclusive_work", arguments={"label": x, "seconds": 0.02}) for x in labels
    ]
    results = await engine.call_many(calls)
    assert [r.text for r in results] == labels
    assert ACTIVE["max"] == 1
    assert ran == [f"{event}:{x}" for x in labels for event in ("start", "end")]


async def test_exclusive_call_waits_for_earlier_shared_calls_and_blocks_later_ones() -> None:
    engine = make_engine(shared_work, exclusive_work)
    calls = [
        ToolCall(name="shared_work", arguments={"label": "s1", "seconds": 0.05}),
        ToolCall(name="shared_work", arguments={"label": "s2", "seconds": 0.03}),
        ToolCall(name="exclusive_work", arguments={"label": "x", "seconds": 0.03}),
        ToolCall(name="shared_work", arguments={"label": "s3", "seconds": 0.01}),
    ]
    results = await engine.call_many(calls)
    assert [r.text for r in results] == ["s1", "s2", "x", "s3"]
    at = ran.index
    assert at("start:x") > at("end:s1")
    assert at("start:x") > at("end:s2")
    assert at("start:s3") > at("end:x")
    assert at("start:s2") < at("end:s1")  # the two shared ones did overlap


async def test_call_many_queued_call_timeout_starts_at_its_turn() -> None:
    engine = make_engine(exclusive_work, impatient)
    calls = [
        ToolCall(name="exclusive_work", arguments={"label": "first", "seconds": 0.3}),
        ToolCall(name="impatient", arguments={"label": "second"}),  # 0.1 s timeout
    ]
    results = await engine.call_many(calls)
    assert [r.status for r in results] == ["ok", "ok"]
    assert ran == ["start:first", "end:first", "start:second", "end:second"]


async def test_call_many_of_nothing_is_nothing() -> None:
    assert await make_engine(echo).call_many([]) == []


async def test_concurrent_calls_of_an_exclusive_tool_never_overlap() -> None:
    engine = make_engine(exclusive_work)
    tasks = [
        asyncio.create_task(run(engine, "exclusive_work", {"label": str(i), "seconds": 0.02}))
        for i in range(6)
    ]
    results = await asyncio.gather(*tasks)
    assert all(r.ok for r in results)
    assert ACTIVE["max"] == 1
    starts = [e for e in ran if e.startswith("start")]
    assert starts == [f"start:{i}" for i in range(6)]  # first come, first served


async def test_concurrency_safe_tool_shares_though_it_writes() -> None:
    engine = make_engine(safe_writer)
    calls = [
        ToolCall(name="safe_writer", arguments={"label": str(i), "seconds": 0.05}) for i in range(5)
    ]
    results = await engine.call_many(calls)
    assert all(r.ok for r in results)
    assert ACTIVE["max"] == 5


def test_scheduler_try_acquire_fast_path() -> None:
    scheduler = Scheduler()
    assert scheduler.try_acquire(False)
    assert scheduler.try_acquire(False)
    assert scheduler.running == 2
    assert not scheduler.try_acquire(True)  # shared holders keep an exclusive caller out
    scheduler.release(False)
    scheduler.release(False)
    assert scheduler.running == 0
    assert scheduler.try_acquire(True)
    assert not scheduler.try_acquire(True)
    assert not scheduler.try_acquire(False)
    scheduler.release(True)
    assert scheduler.running == 0
    assert scheduler.try_acquire(False)


async def test_scheduler_is_first_come_first_served() -> None:
    scheduler = Scheduler()
    assert scheduler.try_acquire(False)  # a shared holder
    order: list[str] = []

    async def acquire(label: str, exclusive: bool) -> None:
        await scheduler.acquire(exclusive)
        order.append(label)

    writer = asyncio.create_task(acquire("writer", True))
    await asyncio.sleep(0)
    reader = asyncio.create_task(acquire("reader", False))
    await asyncio.sleep(0.01)
    # the reader could share with the holder, but the waiting writer came first
    assert order == []
    assert scheduler.waiting == 2
    assert not scheduler.try_acquire(False)
    scheduler.release(False)
    await writer
    await asyncio.sleep(0.01)
    assert order == ["writer"]
    assert not reader.done()
    scheduler.release(True)
    await reader
    assert order == ["writer", "reader"]
    assert scheduler.running == 1
    assert scheduler.waiting == 0


async def test_scheduler_cancelled_waiter_leaves_the_queue_consistent() -> None:
    scheduler = Scheduler()
    assert scheduler.try_acquire(False)
    writer = asyncio.create_task(scheduler.acquire(True))
    await asyncio.sleep(0)
    reader = asyncio.create_task(scheduler.acquire(False))
    await asyncio.sleep(0.01)
    assert not reader.done()
    writer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writer
    # with the writer gone, the reader shares with the holder at once
    await asyncio.wait_for(reader, 1)
    assert scheduler.running == 2
    assert scheduler.waiting == 0
    scheduler.release(False)
    scheduler.release(False)
    assert scheduler.try_acquire(True)


async def test_scheduler_waiter_cancelled_just_after_being_granted_gives_the_slot_back() -> None:
    scheduler = Scheduler()
    assert scheduler.try_acquire(True)
    waiter = asyncio.create_task(scheduler.acquire(True))
    await asyncio.sleep(0)
    scheduler.release(True)  # grants the slot to the waiter, which has not resumed yet
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert scheduler.running == 0
    assert scheduler.try_acquire(True)


# -- 7. cancellation -----------------------------------------------------------------------------


async def test_cancelling_the_caller_cancels_the_tool_and_is_recorded() -> None:
    engine = make_engine(slow_shared)
    call = ToolCall(name="slow_shared", arguments={"label": "c"})
    task = asyncio.create_task(engine.call(call))
    await until(lambda: "start:c" in ran)
    assert [c.id for c in engine.calls.pending] == [call.id]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert ran == ["start:c", "cancelled:c"]
    recorded = engine.calls.result(call.id)
    assert recorded is not None
    assert recorded.status == "cancelled"
    assert engine.calls.pending == []


async def test_tool_swallowing_cancellation_does_not_hide_it_from_the_caller() -> None:
    # asyncio delivers a cancellation once, as a CancelledError inside the innermost await:
    # the tool's. A tool that catches it and returns would hide it from everything above; the
    # engine notices the request is still pending on the task and re-raises it (as anyio does).
    engine = make_engine(swallows_cancel)
    call = ToolCall(name="swallows_cancel")
    task = asyncio.create_task(engine.call(call))
    await until(lambda: "swallow:start" in ran)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == ["swallow:start", "swallow:caught"]
    recorded = engine.calls.result(call.id)
    assert recorded is not None
    assert recorded.status == "cancelled"


async def test_cleanup_code_already_cancelled_can_still_call_tools() -> None:
    # A caller handling its own cancellation (cancelling() > 0 before the call) must still get
    # results: only a cancellation requested during the call counts.
    engine = make_engine(echo)
    seen: list[ToolResult] = []

    async def caller() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append(await engine.call(ToolCall(name="echo", arguments={"text": "bye"})))
            raise

    task = asyncio.create_task(caller())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [r.status for r in seen] == ["ok"]


async def test_cancelling_call_many_cancels_every_running_call() -> None:
    engine = make_engine(slow_shared)
    calls = [ToolCall(name="slow_shared", arguments={"label": x}) for x in "abc"]
    task = asyncio.create_task(engine.call_many(calls))
    await until(lambda: len(ran) == 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(ran) == sorted(
        [*(f"start:{x}" for x in "abc"), *(f"cancelled:{x}" for x in "abc")]
    )
    for call in calls:
        recorded = engine.calls.result(call.id)
        assert recorded is not None
        assert recorded.status == "cancelled"
    assert engine.calls.pending == []


async def test_cancelling_call_many_does_not_start_the_calls_still_queued() -> None:
    engine = make_engine(blocked)
    calls = [ToolCall(name="blocked", arguments={"label": x}) for x in "abc"]
    task = asyncio.create_task(engine.call_many(calls))
    await until(lambda: "start:a" in ran)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.05)
    assert ran == ["start:a", "cleanup:a"]
    recorded = engine.calls.result(calls[0].id)
    assert recorded is not None
    assert recorded.status == "cancelled"


async def test_external_cancellation_just_before_the_deadline_is_not_a_timeout() -> None:
    engine = make_engine(slow_with_deadline)
    call = ToolCall(name="slow_with_deadline", arguments={"label": "d"})
    me = asyncio.current_task()
    assert me is not None
    asyncio.get_running_loop().call_later(0.15, me.cancel)  # the deadline is at 0.25 s
    with pytest.raises(asyncio.CancelledError):
        await engine.call(call)
    assert me.uncancel() == 0
    recorded = engine.calls.result(call.id)
    assert recorded is not None
    assert recorded.status == "cancelled"
    # The call's deadline was disarmed: it must not cancel this task later on.
    await asyncio.sleep(0.3)
    assert ran == ["start:d", "cancelled:d"]


async def test_watchdog_deadline_fires_never_early_and_is_reported_as_ours() -> None:
    watchdog = Watchdog(asyncio.get_running_loop())
    started = time.perf_counter()
    deadline = watchdog.arm(0.05)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(10)
    elapsed = time.perf_counter() - started
    assert deadline.stop() is True
    assert 0.05 <= elapsed < 1.0
    assert watchdog.armed == 0
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0


async def test_watchdog_external_cancel_in_the_same_tick_as_the_deadline_is_re_raised() -> None:
    loop = asyncio.get_running_loop()
    watchdog = Watchdog(loop)
    task = asyncio.current_task()
    assert task is not None
    deadline = watchdog.arm(0.01)
    time.sleep(0.03)  # noqa: ASYNC251 - block so the deadline is due when the loop resumes
    loop.call_soon(task.cancel)  # someone else cancels in the same loop iteration
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(10)
    assert deadline.stop() is False  # not only ours: must be re-raised, not made a timeout
    assert task.uncancel() == 0


async def test_watchdog_stopped_deadline_never_fires() -> None:
    watchdog = Watchdog(asyncio.get_running_loop())
    deadline = watchdog.arm(0.02)
    assert watchdog.armed == 1
    assert deadline.stop() is False
    assert watchdog.armed == 0
    await asyncio.sleep(0.06)  # would be cancelled here if the deadline still fired


# -- 8. streaming --------------------------------------------------------------------------------


async def test_stream_async_generator_chunks_in_order() -> None:
    engine = make_engine(stream_words)
    call = ToolCall(name="stream_words", arguments={"n": 4})
    chunks = await collect(engine, call)
    assert texts(chunks) == ["w0 ", "w1 ", "w2 ", "w3 "]
    assert all(c.call_id == call.id and c.tool == "stream_words" for c in chunks)
    result = final(chunks)
    assert result.status == "ok"
    assert result.content == [TextBlock("w0 w1 w2 w3 ")]
    assert chunks[-1].content == []
    assert engine.calls.result(call.id) is result


async def test_stream_delivers_chunks_while_the_tool_is_still_working() -> None:
    engine = make_engine(gated_stream)
    STREAM_GATE["gate"] = asyncio.Event()
    seen: list[str] = []
    async with contextlib.aclosing(engine.stream(ToolCall(name="gated_stream"))) as stream:
        async for chunk in stream:
            if chunk.is_last:
                assert chunk.result is not None
                assert chunk.result.status == "ok", chunk.result.error
                assert chunk.result.text == "firstsecond"
            else:
                seen.append(texts([chunk, chunk])[0])
                STREAM_GATE["gate"].set()  # the tool only goes on once we saw the chunk
    assert seen == ["first", "second"]


async def test_stream_sync_generator_chunks_in_order() -> None:
    engine = make_engine(sync_stream_words)
    chunks = await collect(engine, ToolCall(name="sync_stream_words", arguments={"n": 3}))
    assert texts(chunks) == ["s0 ", "s1 ", "s2 "]
    result = final(chunks)
    assert result.status == "ok"
    assert result.content == [TextBlock("s0 s1 s2 ")]


async def test_stream_emitter_progress_arrives_before_the_result() -> None:
    engine = make_engine(with_progress)
    chunks = await collect(engine, ToolCall(name="with_progress", arguments={"steps": 3}))
    assert texts(chunks) == ["step 0", "step 1", "step 2"]
    result = final(chunks)
    assert result.status == "ok"
    assert result.content == [TextBlock("done")]  # progress is not part of the answer
    assert ran == [("emitter active", True)]


async def test_stream_emitter_works_from_a_worker_thread() -> None:
    engine = make_engine(sync_with_progress)
    chunks = await collect(engine, ToolCall(name="sync_with_progress", arguments={"steps": 3}))
    assert texts(chunks) == ["tick 0", "tick 1", "tick 2"]
    result = final(chunks)
    assert result.status == "ok"
    assert result.content == [TextBlock("finished")]
    [(_, tool_thread)] = ran
    assert tool_thread != threading.get_ident()


async def test_stream_of_a_plain_tool_is_one_final_chunk() -> None:
    engine = make_engine(echo)
    chunks = await collect(engine, ToolCall(name="echo", arguments={"text": "hi"}))
    assert len(chunks) == 1
    assert final(chunks).content == [TextBlock("hi")]


async def test_closing_a_stream_early_stops_the_tool_and_records_cancelled() -> None:
    engine = make_engine(endless_stream)
    call = ToolCall(name="endless_stream")
    received: list[ToolChunk] = []
    async with contextlib.aclosing(engine.stream(call)) as stream:
        async for chunk in stream:
            received.append(chunk)
            break
    assert texts([*received, received[-1]]) == ["chunk 0"]
    assert ran == ["endless:finally"]
    recorded = engine.calls.result(call.id)
    assert recorded is not None
    assert recorded.status == "cancelled"
    assert engine.calls.pending == []


async def test_cancelling_a_stream_consumer_stops_the_tool_and_records_cancelled() -> None:
    engine = make_engine(endless_stream)
    call = ToolCall(name="endless_stream")
    received: list[ToolChunk] = []

    async def consume() -> None:
        async with contextlib.aclosing(engine.stream(call)) as stream:
            async for chunk in stream:
                received.append(chunk)

    task = asyncio.create_task(consume())
    await until(lambda: len(received) >= 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == ["endless:finally"]
    recorded = engine.calls.result(call.id)
    assert recorded is not None
    assert recorded.status == "cancelled"
    assert engine.calls.pending == []


@pytest.mark.parametrize(
    ("name", "arguments", "error_type"),
    [
        pytest.param("nope", {}, "UnknownToolError", id="unknown tool"),
        pytest.param("stream_words", {"n": "many"}, "ArgumentError", id="wrong type"),
        pytest.param("stream_words", "{not json", "ArgumentError", id="malformed JSON"),
        pytest.param(
            "stream_words", _nested_json(1000, "n"), "ArgumentError", id="1000 levels of nesting"
        ),
    ],
)
async def test_rejected_stream_is_a_single_final_chunk(
    name: str, arguments: Any, error_type: str
) -> None:
    engine = make_engine(stream_words)
    call = ToolCall(name=name, arguments=arguments)
    chunks = await collect(engine, call)
    assert len(chunks) == 1
    result = final(chunks)
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == error_type
    assert engine.calls.result(call.id) is result


async def test_stream_denied_call_is_a_single_final_chunk() -> None:
    chunks = await collect(guarded_engine(), ToolCall(name="guarded", arguments={"mode": "deny"}))
    assert len(chunks) == 1
    assert final(chunks).status == "denied"
    assert "guarded ran" not in ran


async def test_stream_retries_a_tool_that_failed_before_yielding() -> None:
    engine = make_engine(flaky_stream)
    chunks = await collect(engine, ToolCall(name="flaky_stream", arguments={"fail_times": 1}))
    assert texts(chunks) == ["a", "b"]  # nothing twice
    result = final(chunks)
    assert result.status == "ok"
    assert result.attempts == 2
    assert result.content == [TextBlock("ab")]


async def test_stream_does_not_retry_a_tool_that_failed_after_yielding() -> None:
    engine = make_engine(fails_midway)
    chunks = await collect(engine, ToolCall(name="fails_midway"))
    assert texts(chunks) == ["partial"]
    result = final(chunks)
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ConnectionError"
    assert result.attempts == 1
    assert ran == ["attempt"]


async def test_stream_timeout_is_a_final_timeout_chunk() -> None:
    engine = make_engine(stalls_stream)
    started = time.perf_counter()
    chunks = await collect(engine, ToolCall(name="stalls_stream"))
    assert texts(chunks) == ["early"]
    result = final(chunks)
    assert result.status == "timeout"
    assert result.error is not None
    assert result.error.type == "ToolTimeoutError"
    assert 0.2 <= time.perf_counter() - started < 1.5


# -- 9. the call context -------------------------------------------------------------------------


async def test_every_call_is_tracked_with_its_result_by_id() -> None:
    engine = make_engine(echo, typed)
    first = await run(engine, "echo", {"text": "1"}, id="one")
    second = await run(engine, "typed", {"a": "bad"}, id="two")
    third = await run(engine, "missing", id="three")
    assert [c.id for c in engine.calls.calls] == ["one", "two", "three"]
    assert engine.calls.results == [first, second, third]
    assert engine.calls.result("two") is second
    assert engine.calls.result("nope") is None
    assert await engine.calls.wait("one") is first
    assert engine.calls.pending == []


async def test_listeners_hear_every_result_once() -> None:
    engine = make_engine(echo, stream_words)
    heard: list[ToolResult] = []
    engine.calls.add_listener(heard.append)
    a = await run(engine, "echo", {"text": "a"})
    many = await engine.call_many(
        [ToolCall(name="echo", arguments={"text": t}) for t in "bc"] + [ToolCall(name="nope")]
    )
    chunks = await collect(engine, ToolCall(name="stream_words", arguments={"n": 2}))
    submitted = await engine.submit(ToolCall(name="echo", arguments={"text": "d"}))
    expected = [a, *many, final(chunks), submitted]
    assert sorted(r.call_id for r in heard) == sorted(r.call_id for r in expected)
    assert all(any(h is r for h in heard) for r in expected)
    engine.calls.remove_listener(heard.append)
    await run(engine, "echo", {"text": "e"})
    assert len(heard) == len(expected)


async def test_failing_listener_does_not_break_the_call() -> None:
    engine = make_engine(echo)
    heard: list[str] = []

    def broken(result: ToolResult) -> None:
        raise RuntimeError("listener bug")

    engine.calls.add_listener(broken)
    engine.calls.add_listener(lambda r: heard.append(r.call_id))
    first = await run(engine, "echo", {"text": "x"})
    second = await run(engine, "echo", {"text": "y"})
    assert first.status == second.status == "ok"
    assert heard == [first.call_id, second.call_id]


async def test_submit_returns_a_task_and_the_call_is_pending_at_once() -> None:
    engine = make_engine(labelled)
    call = ToolCall(name="labelled", arguments={"label": "late", "seconds": 0.05})
    task = engine.submit(call)
    assert isinstance(task, asyncio.Task)
    assert [c.id for c in engine.calls.pending] == [call.id]
    assert engine.calls.result(call.id) is None
    result = await engine.calls.wait(call.id)
    assert result.status == "ok"
    assert result.text == "late"
    assert await task is result
    assert engine.calls.pending == []


async def test_submitted_calls_finishing_out_of_order_match_their_ids() -> None:
    engine = make_engine(labelled)
    finished: list[str] = []
    engine.calls.add_listener(lambda r: finished.append(r.call_id))
    plan = {"slow": 0.15, "fast": 0.01, "middle": 0.08}
    for label, seconds in plan.items():
        engine.submit(
            ToolCall(name="labelled", arguments={"label": label, "seconds": seconds}, id=label)
        )
    results = await asyncio.gather(*(engine.calls.wait(label) for label in plan))
    assert [r.call_id for r in results] == list(plan)
    assert [r.text for r in results] == list(plan)
    assert finished == ["fast", "middle", "slow"]


async def test_wait_for_an_unknown_call_raises_lookup_error() -> None:
    engine = make_engine(echo)
    with pytest.raises(LookupError, match="no-such-call"):
        await engine.calls.wait("no-such-call")


async def test_history_keeps_only_the_last_calls() -> None:
    engine = make_engine(echo, history=3)
    results = [await run(engine, "echo", {"text": str(i)}, id=f"c{i}") for i in range(5)]
    assert [c.id for c in engine.calls.calls] == ["c2", "c3", "c4"]
    assert engine.calls.results == results[2:]
    assert engine.calls.result("c0") is None
    with pytest.raises(LookupError):
        await engine.calls.wait("c0")


async def test_history_bound_holds_for_calls_that_finish_after_they_were_dropped() -> None:
    engine = make_engine(labelled, history=3)
    tasks = [
        engine.submit(
            ToolCall(name="labelled", arguments={"label": str(i), "seconds": 0.02}, id=f"c{i}")
        )
        for i in range(5)
    ]
    await asyncio.gather(*tasks)
    assert [c.id for c in engine.calls.calls] == ["c2", "c3", "c4"]
    assert [r.call_id for r in engine.calls.results] == ["c2", "c3", "c4"]
    assert engine.calls.result("c0") is None, "results of dropped calls are kept forever"


async def test_closing_the_engine_cancels_running_submitted_calls() -> None:
    async with make_engine(blocked) as engine:
        call = ToolCall(name="blocked", arguments={"label": "s"})
        task = engine.submit(call)
        await until(lambda: "start:s" in ran)
    assert task.cancelled()
    assert ran == ["start:s", "cleanup:s"]
    recorded = engine.calls.result(call.id)
    assert recorded is not None
    assert recorded.status == "cancelled"
    assert engine.calls.pending == []


async def test_closing_the_engine_records_submitted_calls_that_had_not_started() -> None:
    async with make_engine(blocked) as engine:
        call = ToolCall(name="blocked", arguments={"label": "s"})
        task = engine.submit(call)
    assert task.cancelled()
    assert ran == []
    recorded = engine.calls.result(call.id)
    assert recorded is not None, "a submitted call cancelled before it started stays pending"
    assert recorded.status == "cancelled"
    assert engine.calls.pending == []


async def test_cancelled_submitted_call_can_still_be_waited_for() -> None:
    engine = make_engine(blocked)
    call = ToolCall(name="blocked", arguments={"label": "s"})
    task = engine.submit(call)
    task.cancel()
    try:
        async with asyncio.timeout(1):
            result = await engine.calls.wait(call.id)
    except TimeoutError:
        pytest.fail("wait() hangs: a submitted call cancelled before it started is never recorded")
    assert result.status == "cancelled"


async def test_submit_after_close_raises() -> None:
    engine = make_engine(echo)
    await engine.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        engine.submit(ToolCall(name="echo", arguments={"text": "x"}))


# -- 10. external tools --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["remote_job", "remote_base"])
async def test_external_tool_returns_pending_and_a_later_complete_finishes_it(name: str) -> None:
    engine = make_engine(remote_job, RemoteBase())
    heard: list[str] = []
    engine.calls.add_listener(lambda r: heard.append(r.status))
    call = ToolCall(name=name, arguments={"query": "weather"})
    pending = await engine.call(call)
    assert pending.status == "pending"
    assert not pending.ok
    assert pending.metadata["external"] is True
    assert call.id in pending.text
    assert engine.pending_external == [call.id]
    assert engine.calls.result(call.id) is None
    assert engine.calls.pending == [call]
    waiter = asyncio.create_task(engine.calls.wait(call.id))
    await asyncio.sleep(0)
    assert not waiter.done()

    final = engine.complete(call.id, "sunny")
    assert final.status == "ok"
    assert final.content == [TextBlock("sunny")]
    assert final.decision is not None
    assert await waiter is final
    assert engine.calls.result(call.id) is final
    assert engine.pending_external == []
    assert heard == ["pending", "ok"]
    assert ran == []  # the tool body never ran locally


async def test_external_tool_completed_with_tool_output_keeps_metadata() -> None:
    engine = make_engine(remote_job)
    call = ToolCall(name="remote_job", arguments={"query": "q"})
    await engine.call(call)
    result = engine.complete(call.id, ToolOutput("done", {"worker": "w1"}))
    assert result.text == "done"
    assert result.metadata["worker"] == "w1"


async def test_external_tool_completed_with_an_exception_is_an_error() -> None:
    engine = make_engine(remote_job)
    call = ToolCall(name="remote_job", arguments={"query": "q"})
    await engine.call(call)
    result = engine.complete(call.id, ValueError("x"))
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ValueError"
    assert result.error.message == "x"


async def test_completing_an_unknown_or_finished_call_raises_lookup_error() -> None:
    engine = make_engine(remote_job)
    with pytest.raises(LookupError, match="ghost"):
        engine.complete("ghost", "value")
    call = ToolCall(name="remote_job", arguments={"query": "q"})
    await engine.call(call)
    engine.complete(call.id, "once")
    with pytest.raises(LookupError, match=call.id):
        engine.complete(call.id, "twice")


async def test_external_tool_with_invalid_arguments_is_never_pending() -> None:
    engine = make_engine(remote_job)
    result = await run(engine, "remote_job", {"query": 1, "extra": True})
    assert result.status == "error"
    assert engine.pending_external == []


async def test_streamed_external_tool_ends_with_its_pending_result() -> None:
    engine = make_engine(remote_job)
    call = ToolCall(name="remote_job", arguments={"query": "q"})
    chunks = await collect(engine, call)
    assert final(chunks).status == "pending"
    assert engine.pending_external == [call.id]


# -- 11. output cap ------------------------------------------------------------------------------


async def test_long_output_is_truncated_with_a_note() -> None:
    engine = make_engine(long_text, max_result_chars=100)
    result = await run(engine, "long_text", {"n": 1000})
    assert result.status == "ok"
    [block] = result.content
    assert isinstance(block, TextBlock)
    assert block.text.startswith("x" * 100)
    assert "x" * 101 not in block.text
    note = block.text[100:]
    assert "truncated" in note
    assert "1000" in note
    assert result.metadata["truncated"] == {"chars": 1000, "kept": 100}


async def test_output_at_the_limit_is_not_truncated() -> None:
    engine = make_engine(long_text, max_result_chars=100)
    result = await run(engine, "long_text", {"n": 100})
    assert result.content == [TextBlock("x" * 100)]
    assert "truncated" not in result.metadata


async def test_output_cap_counts_every_text_block() -> None:
    engine = make_engine(three_blocks, max_result_chars=100)
    result = await run(engine, "three_blocks")
    assert len(result.content) == 2
    first, second = result.content
    assert first == TextBlock("a" * 60)
    assert isinstance(second, TextBlock)
    assert second.text.startswith("b" * 40)
    assert "b" * 41 not in second.text
    assert "c" not in second.text.split("\n")[0]
    assert result.metadata["truncated"] == {"chars": 180, "kept": 100}


# -- 12. property: arbitrary arguments never break the engine ------------------------------------

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["1", "-3", "1.0", "1e3", " 7 ", "0x10", "true"])
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
ARGUMENT_DICTS = st.dictionaries(
    st.sampled_from(["a", "b"]) | st.text(max_size=5), JSON_VALUES, max_size=4
)
ARGUMENTS = st.one_of(
    ARGUMENT_DICTS,
    ARGUMENT_DICTS.map(lambda d: json.dumps(d, allow_nan=True)),
    st.fixed_dictionaries({"a": st.integers(-(2**63), 2**63 - 1)}, optional={"b": st.text()}),
    st.text(max_size=40),
    st.text(alphabet='{}[]":, 0123456789abtrue', max_size=30),
)
HYPOTHESIS_ENGINE = make_engine(hyp_target)


async def _call_with(arguments: Any) -> None:
    ran.clear()
    result = await HYPOTHESIS_ENGINE.call(ToolCall(name="hyp_target", arguments=arguments))
    assert isinstance(result, ToolResult)
    assert result.status in {"ok", "error"}
    if result.status == "ok":
        [(a, b)] = ran
        assert type(a) is int
        assert type(b) is str
        assert result.text == f"{a}:{b}"
        if isinstance(arguments, dict) and type(arguments.get("a")) is int:
            assert a == arguments["a"]
        if isinstance(arguments, dict) and "b" not in arguments:
            assert b == "x"
    else:
        assert ran == []
        assert result.error is not None
        assert result.error.type == "ArgumentError"


@settings(max_examples=200, deadline=None)
@given(arguments=ARGUMENTS)
def test_arbitrary_arguments_always_give_a_result(arguments: Any) -> None:
    asyncio.run(_call_with(arguments))


async def test_a_call_id_used_again_names_the_new_call() -> None:
    """Once a call has its result, a new call with the same id is pending until its own result
    comes: neither `calls.result` nor `calls.pending` answers with the old call's."""
    from stockade.engine import Engine, ToolCall, Toolkit, tool

    go = asyncio.Event()

    @tool
    async def say(text: str, wait: bool = False) -> str:
        if wait:
            await go.wait()
        return text

    kit = Toolkit()
    kit.add(say)
    async with Engine(kit) as engine:
        first = await engine.call(ToolCall(id="again", name="say", arguments={"text": "first"}))
        assert first.text == "first"
        second = engine.submit(
            ToolCall(id="again", name="say", arguments={"text": "second", "wait": True})
        )
        await asyncio.sleep(0.05)
        assert engine.calls.result("again") is None
        assert "again" in [c.id for c in engine.calls.pending]
        go.set()
        assert (await second).text == "second"
        assert engine.calls.result("again").text == "second"  # type: ignore[union-attr]


def test_registering_something_not_callable_names_its_type_not_its_contents() -> None:
    """The error must not print the object: a mapping like os.environ holds secrets."""
    from stockade.engine import Toolkit
    from stockade.engine.errors import ToolDefinitionError

    secrets = {"API_KEY": "sk-very-secret"}
    with pytest.raises(ToolDefinitionError, match="of type dict as a tool") as caught:
        Toolkit().add(secrets)  # type: ignore[arg-type]
    assert "sk-very-secret" not in str(caught.value)
