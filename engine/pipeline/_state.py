"""A call in the pipeline: `Admitted`, what steps 1-4 learned and steps 5-8 read and add to, and
`RunFailed`, how the run step reports a run that ended in failure."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from stockade.engine.injection import ToolContext
from stockade.engine.messages import CallNotes, Status, ToolCall, escaped, printable
from stockade.engine.tools import RegisteredTool
from stockade.policies import Decision, Request

Approver = Callable[[ToolCall, Decision], "bool | Awaitable[bool]"]
"""Answers "ask" decisions: ``approver(call, decision)`` returns (or resolves to) True to allow
the call. Raising `PermissionDeniedError` refuses it with that message as the reason. A sync
approver runs in a thread of its own; either kind has the engine's ``approval_timeout``."""


@dataclass(slots=True)
class Admitted:
    """A call that passed resolve, validate, classify and decide. Its ``decision`` and
    ``notes`` are the engine's alone: a tool's output never writes them."""

    call: ToolCall
    tool: RegisteredTool
    kwargs: dict[str, Any]
    ctx: ToolContext | None
    decision: Decision
    request: Request
    notes: CallNotes | None = None
    approver: Approver | None = None  # who answers this call's asks (the call's, else the engine's)
    approval_timeout: float | None = None  # how long the approver may take (None: no limit)

    def note(self) -> CallNotes:
        """The call's notes, begun on first use (most calls have nothing to note)."""
        notes = self.notes
        if notes is None:
            notes = self.notes = CallNotes()
        return notes

    def warn(self, warning: str) -> None:
        """Add a warning to the call's result, audit record and span (lone surrogates, as a
        tool's text may hold, escaped: every one of those must be able to encode it)."""
        self.note().warnings.append(escaped(warning))


class RunFailed(Exception):
    """A run that ended in failure after ``attempts`` attempts."""

    def __init__(self, error: BaseException, attempts: int, status: Status) -> None:
        super().__init__(printable(error))  # a tool's exception may fail to be shown
        self.error = error
        self.attempts = attempts
        self.status = status
