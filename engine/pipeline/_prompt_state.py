"""The tool state as an agent's system prompt shows it: the active tool groups and their notes,
and every call still without a result (an external tool's call waiting to be completed, a call
submitted to run in the background, a call in flight), so the model knows what it is waiting
for and does not ask again::

    system = base_prompt + "\n\n" + engine.prompt_state()   # "" when there is nothing to say

`Engine.pending_calls` gives the same calls as data (`PendingCall`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from time import time
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from stockade.engine.messages import ToolCall, printable
from stockade.engine.toolkit import Toolkit

_SHOWN_CHARS = 160  # of a call's arguments: enough to tell calls apart, short enough for a prompt


class PendingCall(BaseModel):
    """A call without a final result: ``external`` (its tool is carried out outside the engine;
    `Engine.complete` finishes it), ``submitted`` (running in the background, from
    `Engine.submit`) or ``running`` (in flight). ``arguments`` is the model's arguments as short
    JSON text (presets never appear: they are not the call's); ``since`` is when it began
    (waiting, or running, in Unix time), None when the engine did not note it."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    arguments: str
    state: Literal["external", "submitted", "running"]
    since: float | None = None


def pending_calls(
    calls: Sequence[ToolCall], external: Mapping[str, float], submitted: Mapping[str, float]
) -> list[PendingCall]:
    """``calls`` (those without a final result, oldest first) described; ``external`` and
    ``submitted`` say when each call of that kind began, by id."""
    found: list[PendingCall] = []
    for call in calls:
        if call.id in external:
            state: Literal["external", "submitted", "running"] = "external"
            since: float | None = external[call.id]
        elif call.id in submitted:
            state, since = "submitted", submitted[call.id]
        else:
            state, since = "running", None
        arguments = _short(call.arguments)
        found.append(
            PendingCall(
                call_id=call.id, tool=call.name, arguments=arguments, state=state, since=since
            )
        )
    return found


def prompt_state(toolkit: Toolkit, pending: Sequence[PendingCall], now: float | None = None) -> str:
    """The prompt text: which groups are active (when there are groups besides ``basic``), their
    notes, and the pending calls with how long each has waited; empty when none of these has
    anything to say. ``now`` (Unix time) is the moment the ages are counted to."""
    parts: list[str] = []
    groups = toolkit.groups
    if len(groups) > 1:
        active = [g.name for g in groups if g.active]
        inactive = [g.name for g in groups if not g.active]
        line = f"Active tool groups: {', '.join(active)}."
        if inactive:
            line += f" Inactive (their tools cannot be called now): {', '.join(inactive)}."
        parts.append(line)
    notes = toolkit.notes()
    if notes:
        parts.append(notes)
    if pending:
        moment = time() if now is None else now
        lines = [
            "## Pending tool calls",
            "These calls have no result yet; each result will come with its call id. Do not "
            "call them again while you wait.",
        ]
        lines.extend(_line(p, moment) for p in pending)
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


_DOING = {
    "external": "carried out outside the engine, waiting",
    "submitted": "running in the background",
    "running": "running",
}


def _line(call: PendingCall, now: float) -> str:
    text = f"- {call.call_id}: {call.tool} {call.arguments} ({_DOING[call.state]}"
    if call.since is not None:
        began = datetime.fromtimestamp(call.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        text += f" since {began}, {_age(max(0.0, now - call.since))}"
    return text + ")"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _short(arguments: Mapping[str, Any] | str) -> str:
    """The arguments as one line of JSON text, cut to `_SHOWN_CHARS`."""
    if isinstance(arguments, str):
        text = " ".join(arguments.split())  # the model's own JSON text, on one line
    else:
        try:
            text = orjson.dumps(dict(arguments), default=printable).decode()
        except (orjson.JSONEncodeError, TypeError):  # 64-bit overflow, deep nesting
            text = printable(dict(arguments))
    text = printable(text)  # lone surrogates escaped: the prompt goes out as UTF-8
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


__all__ = ["PendingCall", "pending_calls", "prompt_state"]
