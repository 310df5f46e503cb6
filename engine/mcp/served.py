"""A served call on the wire, as plain JSON: the tool list entry, the result, the approval form
and what its answers mean.

    entry = tool_entry(tool, network=False)      # a ``tools/list`` entry, with outputSchema
    reply = result_json(await engine.call(call)) # a ``tools/call`` result: content, isError,
                                                 # structuredContent
    answer_of("accept", {"answer": "once"}, decision.suggestions)   # Approve("once")

Both of Stockade's MCP servers speak through these functions: the SDK's server
(`stockade.engine.mcp.server`, for streamable HTTP and programs) validates the dicts into its
models, and the stdio server (`stockade.engine.mcp.stdio`) writes them as they are. This
module imports nothing of the MCP SDK, so that ``stockade serve`` over stdio starts without it.

Every tool declares the same ``outputSchema`` (`RESULT_SCHEMA`) and every result carries
``structuredContent`` conforming to it: the call's status, the decision that let it run or
refused it, the tool's metadata (a file's path, size and sha256, what a walk left out ...) and
the warnings. A client that reads JSON need not parse the text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from stockade.engine.content import ImageBlock, TextBlock
from stockade.engine.errors import PermissionDeniedError
from stockade.engine.formats.mcp import mcp_tool
from stockade.engine.messages import ToolCall, ToolResult
from stockade.engine.pipeline import Approve
from stockade.engine.tools import RegisteredTool
from stockade.policies import Decision, Effect
from stockade.policies.suggestions import Suggestion

APPROVAL_KEY = "stockade_approval"  # the input request's key on 2026-07-28 connections
CHOICE = "answer"  # the form's field for the choice; ``approve`` is the older yes/no field

# One level deep: a client validates every result against it (the SDK's does), and each level
# of nested properties costs that validation as much again; what the objects hold is described.
RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {
            "type": "string",
            "description": "ok, or why not: denied, error, timeout, cancelled, invalid ...",
        },
        "decision": {
            "type": ["object", "null"],
            "description": "The policy's decision: effect, rule and reason (null: none made).",
        },
        "metadata": {
            "type": "object",
            "description": "What the tool reported (paths, sizes, sha256, entries left out).",
        },
        "warnings": {"type": "array", "description": "One line per warning (strings)."},
    },
    "required": ["status", "metadata", "warnings"],
}


def tool_entry(tool: RegisteredTool, *, network: bool) -> dict[str, Any]:
    """The ``tools/list`` entry of ``tool``: name, description, input schema, hints and the
    output schema every Stockade result conforms to."""
    entry = mcp_tool(tool, network=network)
    entry["outputSchema"] = RESULT_SCHEMA
    return entry


def result_json(result: ToolResult) -> dict[str, Any]:
    """An engine result as MCP's: content blocks, ``isError`` for every status but ok, and
    ``structuredContent``. A denial's text names the rule and the reason; the warnings of a
    call that ran with some (a warn decision, an approval kept shorter than asked) follow its
    content, in a block of their own."""
    blocks: list[dict[str, Any]] = []
    if result.status == "denied" and result.decision is not None:
        blocks.append(_text(denial_text(result.decision)))
    elif result.error is not None:
        blocks.append(_text(str(result.error)))
    for block in result.content:
        if isinstance(block, TextBlock):
            blocks.append(_text(block.text))
        elif isinstance(block, ImageBlock):
            blocks.append({"type": "image", "data": block.data, "mimeType": block.media_type})
    if not blocks:
        blocks.append(_text(result.text or result.status))
    warned = warnings_of(result)
    if warned:
        blocks.append(_text("\n".join(warned)))
    decision = result.decision
    structured = {
        "status": result.status,
        "decision": None
        if decision is None
        else {"effect": decision.effect.value, "rule": decision.rule, "reason": decision.reason},
        "metadata": result.tool_metadata,
        "warnings": warned,
    }
    return {"content": blocks, "structuredContent": structured, "isError": result.status != "ok"}


def denial_text(decision: Decision) -> str:
    """A denial as a model reads it: the rule that decided, and why."""
    return f"denied by rule {decision.rule or 'default'}: {decision.reason}"


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def plain_json(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` as JSON data (what JSON cannot hold, such as a tool's own objects in its
    metadata, becomes its text; a lone surrogate is kept escaped), for a writer that takes
    nothing else. The stdio server's writer does this itself, without the copy."""
    try:
        plain = orjson.loads(orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS))
    except orjson.JSONEncodeError:  # a number past 64 bits, a string with a lone surrogate ...
        plain = json.loads(json.dumps(value, default=str, ensure_ascii=True))
    return plain if isinstance(plain, dict) else {}


def warnings_of(result: ToolResult) -> list[str]:
    """One line per warning of ``result``: its warn decision's (naming the rule), then the
    engine's other notes (the decision's reason is among them: said once)."""
    lines: list[str] = []
    said: set[str] = set()
    decision = result.decision
    if decision is not None and decision.effect is Effect.WARN:
        lines.append(f"warning (rule {decision.rule or 'default'}): {decision.reason}")
        said.add(decision.reason)
    noted = result.metadata.get("warnings")
    for warning in noted if isinstance(noted, list) else ():
        if isinstance(warning, str) and warning not in said:
            lines.append(f"warning: {warning}")
            said.add(warning)
    return lines


# -- asking ----------------------------------------------------------------------------------


def approval_schema(
    suggestions: Sequence[Suggestion], policy_file: Path | None, *, titled: bool = True
) -> dict[str, Any]:
    """The approval form: a choice of "no", "once", and per suggestion N "session:N" and
    "always:N", each with a title for people; and the older yes/no field. ``titled`` spells the
    choice as the 2025-11-25 revision does (``oneOf`` of ``const`` and ``title``); without it,
    as 2025-06-18 clients read it (``enum`` with ``enumNames``)."""
    kept = (
        f"added to {policy_file.name}"
        if policy_file is not None
        else "no policy file: kept while the server runs"
    )
    options = [("no", "No: refuse this call"), ("once", "Yes, this call only")]
    for number, offer in enumerate(suggestions, start=1):
        options.append((f"session:{number}", f"Yes, for this session: {offer.summary}"))
        options.append((f"always:{number}", f"Yes, always ({kept}): {offer.summary}"))
    choice: dict[str, Any] = {
        "type": "string",
        "title": "Answer",
        "description": "How far the yes reaches (a protected path or a dangerous command is "
        "asked about every time: then only no or once is offered).",
    }
    if titled:
        choice["oneOf"] = [{"const": value, "title": title} for value, title in options]
    else:
        choice["enum"] = [value for value, _ in options]
        choice["enumNames"] = [title for _, title in options]
    return {
        "type": "object",
        "properties": {
            CHOICE: choice,
            "approve": {
                "type": "boolean",
                "title": "Allow this call once",
                "description": "Read only when no answer is chosen above (older clients).",
                "default": False,
            },
        },
    }


def answer_of(
    action: str, content: Mapping[str, Any] | None, suggestions: Sequence[Suggestion]
) -> Approve | bool:
    """What the person chose on the form: declined or "no" is no; the older yes/no field
    counts only when no choice was made. A choice that was not offered refuses, saying so."""
    if action != "accept":
        return False
    content = content or {}
    choice = content.get(CHOICE)
    if choice is None:
        return Approve("once") if content.get("approve") is True else False
    if choice == "no":
        return False
    if choice == "once":
        return Approve("once")
    scope, _, number = str(choice).partition(":")
    # ASCII digits only: str.isdigit also takes "²", which int() refuses
    index = int(number) - 1 if number.isascii() and number.isdigit() else -1
    if scope in ("session", "always") and 0 <= index < len(suggestions):
        return Approve("session" if scope == "session" else "always", suggestions[index])
    offered = "no, once" + (
        f", session:N or always:N for N from 1 to {len(suggestions)}" if suggestions else ""
    )
    raise PermissionDeniedError(
        f"not approved: the answer {str(choice)[:100]!r} is none of those offered ({offered})"
    )


def offer_digest(suggestions: Sequence[Suggestion]) -> str:
    """A digest of what a question offered, to tell whether an answer still fits it."""
    text = json.dumps(
        [[s.summary, [spec.model_dump(mode="json") for spec in s.approvals]] for s in suggestions]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def describe(call: ToolCall, decision: Decision) -> str:
    """The question put to the person about ``call``."""
    arguments = (
        call.arguments
        if isinstance(call.arguments, str)
        else json.dumps(call.arguments, ensure_ascii=False, default=str)
    )
    if len(arguments) > 500:
        arguments = arguments[:500] + "..."
    question = f"Allow {call.name} {arguments}?"
    if decision.asks:
        # one line per part that asked: a yes approves every one of them
        parts = "\n".join(f"- {part.brief()}" for part in decision.asks)
        return f"{question} The policy asks about {len(decision.asks)} things:\n{parts}"
    return f"{question} The policy asks because: {decision.reason}"


def fingerprint(call: ToolCall) -> str:
    """What an approval was asked about; the client echoes it back with its answer, which then
    counts only for a call with the same name and arguments."""
    text = json.dumps([call.name, call.arguments], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
