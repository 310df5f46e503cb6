"""An engine following a policy that changes under it (`Policy.feed`, as a policy store's feed
sets it): each call is judged, capped and run by the one policy that was newest when it began.
The feed here is a stand-in holding ``current`` (the store's own tests drive the real one)."""

from __future__ import annotations

import asyncio
import tomllib
from dataclasses import dataclass
from typing import Annotated

from stockade.engine import Engine, FromContext, ToolCall, Toolkit, tool
from stockade.policies import Policy, ProcessSpec


@dataclass
class Feed:
    """What the engine reads of a feed: the newest policy, and why it may be stale."""

    current: Policy
    problem: str | None = None


def following(text: str, feed: Feed | None = None) -> tuple[Policy, Feed]:
    policy = Policy.from_dict(tomllib.loads(text))
    if feed is None:
        feed = Feed(policy)
    policy.feed = feed  # type: ignore[assignment]
    feed.current = policy
    return policy, feed


CAPPED = """
[limits]
max_in_flight = 1
[roles]
team = ["agent"]
"""
CAPPED_OTHER_ROLES = """
[limits]
max_in_flight = 1
[roles]
team = ["agent", "ci"]
"""


async def test_a_cap_a_new_policy_keeps_counts_the_calls_the_old_one_admitted() -> None:
    running = 0
    most = 0

    @tool(concurrency_safe=True)
    async def work() -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.2)
        running -= 1
        return "done"

    kit = Toolkit()
    kit.add(work)
    policy, feed = following(CAPPED)
    async with Engine(kit, policy=policy) as engine:
        first = asyncio.create_task(engine.call(ToolCall(name="work", arguments={})))
        await asyncio.sleep(0.05)  # the first call holds the engine's one slot
        following(CAPPED_OTHER_ROLES, feed)  # the same cap, other roles
        second = await engine.call(ToolCall(name="work", arguments={}))
        assert (await first).ok
        assert second.ok
    assert most == 1, "two calls ran at once under a cap of one"


async def test_each_call_is_decided_by_the_newest_policy_and_told_of_a_stale_one() -> None:
    @tool
    def note(text: str) -> str:
        return text

    kit = Toolkit()
    kit.add(note)
    policy, feed = following('default = "allow"')
    async with Engine(kit, policy=policy) as engine:
        assert (await engine.call(ToolCall(name="note", arguments={"text": "a"}))).ok
        following('default = "deny"', feed)
        denied = await engine.call(ToolCall(name="note", arguments={"text": "b"}))
        assert denied.status == "denied"
        assert engine.policy.default.value == "deny"
        feed.problem = "the policy store at postgresql://db is unreachable; deciding with ..."
        stale = await engine.call(ToolCall(name="note", arguments={"text": "c"}))
        assert stale.notes is not None
        assert feed.problem in stale.notes.warnings


async def test_a_call_gets_the_command_settings_of_the_policy_that_judged_it() -> None:
    @tool
    def settings(process: Annotated[ProcessSpec, FromContext]) -> float:
        return process.timeout_s

    kit = Toolkit()
    kit.add(settings)
    policy, feed = following("[process]\ntimeout_s = 10")
    async with Engine(kit, policy=policy) as engine:
        assert (await engine.call(ToolCall(name="settings", arguments={}))).text == "10.0"
        following("[process]\ntimeout_s = 20", feed)
        assert (await engine.call(ToolCall(name="settings", arguments={}))).text == "20.0"
