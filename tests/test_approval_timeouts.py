"""Approvers that take too long, with a real engine on a real loop: the ask is refused once the
engine's ``approval_timeout`` passes, saying so, and a sync approver runs off the event loop, so
that while it thinks every other call goes on."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult
from stockade.errors import ConfigurationError
from stockade.policies import Decision, Policy

RELEASE = threading.Event()  # lets a blocked sync approver go once its test is over


@pytest.fixture(autouse=True)
def _release_approvers() -> Iterator[None]:
    RELEASE.clear()
    yield
    RELEASE.set()


async def asked(text: str) -> str:
    """A tool the policy asks about."""
    return text


async def free(text: str) -> str:
    """A tool the policy allows, that waits a moment."""
    await asyncio.sleep(0.01)
    return text


ASKS = Policy.from_dict(
    {
        "rules": [{"id": "ask-asked", "effect": "ask", "tools": ["asked"]}],
        "dangerous_paths": {"replace": []},
    }
)


def engine(**kwargs: Any) -> Engine:
    toolkit = Toolkit()
    toolkit.add(asked)
    toolkit.add(free)
    return Engine(toolkit, policy=ASKS, **kwargs)


async def never_answers(call: ToolCall, decision: Decision) -> bool:
    await asyncio.Event().wait()
    return True


def blocks(call: ToolCall, decision: Decision) -> bool:
    RELEASE.wait(10)
    return True


def refused_for_silence(result: ToolResult, seconds: str) -> None:
    assert result.status == "denied"
    assert result.error is not None
    assert f"the approver did not answer within {seconds}" in result.error.message
    assert result.notes is not None
    assert result.notes.approval == "refused"


async def test_an_async_approver_that_never_answers_is_refused_at_the_timeout() -> None:
    async with engine(approver=never_answers, approval_timeout=0.2) as runner:
        result = await runner.call(ToolCall(name="asked", arguments={"text": "x"}))
    refused_for_silence(result, "0.2s")


async def test_a_blocking_sync_approver_is_refused_at_the_timeout_and_stalls_nobody() -> None:
    finished: list[str] = []

    async def run(name: str) -> ToolResult:
        result = await runner.call(ToolCall(name=name, arguments={"text": name}))
        finished.append(name)
        return result

    async with engine(approver=blocks, approval_timeout=0.3) as runner:
        waiting, other = await asyncio.gather(run("asked"), run("free"))
    refused_for_silence(waiting, "0.3s")
    assert other.status == "ok"
    # the other call ran while the approver blocked: the loop was never held
    assert finished == ["free", "asked"]
    assert waiting.notes is not None
    assert any("approver's thread" in w for w in waiting.notes.warnings)


async def test_a_per_call_approver_is_bounded_too() -> None:
    async with engine(approval_timeout=0.2) as runner:
        result = await runner.call(
            ToolCall(name="asked", arguments={"text": "x"}), approver=never_answers
        )
    refused_for_silence(result, "0.2s")


async def test_a_sync_approver_that_answers_in_time_still_approves() -> None:
    seen: list[str] = []

    def approves(call: ToolCall, decision: Decision) -> bool:
        seen.append(threading.current_thread().name)
        return True

    async with engine(approver=approves, approval_timeout=5) as runner:
        result = await runner.call(ToolCall(name="asked", arguments={"text": "x"}))
    assert result.status == "ok"
    assert result.notes is not None
    assert result.notes.approval == "approved"
    assert seen[0].startswith("stockade-approver")  # off the event loop's thread


async def test_without_a_limit_an_approver_may_take_its_time() -> None:
    async def slow(call: ToolCall, decision: Decision) -> bool:
        await asyncio.sleep(0.3)
        return True

    async with engine(approver=slow, approval_timeout=None) as runner:
        result = await runner.call(ToolCall(name="asked", arguments={"text": "x"}))
    assert result.status == "ok"


async def test_cancelling_the_caller_while_the_approver_thinks_propagates() -> None:
    async with engine(approver=never_answers, approval_timeout=60) as runner:
        call = ToolCall(name="asked", arguments={"text": "x"})
        task = asyncio.create_task(runner.call(call))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        result = runner.calls.result(call.id)
    assert result is not None
    assert result.status == "cancelled"


async def test_an_approver_raising_its_own_cancelled_error_refuses() -> None:
    async def cancels(call: ToolCall, decision: Decision) -> bool:
        raise asyncio.CancelledError("the approver's own")

    async with engine(approver=cancels) as runner:
        result = await runner.call(ToolCall(name="asked", arguments={"text": "x"}))
    assert result.status == "denied"
    assert result.notes is not None
    assert any("CancelledError" in w for w in result.notes.warnings)


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf")])
def test_the_approval_timeout_must_be_a_positive_number(value: float) -> None:
    with pytest.raises(ConfigurationError, match="approval_timeout"):
        engine(approval_timeout=value)
