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
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from stockade.engine.messages import ToolCall, ToolResult
from stockade.engine.observe._disk_waits import DiskWaits
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

    __slots__ = ("_audit", "_failed", "_others", "_tracer", "_waits", "hears_begin")

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
        self._waits = DiskWaits()  # an fsync log's writes, awaited by the calls
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

    # Each hook is called directly inside a try (no helper taking *args): this runs several
    # times a call, and a span or an audit record must cost as little as it can.

    def began(self, call: ToolCall, description: str | None, *, current: bool) -> object:
        """Tell of a call that begins; returns what to give `leave` when it is over (the
        tracer's token of the span it made current), or None."""
        token = None
        tracer = self._tracer
        if tracer is not None:
            try:
                token = tracer.began(call, description, current=current)
            except Exception:
                self._failed_once(tracer)
        for observer in self._others:
            try:
                observer.began(call, description, current=current)
            except Exception:
                self._failed_once(observer)
        return token

    def leave(self, token: object) -> None:
        """The call `began` returned ``token`` for is over, whatever happened to it."""
        if token is not None and self._tracer is not None:
            try:
                self._tracer.leave(token)
            except Exception:
                self._failed_once(self._tracer)

    def decided(
        self, call: ToolCall, request: Request, decision: Decision
    ) -> Decision | Awaitable[Decision]:
        """Record the decision; returns it, or a denial when the audit log cannot keep it. With
        an fsync log, what to await instead: the decision once its intent is on disk (with the
        others' that arrived meanwhile: one fsync for all), or a denial if it cannot be."""
        ticket = None
        if self._audit is not None:
            try:
                self._audit.admit()  # a log that cannot be written admits no call
            except AuditError as exc:
                decision = _audit_denial(str(exc))
            try:  # the denial too is kept, and written once the log can be
                ticket = self._audit.submit(intent_record(call, request, decision))
            except Exception as exc:  # nothing runs that the audit log cannot keep
                reason = (
                    str(exc) if isinstance(exc, AuditError) else f"the audit log failed: {exc!r}"
                )
                decision = _audit_denial(reason)
        tracer = self._tracer
        if tracer is not None:
            try:
                tracer.decided(call, request, decision)
            except Exception:
                self._failed_once(tracer)
        if self._others:
            for observer in self._others:
                try:
                    observer.decided(call, request, decision)
                except Exception:
                    self._failed_once(observer)
        return decision if ticket is None else _on_disk(self._waits, ticket, decision)

    def ended(self, call: ToolCall, result: ToolResult) -> Awaitable[None] | None:
        """Record the result; with an fsync log, what to await for it to be on disk."""
        ticket = None
        if self._audit is not None:
            try:
                ticket = self._audit.submit(outcome_record(call, result))
            except Exception as exc:  # reported; the call's result stands
                log.error("call %s was not audited: %s", call.id, exc)
        tracer = self._tracer
        if tracer is not None:
            try:
                tracer.ended(call, result)
            except Exception:
                self._failed_once(tracer)
        if self._others:
            for observer in self._others:
                try:
                    observer.ended(call, result)
                except Exception:
                    self._failed_once(observer)
        return None if ticket is None else _outcome_on_disk(self._waits, ticket, call)

    @contextlib.contextmanager
    def run(self, name: str, attributes: Mapping[str, Any]) -> Iterator[None]:
        """A parent span for many calls, when there is a tracer."""
        if self._tracer is None:
            yield
            return
        with self._tracer.run(name, attributes):
            yield

    def _failed_once(self, observer: object) -> None:
        """Log an observer's failure (with its traceback), once per observer."""
        if id(observer) not in self._failed:
            self._failed.add(id(observer))
            log.exception("observer %r failed; calls are unaffected", observer)


def _audit_denial(reason: str) -> Decision:
    return Decision(Effect.DENY, "audit", reason, "call", None)


async def _on_disk(waits: DiskWaits, ticket: Future[None], decision: Decision) -> Decision:
    try:
        await waits.wait(ticket)
    except AuditError as exc:  # it could not be written: the call does not run
        return _audit_denial(str(exc))
    return decision


async def _outcome_on_disk(waits: DiskWaits, ticket: Future[None], call: ToolCall) -> None:
    try:
        await waits.wait(ticket)
    except AuditError as exc:  # reported; the call's result stands (the record waits)
        log.error("call %s was not audited yet: %s", call.id, exc)
