"""Tools that misbehave every way a Python function can, against a real engine on a real loop.

Whatever a tool raises (`BaseException`s included), returns or says of itself, `Engine.call`
and `Engine.stream` answer with a result that can be shown and sent as JSON; only the caller's
own cancellation propagates, recorded as cancelled. Arguments no tool could take (a lone
surrogate, an integer too long to print) are refused as arguments, naming the argument.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import collect

from stockade.engine import (
    Engine,
    ToolBase,
    ToolCall,
    ToolContext,
    Toolkit,
    ToolOutput,
    ToolResult,
    tool,
)
from stockade.engine.content import FileReport
from stockade.engine.messages import escaped
from stockade.engine.observe import AuditLog, read_audit
from stockade.policies import Decision, Effect, Policy


class Custom(BaseException):
    """A BaseException of a tool's own, outside the Exception tree."""


class Unprintable(Exception):
    """An exception whose str() and repr() both raise."""

    def __str__(self) -> str:
        raise RuntimeError("str refuses")

    __repr__ = __str__


class Unshowable:
    """A value whose str() and repr() both raise."""

    def __str__(self) -> str:
        raise RuntimeError("str refuses")

    __repr__ = __str__


# what each kind of hostile tool raises, and the error type its result names
KINDS: dict[str, Callable[[], BaseException]] = {
    "KeyboardInterrupt": lambda: KeyboardInterrupt("pressed"),
    "SystemExit": lambda: SystemExit(3),
    "GeneratorExit": GeneratorExit,
    "Custom": lambda: Custom("a tool's own"),
    "BaseExceptionGroup": lambda: BaseExceptionGroup("group", [Custom("one"), KeyboardInterrupt()]),
    "CancelledError": lambda: asyncio.CancelledError("mine"),
}
SHAPES = ("sync", "async", "sync_gen", "async_gen")


def raising(make: Callable[[], BaseException], shape: str) -> Callable[..., Any]:
    """A tool of ``shape`` that raises ``make()``."""
    if shape == "sync":

        def sync_tool() -> str:
            """Raise."""
            raise make()

        return sync_tool
    if shape == "async":

        async def async_tool() -> str:
            """Raise."""
            raise make()

        return async_tool
    if shape == "sync_gen":

        def sync_gen_tool() -> Iterator[str]:
            """Yield, then raise."""
            yield "a"
            raise make()

        return sync_gen_tool

    async def async_gen_tool() -> AsyncIterator[str]:
        """Yield, then raise."""
        yield "a"
        raise make()

    return async_gen_tool


def engine_of(*tools: Callable[..., Any], **kwargs: Any) -> Engine:
    toolkit = Toolkit()
    for index, fn in enumerate(tools):
        toolkit.add(fn, name=f"t{index}")
    return Engine(toolkit, **kwargs)


def encodable(result: ToolResult) -> None:
    """The result can be sent as JSON (by the strictest encoder: orjson refuses surrogates)."""
    orjson.dumps(result.to_dict())
    assert result.text


# -- every BaseException a tool raises is its call's error ------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", list(KINDS))
async def test_a_tool_raising_any_base_exception_gives_an_error_result(
    kind: str, shape: str
) -> None:
    async with engine_of(raising(KINDS[kind], shape), echo) as engine:
        result = await engine.call(ToolCall(name="t0"))
        assert result.status == "error"
        assert result.error is not None
        assert result.error.type == kind
        encodable(result)
        after = await engine.call(ToolCall(name="t1", arguments={"text": "still here"}))
        assert after.text == "still here"  # the engine goes on


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", list(KINDS))
async def test_a_streamed_tool_raising_any_base_exception_ends_with_an_error_result(
    kind: str, shape: str
) -> None:
    async with engine_of(raising(KINDS[kind], shape)) as engine:
        chunks = await collect(engine, ToolCall(name="t0"))
        result = chunks[-1].result
        assert result is not None
        assert result.status == "error"
        assert result.error is not None
        assert result.error.type == kind


@pytest.mark.parametrize("kind", ["KeyboardInterrupt", "SystemExit"])
async def test_an_interrupt_or_exit_from_a_tool_says_it_stopped_only_the_call(kind: str) -> None:
    async with engine_of(raising(KINDS[kind], "async")) as engine:
        result = await engine.call(ToolCall(name="t0"))
    assert result.error is not None
    assert "cannot stop the engine" in result.error.message


@pytest.mark.parametrize("shape", ["sync", "async"])
async def test_a_tools_own_cancelled_error_is_its_error_not_a_cancellation(shape: str) -> None:
    async with engine_of(raising(KINDS["CancelledError"], shape)) as engine:
        result = await engine.call(ToolCall(name="t0"))
    assert result.status == "error"
    assert result.error is not None
    assert "the tool raised CancelledError itself" in result.error.message


async def test_a_sync_tool_raising_stop_iteration_is_an_error_at_once_not_a_timeout() -> None:
    @tool(timeout=5)
    def stops() -> str:
        """Raise StopIteration, which no asyncio future can carry."""
        raise StopIteration("done early")

    async with engine_of(stops) as engine:
        result = await engine.call(ToolCall(name="t0"))
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "StopIteration"
    assert "done early" in result.error.message


async def test_a_tools_exception_that_cannot_be_shown_is_still_described() -> None:
    def unprintable() -> str:
        """Raise an exception that refuses to be shown."""
        raise Unprintable

    async with engine_of(unprintable) as engine:
        result = await engine.call(ToolCall(name="t0"))
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "Unprintable"
    encodable(result)


# -- the caller's cancellation propagates, whatever the tool does with it -----------------------

STARTED: dict[str, asyncio.Event] = {}


def reacting(reaction: str) -> Callable[..., Any]:
    async def waits() -> str:
        """Wait for ever, and react to cancellation."""
        STARTED["waits"].set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if reaction == "interrupt":
                raise KeyboardInterrupt from None
            if reaction == "own_cancel":
                raise asyncio.CancelledError("the tool's own") from None
            if reaction == "swallow":
                return "swallowed"
            raise
        return "never"

    return waits


@pytest.mark.parametrize("reaction", ["propagate", "interrupt", "own_cancel", "swallow"])
async def test_cancelling_the_caller_propagates_and_is_recorded_as_cancelled(
    reaction: str, tmp_path: Path
) -> None:
    STARTED["waits"] = asyncio.Event()
    log = AuditLog(tmp_path / "audit.jsonl")
    engine = engine_of(reacting(reaction), audit=log)
    call = ToolCall(name="t0")
    task = asyncio.create_task(engine.call(call))
    await STARTED["waits"].wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    result = engine.calls.result(call.id)
    assert result is not None
    assert result.status == "cancelled"
    await engine.aclose()
    log.close()
    (outcome,) = read_audit(tmp_path / "audit.jsonl", kind="outcome", call_id=call.id)
    assert outcome["status"] == "cancelled"


# -- what a tool says of itself can always be shown ----------------------------------------------


async def test_metadata_holding_a_surrogate_path_is_escaped_for_showing() -> None:
    odd = "/workspace/\udcff.txt"  # a file name of undecodable bytes, as Python reads it

    def lists() -> ToolOutput:
        """Report a path that is not valid UTF-8."""
        return ToolOutput("listed", {"source": odd, "nested": [{"path": odd}]})

    def writes() -> ToolOutput:
        """Report writing a file whose name is not valid UTF-8."""
        return ToolOutput("written", file=FileReport(odd, 3, None, "ab"))

    async with engine_of(lists, writes) as engine:
        listed = await engine.call(ToolCall(name="t0"))
        written = await engine.call(ToolCall(name="t1"))
    assert listed.status == "ok"
    assert listed.metadata["source"] == "/workspace/\\udcff.txt"
    assert listed.metadata["nested"] == [{"path": "/workspace/\\udcff.txt"}]
    assert listed.tool_metadata["source"] == odd  # what the tool returned, exactly
    assert written.metadata["path"] == "/workspace/\\udcff.txt"
    for result in (listed, written):
        encodable(result)


async def test_metadata_and_warnings_whose_str_raises_are_shown_safely() -> None:
    def hostile() -> ToolOutput:
        """Return metadata that refuses to be shown."""
        return ToolOutput(
            "done",
            {"note": Unshowable(), "warnings": [Unshowable()], "big": 10**5000, 3: "three"},
        )

    async with engine_of(hostile) as engine:
        result = await engine.call(ToolCall(name="t0"))
    assert result.status == "ok"
    assert isinstance(result.metadata["note"], str)
    assert "warnings" not in result.metadata  # the engine's key: a tool cannot fill it
    assert "5001 digits" in result.metadata["big"]
    assert result.metadata["3"] == "three"
    encodable(result)


async def test_a_tool_output_of_the_wrong_shape_is_an_output_error() -> None:
    def shapeless() -> ToolOutput:
        """Return metadata that is not a mapping."""
        return ToolOutput("done", ["not", "a", "dict"])  # type: ignore[arg-type]

    async with engine_of(shapeless) as engine:
        result = await engine.call(ToolCall(name="t0"))
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "OutputError"
    assert "not a dict" in result.error.message


async def test_an_approver_whose_exception_cannot_be_shown_refuses_with_a_warning() -> None:
    def approver(call: ToolCall, decision: Decision) -> bool:
        raise Unprintable

    policy = Policy.from_dict(
        {"rules": [{"id": "ask-all", "effect": "ask"}], "dangerous_paths": {"replace": []}}
    )
    async with engine_of(echo, policy=policy, approver=approver) as engine:
        result = await engine.call(ToolCall(name="t0", arguments={"text": "x"}))
    assert result.status == "denied"
    assert result.notes is not None
    assert any("Unprintable" in w for w in result.notes.warnings)
    encodable(result)


class Checked(ToolBase):
    """A tool whose permission check raises KeyboardInterrupt."""

    name = "checked"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    def check_permissions(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        raise KeyboardInterrupt

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return "ran"


async def test_a_permission_check_raising_a_base_exception_denies() -> None:
    toolkit = Toolkit()
    toolkit.add(Checked())
    async with Engine(toolkit) as engine:
        result = await engine.call(ToolCall(name="checked"))
    assert result.status == "denied"
    assert result.decision is not None
    assert result.decision.effect is Effect.DENY
    assert "KeyboardInterrupt" in result.decision.reason


# -- arguments no tool could take ------------------------------------------------------------


async def echo(text: str) -> str:
    """Echo the text back."""
    return text


async def test_a_five_thousand_digit_integer_for_a_string_is_an_argument_error() -> None:
    async with engine_of(echo) as engine:
        result = await engine.call(ToolCall(name="t0", arguments={"text": 10**5000}))
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ArgumentError"
    assert "text" in result.error.message
    assert "valid string" in result.error.message
    assert "internal error" not in result.error.message
    encodable(result)


@pytest.mark.parametrize(
    "surrogate", ["\udcff", "\\udcff"], ids=["raw-in-the-text", "escaped-in-the-json"]
)
async def test_a_huge_json_argument_with_a_lone_surrogate_is_an_argument_error(
    surrogate: str,
) -> None:
    arguments = '{"text": "' + "x" * 300_000 + surrogate + '"}'
    async with engine_of(echo) as engine:
        result = await engine.call(ToolCall(name="t0", arguments=arguments))
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ArgumentError"
    assert "argument text holds a lone surrogate" in result.error.message
    encodable(result)


async def test_a_mapping_argument_with_a_lone_surrogate_names_the_argument() -> None:
    async with engine_of(echo) as engine:
        result = await engine.call(ToolCall(name="t0", arguments={"text": "a\ud800b"}))
    assert result.error is not None
    assert result.error.type == "ArgumentError"
    assert "argument text holds a lone surrogate (U+D800 at character 1)" in result.error.message


# -- property: nothing a tool raises escapes ---------------------------------------------------

BASES: list[type[BaseException]] = [
    Exception,
    BaseException,
    KeyboardInterrupt,
    SystemExit,
    GeneratorExit,
    asyncio.CancelledError,
    StopIteration,
    StopAsyncIteration,
    ValueError,
    OSError,
    RecursionError,
    MemoryError,
    TimeoutError,
    ConnectionError,
]
TO_RAISE: dict[str, BaseException] = {}
# any character, lone surrogates included (and made likely: they are rare among all of Unicode)
ANY = st.characters(exclude_categories=()) | st.sampled_from(["\udcff", "\ud800"])
# what Python takes in a class name: anything UTF-8 can encode, but NUL
NAME_CHARACTERS = st.characters(codec="utf-8", exclude_characters="\x00")


@st.composite
def hostile_exceptions(draw: st.DrawFn) -> BaseException:
    """An exception of a class made up on the spot: any base, any name Python takes, any
    arguments (lone surrogates included), and a str() that may raise or return something that
    is not a str."""
    base = draw(st.sampled_from(BASES))
    name = draw(st.text(NAME_CHARACTERS, min_size=1, max_size=12))
    namespace: dict[str, Any] = {}
    behaviour = draw(st.sampled_from(["plain", "raises", "not_str", "both_raise"]))
    if behaviour != "plain":

        def hostile_str(self: BaseException) -> Any:
            if behaviour == "not_str":
                return 42
            raise KeyboardInterrupt("str() interrupted")

        namespace["__str__"] = hostile_str
        if behaviour == "both_raise":
            namespace["__repr__"] = hostile_str
    cls = type(name, (base,), namespace)
    args = draw(st.lists(st.text(ANY) | st.integers() | st.binary(max_size=8), max_size=2))
    if draw(st.booleans()):
        return BaseExceptionGroup(draw(st.text(ANY, max_size=8)), [cls(*args)])
    return cls(*args)


def sync_raiser() -> str:
    """Raise whatever the test put in TO_RAISE."""
    raise TO_RAISE["now"]


async def async_raiser() -> str:
    """Raise whatever the test put in TO_RAISE."""
    raise TO_RAISE["now"]


PROPERTY_ENGINE = engine_of(sync_raiser, async_raiser, loop_stall_threshold=None)


async def _raise_through(exc: BaseException, name: str) -> None:
    TO_RAISE["now"] = exc
    result = await PROPERTY_ENGINE.call(ToolCall(name=name))
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type in {escaped(type(exc).__name__), "RuntimeError", "CancelledError"}
    encodable(result)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exc=hostile_exceptions(), name=st.sampled_from(["t0", "t1"]))
def test_nothing_a_tool_raises_escapes_the_engine(exc: BaseException, name: str) -> None:
    asyncio.run(_raise_through(exc, name))
