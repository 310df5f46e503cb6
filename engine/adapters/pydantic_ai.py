"""Stockade's tools as a pydantic-ai toolset, the policy's ``ask`` as pydantic-ai's deferred
tool approval.

`StockadeToolset` lists the engine's active tools with their JSON schemas (asked afresh at
every step, so a group switched on mid-run appears) and runs every call through
``engine.call`` (policy, sandbox, timeout, audit record, span). A result that is not ``ok``
(a denial, an error, a timeout) reaches the model as a failed tool return (`ToolFailed`), its
text naming the rule and the reason: nothing raises out of the run.

``ask`` becomes pydantic-ai's human-in-the-loop approval: a call the policy asks about raises
`ApprovalRequired` (its metadata hold the rule and the reason), so a run whose ``output_type``
includes `DeferredToolRequests` ends with the call in ``output.approvals``. Approve it with
``DeferredToolResults(approvals={call_id: True})`` and run again: the call then runs through
the engine with an approver that says yes for that call alone (pydantic-ai marks only the call
it resumes as approved). Refuse it with ``approvals={call_id: toolset.deny(part)}``: a
`ToolDenied` whose refusal is recorded in Stockade's audit log (pydantic-ai never calls a denied
tool, so a plain ``False`` refuses too but leaves no record in Stockade).
``approvals="engine"`` leaves every ask to the engine's own approver instead.

Usage::

    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from stockade.engine.adapters.pydantic_ai import StockadeToolset

    toolset = StockadeToolset(engine)
    agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])
    result = await agent.run("tidy the notes")
    if isinstance(result.output, DeferredToolRequests):
        answers = DeferredToolResults()
        for part in result.output.approvals:
            why = result.output.metadata[part.tool_call_id]["reason"]
            ok = input(f"{why} -- allow? ") == "y"
            answers.approvals[part.tool_call_id] = True if ok else toolset.deny(part)
        result = await agent.run(message_history=result.all_messages(),
                                 deferred_tool_results=answers)
"""

from __future__ import annotations

from typing import Any

from stockade.engine.adapters._asks import Approvals, ask_of, checked_approvals, record_refusal
from stockade.engine.adapters._extras import MissingExtraError
from stockade.engine.adapters._text import denial_text, model_text
from stockade.engine.errors import PermissionDeniedError
from stockade.engine.messages import ToolCall, new_call_id
from stockade.engine.pipeline import Approver, Engine
from stockade.engine.tools import RegisteredTool
from stockade.policies import Decision

try:
    from pydantic_ai import RunContext, ToolDenied
    from pydantic_ai.exceptions import ApprovalRequired, ToolFailed
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
    from pydantic_core import SchemaValidator, core_schema
except ImportError as exc:  # the optional extra
    raise MissingExtraError.of("pydantic-ai", "pydantic_ai") from exc

RUN = "the pydantic-ai run"

# Arguments reach the engine as the model gave them (a JSON object): the engine validates them
# against the tool's own model, and reports what is wrong in the call's result.
_ARGUMENTS = SchemaValidator(core_schema.dict_schema())


class StockadeToolset(AbstractToolset[Any]):
    """An engine's tools for pydantic-ai agents. ``subject`` names the agent to the policy;
    ``approvals`` says who answers the policy's asks: ``"framework"`` (pydantic-ai's deferred
    approval, the default) or ``"engine"`` (the engine's approver). ``toolset_id`` is the
    toolset's id among an agent's toolsets."""

    def __init__(
        self,
        engine: Engine,
        *,
        subject: str = "agent",
        approvals: Approvals = "framework",
        toolset_id: str | None = "stockade",
    ) -> None:
        self.engine = engine
        self.subject = subject
        self.approvals = checked_approvals(approvals)
        self._id = toolset_id

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The engine's active tools, with their JSON schemas."""
        return {tool.name: self._toolset_tool(tool) for tool in self.engine.toolkit.tools()}

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Run the call through the engine: its text when ok, else a `ToolFailed` with the
        denial or the error. A call the policy asks about, not yet approved in the run, raises
        `ApprovalRequired` instead (with ``approvals="framework"``)."""
        call = ToolCall(
            name=name,
            arguments=tool_args,
            id=ctx.tool_call_id or new_call_id(),
            subject=self.subject,
        )
        approver: Approver | None = None
        if self.approvals == "framework":
            if not ctx.tool_call_approved:
                asked = await ask_of(self.engine, call)
                if asked is not None:
                    raise ApprovalRequired(metadata=_shown(asked))
            approver = _approved if ctx.tool_call_approved else _not_put
        result = await self.engine.call(call, approver=approver)
        text = model_text(result)
        if not result.ok:
            raise ToolFailed(text)
        return text

    def deny(self, part: ToolCallPart, message: str | None = None) -> ToolDenied:
        """The answer refusing ``part`` (a call in ``DeferredToolRequests.approvals``), with its
        refusal recorded in Stockade's audit log. The model is told ``message``, or the rule
        that asked and that the run refused."""
        call = ToolCall(
            name=part.tool_name,
            arguments=part.args_as_dict(),
            id=part.tool_call_id,
            subject=self.subject,
        )
        verdict = f"refused in {RUN}" + (f": {message}" if message else "")
        refused = record_refusal(self.engine, call, verdict)
        return ToolDenied(message or denial_text(refused))

    def _toolset_tool(self, tool: RegisteredTool) -> ToolsetTool[Any]:
        definition = ToolDefinition(
            name=tool.name,
            parameters_json_schema=tool.parameters,
            description=tool.description,
        )
        return ToolsetTool(
            toolset=self, tool_def=definition, max_retries=1, args_validator=_ARGUMENTS
        )


def _shown(decision: Decision) -> dict[str, Any]:
    """What the app is shown of an ask, in ``DeferredToolRequests.metadata``."""
    return {
        "rule": decision.rule,
        "reason": decision.reason,
        "suggestions": [suggestion.summary for suggestion in decision.suggestions],
    }


async def _approved(call: ToolCall, decision: Decision) -> bool:
    """The approver of a call pydantic-ai resumed as approved: this call, and no other."""
    return True


async def _not_put(call: ToolCall, decision: Decision) -> bool:
    """The approver of a call that was not put to the run's approval: the policy did not ask
    when it was judged a moment ago, but asks now (a file appeared meanwhile ...)."""
    raise PermissionDeniedError(
        f"the policy asks about this call now, but it was not put to {RUN}'s approval when it "
        "was judged a moment before; make the call again to be asked"
    )
