"""The stdio MCP server, spoken to line by line as a client would (and as a broken one would):
the handshake, tool entries with their output schema and results with structured content that
conforms to it, asks put through elicitation, cancellation, the end of stdin, and junk."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stdio_peer import Peer

from stockade.engine import Engine, ToolCall, Toolkit, tool
from stockade.engine.builtin import add_file_tools
from stockade.engine.content import ToolOutput
from stockade.engine.mcp import stdio
from stockade.engine.mcp.served import RESULT_SCHEMA
from stockade.engine.mcp.server import to_mcp_result
from stockade.engine.mcp.stdio import VERSIONS, StdioService
from stockade.policies import Policy
from stockade.sandbox import Mount, VirtualFS

POLICY = Policy.from_dict(
    {
        "default": "allow",
        "rules": [{"id": "asked", "effect": "ask", "paths": ["/workspace/asked/**"]}],
    }
)


@tool
async def slow(seconds: float) -> str:
    """Wait, then say so."""
    await asyncio.sleep(seconds)
    return "waited"


@tool
def odd_metadata() -> ToolOutput:
    """Report metadata JSON writers trip on."""
    return ToolOutput("done", {"when": datetime(2026, 1, 2), "big": 2**80, "name": "a\udc80b"})


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    workspace = tmp_path / "ws"
    (workspace / "asked").mkdir(parents=True)
    (workspace / "notes.txt").write_text("hello\n")
    toolkit = Toolkit()
    add_file_tools(toolkit)
    toolkit.add(slow)
    toolkit.add(odd_metadata)
    with VirtualFS([Mount("/workspace", workspace)]) as fs:
        async with Engine(toolkit, policy=POLICY, fs=fs) as e:
            yield e


async def _peer(engine: Engine, **options: Any) -> Peer:
    peer = Peer(StdioService(engine, **options))
    await peer.start()
    return peer


async def test_a_2026_client_probing_with_discover_falls_back_to_the_handshake(
    engine: Engine,
) -> None:
    peer = await _peer(engine)
    probe = await peer.request(1, "server/discover", {})
    assert probe["error"]["code"] == -32601  # unknown: the SDK's client then initializes
    answer = await peer.initialize()
    assert answer["result"]["protocolVersion"] == "2025-06-18"
    assert answer["result"]["capabilities"] == {"tools": {"listChanged": True}}
    newer = await peer.request(2, "initialize", {"protocolVersion": "2099-01-01"})
    assert newer["result"]["protocolVersion"] == VERSIONS[-1]
    assert (await peer.request(3, "ping"))["result"] == {}
    await peer.close()


async def test_every_result_carries_structured_content_its_tool_schema_accepts(
    engine: Engine,
) -> None:
    """ "Every tool declares the same outputSchema and every result carries structuredContent
    conforming to it": allowed, denied, failed and unknown calls alike."""
    peer = await _peer(engine)
    await peer.initialize()
    tools = (await peer.request(1, "tools/list"))["result"]["tools"]
    assert tools
    assert all(entry["outputSchema"] == RESULT_SCHEMA for entry in tools)
    calls = [
        ("read_text_file", {"path": "notes.txt"}, False),
        ("write_file", {"path": ".env", "content": "KEY=1"}, True),
        ("read_text_file", {"path": "missing.txt"}, True),
        ("no_such_tool", {}, True),
    ]
    for ident, (name, arguments, failed) in enumerate(calls, start=2):
        result = (await peer.request(ident, "tools/call", {"name": name, "arguments": arguments}))[
            "result"
        ]
        assert result["isError"] is failed, result
        jsonschema.validate(result["structuredContent"], RESULT_SCHEMA)
    read = await peer.result(9, "read_text_file", path="notes.txt")
    assert read["content"][0]["text"] == "hello\n"
    assert read["structuredContent"]["metadata"]["path"] == "/workspace/notes.txt"
    assert read["structuredContent"]["status"] == "ok"
    denied = await peer.result(10, "write_file", path=".env", content="x")
    assert denied["structuredContent"]["decision"]["rule"] == "dangerous-path"
    await peer.close()


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ({"action": "accept", "content": {"answer": "once"}}, "ok"),
        ({"action": "accept", "content": {"approve": True}}, "ok"),
        ({"action": "decline"}, "denied"),
        ({"action": "accept", "content": {"answer": "always:7"}}, "denied"),
    ],
)
async def test_an_ask_is_put_to_the_client_through_elicitation(
    engine: Engine, answer: dict[str, Any], status: str
) -> None:
    peer = await _peer(engine)
    await peer.initialize({"elicitation": {}})
    call = {"name": "write_file", "arguments": {"path": "asked/a.txt", "content": "x"}}
    peer.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
    question = await peer.receive()
    assert question["method"] == "elicitation/create"
    assert "Allow write_file" in question["params"]["message"]
    assert "answer" in question["params"]["requestedSchema"]["properties"]
    peer.send({"jsonrpc": "2.0", "id": question["id"], "result": answer})
    result = (await peer.receive())["result"]
    assert result["structuredContent"]["status"] == status
    assert engine.fs is not None
    assert engine.fs.exists("asked/a.txt") is (status == "ok")
    await peer.close()


async def test_an_ask_is_refused_when_the_client_cannot_or_does_not_answer(
    engine: Engine,
) -> None:
    call = {"name": "write_file", "arguments": {"path": "asked/b.txt", "content": "x"}}
    mute = await _peer(engine)
    await mute.initialize()  # no elicitation capability: nobody to ask
    refused = (await mute.request(1, "tools/call", call))["result"]
    assert "does not support elicitation" in refused["content"][0]["text"]
    await mute.close()
    failing = await _peer(engine)
    await failing.initialize({"elicitation": {}})
    failing.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
    question = await failing.receive()
    failing.send(
        {"jsonrpc": "2.0", "id": question["id"], "error": {"code": -1, "message": "no UI"}}
    )
    refused = (await failing.receive())["result"]
    assert "asking the client failed (no UI)" in refused["content"][0]["text"]
    await failing.close()
    slow_person = await _peer(engine, elicit_timeout_s=0.2)
    await slow_person.initialize({"elicitation": {}})
    slow_person.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
    assert (await slow_person.receive())["method"] == "elicitation/create"
    withdrawn = await slow_person.receive()  # the question is withdrawn at the client too
    assert withdrawn["method"] == "notifications/cancelled"
    timed_out = (await slow_person.receive())["result"]
    assert "no answer within 0.2 s" in timed_out["content"][0]["text"]
    await slow_person.close()
    assert engine.fs is not None
    assert not engine.fs.exists("asked/b.txt")


async def test_a_cancelled_call_gets_no_answer_and_is_recorded_as_cancelled(
    engine: Engine,
) -> None:
    peer = await _peer(engine)
    await peer.initialize()
    peer.call(7, "slow", seconds=30)
    await asyncio.sleep(0.2)
    peer.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}})
    assert (await peer.request(8, "ping"))["id"] == 8  # the next message is the ping's answer
    await asyncio.sleep(0.1)
    assert [r.status for r in engine.calls.results][-1:] == ["cancelled"]
    await peer.close()


async def test_stdin_closing_cancels_the_calls_still_running(engine: Engine) -> None:
    peer = await _peer(engine)
    await peer.initialize()
    peer.call(1, "slow", seconds=30)
    await asyncio.sleep(0.2)
    await peer.close()  # returns once the call is cancelled, not after 30 s
    assert [r.status for r in engine.calls.results][-1:] == ["cancelled"]


async def test_requests_it_cannot_serve_get_the_json_rpc_error_that_says_why(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stdio, "MAX_LINE", 10_000)
    peer = await _peer(engine)
    cases: list[tuple[dict[str, Any] | bytes, int, str]] = [
        (b"not json", -32700, "not JSON"),
        (b"[1, 2]", -32600, "no batches"),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, -32600, "string or an integer"),
        ({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": [1]}, -32602, "object"),
        ({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {}}, -32602, "name"),
        (
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "tools/call",
                "params": {"name": "slow", "arguments": "x"},
            },
            -32602,
            "object",
        ),
        ({"jsonrpc": "2.0", "id": 5, "method": "resources/list"}, -32601, "not served"),
        ({"jsonrpc": "2.0", "id": 6}, -32600, "neither"),
        (b'{"x": "' + b"y" * 20_000 + b'"}', -32600, "over 10000 bytes"),
    ]
    for message, code, said in cases:
        peer.send(message)
        error = (await peer.receive())["error"]
        assert error["code"] == code, (message, error)
        assert said in error["message"], (message, error)
    peer.call(9, "slow", seconds=1)
    peer.call(9, "slow", seconds=0)
    assert "still running" in (await peer.receive())["error"]["message"]
    assert (await peer.receive())["result"]["content"][0]["text"] == "waited"
    await peer.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" ")), max_size=5))
async def test_no_junk_stops_the_server(engine: Engine, lines: list[bytes]) -> None:
    peer = await _peer(engine)
    for line in lines:
        peer.send(line)
    peer.send({"jsonrpc": "2.0", "id": 99, "method": "ping"})
    answers = [await peer.receive()]
    while answers[-1].get("id") != 99:  # junk gets errors (or nothing) first
        answers.append(await peer.receive())
    assert answers[-1]["result"] == {}
    assert all("error" in answer for answer in answers[:-1])
    await peer.close()


async def test_metadata_json_cannot_hold_as_it_is_still_reaches_the_client(engine: Engine) -> None:
    """A tool's metadata with an object, a number past 64 bits and a lone surrogate: the result
    is still sent, each value as JSON can carry it, through both servers' writers."""
    peer = await _peer(engine)
    await peer.initialize()
    result = await peer.result(1, "odd_metadata")
    assert result["isError"] is False
    metadata = result["structuredContent"]["metadata"]
    assert metadata == {"when": "2026-01-02 00:00:00", "big": 2**80, "name": "a\udc80b"}
    await peer.close()
    sdk = to_mcp_result(await engine.call(ToolCall(name="odd_metadata", arguments={})))
    assert sdk.structured_content is not None
    assert sdk.structured_content["metadata"]["big"] == 2**80
