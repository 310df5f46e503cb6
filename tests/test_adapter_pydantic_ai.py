"""Stockade's tools in pydantic-ai: a real `Agent` driving a `FunctionModel` (hand-written
replies, no network), every call through the engine, the policy's ``ask`` as pydantic-ai's
deferred tool approval (`DeferredToolRequests` / `DeferredToolResults`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from adapters_support import SECRET, SecondLook, engine_on, import_without
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from stockade import ToolCall, Toolkit, tool
from stockade.engine.adapters._extras import MissingExtraError
from stockade.engine.adapters.pydantic_ai import StockadeToolset
from stockade.errors import ConfigurationError
from stockade.policies import Decision


class Script:
    """A model that makes the given tool calls, one reply per turn, then says "done"; it keeps
    what it was shown of every call (by call id) and the tools it was offered."""

    def __init__(self, *turns: list[ToolCallPart]) -> None:
        self.turns = list(turns)
        self.shown: dict[str, ToolReturnPart] = {}
        self.offered: list[dict[str, Any]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.offered = [
            {"name": t.name, "parameters": t.parameters_json_schema} for t in info.function_tools
        ]
        last = messages[-1]
        if isinstance(last, ModelRequest):
            for part in last.parts:
                if isinstance(part, ToolReturnPart):
                    self.shown[part.tool_call_id] = part
        if self.turns:
            return ModelResponse(parts=list(self.turns.pop(0)))
        return ModelResponse(parts=[TextPart("done")])


def write(path: str, call_id: str, content: str = "stolen") -> ToolCallPart:
    return ToolCallPart("write_file", {"path": path, "content": content}, tool_call_id=call_id)


def agent_with(toolset: StockadeToolset, script: Script) -> Agent[None, str | DeferredToolRequests]:
    return Agent(FunctionModel(script), toolsets=[toolset], output_type=[str, DeferredToolRequests])


async def test_the_tools_reach_the_model_with_their_schemas(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, _):
        script = Script()
        await agent_with(StockadeToolset(engine), script).run("hello")
        offered = {t["name"]: t["parameters"] for t in script.offered}
        assert offered == {t.name: t.parameters for t in engine.toolkit.tools()}


async def test_an_allowed_call_runs_and_its_result_reaches_the_model(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        script = Script(
            [write("notes.txt", "c1", "one two three")],
            [ToolCallPart("word_count", {"path": "notes.txt"}, tool_call_id="c2")],
        )
        result = await agent_with(StockadeToolset(engine), script).run("take notes")
        assert result.output == "done"
        assert place.text("notes.txt") == "one two three"
        assert script.shown["c2"].content == "3"
        assert script.shown["c2"].outcome == "success"
        for call_id in ("c1", "c2"):
            assert [r["kind"] for r in place.records(call_id)] == ["intent", "outcome"]
            assert place.outcome(call_id)["status"] == "ok"


async def test_a_denied_call_is_a_failed_return_and_the_run_goes_on(tmp_path: Path) -> None:
    outside = tmp_path / "host.txt"
    outside.write_text("host file")
    async with engine_on(tmp_path) as (engine, place):
        script = Script(
            [
                ToolCallPart(
                    "read_text_file", {"path": "/workspace/../host.txt"}, tool_call_id="c1"
                ),
                write("/workspace/../host.txt", "c2"),
            ]
        )
        result = await agent_with(StockadeToolset(engine), script).run("escape")
        assert result.output == "done"
        for call_id in ("c1", "c2"):
            shown = script.shown[call_id]
            assert shown.outcome == "failed"
            assert str(shown.content).startswith("denied by rule sandbox: ")
            assert place.outcome(call_id)["status"] == "denied"
        assert outside.read_text() == "host file"


async def test_an_ask_defers_the_call_and_an_approval_runs_it(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        agent = agent_with(StockadeToolset(engine), Script([write(".env", "c1", "API_KEY=new\n")]))
        result = await agent.run("rotate the key")
        requests = result.output
        assert isinstance(requests, DeferredToolRequests)
        assert [part.tool_call_id for part in requests.approvals] == ["c1"]
        assert requests.metadata["c1"]["rule"] == "dangerous-path"
        assert "protected path" in requests.metadata["c1"]["reason"]
        assert place.text(".env") == SECRET
        assert place.records("c1") == []  # the question recorded nothing

        answers = DeferredToolResults(approvals={"c1": True})
        result = await agent.run(
            message_history=result.all_messages(), deferred_tool_results=answers
        )
        assert result.output == "done"
        assert place.text(".env") == "API_KEY=new\n"
        outcome = place.outcome("c1")
        assert (outcome["status"], outcome["approval"]) == ("ok", "approved")


async def test_a_denied_ask_is_refused_audited_and_never_runs(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        toolset = StockadeToolset(engine)
        script = Script([write(".env", "c1")])
        agent = agent_with(toolset, script)
        result = await agent.run("steal the key")
        assert isinstance(result.output, DeferredToolRequests)
        (part,) = result.output.approvals
        answers = DeferredToolResults(approvals={"c1": toolset.deny(part)})
        result = await agent.run(
            message_history=result.all_messages(), deferred_tool_results=answers
        )
        assert result.output == "done"
        assert place.text(".env") == SECRET
        shown = script.shown["c1"]
        assert shown.outcome == "denied"
        assert str(shown.content).startswith("denied by rule dangerous-path: ")
        intent, outcome = place.records("c1")
        assert (intent["effect"], intent["rule"]) == ("ask", "dangerous-path")
        assert (outcome["status"], outcome["approval"]) == ("denied", "refused")
        assert outcome["reason"].endswith("refused in the pydantic-ai run")
        # a call like any other: in the engine's calls, and a span of its own
        assert engine.calls.result("c1").status == "denied"  # type: ignore[union-attr]
        assert place.span("c1")["stockade.status"] == "denied"


async def test_an_approval_answers_its_own_call_and_no_other(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        script = Script(
            [write(".env", "c1", "API_KEY=one\n"), write(".git/hooks/pre-commit", "c2")],
            [write(".env", "c3", "API_KEY=three\n")],
        )
        agent = agent_with(StockadeToolset(engine), script)
        result = await agent.run("two risky writes")
        assert isinstance(result.output, DeferredToolRequests)
        assert [p.tool_call_id for p in result.output.approvals] == ["c1", "c2"]
        answers = DeferredToolResults(approvals={"c1": True, "c2": False})
        result = await agent.run(
            message_history=result.all_messages(), deferred_tool_results=answers
        )
        assert place.text(".env") == "API_KEY=one\n"
        assert place.text(".git/hooks/pre-commit") is None
        # the same write again, by a new call: asked again, not covered by c1's approval
        assert isinstance(result.output, DeferredToolRequests)
        assert [p.tool_call_id for p in result.output.approvals] == ["c3"]
        assert place.text(".env") == "API_KEY=one\n"


async def test_a_call_judged_fine_ahead_that_asks_when_made_is_refused(tmp_path: Path) -> None:
    second = SecondLook()
    toolkit = Toolkit()
    toolkit.add(second)
    async with engine_on(tmp_path, toolkit=toolkit) as (engine, place):
        script = Script([ToolCallPart("touch", {}, tool_call_id="c1")])
        result = await agent_with(StockadeToolset(engine), script).run("touch it")
        assert result.output == "done"
        assert second.runs == 0
        shown = str(script.shown["c1"].content)
        assert shown.startswith("denied by rule touch.second-look: ")
        assert "not put to the pydantic-ai run's approval" in shown
        assert place.outcome("c1")["approval"] == "refused"


async def test_engine_approvals_leave_the_ask_to_the_engines_approver(tmp_path: Path) -> None:
    def approver(call: ToolCall, decision: Decision) -> bool:
        return call.id == "c1"

    async with engine_on(tmp_path, approver=approver) as (engine, place):
        script = Script([write(".env", "c1", "API_KEY=new\n"), write(".git/hooks/x", "c2")])
        agent = agent_with(StockadeToolset(engine, approvals="engine"), script)
        result = await agent.run("two risky writes")
        assert result.output == "done"
        assert place.text(".env") == "API_KEY=new\n"
        assert place.text(".git/hooks/x") is None
        assert str(script.shown["c2"].content).startswith("denied by rule dangerous-path: ")


async def test_a_group_switched_on_mid_run_is_offered_at_the_next_step(tmp_path: Path) -> None:
    @tool(read_only=True)
    def shout(text: str) -> str:
        """Say it louder."""
        return text.upper()

    toolkit = Toolkit(meta_tool=True)
    toolkit.create_group("loud", "Shouting.")
    toolkit.add(shout, group="loud")
    async with engine_on(tmp_path, toolkit=toolkit) as (engine, _):
        script = Script(
            [ToolCallPart("reset_tools", {"loud": True}, tool_call_id="c1")],
            [ToolCallPart("shout", {"text": "hi"}, tool_call_id="c2")],
        )
        result = await agent_with(StockadeToolset(engine), script).run("hello")
        assert result.output == "done"
        assert script.shown["c2"].content == "HI"
        assert "shout" in {t["name"] for t in script.offered}


def test_approvals_must_be_framework_or_engine() -> None:
    with pytest.raises(ConfigurationError, match="'framework' or 'engine'"):
        StockadeToolset(object(), approvals="deferred")  # type: ignore[arg-type]


def test_without_pydantic_ai_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    load = import_without(monkeypatch, "pydantic_ai", "pydantic_ai")
    with pytest.raises(MissingExtraError, match=r"pip install 'stockade\[pydantic-ai\]'"):
        load()
