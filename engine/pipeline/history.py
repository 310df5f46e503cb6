"""The call context: every call an engine received, every result, matched by call id.

Calls are tracked from the moment the engine receives them (so a
submitted call is visible as pending at once); results arrive in whatever order calls finish
and are matched by id; listeners hear every result. A call of an *external* tool first gets a
``pending`` result (listeners hear it) and stays pending until `Engine.complete` delivers the
final one.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable

from stockade.engine.errors import UnknownCallError
from stockade.engine.messages import ToolCall, ToolResult
from stockade.errors import ConfigurationError

log = logging.getLogger("stockade.engine")

Listener = Callable[[ToolResult], None]


class CallContext:
    """Calls and results of one engine, bounded to the last ``history`` calls."""

    def __init__(self, *, history: int = 10_000) -> None:
        if history < 1:
            raise ConfigurationError(f"history must be at least 1, got {history}")
        self._history = history
        self._calls: OrderedDict[str, ToolCall] = OrderedDict()
        self._results: dict[str, ToolResult] = {}
        self._listeners: list[Listener] = []
        self._waiters: dict[str, list[asyncio.Future[ToolResult]]] = {}
        self._listener_failures: set[int] = set()

    # -- reading -----------------------------------------------------------------------------

    @property
    def calls(self) -> list[ToolCall]:
        """Calls received, oldest first."""
        return list(self._calls.values())

    @property
    def results(self) -> list[ToolResult]:
        """Results produced, in call order."""
        return [self._results[i] for i in self._calls if i in self._results]

    @property
    def pending(self) -> list[ToolCall]:
        """Calls without a final result yet: running, or external and not completed."""
        return [c for i, c in self._calls.items() if i not in self._results]

    def result(self, call_id: str) -> ToolResult | None:
        """The result of a call, if it has finished."""
        return self._results.get(call_id)

    async def wait(self, call_id: str) -> ToolResult:
        """Wait for a call's result (returns at once if it already finished)."""
        done = self._results.get(call_id)
        if done is not None:
            return done
        if call_id not in self._calls:
            raise UnknownCallError(f"no call with id {call_id!r} was received by this engine")
        future: asyncio.Future[ToolResult] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(call_id, []).append(future)
        return await future

    # -- listening ---------------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(result)`` for every result from now on. A listener that raises is
        logged (once) and never breaks a call."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop notifying ``listener``."""
        self._listeners.remove(listener)

    # -- engine side -------------------------------------------------------------------------

    def track(self, call: ToolCall) -> None:
        """(Engine use.) Note a received call."""
        calls = self._calls
        calls[call.id] = call
        if self._results.pop(call.id, None) is not None:  # an id used again names the new call
            calls.move_to_end(call.id)
        if len(calls) > self._history:
            old, _ = calls.popitem(last=False)
            self._results.pop(old, None)

    def record(self, result: ToolResult) -> None:
        """(Engine use.) Store a result, wake waiters, notify listeners. A ``pending`` result is
        only announced: the call stays pending until its final result."""
        final = result.status != "pending"
        if final and result.call_id in self._calls:  # a dropped call stays dropped
            self._results[result.call_id] = result
        if final and self._waiters:
            for future in self._waiters.pop(result.call_id, ()):
                if not future.done():
                    future.set_result(result)
        for listener in self._listeners:
            try:
                listener(result)
            except Exception:
                if id(listener) not in self._listener_failures:
                    self._listener_failures.add(id(listener))
                    log.exception(
                        "call-context listener %r failed; the call is unaffected", listener
                    )
