"""Stockade's tools in the OpenAI Agents SDK: a real `Runner` driving a scripted model (the
SDK's own `ScriptedModel`, no network), every call through the engine, the policy's ``ask`` as
the SDK's tool approval (interruptions, ``state.approve`` / ``reject``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from adapters_support import SECRET, SecondLook, engine_on, import_without
from agents import Agent, RunConfig, Runner, RunResult
from agents.testing import ScriptedModel, assistant_message, function_call
from hypothesis import given
from hypothesis import strategies as st

from stockade import ToolCall, Toolkit, tool
from stockade.engine.adapters._extras import MissingExtraError
from stockade.engine.adapters.openai_agents import StockadeTools, strict_compatible
from stockade.errors import ConfigurationError
from stockade.policies import Decision

QUIET = RunConfig(tracing_disabled=True)  # no trace export: there is no network


def agent_with(tools: StockadeTools, *steps: Any) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel([*steps, [assistant_message("done")]])
    return Agent(name="coder", model=model, tools=tools.function_tools()), model


def outputs(model: ScriptedModel) -> dict[str, str]:
    """What the model was shown of each call, by call id (from its last request)."""
    last = model.last_call
    assert last is not None
    items = last.input if isinstance(last.input, list) else []
    return {
        item["call_id"]: str(item["output"])
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def write(path: str, call_id: str, content: str = "stolen") -> Any:
    return function_call("write_file", {"path": path, "content": content}, call_id=call_id)


async def run(agent: Agent[Any], given: Any) -> RunResult:
    return await Runner.run(agent, given, run_config=QUIET)


async def test_the_tools_reach_the_sdk_with_their_schemas(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, _):
        made = {t.name: t for t in StockadeTools(engine).function_tools()}
        assert set(made) == {t.name for t in engine.toolkit.tools()}
        write_file = engine.toolkit.get("write_file")
        assert made["write_file"].params_json_schema == write_file.parameters
        assert made["write_file"].strict_json_schema  # every parameter required: strict
        # optional parameters would become required in strict mode: left non-strict
        assert not made["list_directory"].strict_json_schema
        assert made["list_directory"].params_json_schema == (
            engine.toolkit.get("list_directory").parameters
        )


async def test_an_allowed_call_runs_and_its_result_reaches_the_model(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        agent, model = agent_with(
            StockadeTools(engine),
            [write("notes.txt", "c1", "one two three")],
            [function_call("word_count", {"path": "notes.txt"}, call_id="c2")],
        )
        result = await run(agent, "take notes")
        assert result.final_output == "done"
        assert not result.interruptions
        assert place.text("notes.txt") == "one two three"
        assert outputs(model)["c2"] == "3"
        for call_id in ("c1", "c2"):
            assert [r["kind"] for r in place.records(call_id)] == ["intent", "outcome"]
            assert place.outcome(call_id)["status"] == "ok"


async def test_a_denied_call_comes_back_as_text_and_the_run_goes_on(tmp_path: Path) -> None:
    outside = tmp_path / "host.txt"
    outside.write_text("host file")
    async with engine_on(tmp_path) as (engine, place):
        agent, model = agent_with(
            StockadeTools(engine),
            [
                function_call("read_text_file", {"path": "/workspace/../host.txt"}, call_id="c1"),
                write("/workspace/../host.txt", "c2"),
            ],
        )
        result = await run(agent, "escape")
        assert result.final_output == "done"
        shown = outputs(model)
        assert shown["c1"].startswith("denied by rule sandbox: ")
        assert "outside every mount" in shown["c1"]
        assert shown["c2"].startswith("denied by rule sandbox: ")
        assert outside.read_text() == "host file"
        for call_id in ("c1", "c2"):
            assert place.outcome(call_id)["status"] == "denied"


async def test_an_ask_stops_the_run_and_an_approval_runs_that_call(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        tools = StockadeTools(engine)
        agent, _ = agent_with(tools, [write(".env", "c1", "API_KEY=new\n")])
        result = await run(agent, "rotate the key")
        (item,) = result.interruptions
        assert item.call_id == "c1"
        assert place.text(".env") == SECRET  # nothing ran while the run waited
        asked = tools.decision(item)
        assert asked.rule == "dangerous-path"
        assert place.records("c1") == []  # the question recorded nothing

        state = result.to_state()
        state.approve(item)
        result = await run(agent, state)
        assert result.final_output == "done"
        assert place.text(".env") == "API_KEY=new\n"
        outcome = place.outcome("c1")
        assert (outcome["status"], outcome["approval"]) == ("ok", "approved")
        intent = place.records("c1")[0]
        assert (intent["kind"], intent["effect"]) == ("intent", "ask")


async def test_a_rejected_ask_is_refused_audited_and_never_runs(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        tools = StockadeTools(engine)
        agent, model = agent_with(tools, [write(".env", "c1")])
        result = await run(agent, "steal the key")
        (item,) = result.interruptions
        state = result.to_state()
        tools.reject(state, item)
        result = await run(agent, state)
        assert result.final_output == "done"
        assert place.text(".env") == SECRET
        shown = outputs(model)["c1"]
        assert shown.startswith("denied by rule dangerous-path: ")
        assert shown.endswith("refused in the OpenAI Agents SDK run")
        intent, outcome = place.records("c1")
        assert (intent["kind"], intent["effect"], intent["rule"]) == (
            "intent",
            "ask",
            "dangerous-path",
        )
        assert (outcome["status"], outcome["effect"], outcome["approval"]) == (
            "denied",
            "deny",
            "refused",
        )
        assert outcome["reason"].endswith("refused in the OpenAI Agents SDK run")
        # a call like any other: in the engine's calls, and a span of its own
        assert engine.calls.result("c1").status == "denied"  # type: ignore[union-attr]
        span = place.span("c1")
        assert (span["stockade.status"], span["stockade.decision.rule"]) == (
            "denied",
            "dangerous-path",
        )


async def test_a_rejection_message_is_what_the_model_reads(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        tools = StockadeTools(engine)
        agent, model = agent_with(tools, [write(".env", "c1")])
        result = await run(agent, "steal the key")
        state = result.to_state()
        tools.reject(state, result.interruptions[0], message="not today")
        await run(agent, state)
        assert outputs(model)["c1"] == "not today"
        assert place.outcome("c1")["reason"].endswith(
            "refused in the OpenAI Agents SDK run: not today"
        )


async def test_the_sdks_own_reject_refuses_too(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        agent, _ = agent_with(StockadeTools(engine), [write(".env", "c1")])
        result = await run(agent, "steal the key")
        state = result.to_state()
        state.reject(result.interruptions[0])
        await run(agent, state)
        assert place.text(".env") == SECRET
        assert place.records("c1") == []  # the SDK never called the tool: nothing to record


async def test_an_approval_answers_its_own_call_and_no_other(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        tools = StockadeTools(engine)
        agent, _ = agent_with(
            tools,
            [write(".env", "c1", "API_KEY=one\n"), write(".git/hooks/pre-commit", "c2")],
            [write(".env", "c3", "API_KEY=three\n")],
        )
        result = await run(agent, "two risky writes")
        first, _ = result.interruptions
        state = result.to_state()
        state.approve(first)  # the second is left unanswered
        result = await run(agent, state)
        assert place.text(".env") == "API_KEY=one\n"
        assert place.text(".git/hooks/pre-commit") is None
        assert [i.call_id for i in result.interruptions] == ["c2"]  # still waiting

        state = result.to_state()
        tools.reject(state, result.interruptions[0])
        result = await run(agent, state)
        # the same write again, by a new call: asked again, not covered by c1's approval
        assert [i.call_id for i in result.interruptions] == ["c3"]
        assert place.text(".env") == "API_KEY=one\n"
        assert place.text(".git/hooks/pre-commit") is None
        assert place.outcome("c2")["approval"] == "refused"


async def test_the_sdks_always_approve_answers_later_asks_of_that_tool(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        tools = StockadeTools(engine)
        agent, _ = agent_with(
            tools, [write(".env", "c1", "API_KEY=one\n")], [write(".env", "c2", "API_KEY=two\n")]
        )
        result = await run(agent, "rotate twice")
        state = result.to_state()
        state.approve(result.interruptions[0], always_approve=True)
        result = await run(agent, state)
        assert not result.interruptions  # the SDK's own "always" for write_file, as it documents
        assert place.text(".env") == "API_KEY=two\n"
        for call_id in ("c1", "c2"):  # each call asked Stockade and was approved, once
            outcome = place.outcome(call_id)
            assert (outcome["approval"], outcome["approval_scope"]) == ("approved", "once")


async def test_a_call_the_sdk_runs_unapproved_is_refused_by_the_engine(tmp_path: Path) -> None:
    second = SecondLook()  # fine when the SDK asks whether to stop; asks when it is made
    toolkit = Toolkit()
    toolkit.add(second)
    async with engine_on(tmp_path, toolkit=toolkit) as (engine, place):
        agent, model = agent_with(StockadeTools(engine), [function_call("touch", {}, call_id="c1")])
        result = await run(agent, "touch it")
        assert not result.interruptions
        assert second.runs == 0
        shown = outputs(model)["c1"]
        assert shown.startswith("denied by rule touch.second-look: ")
        assert "holds no approval of it (call c1)" in shown
        assert place.outcome("c1")["approval"] == "refused"


async def test_engine_approvals_leave_the_ask_to_the_engines_approver(tmp_path: Path) -> None:
    asked: list[str] = []

    def approver(call: ToolCall, decision: Decision) -> bool:
        asked.append(call.id)
        return call.id == "c1"

    async with engine_on(tmp_path, approver=approver) as (engine, place):
        tools = StockadeTools(engine, approvals="engine")
        agent, model = agent_with(
            tools, [write(".env", "c1", "API_KEY=new\n"), write(".git/hooks/x", "c2")]
        )
        result = await run(agent, "two risky writes")
        assert not result.interruptions  # the SDK was never asked
        assert sorted(asked) == ["c1", "c2"]
        assert place.text(".env") == "API_KEY=new\n"
        assert place.text(".git/hooks/x") is None
        assert outputs(model)["c2"].startswith("denied by rule dangerous-path: ")


async def test_a_tool_is_enabled_while_its_group_is_active(tmp_path: Path) -> None:
    @tool(read_only=True)
    def shout(text: str) -> str:
        """Say it louder."""
        return text.upper()

    toolkit = Toolkit()
    toolkit.create_group("loud", "Shouting.")
    toolkit.add(shout, group="loud")
    async with engine_on(tmp_path, toolkit=toolkit) as (engine, _):
        tools = StockadeTools(engine)
        agent, model = agent_with(tools)
        await run(agent, "hello")
        first = model.first_call
        assert first is not None
        assert "shout" not in {t.name for t in first.tools}

        toolkit.activate("loud")
        agent, model = agent_with(tools, [function_call("shout", {"text": "hi"}, call_id="c1")])
        await run(agent, "hello")
        assert outputs(model)["c1"] == "HI"


def test_approvals_must_be_framework_or_engine(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="'framework' or 'engine'"):
        StockadeTools(object(), approvals="sdk")  # type: ignore[arg-type]


def test_without_the_sdk_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    load = import_without(monkeypatch, "openai_agents", "agents")
    with pytest.raises(MissingExtraError, match=r"pip install 'stockade\[openai-agents\]'"):
        load()
    with pytest.raises(ImportError):  # what code importing adapters optionally catches
        load()


# a JSON schema of plain objects, some of whose properties are required
_properties = st.dictionaries(
    st.sampled_from(["path", "content", "line", "flag"]),
    st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]),
    max_size=4,
)


@given(_properties, st.data())
def test_a_schema_is_strict_exactly_when_every_property_is_required(
    properties: dict[str, Any], data: st.DataObject
) -> None:
    required = data.draw(st.lists(st.sampled_from(sorted(properties) or ["x"]), unique=True))
    required = [name for name in required if name in properties]
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    assert strict_compatible(schema) == (set(required) == set(properties))


def test_an_open_schema_is_not_strict() -> None:
    assert not strict_compatible({"type": "object", "additionalProperties": True})
    assert not strict_compatible({"type": "object", "properties": {}, "additionalProperties": {}})
