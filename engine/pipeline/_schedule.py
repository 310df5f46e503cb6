"""Step 5, schedule: who may run now. Concurrency-safe calls share the engine, every other call
runs alone, and the policy's caps bound how many run at once.

A first-come-first-served reader/writer lock. Shared holders run together; an exclusive holder
runs with nobody else; a waiting exclusive call blocks later shared calls, so calls are admitted
in the order they arrived and no exclusive call starves. The uncontended path takes no await.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from stockade.engine.messages import ToolCall, ToolResult
from stockade.engine.pipeline._deadline import Watchdog
from stockade.engine.tools import RegisteredTool
from stockade.policies import Policy


class Scheduler:
    """Admission of calls into the engine: shared or exclusive slots, first come first served."""

    __slots__ = ("_exclusive", "_shared", "_waiters")

    def __init__(self) -> None:
        self._shared = 0
        self._exclusive = False
        self._waiters: deque[tuple[bool, asyncio.Future[None]]] = deque()

    @property
    def running(self) -> int:
        """Calls holding a slot now."""
        return self._shared + (1 if self._exclusive else 0)

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot."""
        return sum(1 for _, f in self._waiters if not f.done())

    def try_acquire(self, exclusive: bool) -> bool:
        """Take a slot without waiting, if one is free and nobody is queued ahead."""
        if self._waiters or self._exclusive:
            return False
        if exclusive:
            if self._shared:
                return False
            self._exclusive = True
        else:
            self._shared += 1
        return True

    async def acquire(self, exclusive: bool) -> None:
        """Wait for a slot. Cancellation while waiting leaves the queue as if never joined."""
        if self.try_acquire(exclusive):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (exclusive, future)
        self._waiters.append(entry)
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                self.release(exclusive)  # granted just as we were cancelled: give it back
            else:
                with contextlib.suppress(ValueError):  # already granted and popped
                    self._waiters.remove(entry)
                self._wake()
            raise

    def release(self, exclusive: bool) -> None:
        """Give a slot back and admit whoever is next."""
        if exclusive:
            self._exclusive = False
        else:
            self._shared -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            exclusive, future = self._waiters[0]
            if future.done():
                self._waiters.popleft()
                continue
            if exclusive:
                if self._shared or self._exclusive:
                    return
                self._waiters.popleft()
                self._exclusive = True
                future.set_result(None)
                return
            if self._exclusive:
                return
            self._waiters.popleft()
            self._shared += 1
            future.set_result(None)


class Gates:
    """Caps on calls in flight, from the policy's limits: one for the whole engine, one per
    subject, one per tool. Each cap is an `asyncio.Semaphore` created on first use; calls take
    them always in the same order (engine, subject, tool), so no two calls can deadlock. A cap
    is one semaphore per key and size: a new policy (from a store) keeping a cap shares it with
    the calls the old one admitted; one changing it gives the calls it admits a new one, and
    those running under the old cap finish under it."""

    __slots__ = ("_gates",)

    def __init__(self) -> None:
        self._gates: dict[tuple[str, int], asyncio.Semaphore] = {}

    def for_call(
        self, tool: str, subject: str, caps: tuple[int | None, int | None, int | None]
    ) -> list[asyncio.Semaphore]:
        """The semaphores a call must hold, in acquisition order."""
        global_cap, subject_cap, tool_cap = caps
        gates = []
        for key, cap in (
            ("*", global_cap),
            (f"subject:{subject}", subject_cap),
            (f"tool:{tool}", tool_cap),
        ):
            if cap is not None:
                gate = self._gates.get((key, cap))
                if gate is None:
                    gate = self._gates[key, cap] = asyncio.Semaphore(cap)
                gates.append(gate)
        return gates


async def in_batches(
    calls: list[ToolCall],
    alone: Callable[[ToolCall], bool],
    run: Callable[[ToolCall], Awaitable[ToolResult]],
    unstarted: Callable[[ToolCall], None],
) -> list[ToolResult]:
    """`Engine.call_many`: each call ``run`` in its `batches` group, the results in input
    order. When cancelled, ``unstarted`` hears of every call, so that those that never started
    are recorded as cancelled too."""
    done: list[ToolResult | None] = [None] * len(calls)
    try:
        for group in batches(calls, alone):
            if len(group) == 1:
                done[group[0]] = await run(calls[group[0]])
                continue
            ran = await asyncio.gather(*(run(calls[i]) for i in group))
            for index, result in zip(group, ran, strict=True):
                done[index] = result
    except asyncio.CancelledError:
        for call in calls:
            unstarted(call)
        raise
    return [r for r in done if r is not None]


def batches(calls: Sequence[ToolCall], alone: Callable[[ToolCall], bool]) -> list[list[int]]:
    """The positions of ``calls`` grouped as `Engine.call_many` runs them, in order: consecutive
    calls that may share the engine run together; a call that must run ``alone`` runs by
    itself, after those before it."""
    groups: list[list[int]] = []
    sharing: list[int] = []
    for index, call in enumerate(calls):
        if not alone(call):
            sharing.append(index)
            continue
        if sharing:
            groups.append(sharing)
            sharing = []
        groups.append([index])
    if sharing:
        groups.append(sharing)
    return groups


NO_GATES: tuple[asyncio.Semaphore, ...] = ()  # what a call holds when the policy sets no caps


class Admission:
    """Step 5 for one engine: whether a call must run alone, which caps it must hold, and
    waiting for them."""

    __slots__ = ("gates", "has_limits", "policy", "scheduler")

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.has_limits = policy.has_limits
        self.scheduler = Scheduler()
        self.gates = Gates()

    def follow(self, policy: Policy) -> None:
        """Take a new policy (a store published it) for what is asked without a call's own:
        which calls `call_many` runs alone."""
        self.policy, self.has_limits = policy, policy.has_limits

    def exclusive(self, tool: RegisteredTool, subject: str, policy: Policy | None = None) -> bool:
        """Whether calls of ``tool`` must run alone: not concurrency-safe, or made exclusive by
        the limits of ``policy`` (the call's; None: the engine's now)."""
        if not tool.spec.shares:
            return True
        policy = policy or self.policy
        return policy.has_limits and policy.limits_for(tool.name, subject).exclusive

    def slot(
        self, tool: RegisteredTool, subject: str, policy: Policy | None = None
    ) -> tuple[bool, Sequence[asyncio.Semaphore]]:
        """Whether the call must run alone, and which caps it must hold, by the limits of
        ``policy`` (the one that judged the call; None: the engine's now)."""
        policy = policy or self.policy
        if not policy.has_limits:
            return not tool.spec.shares, NO_GATES
        limits = policy.limits_for(tool.name, subject)
        gates = self.gates.for_call(
            tool.name, subject, (limits.global_cap, limits.subject_cap, limits.tool_cap)
        )
        return self.exclusive(tool, subject, policy), gates

    async def acquire(
        self,
        exclusive: bool,
        gates: Sequence[asyncio.Semaphore],
        limit_s: float,
        watchdog: Watchdog,
    ) -> bool:
        """Wait for the caps and a slot, at most ``limit_s`` seconds in all. False when the time
        ran out (nothing is held then)."""
        if not gates and self.scheduler.try_acquire(exclusive):
            return True
        deadline = watchdog.arm(limit_s)
        held: list[asyncio.Semaphore] = []
        try:
            for gate in gates:
                await gate.acquire()
                held.append(gate)
            await self.scheduler.acquire(exclusive)
        except asyncio.CancelledError:
            for gate in reversed(held):
                gate.release()
            if deadline.stop():
                return False
            raise
        deadline.stop()
        return True

    def release(self, exclusive: bool, gates: Sequence[asyncio.Semaphore]) -> None:
        """Give back what `acquire` took."""
        self.scheduler.release(exclusive)
        for gate in reversed(gates):
            gate.release()

    def waited(self, tool: RegisteredTool, subject: str, policy: Policy | None = None) -> str:
        """What a call that timed out waiting for a slot was waiting for."""
        policy = policy or self.policy
        if not policy.has_limits:
            return "other calls held the engine"
        limits = policy.limits_for(tool.name, subject)
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
