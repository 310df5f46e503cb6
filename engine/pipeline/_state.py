"""A call in the pipeline: `Admitted`, what steps 1-4 learned and steps 5-8 read and add to, and
`RunFailed`, how the run step reports a run that ended in failure."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from stockade.engine.injection import ToolContext
from stockade.engine.messages import CallNotes, Status, ToolCall, escaped, printable
from stockade.engine.tools import RegisteredTool
from stockade.errors import ConfigurationError
from stockade.policies import Decision, Request
from stockade.policies.suggestions import Suggestion


class Approve(NamedTuple):
    """An approver's yes and how far it reaches: ``"once"`` (this call), ``"session"`` (calls
    of this engine until it is closed) or ``"always"`` (appended to the policy file the engine
    was loaded from). ``rule`` is one of the question's `Decision.suggestions` (None: the first,
    the narrowest). Returning True is ``Approve("once")``; ``"session"`` and ``"always"`` are
    ``Approve(scope)``."""

    scope: Literal["once", "session", "always"] = "once"
    rule: Suggestion | None = None


Approver = Callable[[ToolCall, Decision], "bool | str | Approve | Awaitable[bool | str | Approve]"]
"""Answers "ask" decisions: ``approver(call, decision)`` returns (or resolves to) True to allow
the call. Raising `PermissionDeniedError` refuses it with that message as the reason. A sync
approver runs in a thread of its own; either kind has the engine's ``approval_timeout``. To
approve beyond the call it answers ``"session"``, ``"always"`` or an `Approve` naming one of
the decision's ``suggestions``. Asked
about a host a command wants to reach (a decision whose rule begins ``network.``), it may
answer ``"session"`` or ``"always"`` to approve that host and port beyond the call (True and
``"call"`` approve it for the rest of the call)."""


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


def positive(**settings: float | None) -> None:
    """Raise `ConfigurationError` naming the first setting that is neither None nor a positive
    finite number."""
    for name, value in settings.items():
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ConfigurationError(f"{name} must be a positive number, got {value}")
