"""`stockade serve` beside the reference filesystem MCP server, on the same folder, in one run.

    python benchmarks/bench_mcp_server.py --install-reference   # fetch it from npm first
    python benchmarks/bench_mcp_server.py                       # about 40 seconds
    python benchmarks/bench_mcp_server.py --quick               # a smoke run
    python benchmarks/bench_mcp_server.py --json

The reference is ``@modelcontextprotocol/server-filesystem`` (the version pinned below, run by
Node.js), installed with ``--install-reference`` into ``benchmarks/.reference-mcp`` (npm must be
on PATH; without it, or without the install, its rows say so). Both servers are driven by the
``mcp`` SDK's client over stdio, as an MCP host would drive them:

- per-call latency: one session with each server, the same call alternating between them call by
  call (reading a 4 KiB text file: ``read_text_file``), so the machine's noise hits both alike;
  the figure is the median milliseconds per call over the whole round trip (client encode,
  pipe, server, pipe, client decode);
- start-up: from spawning the server to having its tool list (``initialize`` then
  ``tools/list``), alternating the servers spawn by spawn; the median.

Stockade's call includes everything a call does there: the policy decision, the guarded VFS
read, the audit record and the span; the reference server checks the path against its allowed
folders and reads the file.
"""

from __future__ import annotations

import asyncio
import os
import shutil
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


def servers(folder: Path, state: Path) -> dict[str, StdioServerParameters]:
    """How each server is started on ``folder`` (Stockade's state outside it)."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}
    stockade = Path(sys.executable).parent / "stockade"
    found = {
        "stockade serve": StdioServerParameters(
            command=str(stockade),
            args=["serve", "--workspace", str(folder), "--state", str(state)],
            env=env,
        )
    }
    if reference_missing() is None:
        found["reference server"] = StdioServerParameters(
            command=shutil.which("node") or "node", args=[str(ENTRY), str(folder)], env=env
        )
    return found


def read_arguments(name: str, folder: Path) -> dict[str, Any]:
    """The same read, spelled as each server wants its path."""
    path = "/workspace/page.txt" if name == "stockade serve" else str(folder / "page.txt")
    return {"path": path}


async def latency(
    params: dict[str, StdioServerParameters], folder: Path, calls: int
) -> dict[str, list[float]]:
    """Milliseconds of each call, alternating between the servers call by call."""
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


def run(quick: bool) -> options.Rows:
    """Both measures on a fresh folder holding the 4 KiB file."""
    calls, rounds = (50, 3) if quick else (500, 15)
    with tempfile.TemporaryDirectory() as base:
        folder, state = Path(base) / "project", Path(base) / "state"
        folder.mkdir()
        (folder / "page.txt").write_text(("x" * 63 + "\n") * (FILE_BYTES // 64))
        params = servers(folder, state)
        print(f"measuring {', '.join(params)} ...", file=sys.stderr)
        calls_ms = asyncio.run(latency(params, folder, calls))
        starts_ms = asyncio.run(start_up(params, rounds))
    rows: options.Rows = []
    for measure, samples, count, target in (
        ("read_text_file of 4 KiB, ms per call", calls_ms, calls, 0.8),
        ("spawn to tool list, ms", starts_ms, rounds, 1.0),
    ):
        medians = {name: statistics.median(values) for name, values in samples.items()}
        theirs = medians.get("reference server")
        ours = medians["stockade serve"]
        rows.append(
            {
                "measure": measure,
                "stockade_ms": round(ours, 3),
                "reference_ms": None if theirs is None else round(theirs, 3),
                "ratio": None if theirs is None else round(ours / theirs, 2),
                "target": f"<= {target}x",
                "meets_target": None if theirs is None else ours / theirs <= target,
                "samples": count,
                "note": reference_missing(),
            }
        )
    return rows


def table(rows: options.Rows) -> None:
    header = ("measure", "stockade ms", "reference ms", "ratio", "target", "met")
    print("{:38} {:>12} {:>13} {:>7}  {:8} {}".format(*header))
    for r in rows:
        theirs = "" if r["reference_ms"] is None else f"{r['reference_ms']:.2f}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        met = {None: "", True: "yes", False: "NO"}[r["meets_target"]]
        print(
            f"{r['measure']:38} {r['stockade_ms']:>12.2f} {theirs:>13} {ratio:>7}  "
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
