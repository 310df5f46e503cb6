"""Step 8, record: what the audit log keeps of a call when it is decided and when it ends.

Plain dicts, built directly, ``kind`` and ``time`` first (this runs twice per call): the audit
log numbers, chains, seals and writes them as they are.
"""

from __future__ import annotations

from time import time
from typing import Any

from stockade.engine.calls import ToolCall, ToolResult
from stockade.policies import Decision, Request

_MAX_TEXT = 2000
_MAX_ITEMS = 20


def intent_fields(call: ToolCall, request: Request, decision: Decision) -> dict[str, Any]:
    """The ``intent`` record: who asks for which tool, on which canonical paths (and how), the
    command, and what the policy decided, by which rule and why."""
    fields = {
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
        fields["rule"] = decision.rule
        fields["reason"] = decision.reason
    if request.paths:
        fields["paths"] = request.paths  # (path, access) pairs: JSON arrays
    if request.command is not None:
        fields["command"] = request.command
    return fields


def outcome_fields(call: ToolCall, result: ToolResult) -> dict[str, Any]:
    """The ``outcome`` record: how the call ended, how long it took, and what it changed (the
    bytes and the sha256 of a file before and after, as file tools report them). Who asked and
    what was decided are in the call's intent record (the same ``call_id``); the decision is
    repeated only when it changed since (an approver's answer), or when there was no intent
    (a call refused before it was decided: an unknown tool, bad arguments)."""
    metadata = result.metadata
    error = result.error
    fields: dict[str, Any] = {
        "kind": "outcome",
        "time": time(),
        "call_id": call.id,
        "tool": result.tool,
        "status": result.status,
        "duration_s": result.duration_s,
        "attempts": result.attempts,
    }
    if error is not None:
        fields["error"] = error.type
    decision = result.decision
    if decision is None:
        fields["subject"] = call.subject
    elif metadata and "approval" in metadata:
        fields["effect"] = decision.effect
        fields["rule"] = decision.rule
    if metadata:
        for key in ("path", "bytes", "sha256_before", "sha256_after", "approval"):
            if key in metadata:
                fields[key] = metadata[key]
        process = metadata.get("process")
        if isinstance(process, dict):
            fields["isolation"] = process.get("isolation")
            fields["exit_code"] = process.get("exit_code")
            fields["killed_reason"] = process.get("killed_reason")
        warnings = metadata.get("warnings")
        if warnings:  # what a tool put there is kept bounded: a record is one line
            fields["warnings"] = [str(w)[:_MAX_TEXT] for w in list(warnings)[:_MAX_ITEMS]]
        if metadata.get("dangerous_io"):
            fields["dangerous_io"] = True
    return fields
