"""Step 8, record: the engine tells its observers of every call, when it begins, when it is
decided, and when it ends. The audit log and tracing are observers; so may be yours.

`Observers` is what the engine holds (or None, when nobody listens: the hot path then checks
one attribute). The audit log is told first and apart from the others, because it is the only
one whose failure changes a call: a call whose intent it cannot keep is denied before anyone
else hears of it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from stockade.engine.messages import ToolCall, ToolResult
from stockade.engine.observe.audit_log import AuditError, AuditLog
from stockade.engine.observe.records import intent_record, outcome_record
from stockade.policies import Decision, Effect, Request

if TYPE_CHECKING:  # the OpenTelemetry SDK loads only when tracing is used
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger("stockade.engine")


class CallObserver(Protocol):
    """Hears every call of an engine. An observer that raises is logged (once) and never breaks
    a call. ``current``: the call runs in this task, so a tracer may make its span current."""

    def began(self, call: ToolCall, description: str | None, *, current: bool) -> None: ...

    def decided(self, call: ToolCall, request: Request, decision: Decision) -> None: ...

    def ended(self, call: ToolCall, result: ToolResult) -> None: ...


class Observers:
    """The audit log, the tracer and any other observers of one engine, told in that order."""

    __slots__ = ("_audit", "_failed", "_others", "_tracer", "hears_begin")

    def __init__(
        self,
        audit: AuditLog | None,
        tracer: Any,  # a CallTracer: typed loosely so the OpenTelemetry SDK loads only with it
        others: Sequence[CallObserver],
    ) -> None:
        self._audit = audit
        self._tracer = tracer
        self._others = tuple(others)
        self._failed: set[int] = set()
        # the audit log does not care when a call begins: with it alone, the engine need not
        # look the tool up to say so (that is on the hot path)
        self.hears_begin = tracer is not None or bool(self._others)

    @classmethod
    def of(
        cls,
        audit: AuditLog | None,
        provider: TracerProvider | None,
        record_content: bool,
        others: Sequence[CallObserver],
    ) -> Observers | None:
        """The observers an engine was given, or None when there are none."""
        if audit is None and provider is None and not others:
            return None
        tracer = None
        if provider is not None:
            from stockade.engine.observe.tracing import CallTracer

            tracer = CallTracer(provider, record_content=record_content)
        return cls(audit, tracer, others)

    def began(self, call: ToolCall, description: str | None, *, current: bool) -> object:
        """Tell of a call that begins; returns what to give `leave` when it is over (the
        tracer's token of the span it made current), or None."""
        token = None
        if self._tracer is not None:
            token = self._tell(self._tracer, self._tracer.began, call, description, current=current)
        for observer in self._others:
            self._tell(observer, observer.began, call, description, current=current)
        return token

    def leave(self, token: object) -> None:
        """The call `began` returned ``token`` for is over, whatever happened to it."""
        if token is not None and self._tracer is not None:
            self._tell(self._tracer, self._tracer.leave, token)

    def decided(self, call: ToolCall, request: Request, decision: Decision) -> Decision:
        """Record the decision; returns it, or a denial when the audit log cannot keep it."""
        if self._audit is not None:
            try:
                self._audit.append(intent_record(call, request, decision))
            except Exception as exc:  # nothing runs that the audit log cannot keep
                reason = (
                    str(exc) if isinstance(exc, AuditError) else f"the audit log failed: {exc!r}"
                )
                decision = Decision(Effect.DENY, "audit", reason, "call", None)
        if self._tracer is not None:
            self._tell(self._tracer, self._tracer.decided, call, request, decision)
        for observer in self._others:
            self._tell(observer, observer.decided, call, request, decision)
        return decision

    def ended(self, call: ToolCall, result: ToolResult) -> None:
        if self._audit is not None:
            try:
                self._audit.append(outcome_record(call, result))
            except Exception as exc:  # reported; the call's result stands
                log.error("call %s was not audited: %s", call.id, exc)
        if self._tracer is not None:
            self._tell(self._tracer, self._tracer.ended, call, result)
        for observer in self._others:
            self._tell(observer, observer.ended, call, result)

    @contextlib.contextmanager
    def run(self, name: str, attributes: Mapping[str, Any]) -> Iterator[None]:
        """A parent span for many calls, when there is a tracer."""
        if self._tracer is None:
            yield
            return
        with self._tracer.run(name, attributes):
            yield

    def _tell(self, observer: object, hook: Any, *args: Any, **kwargs: Any) -> Any:
        """``hook(...)``, whose failure is logged (once per observer), never raised into a
        call."""
        try:
            return hook(*args, **kwargs)
        except Exception:
            if id(observer) not in self._failed:
                self._failed.add(id(observer))
                log.exception("observer %r failed; calls are unaffected", observer)
            return None
