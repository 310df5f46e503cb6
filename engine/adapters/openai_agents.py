"""Stockade's tools as OpenAI Agents SDK function tools, the policy's ``ask`` as the SDK's own
tool approval.

Each tool of the engine's toolkit becomes a `FunctionTool` with the tool's JSON schema (strict
where the schema already is strict-compatible), enabled while its group is active, and every
call goes through ``engine.call`` (policy, sandbox, timeout, audit record, span); what the model
reads back is the result's text, a denial as ``denied by rule ...: reason``: nothing raises out
of the run.

``ask`` becomes the SDK's human-in-the-loop approval: a tool's ``needs_approval`` asks the policy
(``engine.preview``), so a call the policy asks about stops the run with a `ToolApprovalItem`
among ``result.interruptions``. Approve it with the SDK's ``state.approve(item)`` and run again:
the call then runs through the engine with an approver that says yes only when the run's own
approvals hold a yes for that very call id (the SDK binds a call id to its arguments). Refuse it
with `StockadeTools.reject`, which calls the SDK's ``state.reject`` and records the refusal in
Stockade's audit log (the SDK never calls a rejected tool, so a plain ``state.reject`` refuses
too but leaves no record in Stockade). ``approvals="engine"`` leaves every ask to the engine's
own approver instead.

Usage::

    from agents import Agent, Runner
    from stockade.engine.adapters.openai_agents import StockadeTools

    tools = StockadeTools(engine)
    agent = Agent(name="coder", model=model, tools=tools.function_tools())
    result = await Runner.run(agent, "tidy the notes")
    while result.interruptions:
        state = result.to_state()
        for item in result.interruptions:
            if input(f"{tools.decision(item).reason} -- allow? ") == "y":
                state.approve(item)
            else:
                tools.reject(state, item)
        result = await Runner.run(agent, state)
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

from stockade.engine.adapters._asks import Approvals, ask_of, checked_approvals, record_refusal
from stockade.engine.adapters._extras import MissingExtraError
from stockade.engine.adapters._text import denial_text, model_text
from stockade.engine.errors import PermissionDeniedError, UnknownToolError
from stockade.engine.messages import ToolCall
from stockade.engine.pipeline import Engine
from stockade.engine.tools import RegisteredTool
from stockade.policies import Decision

try:
    from agents import FunctionTool, RunContextWrapper, RunState, Tool, ToolApprovalItem
    from agents.exceptions import UserError
    from agents.strict_schema import ensure_strict_json_schema
    from agents.tool_context import ToolContext
except ImportError as exc:  # the optional extra
    raise MissingExtraError.of("openai-agents", "agents") from exc

SDK = "the OpenAI Agents SDK run"


class StockadeTools:
    """An engine's tools for Agents SDK agents. ``subject`` names the agent to the policy;
    ``approvals`` says who answers the policy's asks: ``"framework"`` (the SDK's approval,
    the default) or ``"engine"`` (the engine's approver)."""

    def __init__(
        self, engine: Engine, *, subject: str = "agent", approvals: Approvals = "framework"
    ) -> None:
        self.engine = engine
        self.subject = subject
        self.approvals = checked_approvals(approvals)

    def function_tools(self) -> list[Tool]:
        """One `FunctionTool` per tool registered now (each enabled while its group is
        active), typed as the SDK's ``Agent(tools=...)`` takes them: make the agent after
        registering its tools."""
        return [self._function_tool(tool) for tool in self.engine.toolkit.tools(active_only=False)]

    def decision(self, item: ToolApprovalItem) -> Decision:
        """What the policy asks about the call ``item`` stands for (its reason, its rule and the
        suggestions a person may choose from), to show whoever approves it. Raises
        `CallError` for a call the engine cannot judge (an unknown tool, bad arguments)."""
        return self.engine.preview(self._call_of(item))[1]

    def reject(
        self, state: RunState[Any], item: ToolApprovalItem, *, message: str | None = None
    ) -> None:
        """Refuse ``item`` in the SDK's run ``state`` (the SDK's ``state.reject``) and record
        the refusal in Stockade's audit log; the model is told ``message``, or the rule that
        asked and that the run refused. Run the state again afterwards, as with the SDK."""
        if item.tool_name is None or self.engine.toolkit.resolve(item.tool_name) is None:
            state.reject(item, rejection_message=message)  # not one of Stockade's tools
            return
        verdict = f"refused in {SDK}" + (f": {message}" if message else "")
        refused = record_refusal(self.engine, self._call_of(item), verdict)
        state.reject(item, rejection_message=message or denial_text(refused))

    # -- one tool ----------------------------------------------------------------------------

    def _function_tool(self, tool: RegisteredTool) -> FunctionTool:
        name = tool.name
        schema = copy.deepcopy(tool.parameters)
        return FunctionTool(
            name=name,
            description=tool.description,
            params_json_schema=schema,
            on_invoke_tool=self._invoker(name),
            strict_json_schema=strict_compatible(schema),
            is_enabled=lambda _ctx, _agent: self.engine.toolkit.resolve(name) is not None,
            needs_approval=self._asker(name) if self.approvals == "framework" else False,
        )

    def _asker(
        self, name: str
    ) -> Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]:
        async def needs_approval(
            _ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
        ) -> bool:
            call = ToolCall(name=name, arguments=params, id=call_id, subject=self.subject)
            return await ask_of(self.engine, call) is not None

        return needs_approval

    def _invoker(self, name: str) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            call = ToolCall(
                name=name,
                arguments=arguments if arguments.strip() else {},
                id=ctx.tool_call_id,
                subject=self.subject,
            )
            approver = _run_approval(ctx, name) if self.approvals == "framework" else None
            return model_text(await self.engine.call(call, approver=approver))

        return invoke

    def _call_of(self, item: ToolApprovalItem) -> ToolCall:
        name, call_id = item.tool_name, item.call_id
        if name is None or call_id is None:
            raise UnknownToolError(f"the approval item {item!r} names no function tool call")
        arguments = item.arguments or ""
        return ToolCall(
            name=name,
            arguments=arguments if arguments.strip() else {},
            id=call_id,
            subject=self.subject,
        )


def _run_approval(
    ctx: ToolContext[Any], name: str
) -> Callable[[ToolCall, Decision], Awaitable[bool]]:
    """The engine's approver for one call: yes when the SDK run's approvals hold a yes for this
    call id (``state.approve(item)``, or the SDK's ``always_approve`` for the tool), else no,
    saying so. It answers only the call it was made for."""

    async def approver(call: ToolCall, decision: Decision) -> bool:
        if call.id == ctx.tool_call_id and ctx.is_tool_approved(name, call.id) is True:
            return True
        raise PermissionDeniedError(
            f"the policy asks about this call and {SDK} holds no approval of it (call "
            f"{call.id}); the run stops for calls the policy asks about when they are made: "
            "approve it there with state.approve(item)"
        )

    return approver


def strict_compatible(schema: dict[str, Any]) -> bool:
    """Whether ``schema`` means the same in the SDK's strict mode: the strict form adds only
    ``additionalProperties: false`` (strict mode makes every property required, which would
    change a schema with optional parameters, so such a schema stays non-strict)."""
    try:
        strict = ensure_strict_json_schema(copy.deepcopy(schema))
    except (UserError, TypeError, ValueError):
        return False
    return bool(_loose(strict) == _loose(schema))


def _loose(node: Any) -> Any:
    """``node`` without ``additionalProperties: false`` and with ``required`` in a set order."""
    if isinstance(node, dict):
        return {
            key: sorted(value) if key == "required" and isinstance(value, list) else _loose(value)
            for key, value in node.items()
            if not (key == "additionalProperties" and value is False)
        }
    if isinstance(node, list):
        return [_loose(value) for value in node]
    return node
