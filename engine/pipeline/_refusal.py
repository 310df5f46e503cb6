"""A call its caller refused before it ran: judged as `Engine.call` judges it, recorded as every
call is (the audit log's intent and outcome, the span, `Engine.calls` and its listeners), and
never run.

An agent framework with approvals of its own (the Agents SDK's ``needs_approval``, pydantic-ai's
deferred tools) asks its person itself; when the answer is no, the framework never calls the
tool, and the adapter tells the engine with `Engine.refuse`. The outcome is a denial whatever
the policy says now (``approval: refused``); the policy's ask, when it asked, is the intent.
Synchronous, as the frameworks' refusal hooks are: an fsync audit log's records are submitted
and written with the next batch, not waited for (nothing runs either way).
"""

from __future__ import annotations

import inspect
import logging
from time import perf_counter
from typing import Protocol

from stockade.engine.errors import CallError
from stockade.engine.messages import CallNotes, ErrorInfo, ToolCall, ToolResult
from stockade.engine.observe.observer import Observers
from stockade.engine.pipeline.history import CallContext
from stockade.engine.toolkit import Toolkit
from stockade.policies import Decision, Effect, Request

log = logging.getLogger("stockade.engine")


class _Engine(Protocol):
    """What of the engine a refusal uses (`Engine.refuse` is this module's `refuse`)."""

    toolkit: Toolkit
    calls: CallContext
    _observers: Observers | None

    def preview(self, call: ToolCall) -> tuple[Request, Decision]: ...


def refuse(engine: _Engine, call: ToolCall, verdict: str) -> ToolResult:
    """Record ``call`` as refused by its caller (``verdict`` says by whom and why) and return
    its result, denied, without running it: the policy's ask as its intent (when it asked), the
    outcome ``approval: refused``, its span, `Engine.calls` and its listeners, as `Engine.call`
    records a call an approver refused."""
    calls, observers = engine.calls, engine._observers
    tool = engine.toolkit.resolve(call.name)
    description = tool.description if tool is not None else None
    started = perf_counter()
    calls.track(call)
    request: Request | None = None
    asked: Decision | None = None
    try:
        request, asked = engine.preview(call)
    except CallError:
        pass  # an unknown tool or bad arguments: refused all the same, with no intent
    except Exception as exc:  # a path outside every mount ...: the policy never saw it
        log.info("call %s (%s) could not be judged for its refusal: %s", call.id, call.name, exc)
    if asked is not None and asked.effect is Effect.ASK:
        refused = asked.answered(False, verdict)
    else:
        refused = Decision(Effect.DENY, None, verdict)
    if observers is not None:
        observers.began(call, description, current=False)
        if request is not None and asked is not None:
            _submitted(observers.decided(call, request, asked))
    result = ToolResult(
        call_id=call.id,
        tool=call.name,
        status="denied",
        error=ErrorInfo("PermissionDeniedError", refused.reason),
        decision=refused,
        duration_s=perf_counter() - started,
        notes=CallNotes(approval="refused"),
        metadata={"approval": "refused"},
    )
    calls.record(result)
    if observers is not None:
        _submitted(observers.ended(call, result))
    return result


def _submitted(waiting: object) -> None:
    """An fsync log's wait for its record, not taken: the record is submitted and goes to disk
    with the next batch (closing the wait keeps Python from warning it was never awaited)."""
    if inspect.iscoroutine(waiting):
        waiting.close()
