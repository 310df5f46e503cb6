"""The messages between an agent and the engine: `ToolCall` in, `ToolResult` (or `ToolChunk`s
while streaming) out, and `CallNotes`, what the engine itself noted about a call.

They are slotted dataclasses rather than pydantic models because one of each is built per call
on the hot path (a dataclass costs a fraction of a model); `to_dict` / `from_dict` are the
validated boundary to JSON.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from stockade.engine.content import (
    Block,
    FileReport,
    ProcessReport,
    block_from_dict,
    block_to_dict,
    text_of,
)
from stockade.engine.errors import FormatError
from stockade.policies import Decision, Effect

Status = Literal["ok", "error", "denied", "timeout", "cancelled", "pending"]
STATUSES: tuple[Status, ...] = ("ok", "error", "denied", "timeout", "cancelled", "pending")


def escaped(text: str) -> str:
    """``text`` with any lone surrogate (as a file name of undecodable bytes reads) written as
    a backslash escape, so that it can be encoded as UTF-8: logged, written to the audit log,
    put on a span, sent as JSON."""
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def printable(value: object, render: Callable[[object], str] = str) -> str:
    """``render(value)`` (``str`` by default) made safe to show: a value whose rendering
    raises is shown by its repr, then by its type alone, and lone surrogates are escaped. For
    what tools hand the engine (exceptions, warnings, metadata), which may be hostile: this
    never raises (a ``str()`` raising even KeyboardInterrupt is the value's fault, not a reason
    to stop)."""
    for attempt in (render, repr):
        try:
            text = attempt(value)
        except BaseException:  # any failure means: try the next way
            continue
        if isinstance(text, str):  # a __str__ may return a str subclass, or lie
            return escaped(str.__str__(text))
    return f"<{escaped(type(value).__name__)} that cannot be shown>"


def new_call_id() -> str:
    """A fresh call id for calls whose format does not carry one (XML, hand-made calls)."""
    return "call_" + os.urandom(8).hex()


@dataclass(slots=True, kw_only=True, frozen=True)
class ToolCall:
    """One request from an agent to run a tool.

    ``arguments`` is a mapping, or the raw JSON text a model produced (validated by the engine,
    so malformed JSON becomes an error result rather than an exception). ``subject`` names the
    agent on whose behalf the call runs; policies decide per subject. A call is frozen: a tool
    that is handed it cannot give it another id or name (and so another's audit record).
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str = field(default_factory=new_call_id)
    subject: str = "agent"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        args = self.arguments if isinstance(self.arguments, str) else dict(self.arguments)
        return {"id": self.id, "name": self.name, "arguments": args, "subject": self.subject}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        """Build from `to_dict` output (or any mapping with ``name`` and ``arguments``)."""
        if not isinstance(data.get("name"), str) or not data["name"]:
            raise FormatError(
                f"a tool call needs a non-empty string 'name'; got {data.get('name')!r}"
            )
        args = data.get("arguments", {})
        if not isinstance(args, str | Mapping):
            raise FormatError(
                f"tool call {data['name']!r}: 'arguments' must be an object or a JSON string, "
                f"not {type(args).__name__}"
            )
        extra: dict[str, Any] = {}
        if data.get("id"):
            extra["id"] = str(data["id"])
        if data.get("subject"):
            extra["subject"] = str(data["subject"])
        return cls(name=data["name"], arguments=args, **extra)


@dataclass(slots=True, frozen=True)
class ErrorInfo:
    """What went wrong: the exception type's name and its message."""

    type: str
    message: str

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"

    @classmethod
    def of(cls, exc: BaseException) -> ErrorInfo:
        """Describe an exception, falling back to its repr when it has no message. Never
        raises: an exception whose ``str()`` fails, or whose text holds lone surrogates, is
        described as `printable` renders it."""
        message = printable(exc)
        if not message:
            message = printable(exc, repr)
        return cls(escaped(type(exc).__name__), message)


@dataclass(slots=True, frozen=True)
class Retry:
    """A failed attempt that was tried again: its number, its error, and the wait after it."""

    attempt: int
    error: str
    delay_s: float


@dataclass(slots=True, frozen=True)
class ChangeNote:
    """What became of one thing a command changed in its copy-on-write view: the path, the kind
    of change (``added``, ``modified``, ``deleted``, ``created_dir``, ``mode``, ``link``,
    ``special``), the file's bytes and sha256 before and after, whether it was applied to the
    host, and, when not, the rule and the reason."""

    path: str
    kind: str
    bytes: int | None
    sha256_before: str | None
    sha256_after: str | None
    applied: bool
    rule: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (empty fields left out)."""
        shown: dict[str, Any] = {"path": self.path, "kind": self.kind, "applied": self.applied}
        for key in ("bytes", "sha256_before", "sha256_after", "rule"):
            value = getattr(self, key)
            if value is not None:
                shown[key] = value
        if self.reason:
            shown["reason"] = self.reason
        return shown


@dataclass(slots=True, frozen=True)
class ConnectionNote:
    """One connection a command asked for, as its network's proxy judged it: the host and
    port, how it asked (``connect``, ``http``, ``socks``, ``direct``), whether it was allowed
    and why (or why not), where it went, the bytes each way, and when (Unix nanoseconds)."""

    host: str
    port: int
    via: str
    allowed: bool
    reason: str
    address: str | None
    bytes_sent: int
    bytes_received: int
    at: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (the time left out: the record has its own)."""
        shown: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "via": self.via,
            "allowed": self.allowed,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
        }
        if self.address is not None:
            shown["address"] = self.address
        if self.reason:
            shown["reason"] = self.reason
        return shown


@dataclass(slots=True)
class CallNotes:
    """What the engine knows of a call beyond its content, kept in typed fields that only the
    engine writes: the audit log and the trace are made from these, never from a tool's free
    metadata.

    Its own notes: ``warnings`` (a warn decision, an ignored preset, a thread left running),
    ``approval`` (the answer to an ask decision), ``retries``, ``ignored_arguments`` (preset
    names the call tried to set), ``truncated`` (characters of text and how many were kept),
    ``external`` (carried out outside the engine), ``dangerous_io`` (a tool on host paths). And
    the typed reports it accepted from the tool's `ToolOutput`: ``file`` and ``process``; and
    ``changes``, what became of each thing a command changed in its copy-on-write view;
    ``connections``, each connection its command asked for under a filtered network.
    ``approval`` is ``unanswered`` for a shadow-mode ask nobody could answer; an approved ask's
    ``approval_scope`` says how far the yes reaches (once, the session, always).
    """

    warnings: list[str] = field(default_factory=list)
    approval: Literal["approved", "refused", "unanswered"] | None = None
    approval_scope: Literal["once", "session", "always"] | None = None
    retries: list[Retry] = field(default_factory=list)
    ignored_arguments: list[str] = field(default_factory=list)
    truncated: tuple[int, int] | None = None
    external: bool = False
    dangerous_io: bool = False
    file: FileReport | None = None
    process: ProcessReport | None = None
    changes: list[ChangeNote] = field(default_factory=list)
    connections: list[ConnectionNote] = field(default_factory=list)

    def copy(self) -> CallNotes:
        """A copy whose lists can be changed without changing these notes."""
        return replace(
            self,
            warnings=list(self.warnings),
            retries=list(self.retries),
            ignored_arguments=list(self.ignored_arguments),
            changes=list(self.changes),
            connections=list(self.connections),
        )

    def as_metadata(self) -> dict[str, Any]:
        """The notes as ``result.metadata`` shows them (only what was noted)."""
        shown: dict[str, Any] = {}
        if self.file is not None:
            shown.update(self.file.as_metadata())
        if self.ignored_arguments:
            shown["ignored_arguments"] = list(self.ignored_arguments)
        if self.warnings:
            shown["warnings"] = list(self.warnings)
        if self.retries:
            shown["retries"] = [
                {"attempt": r.attempt, "error": r.error, "delay_s": r.delay_s} for r in self.retries
            ]
        if self.approval is not None:
            shown["approval"] = self.approval
        if self.approval_scope is not None:
            shown["approval_scope"] = self.approval_scope
        if self.truncated is not None:
            shown["truncated"] = {"chars": self.truncated[0], "kept": self.truncated[1]}
        if self.external:
            shown["external"] = True
        if self.dangerous_io:
            shown["dangerous_io"] = True
        if self.changes:
            shown["changes"] = [change.as_dict() for change in self.changes]
        return shown


ENGINE_KEYS = frozenset(
    {
        "warnings",
        "approval",
        "approval_scope",
        "retries",
        "ignored_arguments",
        "external",
        "dangerous_io",
        "changes",
    }
)
"""Metadata keys that only the engine's notes fill: a tool's own values for them stay in
``result.tool_metadata``. (``truncated`` and the file report's keys are the tool's to say too:
the engine's note replaces them only when it has one.)"""


def merged_metadata(tool_metadata: Mapping[str, Any], notes: CallNotes | None) -> dict[str, Any]:
    """``result.metadata``: the tool's metadata (but the engine's keys), then the notes."""
    shown = {k: v for k, v in tool_metadata.items() if k not in ENGINE_KEYS}
    if notes is not None:
        shown.update(notes.as_metadata())
    return shown


@dataclass(slots=True, kw_only=True)
class ToolResult:
    """The outcome of one call. Exactly one is produced for every call the engine receives.

    ``metadata`` is for reading: the tool's own metadata with the engine's notes over it.
    ``notes`` are the engine's typed notes (None: nothing to note), and ``tool_metadata``
    exactly what the tool returned as metadata.
    """

    call_id: str
    tool: str
    status: Status
    content: list[Block] = field(default_factory=list)
    error: ErrorInfo | None = None
    decision: Decision | None = None
    attempts: int = 0
    duration_s: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    notes: CallNotes | None = None
    tool_metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the tool ran and succeeded."""
        return self.status == "ok"

    @property
    def text(self) -> str:
        """What a model should be shown: the content as text, preceded by the error line when
        the call failed (a failure must never read like a success)."""
        if self.error is None:
            return text_of(self.content)
        if not self.content:
            return str(self.error)
        return f"{self.error}\n{text_of(self.content)}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (metadata must itself be JSON-compatible)."""
        decision = self.decision
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "status": self.status,
            "content": [block_to_dict(b) for b in self.content],
            "error": None
            if self.error is None
            else {"type": self.error.type, "message": self.error.message},
            "decision": None
            if decision is None
            else {
                "effect": decision.effect.value,
                "rule": decision.rule,
                "reason": decision.reason,
            },
            "attempts": self.attempts,
            "duration_s": self.duration_s,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolResult:
        """Inverse of `to_dict`; raises ValueError naming what is missing or wrong."""
        missing = [key for key in ("call_id", "tool", "status") if key not in data]
        if missing:
            raise FormatError(f"a tool result needs {', '.join(missing)}; got keys {sorted(data)}")
        status = data["status"]
        if status not in STATUSES:
            raise FormatError(f"unknown result status {status!r}; expected one of {STATUSES}")
        err = data.get("error")
        dec = data.get("decision")
        return cls(
            call_id=str(data["call_id"]),
            tool=str(data["tool"]),
            status=status,
            content=[block_from_dict(b) for b in data.get("content", [])],
            error=None if not err else ErrorInfo(str(err["type"]), str(err["message"])),
            decision=None
            if not dec
            else Decision(Effect(dec["effect"]), dec.get("rule"), str(dec.get("reason", ""))),
            attempts=int(data.get("attempts", 0)),
            duration_s=float(data.get("duration_s", 0.0)),
            metadata=dict(data.get("metadata") or {}),
        )


@dataclass(slots=True)
class ToolChunk:
    """One piece of a streamed call. The last chunk has ``is_last`` set and carries the result."""

    call_id: str
    tool: str
    content: list[Block]
    is_last: bool = False
    result: ToolResult | None = None
