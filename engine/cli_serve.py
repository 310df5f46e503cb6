"""``stockade serve``: the sandboxed tools as an MCP server, over stdio or loopback HTTP.

    stockade serve --workspace ./project                       # stdio: for an MCP client's config
    stockade serve --workspace ./project --mount /userinput=./docs:ro --http 8765

Every call goes through the engine: the policy, the VFS and process sandbox, timeouts, the
audit log and traces (in ``--state``). Standard output carries only the protocol; messages go
to standard error.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Annotated

import typer
from opentelemetry.sdk.trace import TracerProvider

from stockade.engine.audit import AuditError, AuditLog
from stockade.engine.cli_common import fail, load_policy
from stockade.engine.engine import Engine
from stockade.engine.filetools import add_file_tools
from stockade.engine.shelltools import add_shell_tools
from stockade.engine.toolkit import Toolkit
from stockade.engine.tracing import tracer_provider
from stockade.policies import Policy
from stockade.sandbox import Mount, SandboxError, VirtualFS

STOP_GRACE_S = 3.0  # after SIGTERM or Ctrl-C, for calls in flight to be cancelled and recorded


def parse_mount(text: str) -> Mount:
    """``PREFIX=DIR`` or ``PREFIX=DIR:ro`` as a host mount; raises ValueError saying what is
    wrong."""
    prefix, sep, rest = text.partition("=")
    if not sep or not prefix or not rest:
        raise ValueError(f"--mount {text!r}: write PREFIX=DIR or PREFIX=DIR:ro")
    read_only = rest.endswith(":ro")
    folder = Path(rest[:-3] if read_only else rest.removesuffix(":rw"))
    if not folder.is_dir():
        raise ValueError(f"--mount {text!r}: {folder} does not exist or is not a folder")
    return Mount(prefix, folder.resolve(), read_only=read_only)


def serve(
    workspace: Annotated[
        Path, typer.Option(help="The folder served as /workspace.", file_okay=False)
    ] = Path("."),
    mounts: Annotated[
        list[str] | None,
        typer.Option("--mount", help="Another folder: PREFIX=DIR, or PREFIX=DIR:ro. Repeatable."),
    ] = None,
    policy_file: Annotated[
        Path | None, typer.Option("--policy", help="A policy file (default: the default preset).")
    ] = None,
    preset: Annotated[str | None, typer.Option(help="A preset instead of a file.")] = None,
    http: Annotated[
        int | None,
        typer.Option(help="Serve streamable HTTP on this loopback port instead of stdio."),
    ] = None,
    shell: Annotated[
        bool, typer.Option(help="Offer run_shell and run_python besides the file tools.")
    ] = True,
    state: Annotated[
        Path, typer.Option(help="Folder for the audit log and the traces.", file_okay=False)
    ] = Path(".stockade"),
) -> None:
    """Serve the sandboxed file and shell tools to MCP clients (stdio unless --http)."""
    policy = load_policy(policy_file, preset)
    if not workspace.is_dir():
        fail(f"the workspace {workspace} does not exist or is not a folder; create it first")
    if not os.access(workspace, os.W_OK):
        fail(f"the workspace {workspace} is not writable; mount it read-only with --mount")
    if http is not None and not 0 < http < 65536:
        fail(f"--http {http}: give a port between 1 and 65535")
    try:
        extra = [parse_mount(text) for text in mounts or []]
        fs = VirtualFS([Mount("/workspace", workspace.resolve()), *extra])
        state.mkdir(parents=True, exist_ok=True)
        audit = AuditLog(state / "audit.jsonl")
    except (ValueError, SandboxError, AuditError, OSError) as exc:
        fail(str(exc))
    toolkit = Toolkit()
    add_file_tools(toolkit)
    if shell:
        add_shell_tools(toolkit)
    provider = tracer_provider("jsonl", path=state / "traces.jsonl")
    try:
        asyncio.run(_serve(toolkit, policy, fs, audit, provider, http))
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass  # Ctrl-C or SIGTERM ends a server: not an error
    finally:
        fs.close()
        audit.close()
        provider.shutdown()


async def _serve(
    toolkit: Toolkit,
    policy: Policy,
    fs: VirtualFS,
    audit: AuditLog,
    provider: TracerProvider,
    http: int | None,
) -> None:
    from stockade.engine.mcp_server import McpService  # the MCP SDK loads only when serving

    # SIGTERM (what a client sends after closing stdin) and Ctrl-C cancel the calls in flight,
    # whose process trees are killed and whose outcomes are recorded. If stdin is still open,
    # the SDK's reader thread cannot be interrupted and would keep the server up, so after a
    # grace period the audit log and traces are closed and the process exits.
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def stop() -> None:
        if main is not None:
            main.cancel()
        loop.call_later(STOP_GRACE_S, _exit_now, audit, provider)

    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop)
    async with Engine(
        toolkit, policy=policy, fs=fs, audit=audit, tracer_provider=provider
    ) as engine:
        service = McpService(engine)
        if http is None:
            await service.serve_stdio()
        else:
            await service.serve_http(http)


def _exit_now(audit: AuditLog, provider: TracerProvider) -> None:
    """Leave without waiting for the stdin reader: what was recorded is written first."""
    try:
        audit.close()
        provider.shutdown()
    finally:
        os._exit(0)
