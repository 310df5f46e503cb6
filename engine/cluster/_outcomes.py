"""The results the driver makes itself, for calls that did not get one from their engine: a call
refused because its session drains, is closed or is dead; a call whose session was lost while
it ran (its node died: the outcome is unknown, and it was not re-run); a call cut short by
closing the session. And Ray's errors, said in a line.

    result = lost(call, "session s-1 on node 3f2a... (10.0.0.7) is lost: its node died")
"""

from __future__ import annotations

from stockade.engine.messages import ErrorInfo, Status, ToolCall, ToolResult


def made(call: ToolCall, status: Status, kind: str, message: str) -> ToolResult:
    """A result the driver made for ``call``: no content, ``kind: message`` as its error."""
    return ToolResult(
        call_id=call.id, tool=call.name, status=status, error=ErrorInfo(kind, message)
    )


def lost(call: ToolCall, loss: str) -> ToolResult:
    """A call in flight when its session was lost: it may have run, in part or whole."""
    return made(
        call,
        "error",
        "SessionLostError",
        f"{loss}. The outcome of call {call.id} ({call.name}) is unknown: it may or may not "
        "have run on that node, and it was NOT re-run; check the workspace before retrying",
    )


def refused(call: ToolCall, session: str, state: str, reason: str | None) -> ToolResult:
    """A call that arrived when its session takes no more: it was not run."""
    if state == "draining":
        kind, why = "SessionDrainingError", f"session {session} is draining: it takes no new calls"
    elif state == "closed":
        kind, why = "SessionClosedError", f"session {session} is closed"
    else:
        kind, why = "SessionLostError", reason or f"session {session} is lost"
    return made(call, "error", kind, f"{why}. Call {call.id} ({call.name}) was not run")


def closed(call: ToolCall, session: str) -> ToolResult:
    """A call still without a result when its session was closed and its actor killed."""
    return made(
        call,
        "cancelled",
        "SessionClosedError",
        f"session {session} was closed while call {call.id} ({call.name}) ran; it was cancelled",
    )


def duplicate(call: ToolCall, session: str) -> ToolResult:
    """A second call with the id of one still in flight: results are matched by id."""
    return made(
        call,
        "error",
        "DuplicateCallError",
        f"a call with id {call.id!r} is already in flight on session {session}; give each "
        "call its own id (the call was not run)",
    )


def failed(call: ToolCall, session: str, exc: BaseException) -> ToolResult:
    """A call whose actor task failed for a reason other than the actor's loss (a fault in
    the session's own code, a result lost on its way back): it may have run all the same."""
    return made(
        call,
        "error",
        "SessionError",
        f"session {session} returned no result for call {call.id} ({call.name}): {said(exc)}. "
        "Its outcome is unknown: it may or may not have run on the node, and it was NOT re-run",
    )


def said(exc: BaseException) -> str:
    """An exception in one line: its type and the first line of its message, shortened."""
    first = str(exc).strip().splitlines()
    text = first[0] if first else ""
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["closed", "duplicate", "failed", "lost", "made", "refused", "said"]
