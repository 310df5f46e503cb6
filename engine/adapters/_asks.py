"""The policy's ``ask`` met in a framework's own approval: judging a call before the framework
stops for it, and recording a call the framework's app refused.

A framework with human-in-the-loop approval (the Agents SDK's ``needs_approval``, pydantic-ai's
deferred approvals) decides *before* it runs a tool whether to stop and ask; `ask_of` is the
policy's answer to that question, without running or recording anything. When the app says yes,
the call runs through the engine with an approver that answers for that call alone. When the
app says no, the framework never calls the tool, so the adapter tells the engine
(`record_refusal`, through `Engine.refuse`): an ``intent`` record with the policy's ask and an
``outcome`` record, denied, ``approval: refused``, a span and an entry in ``engine.calls``, as
for an approver's no. Nothing runs.

Usage::

    decision = await ask_of(engine, call)          # None: not an ask (or the engine will say)
    if decision is not None:
        ...                                         # stop the framework's run for approval
    refused = record_refusal(engine, call, "refused in the pydantic-ai run")
"""

from __future__ import annotations

import logging
from typing import Literal

from stockade.engine.messages import ToolCall
from stockade.engine.pipeline import Engine
from stockade.errors import ConfigurationError
from stockade.policies import Decision, Effect

log = logging.getLogger("stockade.engine")

Approvals = Literal["framework", "engine"]  # who answers the policy's asks


def checked_approvals(approvals: str) -> Approvals:
    """``approvals`` when it is one of the two answers, else a ConfigurationError saying so."""
    if approvals == "framework":
        return "framework"
    if approvals == "engine":
        return "engine"
    raise ConfigurationError(f"approvals must be 'framework' or 'engine', not {approvals!r}")


async def ask_of(engine: Engine, call: ToolCall) -> Decision | None:
    """The policy's ask on ``call`` (what a person approving it should see), or None when the
    policy does not ask. Nothing runs and nothing is recorded. A call the engine cannot judge
    ahead (unknown tool, bad arguments, a path outside every mount) is not an ask: the engine
    itself reports it when the call is made, as an error or a denial."""
    tool = engine.toolkit.resolve(call.name)
    if tool is None:
        return None
    if tool.spec.command is not None:
        await engine.isolation()  # probed off the loop, not inside preview
    try:
        _, decision = engine.preview(call)
    except Exception:  # judged again, and reported, by engine.call: a preview only advises
        return None
    return decision if decision.effect is Effect.ASK else None


def record_refusal(engine: Engine, call: ToolCall, verdict: str) -> Decision:
    """Record that ``call`` was asked about and refused (``verdict`` says by whom, and why),
    without running it, as the engine records any call (`Engine.refuse`: the audit log, the
    span, ``engine.calls``); returns the refused decision (its reason ends with ``verdict``)."""
    refused = engine.refuse(call, verdict).decision
    return refused if refused is not None else Decision(Effect.DENY, None, verdict)
