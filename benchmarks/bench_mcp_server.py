"""`stockade serve` beside the reference filesystem MCP server, on the same folder, in one run.

    python benchmarks/bench_mcp_server.py --install-reference   # fetch it from npm first
    python benchmarks/bench_mcp_server.py                       # about a minute
    python benchmarks/bench_mcp_server.py --quick               # a smoke run
    python benchmarks/bench_mcp_server.py --json

The reference is ``@modelcontextprotocol/server-filesystem`` (the version pinned below, run by
Node.js), installed with ``--install-reference`` into ``benchmarks/.reference-mcp`` (npm must be
on PATH; without it, or without the install, its rows say so). Each measure alternates the
servers call by call or spawn by spawn, so the machine's noise hits them alike, and gives the
median milliseconds:

- per-call latency, the server's round trip: one session with each server driven by a minimal
  client that writes a JSON-RPC request line and reads the answer line (what the server costs
  a host), reading a 4 KiB text file with ``read_text_file``;
- the same calls through the ``mcp`` SDK's Python client (what a Python host sees: the client's
  own work, about half a millisecond a call, is paid alike for both servers);
- start-up, from spawning the server to having its tool list (``initialize`` then
  ``tools/list``) through the SDK's client: ``stockade serve --warm`` (forked from a warm
  Stockade, started by a first run before timing), and a cold ``stockade serve``.

Stockade's call includes everything a call does there: the policy decision, the guarded VFS
read, the audit record and the span; the reference server checks the path against its allowed
folders and reads the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from time import perf_counter
from typing import Any

import options
from mcp import Client, StdioServerParameters

REFERENCE = "@modelcontextprotocol/server-filesystem"
REFERENCE_VERSION = "2026.8.31"
PLACE = Path(__file__).resolve().parent / ".reference-mcp"
ENTRY = PLACE / "node_modules" / REFERENCE / "dist" / "index.js"
FILE_BYTES = 4096


def install_reference() -> str | None:
    """Install the reference server with npm; None when done, else why not."""
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not on PATH: install Node.js (with npm) to measure the reference server"
    PLACE.mkdir(exist_ok=True)
    print(f"installing {REFERENCE}@{REFERENCE_VERSION} into {PLACE} ...", file=sys.stderr)
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(PLACE),
         f"{REFERENCE}@{REFERENCE_VERSION}"],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return f"npm install failed ({done.returncode}): {done.stderr.strip()[-400:]}"
    return None


def reference_missing() -> str | None:
    """Why the reference server cannot be measured, or None."""
    if shutil.which("node") is None:
        return "node is not on PATH: install Node.js to measure the reference server"
    if not ENTRY.exists():
        return f"not installed: run with --install-reference (npm installs {REFERENCE})"
    return None


def servers(folder: Path, state: Path, runtime: Path) -> dict[str, StdioServerParameters]:
    """How each server is started on ``folder`` (Stockade's state outside it, its warm servers
    in ``runtime``)."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/root"),
        "XDG_RUNTIME_DIR": str(runtime),
    }
    stockade = Path(sys.executable).parent / "stockade"
    args = ["serve", "--workspace", str(folder), "--state", str(state)]
    found = {
        "stockade serve --warm": StdioServerParameters(
            command=str(stockade), args=[*args, "--warm"], env=env
        ),
        "stockade serve": StdioServerParameters(command=str(stockade), args=args, env=env),
    }
    if reference_missing() is None:
        found["reference server"] = StdioServerParameters(
            command=shutil.which("node") or "node", args=[str(ENTRY), str(folder)], env=env
        )
    return found


def read_arguments(name: str, folder: Path) -> dict[str, Any]:
    """The same read, spelled as each server wants its path."""
    path = str(folder / "page.txt") if name == "reference server" else "/workspace/page.txt"
    return {"path": path}


class LineClient:
    """A minimal MCP client over stdio: one request line written, one answer line read."""

    def __init__(self, params: StdioServerParameters) -> None:
        self.process = subprocess.Popen(
            [params.command, *params.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=params.env,
        )
        self.ident = 0
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "b"}}
        self.ask("initialize", hello)
        self.tell("notifications/initialized")

    def tell(self, method: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")
        self.process.stdin.flush()

    def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.ident += 1
        line = {"jsonrpc": "2.0", "id": self.ident, "method": method, "params": params}
        self.process.stdin.write(json.dumps(line).encode() + b"\n")
        self.process.stdin.flush()
        while True:  # skip notifications (the reference logs through them)
            answer: dict[str, Any] = json.loads(self.process.stdout.readline())
            if answer.get("id") == self.ident:
                return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def round_trips(
    params: dict[str, StdioServerParameters], folder: Path, calls: int
) -> dict[str, list[float]]:
    """Milliseconds of each call through `LineClient`, alternating the servers call by call."""
    clients = {name: LineClient(p) for name, p in params.items()}
    try:
        ways: dict[str, Callable[[], object]] = {}
        for name, client in clients.items():
            call = {"name": "read_text_file", "arguments": read_arguments(name, folder)}

            def way(client: LineClient = client, call: dict[str, Any] = call) -> None:
                answer = client.ask("tools/call", call)
                if answer["result"].get("isError"):
                    raise RuntimeError(f"the read failed: {answer}")

            ways[name] = way
        return options.alternating_samples(ways, calls, warm_up=20)
    finally:
        for client in clients.values():
            client.close()


async def latency(
    params: dict[str, StdioServerParameters], folder: Path, calls: int
) -> dict[str, list[float]]:
    """Milliseconds of each call through the SDK's client, alternating call by call."""
    samples: dict[str, list[float]] = {name: [] for name in params}
    async with AsyncExitStack() as stack:  # closed in reverse order, as the SDK needs
        clients = {
            name: await stack.enter_async_context(Client(p, mode="legacy"))
            for name, p in params.items()
        }
        ways: dict[str, Callable[[], Awaitable[Any]]] = {
            name: _caller(client, read_arguments(name, folder)) for name, client in clients.items()
        }
        for way in ways.values():  # warm-up: first calls load code
            for _ in range(20):
                await way()
        for _ in range(calls):
            for name, way in ways.items():
                started = perf_counter()
                await way()
                samples[name].append((perf_counter() - started) * 1000)
    return samples


def _caller(client: Client, arguments: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
    async def call() -> Any:
        result = await client.call_tool("read_text_file", arguments)
        if result.is_error:
            raise RuntimeError(f"the read failed: {result.content}")
        return result

    return call


async def start_up(params: dict[str, StdioServerParameters], rounds: int) -> dict[str, list[float]]:
    """Milliseconds from spawn to a listed tool set, alternating the servers."""
    samples: dict[str, list[float]] = {name: [] for name in params}
    for _ in range(rounds):
        for name, p in params.items():
            started = perf_counter()
            async with Client(p, mode="legacy") as client:
                tools = await client.list_tools()
                samples[name].append((perf_counter() - started) * 1000)
            assert tools.tools, f"{name} listed no tools"
    return samples


async def start_warm_server(params: StdioServerParameters, runtime: Path) -> None:
    """A first ``--warm`` start runs cold and starts the warm server: wait until it listens."""
    async with Client(params, mode="legacy") as client:
        await client.list_tools()
    deadline = perf_counter() + 60
    while not _listening(runtime):
        if perf_counter() > deadline:
            raise RuntimeError("the warm server did not start within 60 s")
        await asyncio.sleep(0.05)


def _listening(runtime: Path) -> bool:
    return any(runtime.glob("stockade/*.sock"))


def stop_warm_servers(runtime: Path) -> None:
    for lock in runtime.glob("stockade/*.lock"):
        text = lock.read_text().strip()
        if text.isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(text), signal.SIGTERM)


def run(quick: bool) -> options.Rows:
    """The measures on a fresh folder holding the 4 KiB file."""
    calls, rounds = (50, 3) if quick else (500, 15)
    with tempfile.TemporaryDirectory() as base:
        folder, state = Path(base) / "project", Path(base) / "state"
        runtime = Path(tempfile.mkdtemp(prefix="warm-", dir="/tmp"))  # a socket path is short
        folder.mkdir()
        (folder / "page.txt").write_text(("x" * 63 + "\n") * (FILE_BYTES // 64))
        params = servers(folder, state, runtime)
        calling = {name: p for name, p in params.items() if name != "stockade serve --warm"}
        print(f"measuring {', '.join(params)} ...", file=sys.stderr)
        try:
            asyncio.run(start_warm_server(params["stockade serve --warm"], runtime))
            trips_ms = round_trips(calling, folder, calls)
            calls_ms = asyncio.run(latency(calling, folder, calls))
            starts_ms = asyncio.run(start_up(params, rounds))
        finally:
            stop_warm_servers(runtime)
            shutil.rmtree(runtime, ignore_errors=True)
    rows: options.Rows = []
    for measure, ours, samples, count, target in (
        ("read_text_file 4 KiB, round trip", "stockade serve", trips_ms, calls, 0.8),
        ("read_text_file 4 KiB, SDK client", "stockade serve", calls_ms, calls, None),
        ("spawn to tool list, --warm", "stockade serve --warm", starts_ms, rounds, 1.0),
        ("spawn to tool list, cold", "stockade serve", starts_ms, rounds, None),
    ):
        medians = {name: statistics.median(values) for name, values in samples.items()}
        theirs = medians.get("reference server")
        mine = medians[ours]
        ratio = None if theirs is None else mine / theirs
        rows.append(
            {
                "measure": measure,
                "stockade_ms": round(mine, 3),
                "reference_ms": None if theirs is None else round(theirs, 3),
                "ratio": None if ratio is None else round(ratio, 2),
                "target": "" if target is None else f"<= {target}x",
                "meets_target": None if ratio is None or target is None else ratio <= target,
                "samples": count,
                "note": reference_missing(),
            }
        )
    return rows


def table(rows: options.Rows) -> None:
    header = ("measure", "stockade ms", "reference ms", "ratio", "target", "met")
    print("{:36} {:>12} {:>13} {:>7}  {:8} {}".format(*header))
    for r in rows:
        theirs = "" if r["reference_ms"] is None else f"{r['reference_ms']:.2f}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        met = {None: "", True: "yes", False: "NO"}[r["meets_target"]]
        print(
            f"{r['measure']:36} {r['stockade_ms']:>12.2f} {theirs:>13} {ratio:>7}  "
            f"{r['target']:8} {met}"
        )
    if rows and rows[0]["note"]:
        print(f"reference server: {rows[0]['note']}")


def main() -> int:
    # --install-reference is this script's own option, taken off before the shared ones
    if "--install-reference" in sys.argv:
        sys.argv.remove("--install-reference")
        if (why := install_reference()) is not None:
            print(why, file=sys.stderr)
    return options.main(__doc__, "MCP server", run, table, f"{REFERENCE}@{REFERENCE_VERSION}")


if __name__ == "__main__":
    sys.exit(main())
