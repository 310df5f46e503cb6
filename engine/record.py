"""Step 8, record: what the audit log keeps of a call when it is decided and when it ends.

Plain dicts, built directly (this runs twice per call): the audit log seals and writes them.
"""

from __future__ import annotations

from typing import Any

from engine.calls import ToolCall, ToolResult
from policies import Decision, Request


def intent_fields(call: ToolCall, request: Request, decision: Decision) -> dict[str, Any]:
    """The ``intent`` record: who asks for which tool, on which canonical paths (and how), the
    command, and what the policy decided, by which rule and why."""
    return {
        "call_id": call.id,
        "subject": call.subject,
        "tool": request.tool,
        "action": request.action,
        "paths": [[path, access] for path, access in request.paths],
        "command": request.command,
        "effect": decision.effect.value,
        "rule": decision.rule,
        "reason": decision.reason,
    }


def outcome_fields(call: ToolCall, result: ToolResult) -> dict[str, Any]:
    """The ``outcome`` record: how the call ended, how long it took, and what it changed (the
    bytes and the sha256 of a file before and after, as file tools report them)."""
    metadata = result.metadata
    decision = result.decision
    fields: dict[str, Any] = {
        "call_id": call.id,
        "subject": call.subject,
        "tool": result.tool,
        "status": result.status,
        "duration_s": round(result.duration_s, 6),
        "attempts": result.attempts,
        "effect": decision.effect.value if decision is not None else None,
        "rule": decision.rule if decision is not None else None,
        "error": result.error.type if result.error is not None else None,
    }
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
        if warnings:
            fields["warnings"] = [str(w) for w in warnings]
        if metadata.get("dangerous_io"):
            fields["dangerous_io"] = True
    return fields
