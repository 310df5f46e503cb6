"""`stockade serve` as an MCP client meets it: a real subprocess driven by the SDK's own client,
over stdio, in both protocol eras (the 2025 handshake and 2026-07-28's per-request one)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import psutil
import pytest
from mcp import Client
from support import listening, serve_params

from stockade.engine import Engine, Toolkit, tool
from stockade.engine.builtin.shell import add_shell_tools
from stockade.engine.cli.common import default_state
from stockade.engine.mcp.server import McpService, annotations_of
from stockade.engine.observe import read_audit, verify_audit
from stockade.sandbox import VirtualFS

Elicit = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]
MODES = ["legacy", "auto"]  # auto settles on 2026-07-28 with a server that serves both


def _stockade() -> str:
    return str(Path(sys.executable).parent / "stockade")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello from the host\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "spec.md").write_text("the spec\n")
    return tmp_path


async def _accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"approve": True})


async def _decline(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.parametrize("mode", MODES)
async def test_lists_the_file_and_shell_tools_with_schemas_and_annotations(
    project: Path, mode: str
) -> None:
    async with Client(serve_params(project), mode=mode) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    assert {"read_text_file", "write_file", "delete_file", "run_shell", "run_python"} <= set(listed)
    read, write, delete, shell = (
        listed[n] for n in ("read_text_file", "write_file", "delete_file", "run_shell")
    )
    assert read.input_schema["required"] == ["path"]
    assert "fs" not in read.input_schema["properties"]  # injected, never the client's to give
    assert read.description
    assert read.annotations is not None
    assert read.annotations.read_only_hint is True
    assert read.annotations.destructive_hint is False
    assert write.annotations is not None
    assert write.annotations.read_only_hint is False
    assert write.annotations.idempotent_hint is True
    assert delete.annotations is not None
    assert delete.annotations.destructive_hint is True
    assert shell.annotations is not None
    assert shell.annotations.destructive_hint is True
    assert shell.annotations.open_world_hint is False  # the default preset keeps the network off


@pytest.mark.parametrize("mode", MODES)
async def test_allowed_denied_and_escaping_calls_and_their_audit_records(
    project: Path, mode: str
) -> None:
    async with Client(serve_params(project), mode=mode) as client:
        read = await client.call_tool("read_text_file", {"path": "/workspace/notes.txt"})
        spec = await client.call_tool("read_text_file", {"path": "/userinput/spec.md"})
        wrote = await client.call_tool("write_file", {"path": "out.txt", "content": "made"})
        read_only = await client.call_tool(
            "write_file", {"path": "/userinput/spec.md", "content": "x"}
        )
        escape = await client.call_tool("read_text_file", {"path": "/workspace/../etc/passwd"})
        dotenv = await client.call_tool("write_file", {"path": ".env", "content": "KEY=1"})
        unknown = await client.call_tool("no_such_tool", {})
        bad = await client.call_tool("read_text_file", {"path": 5})
    assert not read.is_error
    assert "hello from the host" in _text(read)
    assert not spec.is_error
    assert "the spec" in _text(spec)
    assert not wrote.is_error
    assert (project / "ws" / "out.txt").read_text() == "made"
    assert read_only.is_error
    assert (project / "docs" / "spec.md").read_text() == "the spec\n"
    assert escape.is_error
    assert _text(escape).startswith("denied by rule sandbox:")
    assert "outside every mount" in _text(escape)
    # no elicitation offered by this client: an ask is refused, and the text says why
    assert dotenv.is_error
    assert _text(dotenv).startswith("denied by rule dangerous-path:")
    assert "does not support elicitation" in _text(dotenv)
    assert not (project / "ws" / ".env").exists()
    assert unknown.is_error
    assert "no tool named 'no_such_tool'" in _text(unknown)
    assert bad.is_error
    assert "ArgumentError" in _text(bad)

    log = project / "state" / "audit.jsonl"
    assert verify_audit(log).ok
    outcomes = list(read_audit(log, kind="outcome"))
    assert [r["status"] for r in outcomes] == [
        "ok", "ok", "ok", "denied", "denied", "denied", "error", "error"
    ]  # fmt: skip
    intents = list(read_audit(log, kind="intent"))
    assert {r["subject"] for r in intents} == {"mcp"}
    assert any(r.get("rule") == "dangerous-path" for r in intents)


async def test_by_default_the_state_is_kept_outside_the_workspace(project: Path) -> None:
    home = project / "state-home"
    params = serve_params(project)
    params.args = [a for a in params.args if a not in ("--state", str(project / "state"))]
    params.env = {**(params.env or {}), "XDG_STATE_HOME": str(home)}
    async with Client(params, mode="legacy") as client:
        wrote = await client.call_tool("write_file", {"path": "out.txt", "content": "made"})
    assert not wrote.is_error
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(home))
        log = default_state(project / "ws") / "audit.jsonl"
    assert log.is_relative_to(home)
    assert verify_audit(log).ok
    assert not (project / "ws" / ".stockade").exists()


async def test_state_kept_in_the_workspace_on_insistence_is_still_out_of_the_agents_reach(
    project: Path,
) -> None:
    """The attack: empty the audit log, delete it, rewrite the policy file. Each is refused by
    Stockade's own rule, and the log verifies afterwards."""
    workspace = project / "ws"
    policy = workspace / "stockade.toml"
    policy.write_text('version = 1\ndefault = "ask"\n', encoding="utf-8")
    params = serve_params(project, "--policy", str(policy), "--state-in-mount")
    params.args = [str(workspace / ".stockade") if a == str(project / "state") else a
                   for a in params.args]  # fmt: skip
    async with Client(params, mode="legacy") as client:
        emptied = await client.call_tool(
            "write_file", {"path": ".stockade/audit.jsonl", "content": ""}
        )
        deleted = await client.call_tool("delete_file", {"path": ".stockade/audit.jsonl"})
        sealed = await client.call_tool(
            "write_file", {"path": ".stockade/audit.jsonl.seal", "content": ""}
        )
        rewritten = await client.call_tool(
            "write_file", {"path": "stockade.toml", "content": 'version = 1\ndefault = "allow"\n'}
        )
        moved = await client.call_tool(
            "move_file", {"source": ".stockade", "destination": "elsewhere"}
        )
    for refused in (emptied, deleted, sealed, rewritten, moved):
        assert refused.is_error
        assert _text(refused).startswith("denied by rule stockade-state:"), _text(refused)
    assert 'default = "ask"' in policy.read_text()
    log = workspace / ".stockade" / "audit.jsonl"
    report = verify_audit(log)
    assert report.ok, str(report)
    assert report.records == 10
    assert report.sealed == 10


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("answer", "allowed"), [(_accept, True), (_decline, False)])
async def test_an_ask_goes_to_the_person_through_elicitation(
    project: Path, mode: str, answer: Elicit, allowed: bool
) -> None:
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        asked.append(params.message)
        return await answer(context, params)

    async with Client(serve_params(project), mode=mode, elicitation_callback=elicit) as client:
        dotenv = await client.call_tool("write_file", {"path": ".env", "content": "KEY=1"})
        plain = await client.call_tool("write_file", {"path": "plain.txt", "content": "p"})
    assert len(asked) == 1  # only the call the policy asks about
    assert "write_file" in asked[0]
    assert ".env" in asked[0]
    assert "protected path" in asked[0]
    assert dotenv.is_error is not allowed
    assert (project / "ws" / ".env").exists() is allowed
    if not allowed:
        assert "refused by the approver" in _text(dotenv)
    assert not plain.is_error
    approval = [r.get("approval") for r in read_audit(project / "state" / "audit.jsonl")]
    assert ("approved" if allowed else "refused") in approval


async def test_commands_run_boxed_and_dangerous_ones_are_refused_before_anyone_is_asked(
    project: Path,
) -> None:
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with Client(serve_params(project), mode="legacy", elicitation_callback=elicit) as client:
        ran = await client.call_tool("run_shell", {"command": "cat notes.txt; pwd"})
        rm = await client.call_tool("run_shell", {"command": "rm -rf /"})
    assert not ran.is_error
    assert "hello from the host" in _text(ran)
    assert "/workspace" in _text(ran)
    assert rm.is_error
    assert "dangerous-command:rm-recursive-force" in _text(rm)
    assert len(asked) == 1  # the cat was asked about; rm -rf / never reaches the person


async def test_a_client_that_disconnects_mid_call_leaves_the_audit_log_intact(
    project: Path,
) -> None:
    """The client goes away while a command runs: the server ends, the command's tree is
    killed, and the log still verifies."""
    marker = project / "ws" / "started"

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": True})

    async def call_and_walk_away() -> None:
        params = serve_params(project)
        async with Client(params, mode="legacy", elicitation_callback=elicit) as client:
            task = asyncio.create_task(
                client.call_tool("run_shell", {"command": "touch started; sleep 61.25"})
            )
            for _ in range(200):
                if marker.exists():
                    break
                await asyncio.sleep(0.05)
            task.cancel()

    await asyncio.wait_for(call_and_walk_away(), 60)
    assert marker.exists()
    log = project / "state" / "audit.jsonl"
    for _ in range(100):  # the server writes its last records as it shuts down
        if verify_audit(log).ok and len(list(read_audit(log, kind="outcome"))) == 1:
            break
        await asyncio.sleep(0.1)
    assert verify_audit(log).ok
    [outcome] = read_audit(log, kind="outcome")
    assert outcome["tool"] == "run_shell"
    assert outcome["status"] == "cancelled"
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "sleep 61.25" in " ".join(p.info["cmdline"] or [])
    ]
    assert left == []


def test_bad_serve_options_fail_with_one_clear_line(tmp_path: Path) -> None:
    """Wrong options exit 2 (usage), as typer's own; a state folder the agent could reach is
    refused with 1, as in every command."""
    cases = [
        (["--workspace", str(tmp_path / "missing")], "does not exist", 2),
        (["--mount", "/userinput"], "PREFIX=DIR", 2),
        (["--mount", f"/userinput={tmp_path / 'nope'}"], "does not exist", 2),
        (["--mount", f"userinput={tmp_path}"], "absolute logical path", 2),
        (["--preset", "nonsense"], "nonsense", 2),
        (["--http", "70000"], "between 1 and 65535", 2),
        # state the agent could write: inside the workspace, or another writable mount
        (
            ["--workspace", str(tmp_path), "--state", str(tmp_path / "st")],
            "the agent can write",
            1,
        ),
        (
            [
                "--workspace",
                str(tmp_path / "ws"),
                "--mount",
                f"/data={tmp_path}",
                "--state",
                str(tmp_path / "st"),
            ],
            "mounted at /data",
            1,
        ),
    ]
    (tmp_path / "ws").mkdir()
    for args, said, code in cases:
        done = subprocess.run(
            [_stockade(), "serve", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == code, (args, done.stderr)
        assert said in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


async def test_serves_streamable_http_on_loopback(project: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = await asyncio.create_subprocess_exec(
        *[_stockade(), "serve", "--workspace", str(project / "ws"), "--http", str(port)],
        "--state",
        str(project / "state"),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        await listening(port)
        async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
            read = await client.call_tool("read_text_file", {"path": "notes.txt"})
            escape = await client.call_tool("read_text_file", {"path": "/etc/passwd"})
        assert "hello from the host" in _text(read)
        assert escape.is_error
        assert "denied by rule" in _text(escape)
    finally:
        server.terminate()
        await server.wait()


# -- in process: the tool list changing, and annotations -------------------------------------


@tool(read_only=True)
def ping() -> str:
    """Answer pong."""
    return "pong"


@tool(read_only=True, open_world=True)
def fetch_weather(city: str) -> str:
    """Today's weather (a tool that reaches the internet)."""
    return f"{city}: sunny"


async def test_switching_tool_groups_tells_the_client_its_tool_list_changed() -> None:
    toolkit = Toolkit(meta_tool=True)
    toolkit.add(ping)
    toolkit.create_group("web", "Tools that reach the internet.")
    toolkit.add(fetch_weather, group="web")
    heard: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification):
            heard.append(message.method)

    async with (
        Engine(toolkit) as engine,
        Client(McpService(engine).server, mode="legacy", message_handler=on_message) as client,
    ):
        before = {t.name for t in (await client.list_tools()).tools}
        await client.call_tool("ping", {})
        assert heard == []  # nothing changed
        switched = await client.call_tool("reset_tools", {"web": True})
        after = {t.name for t in (await client.list_tools()).tools}
        for _ in range(50):
            if heard:
                break
            await asyncio.sleep(0.01)
    assert not switched.is_error
    assert "fetch_weather" not in before
    assert "fetch_weather" in after
    assert heard == ["notifications/tools/list_changed"]


def test_annotations_follow_the_tool_attributes() -> None:
    toolkit = Toolkit()
    toolkit.add(ping)
    toolkit.add(fetch_weather)
    add_shell_tools(toolkit)
    hints = {t.name: annotations_of(t, network=False) for t in toolkit.tools()}
    assert hints["ping"].read_only_hint is True
    assert hints["ping"].open_world_hint is False
    assert hints["fetch_weather"].open_world_hint is True
    shell = toolkit.get("run_shell")
    assert annotations_of(shell, network=True).open_world_hint is True
    assert annotations_of(shell, network=False).open_world_hint is False
    assert hints["ping"].model_dump(by_alias=True)["readOnlyHint"] is True  # the wire's name


def _rpc(process: subprocess.Popen[bytes], message: dict[str, Any] | bytes) -> None:
    assert process.stdin is not None
    line = message if isinstance(message, bytes) else json.dumps(message).encode()
    process.stdin.write(line + b"\n")
    process.stdin.flush()


def _answer(process: subprocess.Popen[bytes], request_id: int) -> dict[str, Any]:
    """The server's reply to ``request_id`` (notifications and other replies skipped)."""
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        assert line, "the server closed its output"
        reply = json.loads(line)
        if reply.get("id") == request_id:
            return reply  # type: ignore[no-any-return]


def test_malformed_requests_and_huge_arguments_get_errors_and_the_server_goes_on(
    project: Path,
) -> None:
    """Raw JSON-RPC, as a broken client would send it: junk lines, a request of an unknown
    method, a call with 2 MB of arguments. Each gets an error; the next call still works."""
    params = serve_params(project)
    process = subprocess.Popen(
        [params.command, *params.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=project,
    )
    try:
        _rpc(process, b"this is not JSON")
        _rpc(process, b'{"jsonrpc": "2.0", "id": ')
        _rpc(
            process,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            },
        )
        assert "result" in _answer(process, 1)
        _rpc(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _rpc(process, {"jsonrpc": "2.0", "id": 2, "method": "no/such/method", "params": {}})
        assert "error" in _answer(process, 2)
        huge = {"path": "big.txt", "content": "x" * 2_000_000}
        call = {"name": "write_file", "arguments": huge}
        _rpc(process, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call})
        refused = _answer(process, 3)["result"]
        assert refused["isError"] is True
        assert "ArgumentError" in refused["content"][0]["text"]
        assert not (project / "ws" / "big.txt").exists()
        read = {"name": "read_text_file", "arguments": {"path": "notes.txt"}}
        _rpc(process, {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": read})
        fine = _answer(process, 4)["result"]
        assert fine["isError"] is False
        assert "hello from the host" in fine["content"][0]["text"]
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert verify_audit(project / "state" / "audit.jsonl").ok


async def test_an_approval_nobody_answers_is_refused_after_the_elicitation_timeout(
    fs: VirtualFS,
) -> None:
    toolkit = Toolkit()
    add_shell_tools(toolkit)

    async def never(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async with Engine(toolkit, fs=fs) as engine:
        service = McpService(engine, elicit_timeout_s=0.5)
        async with Client(service.server, mode="legacy", elicitation_callback=never) as client:
            result = await asyncio.wait_for(
                client.call_tool("run_shell", {"command": "echo hi"}), 30
            )
    assert result.is_error
    assert "no answer within 0.5 s" in _text(result)


@pytest.mark.parametrize("stdin", ["/dev/null", "a file of requests"])
def test_serve_reads_stdin_that_is_no_pipe_and_ends_with_it(tmp_path: Path, stdin: str) -> None:
    """A server started with stdin from /dev/null or a file (a script, a service manager) reads
    what is there and exits 0; /dev/null once left it hanging on an error epoll raised late."""
    (tmp_path / "ws").mkdir()
    source = tmp_path / "requests.jsonl"
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    source.write_text(
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}) + "\n"
    )
    with open("/dev/null" if stdin == "/dev/null" else source, "rb") as given:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "stockade"), "serve", "--workspace",
             str(tmp_path / "ws"), "--state", str(tmp_path / "state")],
            stdin=given, capture_output=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert answers == ([] if stdin == "/dev/null" else [answers[0]])
    if answers:
        assert answers[0]["result"]["serverInfo"]["name"]
