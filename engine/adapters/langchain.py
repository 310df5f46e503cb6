"""Stockade's tools as LangChain tools.

`stockade_tools(engine)` gives one `StockadeTool` (a LangChain `BaseTool`) per active tool,
with the tool's JSON schema as its ``args_schema``; every call goes through ``engine.call``
(policy, sandbox, timeout, audit record, span), with the model's tool call id as the call's id
when the tool is invoked with a tool call. A result that is not ``ok`` (a denial, an error, a
timeout) comes back as the tool's output with ``status="error"`` (a `ToolException`, handled
by the tool), its text naming the rule and the reason: nothing raises out of the agent.

LangChain has no approval of its own for plain tools, so ``ask`` goes to the engine's approver
(``Engine(approver=...)``); without one, an ask is refused. (LangGraph's ``interrupt`` is not
used.)

``ainvoke`` is the way in; ``invoke`` works too where no event loop is running in the thread
(it runs the call in a loop of its own).

Usage::

    from stockade.engine.adapters.langchain import stockade_tools

    tools = {tool.name: tool for tool in stockade_tools(engine)}
    reply = await model.bind_tools(list(tools.values())).ainvoke(messages)
    for tool_call in reply.tool_calls:
        messages.append(await tools[tool_call["name"]].ainvoke(tool_call))  # a ToolMessage
"""

from __future__ import annotations

import asyncio
from typing import Any

from stockade.engine.adapters._extras import MissingExtraError
from stockade.engine.adapters._text import model_text
from stockade.engine.messages import ToolCall, new_call_id
from stockade.engine.pipeline import Engine
from stockade.errors import ConfigurationError

try:
    from langchain_core.tools import BaseTool, ToolException
    from pydantic import Field
except ImportError as exc:  # the optional extra
    raise MissingExtraError.of("langchain", "langchain_core") from exc


class StockadeTool(BaseTool):
    """One of an engine's tools as a LangChain tool (make them with `stockade_tools`).
    ``subject`` names the agent to the policy."""

    engine: Engine = Field(exclude=True, repr=False)
    subject: str = "agent"
    handle_tool_error: bool = True  # a denial or an error is the tool's output, not a crash

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # the arguments go to the engine whole (it validates them against the tool's own model),
        # with the tool call's id, which LangChain hands no tool otherwise
        return (), {"arguments": tool_input, "call_id": tool_call_id}

    async def _arun(self, arguments: str | dict[str, Any], call_id: str | None, **_: Any) -> str:
        if isinstance(arguments, str) and not arguments.strip():
            arguments = {}
        call = ToolCall(
            name=self.name, arguments=arguments, id=call_id or new_call_id(), subject=self.subject
        )
        result = await self.engine.call(call)
        text = model_text(result)
        if not result.ok:
            raise ToolException(text)
        return text

    def _run(self, arguments: str | dict[str, Any], call_id: str | None, **_: Any) -> str:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: the call gets one of its own
            return asyncio.run(self._arun(arguments, call_id))
        raise ConfigurationError(
            f"tool {self.name!r} was invoked synchronously inside a running event loop, which "
            "would block it; use `await tool.ainvoke(...)` there"
        )


def stockade_tools(engine: Engine, *, subject: str = "agent") -> list[StockadeTool]:
    """One LangChain tool per tool active in ``engine``'s toolkit now."""
    return [
        StockadeTool(
            name=tool.name,
            description=tool.description,
            args_schema=tool.parameters,
            engine=engine,
            subject=subject,
        )
        for tool in engine.toolkit.tools()
    ]
