"""`stockade serve` as a user meets it: the real command in a subprocess, stopped by real
signals; where it says it listens, what it says when it stops, the bearer token over HTTP, and
the exit codes the README documents (0, 1, 2, 130)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import psutil
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from support import serve_params, stockade_cli

from stockade.engine.observe import read_audit, verify_audit

TOKEN = "s3cret-token-0123456789abcdef"
HELLO = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}


def _stockade() -> str:
    return str(Path(sys.executable).parent / "stockade")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _request(ident: int, method: str, params: dict[str, Any]) -> bytes:
    return (
        json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}) + "\n"
    ).encode()


def _sleeping() -> bool:
    """Whether the test's command runs (``sleep 47.5``)."""
    return any(
        "sleep 47.5" in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("hello from the host\n")
    (tmp_path / "docs").mkdir()
    return tmp_path


class Served:
    """A `stockade serve` subprocess, its stdin kept open (as an MCP host keeps it)."""

    def __init__(self, process: asyncio.subprocess.Process, ready: str) -> None:
        self.process = process
        self.ready = ready
        self.stderr = ready

    @classmethod
    async def start(cls, project: Path, *args: str, env: dict[str, str] | None = None) -> Served:
        process = await asyncio.create_subprocess_exec(
            _stockade(), "serve", "--workspace", str(project / "ws"),
            "--state", str(project / "state"), *args,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=project, env={**os.environ, **(env or {})},
        )  # fmt: skip
        assert process.stderr is not None
        try:
            line = await asyncio.wait_for(process.stderr.readline(), 60)
            assert line.startswith(b"stockade serve: "), line
        except BaseException:
            process.kill()
            await process.wait()
            raise
        return cls(process, line.decode())

    async def stop(self, number: int | None) -> int:
        """Send ``number`` (None: close stdin) and wait for the exit code; the rest of stderr
        is kept in ``stderr``."""
        assert self.process.stdin is not None
        assert self.process.stderr is not None
        if number is None:
            self.process.stdin.close()
        else:
            self.process.send_signal(number)
        self.stderr += (await asyncio.wait_for(self.process.stderr.read(), 30)).decode()
        code = await asyncio.wait_for(self.process.wait(), 30)
        with contextlib.suppress(Exception):
            self.process.stdin.close()
        return code

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()


# -- stopping: signals, exit codes, no traceback, the audit log's verdict ---------------------


@pytest.mark.parametrize(
    ("number", "code", "said", "mode"),
    [(signal.SIGINT, 130, "Ctrl-C", "legacy"), (signal.SIGTERM, 0, "SIGTERM", "auto")],
)
async def test_an_http_server_stops_on_a_signal_without_a_traceback(
    project: Path, number: int, code: int, said: str, mode: str
) -> None:
    """A client is connected with a command running: the signal cancels it (recorded so, its
    process killed), the server exits with the documented code, and says the log verifies."""
    port = _free_port()
    served = await Served.start(project, "--http", str(port), "--preset", "permissive")
    try:
        assert f"http://127.0.0.1:{port}/mcp" in served.ready
        async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode) as client:
            read = await client.call_tool("read_text_file", {"path": "notes.txt"})
            assert "hello from the host" in _text(read)
            running = asyncio.create_task(client.call_tool("run_shell", {"command": "sleep 47.5"}))
            for _ in range(300):  # the command runs on layers: no file shows it started
                if _sleeping():
                    break
                await asyncio.sleep(0.05)
            assert _sleeping()
            exit_code = await served.stop(number)
            running.cancel()
            with contextlib.suppress(BaseException):
                await running
    finally:
        served.kill()
    assert exit_code == code, served.stderr
    assert "Traceback" not in served.stderr
    assert "CancelledError" not in served.stderr
    last = served.stderr.strip().splitlines()[-1]
    assert f"stopped ({said})" in last, served.stderr
    assert "intact" in last, served.stderr
    log = project / "state" / "audit.jsonl"
    assert verify_audit(log).ok
    statuses = {o["tool"]: o["status"] for o in read_audit(log, kind="outcome")}
    assert statuses == {"read_text_file": "ok", "run_shell": "cancelled"}
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "sleep 47.5" in " ".join(p.info["cmdline"] or [])
    ]
    assert left == []


@pytest.mark.parametrize(
    ("number", "code", "said"),
    [
        (signal.SIGINT, 130, "Ctrl-C"),
        (signal.SIGTERM, 0, "SIGTERM"),
        (None, 0, "its client closed stdin"),
    ],
)
async def test_a_stdio_server_stops_on_a_signal_or_its_stdin_closing(
    project: Path, number: int | None, code: int, said: str
) -> None:
    served = await Served.start(project)
    process = served.process
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(_request(1, "initialize", HELLO))
        await process.stdin.drain()
        answer = json.loads(await asyncio.wait_for(process.stdout.readline(), 30))
        assert answer["id"] == 1
        exit_code = await served.stop(number)
        rest = await process.stdout.read()
    finally:
        served.kill()
    assert exit_code == code, served.stderr
    assert "Traceback" not in served.stderr
    assert [json.loads(line) for line in rest.splitlines()] == []  # stdout: the protocol alone
    last = served.stderr.strip().splitlines()[-1]
    assert f"stopped ({said})" in last, served.stderr
    assert "intact" in last, served.stderr


def test_ctrl_c_in_a_terminal_stops_a_stdio_server_with_130(project: Path) -> None:
    """Served in a terminal, Ctrl-C reaches the server and the command it runs (the whole
    foreground group): the command is recorded as cancelled, the server says so and exits 130."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the server, its stdin, stdout and stderr the terminal
        os.chdir(project)
        os.execv(_stockade(), [_stockade(), "serve", "--workspace", "ws", "--state", "state",
                               "--preset", "permissive"])  # fmt: skip
    seen = bytearray()

    def until(text: bytes, within_s: float = 30.0) -> None:
        end = time.monotonic() + within_s
        while text not in seen and time.monotonic() < end:
            if select.select([fd], [], [], 0.1)[0]:
                with contextlib.suppress(OSError):
                    seen.extend(os.read(fd, 65536))
        assert text in seen, bytes(seen)

    try:
        until(b"stockade serve: stdio")
        call = {"name": "run_shell", "arguments": {"command": "sleep 47.5"}}
        os.write(fd, _request(1, "initialize", HELLO) + _request(2, "tools/call", call))
        until(b'"serverInfo"')
        end = time.monotonic() + 30
        while not _sleeping() and time.monotonic() < end:
            time.sleep(0.05)
        assert _sleeping()
        os.write(fd, b"\x03")  # Ctrl-C, as typed
        until(b"stopped (Ctrl-C)")
        until(b"intact")
        _, status = os.waitpid(pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 130, bytes(seen)
    assert b"Traceback" not in seen
    [outcome] = read_audit(project / "state" / "audit.jsonl", kind="outcome")
    assert outcome["status"] == "cancelled"
    assert not _sleeping()


async def test_a_log_that_does_not_verify_when_the_server_stops_exits_1(project: Path) -> None:
    """The audit log is cut while the server runs: at its end the server says the log is
    not intact, names it, and exits 1."""
    served = await Served.start(project, "--preset", "permissive")
    process = served.process
    assert process.stdin is not None
    assert process.stdout is not None
    log = project / "state" / "audit.jsonl"
    try:
        process.stdin.write(_request(1, "initialize", HELLO))
        call = {"name": "read_text_file", "arguments": {"path": "notes.txt"}}
        process.stdin.write(_request(2, "tools/call", call))
        await process.stdin.drain()
        for _ in range(2):
            await asyncio.wait_for(process.stdout.readline(), 30)
        for _ in range(100):  # the records reach the disk soon after the answer
            if len(list(read_audit(log))) == 2:
                break
            await asyncio.sleep(0.05)
        text = log.read_text()
        assert "read_text_file" in text
        log.write_text(text.replace("read_text_file", "write_file"))  # a record rewritten
        exit_code = await served.stop(None)
    finally:
        served.kill()
    assert exit_code == 1, served.stderr
    last = served.stderr.strip().splitlines()[-1]
    assert f"audit log {log} NOT intact" in last
    assert f"stockade audit verify {log}" in last
    assert "Traceback" not in served.stderr


async def test_two_servers_sharing_state_leave_a_log_that_verifies(project: Path) -> None:
    async def session(name: str) -> None:
        async with Client(serve_params(project, "--preset", "permissive")) as client:
            for n in range(4):
                await client.call_tool("write_file", {"path": f"{name}-{n}.txt", "content": name})
                await client.call_tool("read_text_file", {"path": f"{name}-{n}.txt"})

    await asyncio.wait_for(asyncio.gather(session("a"), session("b")), 90)
    log = project / "state" / "audit.jsonl"
    for _ in range(100):  # each server writes its last records as it shuts down
        if len(list(read_audit(log, kind="outcome"))) == 16:
            break
        await asyncio.sleep(0.1)
    assert len(list(read_audit(log, kind="outcome"))) == 16
    done = stockade_cli("audit", "verify", str(log), cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr


# -- starting: one line saying where, and what it serves with ---------------------------------


def test_the_ready_line_says_transport_workspace_policy_and_audit_log(project: Path) -> None:
    policy = project / "policy.toml"
    policy.write_text('version = 1\ndefault = "allow"\n')
    done = stockade_cli(
        "serve", "--workspace", "ws", "--mount", f"/userinput={project / 'docs'}:ro",
        "--policy", str(policy), "--state", "state",
        cwd=project, stdin=_request(1, "initialize", HELLO).decode(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [answer] = [json.loads(line) for line in done.stdout.splitlines()]  # stdout: JSON-RPC only
    assert answer["result"]["serverInfo"]["name"] == "stockade"
    ready, stopped = done.stderr.strip().splitlines()
    assert ready == (
        f"stockade serve: stdio, workspace {project / 'ws'} at /workspace, "
        f"{project / 'docs'} at /userinput (read-only), policy {policy}, "
        f"audit log {project / 'state' / 'audit.jsonl'}"
    )
    assert stopped.startswith("stockade serve: stopped (its client closed stdin); audit log ")


def test_a_port_in_use_is_one_line_and_exit_1(project: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = stockade_cli("serve", "--workspace", "ws", "--http", str(port), cwd=project)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (
        f"error: --http {port}: the port is in use (another program listens on "
        f"127.0.0.1:{port}); choose another port"
    )


# -- usage errors ------------------------------------------------------------------------------


def test_a_missing_workspace_or_a_port_out_of_range_is_a_usage_error(project: Path) -> None:
    (project / "file.txt").write_text("not a folder")
    cases = [
        (["--workspace", "missing"], "--workspace missing: it does not exist or is not a folder"),
        (["--workspace", "file.txt"], "--workspace file.txt: it does not exist or is not a"),
        (["--workspace", "ws", "--http", "70000"], "--http 70000: give a port between 1 and"),
        (["--workspace", "ws", "--http", "0"], "--http 0: give a port between 1 and 65535"),
        (["--workspace", "ws", "--token-file", "t"], "--token-file is for --http"),
    ]
    for args, said in cases:
        done = stockade_cli("serve", *args, cwd=project)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.strip() == f"error: {said}" or said in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_help_shows_no_bool_metavar(project: Path) -> None:
    done = stockade_cli("serve", "--help", cwd=project)
    assert done.returncode == 0
    assert "--token-file" in done.stdout
    assert "<bool>" not in done.stdout


# -- the bearer token over HTTP ----------------------------------------------------------------


def _token_file(
    project: Path, text: str = TOKEN + "\n", mode: int = 0o600, name: str = "token"
) -> Path:
    file = project / name
    file.write_text(text)
    file.chmod(mode)
    return file


async def test_http_clients_must_send_the_bearer_token(project: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    served = await Served.start(
        project, "--http", str(port), "--token-file", str(_token_file(project))
    )
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO}
    accept = {"Accept": "application/json, text/event-stream"}
    try:
        assert "clients must send the bearer token" in served.ready
        async with httpx.AsyncClient() as raw:
            missing = await raw.post(url, json=initialize, headers=accept)
            wrong = await raw.post(
                url, json=initialize, headers={**accept, "Authorization": "Bearer " + "x" * 29}
            )
            basic = await raw.post(url, json=initialize, headers={**accept, "Authorization": TOKEN})
            rebound = await raw.post(
                url, json=initialize,
                headers={**accept, "Authorization": f"Bearer {TOKEN}", "Host": "evil.example"},
            )  # fmt: skip
            right = await raw.post(
                url, json=initialize, headers={**accept, "Authorization": f"bearer {TOKEN}"}
            )
        for refused in (missing, wrong, basic):
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith("Bearer ")
            assert TOKEN not in refused.text
        assert "invalid_token" in wrong.headers["www-authenticate"]
        assert rebound.status_code in (403, 421)  # the loopback Host check stays
        assert right.status_code == 200, right.text

        http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            read = await client.call_tool("read_text_file", {"path": "notes.txt"})
        assert "hello from the host" in _text(read)
        with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's error for a 401 varies
            async with Client(url, mode="legacy") as client:
                await asyncio.wait_for(client.list_tools(), 30)
        exit_code = await served.stop(signal.SIGTERM)
    finally:
        served.kill()
    assert exit_code == 0, served.stderr
    assert TOKEN not in served.stderr
    assert "Traceback" not in served.stderr
    for kept in (project / "state").rglob("*"):
        if kept.is_file():
            assert TOKEN.encode() not in kept.read_bytes(), kept


async def test_the_token_can_come_from_the_environment_and_is_not_passed_on(
    project: Path,
) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    served = await Served.start(
        project, "--http", str(port), "--preset", "permissive",
        env={"STOCKADE_SERVE_TOKEN": TOKEN},
    )  # fmt: skip
    try:
        async with httpx.AsyncClient() as raw:
            assert (await raw.post(url, json={})).status_code == 401
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            shown = await client.call_tool(
                "run_shell", {"command": 'echo "[${STOCKADE_SERVE_TOKEN:-unset}]"'}
            )
        assert "[unset]" in _text(shown)
        assert await served.stop(signal.SIGTERM) == 0
    finally:
        served.kill()


def test_a_token_that_cannot_be_used_is_refused_in_one_line(project: Path) -> None:
    port = str(_free_port())
    env = {"STOCKADE_SERVE_TOKEN": ""}
    cases = [
        (_token_file(project, "\n", name="empty"), 1, "the token is empty"),
        (_token_file(project, mode=0o644, name="open"), 1, "chmod 600"),
        (_token_file(project, "short\n", name="short"), 1, "use 16 or more"),
        (_token_file(project, "two words here and more\n", name="spaced"), 1, "spaces"),
        (project / "absent", 1, "cannot read it"),
        (project / "ws", 1, "cannot read it"),
    ]
    for file, code, said in cases:
        done = stockade_cli(
            "serve", "--workspace", "ws", "--http", port, "--token-file", str(file), cwd=project
        )
        assert done.returncode == code, (file, done.stderr)
        assert said in done.stderr, done.stderr
        assert "--token-file" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    both = stockade_cli(
        "serve", "--workspace", "ws", "--http", port, "--token-file", str(_token_file(project)),
        cwd=project, env={"STOCKADE_SERVE_TOKEN": TOKEN},
    )  # fmt: skip
    assert both.returncode == 2
    assert "not both" in both.stderr
    assert TOKEN not in both.stderr
    empty = stockade_cli("serve", "--workspace", "ws", "--http", port, cwd=project, env=env)
    assert empty.returncode == 1
    assert "STOCKADE_SERVE_TOKEN: the token is empty" in empty.stderr
