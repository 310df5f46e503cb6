"""Calls of external tools: admitted like any other, then left for someone outside the engine
to do and `Engine.complete` (a person, another process, a UI)."""

from __future__ import annotations

from time import time
from typing import Any

from stockade.engine.errors import UnknownCallError
from stockade.engine.messages import ToolCall, ToolResult
from stockade.engine.pipeline import _results as results
from stockade.engine.pipeline._state import Admitted, RunFailed


class ExternalCalls:
    """The external calls an engine waits on, by call id (each with its start on the
    performance clock, for its duration, and in Unix time, for saying since when it waits)."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[Admitted, float, float]] = {}

    def pending(self, admitted: Admitted, started: float) -> ToolResult:
        """Leave ``admitted`` waiting; its result for now says so."""
        self._waiting[admitted.call.id] = (admitted, started, time())
        return results.pending(admitted, started)

    def complete(self, call_id: str, value: Any, max_chars: int) -> tuple[ToolCall, ToolResult]:
        """The waiting call and its final result, from what was done outside (an exception for
        a failure). Raises `UnknownCallError` for an id nobody waits on."""
        entry = self._waiting.pop(call_id, None)
        if entry is None:
            waiting = ", ".join(self._waiting) or "(none)"
            raise UnknownCallError(f"no external call {call_id!r} is pending; pending: {waiting}")
        admitted, started, _ = entry
        if isinstance(value, BaseException):
            result = results.run_failure(admitted, started, RunFailed(value, 1, "error"))
        else:
            result = results.success(admitted, started, value, 1, max_chars)
        return admitted.call, result

    def ids(self) -> list[str]:
        """The ids of the calls waiting, oldest first."""
        return list(self._waiting)

    def since(self) -> dict[str, float]:
        """When each waiting call began to wait (Unix time), by id, oldest first."""
        return {call_id: entry[2] for call_id, entry in self._waiting.items()}
