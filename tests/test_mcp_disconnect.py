"""`stockade serve --http` when a client dies mid-call: its call is cancelled (the command's
processes killed, the audit log saying ``cancelled``) and the other sessions go on being served,
in both protocol eras (the 2025 handshake and 2026-07-28's per-request one). The dying client
is a real SDK client in its own process, killed with SIGKILL, so it says goodbye to nobody."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import psutil
import pytest
from mcp import Client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from support import listening

from stockade.engine import Engine, Toolkit, tool
from stockade.engine.mcp.server import McpService
from stockade.engine.observe import read_audit, verify_audit
from stockade.policies import Policy

ERAS = ["legacy", "2026-07-28"]  # the client's mode: the initialize handshake, or 2026-07-28
SLEEP = "297.25"  # long past any bound below, and a duration nothing else on the machine sleeps

# The client that dies: it says which protocol version it speaks, then calls and waits.
DYING_CLIENT = textwrap.dedent(
    """
    import asyncio
    import sys

    from mcp import Client

    async def main(url: str, mode: str, command: str) -> None:
        async with Client(url, mode=mode) as client:
            print(client.protocol_version, flush=True)
            await client.call_tool("run_shell", {"command": command})

    asyncio.run(main(*sys.argv[1:]))
    """
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _until(check: Callable[[], bool], within_s: float) -> bool:
    for _ in range(int(within_s / 0.05)):
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


def _sleeps() -> list[psutil.Process]:
    """The dying client's command, wherever in the sandbox it runs."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        words = process.info["cmdline"] or []
        if words and Path(words[0]).name == "sleep" and SLEEP in words:
            found.append(process)
    return found


def _outcomes(log: Path) -> list[dict[str, Any]]:
    return list(read_audit(log, kind="outcome")) if log.exists() else []


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """``stockade serve --http`` on a free loopback port: its URL and its audit log."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("hello from the host\n")
    port = _free_port()
    server = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "stockade"),
        *["serve", "--workspace", str(tmp_path / "ws"), "--http", str(port)],
        *["--state", str(tmp_path / "state"), "--preset", "permissive"],  # commands run unasked
        stdin=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await listening(port)
        yield f"http://127.0.0.1:{port}/mcp", tmp_path / "state" / "audit.jsonl"
    finally:
        server.terminate()  # which cancels whatever still runs
        await server.wait()
        for process in _sleeps():  # a command the server failed to stop: not left behind
            process.kill()


@pytest.mark.parametrize("mode", ERAS)
async def test_a_client_killed_mid_call_cancels_its_command_and_others_are_answered(
    served: tuple[str, Path], mode: str
) -> None:
    url, log = served
    dying = await asyncio.create_subprocess_exec(
        *[sys.executable, "-c", DYING_CLIENT, url, mode, f"sleep {SLEEP}"],
        stdout=subprocess.PIPE,
    )
    try:
        assert dying.stdout is not None
        spoken = (await asyncio.wait_for(dying.stdout.readline(), 20)).decode().strip()
        expected = HANDSHAKE_PROTOCOL_VERSIONS if mode == "legacy" else MODERN_PROTOCOL_VERSIONS
        assert spoken in expected  # the era this case is about is the one exercised
        assert await _until(lambda: bool(_sleeps()), 15), "the command never started"
        async with Client(url, mode=mode) as other:
            # asked while the command runs (a command runs alone, so this waits for it)
            quick = asyncio.create_task(other.call_tool("read_text_file", {"path": "notes.txt"}))
            await asyncio.sleep(0.5)
            os.kill(dying.pid, signal.SIGKILL)
            await dying.wait()
            # answered once the dead client's command is cancelled, not when it would end
            answer = await asyncio.wait_for(quick, 15)
    finally:
        if dying.returncode is None:
            dying.kill()
            await dying.wait()
    assert not answer.is_error
    assert any(
        isinstance(c, types.TextContent) and "hello from the host" in c.text for c in answer.content
    )
    assert await _until(lambda: not _sleeps(), 10), "the dead client's command still runs"
    assert await _until(lambda: any(o["tool"] == "run_shell" for o in _outcomes(log)), 10)
    [shell] = [o for o in _outcomes(log) if o["tool"] == "run_shell"]
    assert shell["status"] == "cancelled"
    assert verify_audit(log).ok


# -- in process: the MCP layer holds no session up behind another ----------------------------


async def _serving(service: McpService) -> tuple[str, asyncio.Task[None]]:
    port = _free_port()
    task = asyncio.create_task(service.serve_http(port))
    await listening(port, pause=0.05)
    return f"http://127.0.0.1:{port}/mcp", task


@pytest.mark.parametrize("mode", ERAS)
async def test_sessions_are_served_side_by_side(mode: str) -> None:
    """One session's call in progress holds no other session's call up: only the engine's
    scheduling (a call that is not concurrency-safe runs alone) ever makes calls wait."""
    released = asyncio.Event()
    entered = asyncio.Event()

    @tool(read_only=True)
    async def wait_for_release() -> str:
        """Wait until the test lets go."""
        entered.set()
        await released.wait()
        return "released"

    @tool(read_only=True)
    def ping() -> str:
        """Answer pong."""
        return "pong"

    toolkit = Toolkit()
    toolkit.add(wait_for_release)
    toolkit.add(ping)
    async with Engine(toolkit, policy=Policy.preset("permissive")) as engine:
        url, server = await _serving(McpService(engine))
        try:
            async with Client(url, mode=mode) as first, Client(url, mode=mode) as second:
                waiting = asyncio.create_task(first.call_tool("wait_for_release", {}))
                await asyncio.wait_for(entered.wait(), 15)
                pong = await asyncio.wait_for(second.call_tool("ping", {}), 15)
                assert not waiting.done()
                released.set()
                freed = await asyncio.wait_for(waiting, 15)
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
    assert [c.text for c in pong.content if isinstance(c, types.TextContent)] == ["pong"]
    assert not freed.is_error


@pytest.mark.parametrize("mode", ERAS)
async def test_an_ask_over_http_is_still_answered_while_the_connection_is_watched(
    mode: str,
) -> None:
    """The watch on a call's connection leaves its mid-call question to the person alone."""

    @tool(read_only=True)
    def ping() -> str:
        """Answer pong."""
        return "pong"

    toolkit = Toolkit()
    toolkit.add(ping)
    policy = Policy.from_dict({"version": 1, "default": "ask"})
    asked: list[str] = []

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with Engine(toolkit, policy=policy) as engine:
        url, server = await _serving(McpService(engine))
        try:
            async with Client(url, mode=mode, elicitation_callback=approve) as client:
                pong = await asyncio.wait_for(client.call_tool("ping", {}), 15)
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
    assert not pong.is_error, pong
    assert [c.text for c in pong.content if isinstance(c, types.TextContent)] == ["pong"]
    assert len(asked) == 1
