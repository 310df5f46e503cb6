"""What the audit log keeps of a call: an ``intent`` record when it is decided and an
``outcome`` record when it ends, as typed dicts built directly from the engine's own state.

Every field comes from the call, the policy's request and decision, the result's status and the
engine's typed `CallNotes`, never from a tool's free metadata: the audit log is evidence, and a
tool cannot write into it. The records are `TypedDict`s (dicts at run time: this runs twice a
call), ``kind`` and ``time`` first, empty fields left out; the audit log numbers, chains, seals
and writes them as they are.
"""

from __future__ import annotations

from time import time
from typing import Any, Literal, NotRequired, TypedDict

from stockade.engine.messages import Status, ToolCall, ToolResult
from stockade.policies import Decision, Effect, Request
from stockade.policies.request import Access, Action

_MAX_TEXT = 2000
_MAX_ITEMS = 20


class IntentRecord(TypedDict):
    """Who asks for which tool, on which canonical paths (and how), the command, and what the
    policy decided, by which rule and why; ``dangerous_io`` when the paths are host paths,
    reached outside the sandbox (whatever was decided: a refused attempt is marked too)."""

    kind: Literal["intent"]
    time: float
    call_id: str
    subject: str
    tool: str
    action: Action
    effect: Effect
    rule: NotRequired[str]
    reason: NotRequired[str]
    paths: NotRequired[tuple[tuple[str, Access], ...]]
    command: NotRequired[str]
    dangerous_io: NotRequired[bool]


class OutcomeRecord(TypedDict):
    """How the call ended, how long it took, what was approved and warned, and what it changed
    (a file's bytes and sha256 before and after; a process's isolation and exit; each change a
    command made, and whether it was applied)."""

    kind: Literal["outcome"]
    time: float
    call_id: str
    tool: str
    status: Status
    duration_s: float
    attempts: int
    error: NotRequired[str]
    subject: NotRequired[str]
    effect: NotRequired[Effect]
    rule: NotRequired[str | None]
    approval: NotRequired[str]
    approval_scope: NotRequired[str]
    reason: NotRequired[str]
    path: NotRequired[str]
    bytes: NotRequired[int]
    sha256_before: NotRequired[str | None]
    sha256_after: NotRequired[str | None]
    isolation: NotRequired[str]
    exit_code: NotRequired[int | None]
    killed_reason: NotRequired[str | None]
    warnings: NotRequired[list[str]]
    dangerous_io: NotRequired[bool]
    changes: NotRequired[list[dict[str, Any]]]
    connections: NotRequired[list[dict[str, Any]]]


def intent_record(call: ToolCall, request: Request, decision: Decision) -> IntentRecord:
    """The ``intent`` record of a decided call."""
    record: IntentRecord = {
        "kind": "intent",
        "time": time(),
        "call_id": call.id,
        "subject": call.subject,
        "tool": request.tool,
        "action": request.action,
        "effect": decision.effect,  # a StrEnum: orjson writes its value
    }
    # left out when empty: every byte is hashed, for every call. A decision without a rule is
    # the policy's default, whose reason says only that
    if decision.rule is not None:
        record["rule"] = decision.rule
        record["reason"] = decision.reason
    if request.paths:
        record["paths"] = request.paths  # (path, access) pairs: JSON arrays
    if request.command is not None:
        record["command"] = request.command
    if request.host_paths:
        record["dangerous_io"] = True
    return record


def outcome_record(call: ToolCall, result: ToolResult) -> OutcomeRecord:
    """The ``outcome`` record of an ended call. Who asked and what was decided are in the
    call's intent record (the same ``call_id``); the decision is repeated only when it changed
    since (an approver's answer), or when there was no intent (a call refused before it was
    decided: an unknown tool, bad arguments)."""
    record: OutcomeRecord = {
        "kind": "outcome",
        "time": time(),
        "call_id": call.id,
        "tool": result.tool,
        "status": result.status,
        "duration_s": result.duration_s,
        "attempts": result.attempts,
    }
    if result.error is not None:
        record["error"] = result.error.type
    notes = result.notes
    decision = result.decision
    if decision is None:
        record["subject"] = call.subject
    elif notes is not None and notes.approval is not None:
        record["effect"] = decision.effect
        record["rule"] = decision.rule
        record["reason"] = decision.reason  # the answer: who said what (or Ctrl-C at the prompt)
    if notes is None:
        return record
    if notes.approval is not None:
        record["approval"] = notes.approval
    if notes.approval_scope is not None:
        record["approval_scope"] = notes.approval_scope
    if notes.file is not None:
        record["path"] = notes.file.path
        record["bytes"] = notes.file.bytes
        record["sha256_before"] = notes.file.sha256_before
        record["sha256_after"] = notes.file.sha256_after
    if notes.process is not None:
        record["isolation"] = notes.process.isolation
        record["exit_code"] = notes.process.exit_code
        record["killed_reason"] = notes.process.killed_reason
    if notes.warnings:  # kept bounded: a record is one line
        record["warnings"] = [w[:_MAX_TEXT] for w in notes.warnings[:_MAX_ITEMS]]
    if notes.dangerous_io:
        record["dangerous_io"] = True
    if notes.changes:  # every one, applied or not: what a command did is the point of the log
        record["changes"] = [change.as_dict() for change in notes.changes]
    if notes.connections:  # every one, allowed or not: where a command went is the point too
        record["connections"] = [c.as_dict() for c in notes.connections]
    return record
