"""Remote MCP servers through the engine (engine/mcp/client.py): the SSE and streamable HTTP
transports, headers, postprocess hooks and raw results, with REAL servers.

tests/mcp_servers/remote_server.py (written with the SDK, served by uvicorn on a loopback port)
answers 401 to any request without ``Authorization: Bearer <TOKEN>``. One server of each
transport is started for the module; nothing is mocked. What a user relies on:

1. ``url=..., transport="sse"`` (and the default, streamable HTTP) with ``headers=`` reach the
   server's tools through the engine; without the token, or with a wrong one, connecting fails
   with an error naming the HTTP status;
2. the header's value is a secret: it is in no result, error, audit record, span or log line,
   even when the server repeats it in an error of its own;
3. settings that do not fit (a transport for a command, headers for a command, an unknown
   transport, a header value that cannot be sent) are `ConfigurationError`s at once;
4. ``postprocess`` applies to every tool of the server;
5. ``raw_results=True`` puts the server's `CallToolResult` in ``result.tool_metadata``
   (structured content, resource links), while the content stays the text a model reads.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult
from stockade.engine.content import TextBlock
from stockade.engine.mcp.client import (
    RAW_KEY,
    HttpTarget,
    McpConnection,
    McpServer,
    McpServerError,
)
from stockade.engine.observe import AuditLog, read_audit, verify_audit
from stockade.errors import ConfigurationError
from stockade.policies import Policy

REMOTE = Path(__file__).parent / "mcp_servers" / "remote_server.py"
NOTES = [sys.executable, str(REMOTE.parent / "notes_server.py")]
TOKEN = "stk-" + secrets.token_hex(16)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ALLOW = Policy.from_dict({"default": "allow"})
TRANSPORTS = ["sse", "streamable-http"]
PATHS = {"sse": "/sse", "streamable-http": "/mcp"}


@pytest.fixture(scope="module")
def urls() -> Iterator[dict[str, str]]:
    """One remote server per transport, for the module: ``{transport: url}``."""
    env = {**os.environ, "REMOTE_TOKEN": TOKEN}
    started = {
        transport: subprocess.Popen(
            [sys.executable, str(REMOTE), transport], stdout=subprocess.PIPE, env=env, text=True
        )
        for transport in TRANSPORTS
    }
    try:
        found = {}
        for transport, process in started.items():
            assert process.stdout is not None
            port = process.stdout.readline().strip()
            assert port.isdigit(), f"the {transport} server did not start (it said {port!r})"
            found[transport] = f"http://127.0.0.1:{port}{PATHS[transport]}"
        yield found
    finally:
        for process in started.values():
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def remote(urls: dict[str, str], transport: str) -> AsyncIterator[tuple[Toolkit, McpServer]]:
    """A toolkit holding the remote server's tools, reached with the token."""
    kit = Toolkit()
    server = await asyncio.wait_for(
        kit.add_mcp_server(
            "remote", url=urls[transport], transport=transport, headers=AUTH, timeout_s=10
        ),
        30,
    )
    yield kit, server
    await asyncio.wait_for(server.close(), 30)


async def call(kit: Toolkit, tool: str, **arguments: Any) -> ToolResult:
    async with Engine(kit, policy=ALLOW) as engine:
        return await engine.call(ToolCall(name=f"mcp__remote__{tool}", arguments=arguments))


# -- 1. transports and the token ---------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_a_remote_servers_tools_answer_through_the_engine_with_the_token(
    remote: tuple[Toolkit, McpServer],
) -> None:
    kit, server = remote
    assert sorted(server.tools) == [
        "mcp__remote__add",
        "mcp__remote__forecast",
        "mcp__remote__leaky",
        "mcp__remote__refuse",
        "mcp__remote__report",
    ]
    added = await call(kit, "add", a=2, b=40)
    assert (added.status, added.text) == ("ok", "42")
    weather = await call(kit, "forecast", city="Oslo")
    assert weather.ok
    assert json.loads(weather.text) == {"city": "Oslo", "high_c": 21, "sky": "clear"}
    refused = await call(kit, "refuse", reason="closed")
    assert refused.status == "error"
    assert "refused: closed" in refused.text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("headers", [None, {"Authorization": "Bearer wrong-" + "9" * 24}])
async def test_without_the_right_token_connecting_fails_naming_the_status(
    urls: dict[str, str], transport: str, headers: dict[str, str] | None
) -> None:
    kit = Toolkit()
    with pytest.raises(McpServerError) as caught:
        await asyncio.wait_for(
            kit.add_mcp_server(
                "remote", url=urls[transport], transport=transport, headers=headers, timeout_s=10
            ),
            30,
        )
    message = str(caught.value)
    assert "could not be started" in message
    assert "HTTP 401 Unauthorized" in message
    assert "wrong-999" not in message  # a wrong token is a secret too
    assert kit.tools(active_only=False) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("transport", "served"), [("streamable-http", "sse"), ("sse", "mcp")])
async def test_the_wrong_transport_for_a_url_fails_naming_the_status(
    urls: dict[str, str], transport: str, served: str
) -> None:
    """Streamable HTTP POSTs to an SSE endpoint (405); SSE GETs a streamable one (400)."""
    url = urls["sse" if served == "sse" else "streamable-http"]
    with pytest.raises(McpServerError, match=r"HTTP 40\d .*check its URL, transport, headers"):
        await asyncio.wait_for(
            Toolkit().add_mcp_server(
                "remote", url=url, transport=transport, headers=AUTH, timeout_s=10
            ),
            30,
        )


# -- 2. the token is a secret ------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_the_token_is_in_no_result_error_audit_record_span_or_log(
    urls: dict[str, str], transport: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    audit_path = tmp_path / "audit.jsonl"
    audit = AuditLog(audit_path)
    kit = Toolkit()
    server = await kit.add_mcp_server(
        "remote", url=urls[transport], transport=transport, headers=AUTH, raw_results=True
    )
    calls = [
        ToolCall(name="mcp__remote__add", arguments={"a": 1, "b": 2}),
        ToolCall(name="mcp__remote__report", arguments={"topic": "q3"}),
        ToolCall(name="mcp__remote__refuse", arguments={"reason": "no"}),
        ToolCall(name="mcp__remote__add", arguments={"a": "not a number"}),
        ToolCall(name="mcp__remote__leaky", arguments={}),
    ]
    try:
        async with Engine(kit, policy=ALLOW, audit=audit, tracer_provider=provider) as engine:
            results = [await engine.call(c) for c in calls[:-1]]
            # every log line so far, the SDK's debug lines of each request included
            before_leak = [r.getMessage() for r in caplog.records]
            results.append(await engine.call(calls[-1]))
    finally:
        await server.close()
        audit.close()
    assert [r.status for r in results] == ["ok", "ok", "error", "error", "error"]
    leaky = results[-1]
    # the server repeated the header in its error: the engine shows it masked
    assert "cannot serve a caller presenting ***" in leaky.text

    seen = [r.text for r in results]
    seen += [json.dumps(r.to_dict(), default=str) for r in results]
    seen += [repr(r.tool_metadata) for r in results]
    seen.append(audit_path.read_text())
    seen += [span.to_json() for span in spans.get_finished_spans()]
    seen += before_leak
    # after the leak, the SDK's debug lines show the server's message as it came: ours never
    seen += [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("stockade") or r.levelno >= logging.INFO
    ]
    seen.append(repr(server.connection.target))
    assert len(spans.get_finished_spans()) == len(calls)
    for text in seen:
        assert TOKEN not in text
    assert verify_audit(audit_path).ok


@given(
    token=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=4, max_size=24),
    before=st.text(max_size=30),
    after=st.text(max_size=30),
)
@example(token="x***", before="x", after="")  # masking it once leaves "x***" again
def test_a_header_value_never_survives_in_a_message(token: str, before: str, after: str) -> None:
    """Whatever surrounds it (even stars that would complete it again), the credential and the
    whole header value are masked."""
    target = HttpTarget("http://127.0.0.1:9/mcp", headers={"Authorization": f"Bearer {token}"})
    connection = McpConnection("x", target, timeout_s=1, max_restarts=0)
    shown = connection.hidden(f"{before}{token}{after} and Bearer {token}")
    assert token not in shown
    assert "***" in shown
    if token not in before + after:
        assert connection.hidden(before + after) == before + after  # nothing else changes


# -- 3. settings that do not fit ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"command": NOTES, "transport": "sse"}, "does not fit"),
        ({"command": NOTES, "headers": AUTH}, "headers= are for a url"),
        ({"url": "http://127.0.0.1:9/mcp", "transport": "stdio"}, "does not fit"),
        ({"url": "http://127.0.0.1:9/mcp", "transport": "websocket"}, "does not fit"),
        ({"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "abc\r\nX-Evil: 1"}}, "X-Key"),
        ({"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "clé-privée"}}, "printable"),
        ({"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": 12345678}}, "printable"),
    ],
)
async def test_settings_that_do_not_fit_are_configuration_errors(
    options: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigurationError, match=says) as caught:
        await Toolkit().add_mcp_server("remote", **options)
    for value in (options.get("headers") or {}).values():
        assert str(value) not in str(caught.value)  # a header's value is never shown


# -- 4. postprocess ----------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_postprocess_applies_to_every_tool_of_the_server(urls: dict[str, str]) -> None:
    seen: list[tuple[str, str]] = []

    def shout(call: ToolCall, result: ToolResult) -> ToolResult | None:
        seen.append((call.name, result.status))
        if call.name.endswith("__add"):
            return None  # keep the result as it is
        result.content = [TextBlock(result.text.upper())]
        return result

    kit = Toolkit()
    server = await kit.add_mcp_server(
        "remote", url=urls["sse"], transport="sse", headers=AUTH, postprocess=shout
    )
    try:
        added = await call(kit, "add", a=1, b=1)
        summary = await call(kit, "report", topic="sales")
        refused = await call(kit, "refuse", reason="later")
    finally:
        await server.close()
    assert added.text == "2"
    assert summary.text == "SUMMARY OF SALES\n[RESOURCE_LINK CONTENT LEFT OUT]"
    assert refused.status == "error"  # a hook changes what is read, never how the run ended
    assert seen == [
        ("mcp__remote__add", "ok"),
        ("mcp__remote__report", "ok"),
        ("mcp__remote__refuse", "error"),
    ]


# -- 5. raw results ----------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_raw_results_carry_the_servers_call_tool_result(
    urls: dict[str, str], transport: str, tmp_path: Path
) -> None:
    kit = Toolkit()
    server = await kit.add_mcp_server(
        "remote", url=urls[transport], transport=transport, headers=AUTH, raw_results=True
    )
    audit_path = tmp_path / "audit.jsonl"
    audit = AuditLog(audit_path)
    try:
        async with Engine(kit, policy=ALLOW, audit=audit) as engine:
            weather = await engine.call(
                ToolCall(name="mcp__remote__forecast", arguments={"city": "Rome"})
            )
            report = await engine.call(
                ToolCall(name="mcp__remote__report", arguments={"topic": "q3"})
            )
    finally:
        await server.close()
        audit.close()

    raw = weather.tool_metadata[RAW_KEY]
    assert isinstance(raw, types.CallToolResult)
    assert raw.structured_content == {"city": "Rome", "high_c": 21, "sky": "clear"}
    assert weather.metadata[RAW_KEY]["structuredContent"] == raw.structured_content
    assert json.loads(weather.text) == raw.structured_content  # the model still reads text

    raw = report.tool_metadata[RAW_KEY]
    links = [item for item in raw.content if isinstance(item, types.ResourceLink)]
    assert [str(link.uri) for link in links] == ["file:///reports/q3.pdf"]
    assert raw.structured_content == {"topic": "q3", "pages": 3}
    assert report.text == "summary of q3\n[resource_link content left out]"
    json.dumps(report.to_dict())  # what callers serialise stays JSON

    outcomes = [r for r in read_audit(audit_path) if r["kind"] == "outcome"]
    assert [r["status"] for r in outcomes] == ["ok", "ok"]
    assert verify_audit(audit_path).ok


@pytest.mark.timeout(60)
async def test_without_raw_results_no_call_tool_result_is_kept(
    remote: tuple[Toolkit, McpServer],
) -> None:
    kit, _ = remote
    result = await call(kit, "report", topic="q3")
    assert result.ok
    assert RAW_KEY not in result.tool_metadata
    assert RAW_KEY not in result.metadata


@pytest.mark.timeout(60)
async def test_a_postprocess_hook_can_read_the_raw_result(urls: dict[str, str]) -> None:
    def pages(call: ToolCall, result: ToolResult) -> ToolResult:
        raw = result.tool_metadata[RAW_KEY]
        result.content = [TextBlock(f"{raw.structured_content['pages']} pages")]
        return result

    kit = Toolkit()
    server = await kit.add_mcp_server(
        "remote",
        url=urls["streamable-http"],
        headers=AUTH,
        raw_results=True,
        postprocess=pages,
    )
    try:
        result = await call(kit, "report", topic="q3")
    finally:
        await server.close()
    assert (result.status, result.text) == ("ok", "3 pages")
