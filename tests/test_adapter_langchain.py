"""Stockade's tools as LangChain tools: real `BaseTool`s invoked with model tool calls (a fake
chat model's hand-written replies drive a small agent loop, no network), every call through the
engine; ``ask`` goes to the engine's approver, since LangChain has no approval of its own."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from adapters_support import SECRET, engine_on, import_without
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from stockade import ToolCall
from stockade.engine.adapters._extras import MissingExtraError
from stockade.engine.adapters.langchain import StockadeTool, stockade_tools
from stockade.errors import ConfigurationError
from stockade.policies import Decision


def tool_call(name: str, args: dict[str, object], call_id: str) -> dict[str, object]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def by_name(tools: list[StockadeTool]) -> dict[str, StockadeTool]:
    return {tool.name: tool for tool in tools}


async def test_the_tools_carry_their_json_schemas(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, _):
        tools = by_name(stockade_tools(engine))
        assert set(tools) == {t.name for t in engine.toolkit.tools()}
        for registered in engine.toolkit.tools():
            assert tools[registered.name].args_schema == registered.parameters
            shown = convert_to_openai_tool(tools[registered.name])["function"]
            assert shown["description"] == registered.description
            if "$defs" not in registered.parameters:  # LangChain inlines references
                assert shown["parameters"] == registered.parameters
            else:
                assert "$ref" not in json.dumps(shown["parameters"])
                assert shown["parameters"]["properties"].keys() == (
                    registered.parameters["properties"].keys()
                )


async def test_a_small_agent_loop_runs_allowed_calls_and_refuses_the_rest(tmp_path: Path) -> None:
    replies = iter(
        [
            AIMessage(
                content="",
                tool_calls=[
                    tool_call("write_file", {"path": "notes.txt", "content": "a b c"}, "c1"),
                    tool_call("write_file", {"path": ".env", "content": "stolen"}, "c2"),
                    tool_call("read_text_file", {"path": "/workspace/../host.txt"}, "c3"),
                ],
            ),
            AIMessage(
                content="", tool_calls=[tool_call("word_count", {"path": "notes.txt"}, "c4")]
            ),
            AIMessage(content="done"),
        ]
    )
    model = GenericFakeChatModel(messages=replies)
    (tmp_path / "host.txt").write_text("host file")
    async with engine_on(tmp_path) as (engine, place):  # no approver: every ask is refused
        tools = by_name(stockade_tools(engine))
        messages: list[BaseMessage] = [HumanMessage("take notes")]
        while True:
            reply = await model.ainvoke(messages)
            messages.append(reply)
            if not isinstance(reply, AIMessage) or not reply.tool_calls:
                break
            for call in reply.tool_calls:
                messages.append(await tools[call["name"]].ainvoke(call))
        shown = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
        assert (shown["c1"].status, shown["c4"].status, shown["c4"].content) == (
            "success",
            "success",
            "3",
        )
        assert shown["c2"].status == "error"
        assert str(shown["c2"].content).startswith("denied by rule dangerous-path: ")
        assert shown["c3"].status == "error"
        assert str(shown["c3"].content).startswith("denied by rule sandbox: ")
        assert place.text("notes.txt") == "a b c"
        assert place.text(".env") == SECRET
        assert (tmp_path / "host.txt").read_text() == "host file"
        # the model's tool call ids are the calls' ids in the audit log
        for call_id, status in [("c1", "ok"), ("c2", "denied"), ("c3", "denied"), ("c4", "ok")]:
            assert [r["kind"] for r in place.records(call_id)] == ["intent", "outcome"]
            assert place.outcome(call_id)["status"] == status


async def test_an_ask_goes_to_the_engines_approver(tmp_path: Path) -> None:
    asked: list[tuple[str, str | None]] = []

    def approver(call: ToolCall, decision: Decision) -> bool:
        asked.append((call.id, decision.rule))
        return True

    async with engine_on(tmp_path, approver=approver) as (engine, place):
        write = by_name(stockade_tools(engine))["write_file"]
        done = await write.ainvoke(
            tool_call("write_file", {"path": ".env", "content": "API_KEY=new\n"}, "c1")
        )
        assert done.status == "success"
        assert asked == [("c1", "dangerous-path")]
        assert place.text(".env") == "API_KEY=new\n"
        assert place.outcome("c1")["approval"] == "approved"


async def test_plain_arguments_and_json_text_work_and_bad_json_is_an_error(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        tools = by_name(stockade_tools(engine, subject="bot"))
        written = await tools["write_file"].ainvoke({"path": "a.txt", "content": "x y"})
        assert written.startswith("created /workspace/a.txt")
        assert await tools["word_count"].ainvoke('{"path": "a.txt"}') == "2"
        bad = await tools["word_count"].ainvoke('{"path": ')
        assert "not valid JSON" in bad
        assert place.text("a.txt") == "x y"


async def test_invoke_works_where_no_loop_runs_and_refuses_inside_one(tmp_path: Path) -> None:
    async with engine_on(tmp_path) as (engine, place):
        write = by_name(stockade_tools(engine))["write_file"]
        # a thread of its own has no running loop: the call gets one
        message = await asyncio.to_thread(
            write.invoke, tool_call("write_file", {"path": "s.txt", "content": "sync"}, "c1")
        )
        assert message.status == "success"
        assert place.text("s.txt") == "sync"
        assert place.outcome("c1")["status"] == "ok"
        with pytest.raises(ConfigurationError, match="ainvoke"):
            write.invoke({"path": "t.txt", "content": "blocked"})
        assert place.text("t.txt") is None


def test_without_langchain_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    load = import_without(monkeypatch, "langchain", "langchain_core")
    with pytest.raises(MissingExtraError, match=r"pip install 'stockade\[langchain\]'"):
        load()
