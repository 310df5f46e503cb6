"""OpenTelemetry spans for calls and runs, after the GenAI semantic conventions.

    provider = tracer_provider("jsonl", path=".stockade/traces.jsonl")   # or console, otlp, memory
    engine = Engine(toolkit, tracer_provider=provider)
    with engine.run_span("session", agent="planner"):                    # a parent for many calls
        await engine.call(...)

Each call is one span, ``execute_tool {tool}`` (``gen_ai.operation.name`` ``execute_tool``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.description``, ``error.type``),
with Stockade's own attributes: the decision's effect and rule, the status, attempts, the
canonical paths touched, bytes written, the isolation a command ran under. Retries, approvals
and warnings are span events. The span is current while the tool runs, so spans the tool makes
nest under it. Arguments and results are recorded only with ``record_content=True``, with
secret-looking values redacted. An engine without a tracer provider makes no spans at all.

Exporters come wrapped so that one that fails is reported once in the log and never reaches a
call; the file, console and OTLP exporters sit behind a batch processor, so one that hangs
delays no call either.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextvars import Token
from pathlib import Path
from typing import Any, Literal

import orjson
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from stockade.engine.content import text_of
from stockade.engine.messages import CallNotes, ToolCall, ToolResult
from stockade.engine.observe.own_files import TRACE_FILES
from stockade.errors import ConfigurationError
from stockade.policies import Decision, Request

log = logging.getLogger("stockade.tracing")

ExporterName = Literal["console", "jsonl", "otlp", "memory"]
REDACTED = "[REDACTED]"
MAX_RECORDED_CHARS = 4096

# keys whose values are secrets whatever they hold (as whole words of the key: ``api_key``,
# ``apiKey`` and ``X-Auth-Token`` are; ``author``, ``passenger`` and ``max_tokens`` are not)
_SECRET_WORDS = re.compile(
    r"(?:^|_)(pass(word|wd|phrase)?|secret|token|api_?key|auth|authorization|credentials?"
    r"|private_?key|cookie|session_?id|signature|access_?key|secret_?key)(?:_|$)"
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# values that look like a secret anywhere in a text (not inside a longer word: "risk-free")
_SECRET_VALUE = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|sk-[A-Za-z0-9_-]{20,}"  # OpenAI-style keys
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"  # JWTs
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{16,}"
    r")"
)
_MAX_DEPTH = 32


def secret_key(key: str) -> bool:
    """Whether a mapping key names a secret (its value is then redacted whole)."""
    words = _CAMEL.sub("_", key).lower().replace("-", "_").replace(".", "_").replace(" ", "_")
    return _SECRET_WORDS.search(words) is not None


def redact(value: Any, key: str = "", _depth: int = 0) -> Any:
    """``value`` with secrets replaced: whole values under secret-looking keys, and
    secret-looking substrings of any text, through nested mappings and lists (deeper than 32
    levels, or cyclic, the rest is summarised)."""
    if key and secret_key(key):
        return REDACTED
    if isinstance(value, str):
        return _SECRET_VALUE.sub(REDACTED, value)
    if _depth >= _MAX_DEPTH and isinstance(value, Mapping | list | tuple):
        return f"<nested deeper than {_MAX_DEPTH} levels>"
    if isinstance(value, Mapping):
        return {str(k): redact(v, str(k), _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, "", _depth + 1) for v in value]
    return value


def recorded(value: Any) -> str:
    """Arguments or a result as span text: JSON, redacted, cut to a few KiB. Never raises: a
    value that cannot be serialised is described instead."""
    try:
        text = orjson.dumps(redact(value), default=str).decode()
    except (TypeError, ValueError, RecursionError) as exc:
        return f"<not serialisable: {type(value).__name__}: {exc}>"[:MAX_RECORDED_CHARS]
    if len(text) > MAX_RECORDED_CHARS:
        return f"{text[:MAX_RECORDED_CHARS]}... [{len(text):,} characters in all]"
    return text


class _Guarded(SpanExporter):
    """An exporter whose failures are logged once (and again only after it recovered), never
    raised into the processor or a call."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self._failing = False
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:
            self._report(f"{type(exc).__name__}: {exc}")
            return SpanExportResult.FAILURE
        if result is SpanExportResult.FAILURE:
            self._report("it reported a failure")
        else:
            self._failing = False
        return result

    def _report(self, why: str) -> None:
        with self._lock:
            if not self._failing:
                log.error(
                    "the span exporter %s failed (%s); calls go on, spans are being lost",
                    type(self.inner).__name__,
                    why,
                )
            self._failing = True

    def shutdown(self) -> None:
        try:
            self.inner.shutdown()
        except Exception as exc:  # shutting down must not fail the caller either
            self._report(f"shutdown: {exc}")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        try:
            return self.inner.force_flush(timeout_millis)
        except Exception as exc:
            self._report(f"flush: {exc}")
            return False


class JsonLinesExporter(SpanExporter):
    """Spans as JSON lines appended to a file (OpenTelemetry's own JSON form of each span)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(
            orjson.dumps(orjson.loads(span.to_json(indent=None))).decode() + "\n" for span in spans
        )
        with self._lock, self.path.open("a", encoding="utf-8") as handle:
            handle.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def tracer_provider(
    exporter: ExporterName | SpanExporter,
    *,
    path: str | Path = ".stockade/traces.jsonl",
    endpoint: str | None = None,
) -> TracerProvider:
    """A tracer provider exporting spans to ``console``, a ``jsonl`` file at ``path``,
    ``otlp`` (needs ``pip install 'stockade[otlp]'``; ``endpoint`` or the usual
    ``OTEL_EXPORTER_OTLP_*`` variables), or any `SpanExporter` given, behind a batch processor.
    (For spans in memory, see `memory_provider`.) Failures of the exporter are logged once."""
    provider = TracerProvider()
    if isinstance(exporter, SpanExporter):
        provider.add_span_processor(BatchSpanProcessor(_Guarded(exporter)))
    elif exporter == "console":
        # the stream as it is now (the exporter's default is stdout as it was at import)
        console = ConsoleSpanExporter(out=sys.stdout)
        provider.add_span_processor(BatchSpanProcessor(_Guarded(console)))
    elif exporter == "jsonl":
        provider.add_span_processor(BatchSpanProcessor(_Guarded(JsonLinesExporter(path))))
        # so that an engine given this provider protects the file from its calls (own_files)
        setattr(provider, TRACE_FILES, (Path(path).resolve(),))
    elif exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigurationError(
                "the otlp exporter needs its package: pip install 'stockade[otlp]'"
            ) from None
        provider.add_span_processor(BatchSpanProcessor(_Guarded(OTLPSpanExporter(endpoint))))
    else:
        raise ConfigurationError(
            f"unknown exporter {exporter!r}; use console, jsonl, otlp, memory or a SpanExporter"
        )
    return provider


def memory_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider keeping finished spans in memory (``exporter.get_finished_spans()``),
    exported as each span ends: for tests, and for looking at spans in a program."""
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(_Guarded(memory)))
    return provider, memory


class CallTracer:
    """Makes the spans of an engine's calls and runs (see the module docstring)."""

    def __init__(self, provider: TracerProvider, *, record_content: bool = False) -> None:
        self.tracer = provider.get_tracer("stockade")
        self.record_content = record_content
        # id(ToolCall) -> the spans of that call object still waiting for their results (one,
        # unless a caller runs the same ToolCall twice at once)
        self.spans: dict[int, list[Span]] = {}

    def began(
        self, call: ToolCall, description: str | None, *, current: bool
    ) -> Token[Context] | None:
        """Open the span of ``call``; with ``current`` it is made the current span, and the
        token to give `leave` when the call is over is returned."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "stockade.subject": call.subject,
        }
        if description:
            attributes["gen_ai.tool.description"] = description
        if self.record_content:
            attributes["gen_ai.tool.call.arguments"] = recorded(call.arguments)
        span = self.tracer.start_span(
            f"execute_tool {call.name}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        self.spans.setdefault(id(call), []).append(span)
        return context_api.attach(trace.set_span_in_context(span)) if current else None

    @staticmethod
    def leave(token: Token[Context]) -> None:
        """The span `began` made current is current no more."""
        context_api.detach(token)

    def decided(self, call: ToolCall, request: Request, decision: Decision) -> None:
        """What the policy was asked and answered."""
        open_spans = self.spans.get(id(call))
        if not open_spans:
            return
        found: dict[str, Any] = {"stockade.decision.effect": decision.effect.value}
        if decision.rule is not None:
            found["stockade.decision.rule"] = decision.rule
        if request.paths:
            found["stockade.paths"] = [f"{access}:{path}" for path, access in request.paths]
        if request.command is not None:
            found["stockade.command"] = redact(request.command)
        open_spans[-1].set_attributes(found)  # one call: the span's lock is taken once

    def ended(self, call: ToolCall, result: ToolResult) -> None:
        """Close the span of ``call`` with how it ended."""
        open_spans = self.spans.get(id(call))
        if not open_spans:
            # ended before it began (cancelled while waiting), or an external call's final
            # result: it gets a span of its own, so every result is in the trace
            self.began(call, None, current=False)
            open_spans = self.spans[id(call)]
        span = open_spans.pop()
        if not open_spans:
            del self.spans[id(call)]
        self._close(span, result)

    def _close(self, span: Span, result: ToolResult) -> None:
        ending: dict[str, Any] = {
            "stockade.status": result.status,
            "stockade.attempts": result.attempts,
        }
        decision = result.decision
        if decision is not None:
            ending["stockade.decision.effect"] = decision.effect.value
            if decision.rule is not None:
                ending["stockade.decision.rule"] = decision.rule
        if self.record_content and result.content:
            ending["gen_ai.tool.call.result"] = recorded(text_of(result.content))
        if result.error is not None:
            ending["error.type"] = result.error.type
        span.set_attributes(ending)
        if result.notes is not None:
            self._notes(span, result.notes)
        if result.status not in ("ok", "pending"):
            message = result.error.message if result.error is not None else result.status
            span.set_status(Status(StatusCode.ERROR, f"{result.status}: {message}"[:500]))
        span.end()

    @staticmethod
    def _notes(span: Span, notes: CallNotes) -> None:
        """The engine's notes on the span (never the tool's own metadata)."""
        if notes.file is not None and notes.file.sha256_after is not None:
            span.set_attribute("stockade.bytes_written", notes.file.bytes)
        if notes.process is not None:
            span.set_attribute("stockade.isolation", notes.process.isolation)
        for retry in notes.retries:
            span.add_event(
                "retry",
                {
                    "attempt": str(retry.attempt),
                    "error": retry.error,
                    "delay_s": str(retry.delay_s),
                },
            )
        if notes.approval is not None:
            scope = {"scope": notes.approval_scope} if notes.approval_scope else {}
            span.add_event("approval", {"answer": notes.approval, **scope})
        for warning in notes.warnings:
            span.add_event("warning", {"message": warning})
        if notes.changes:
            applied = sum(1 for change in notes.changes if change.applied)
            span.set_attribute("stockade.changes.applied", applied)
            span.set_attribute("stockade.changes.refused", len(notes.changes) - applied)
            for change in notes.changes:
                if not change.applied:  # what was refused, each named; the audit log has all
                    span.add_event(
                        "change refused",
                        {"path": change.path, "kind": change.kind, "reason": change.reason},
                    )
        for connection in notes.connections:  # each when it was asked for
            span.add_event(
                "connection allowed" if connection.allowed else "connection refused",
                {k: v for k, v in connection.as_dict().items() if k != "allowed"},
                timestamp=connection.at or None,
            )

    @contextlib.contextmanager
    def run(self, name: str, attributes: Mapping[str, Any]) -> Iterator[Span]:
        """A parent span for many calls (a session, a batch, a replayed transcript)."""
        values = {f"stockade.run.{k}": _attribute(v) for k, v in attributes.items()}
        with self.tracer.start_as_current_span(
            f"run {name}", attributes={"stockade.run.name": name, **values}
        ) as span:
            yield span


def _attribute(value: Any) -> Any:
    return value if isinstance(value, str | bool | int | float) else str(value)
