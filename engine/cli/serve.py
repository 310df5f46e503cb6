"""``stockade serve``: the sandboxed tools as an MCP server, over stdio or loopback HTTP.

    stockade serve --workspace ./project                       # stdio: for an MCP client's config
    stockade serve --workspace ./project --mount /userinput=./docs:ro --http 8765

Every call goes through the engine: the policy, the VFS and process sandbox, timeouts, the
audit log and traces (in ``--state``: by default a folder of the user's state folder for this
workspace, outside it; one inside a writable mount is refused unless ``--state-in-mount``).
Standard output carries only the protocol; messages go to standard error.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Annotated

import typer

from stockade.engine.cli.common import (
    MountsOption,
    PolicyOption,
    PresetOption,
    StateInMountOption,
    StateOption,
    WarmOption,
    fail,
    load_policy,
)
from stockade.engine.cli.session import Session, choose_state, mounts_of, standard_toolkit
from stockade.engine.observe import AuditError
from stockade.sandbox import SandboxError

STOP_GRACE_S = 3.0  # after SIGTERM or Ctrl-C, for calls in flight to be cancelled and recorded


def serve(
    workspace: Annotated[
        Path, typer.Option(help="The folder served as /workspace.", file_okay=False)
    ] = Path("."),
    mounts: MountsOption = None,
    policy_file: PolicyOption = None,
    preset: PresetOption = None,
    http: Annotated[
        int | None,
        typer.Option(help="Serve streamable HTTP on this loopback port instead of stdio."),
    ] = None,
    shell: Annotated[
        bool, typer.Option(help="Offer run_shell and run_python besides the file tools.")
    ] = True,
    state: StateOption = None,
    state_in_mount: StateInMountOption = False,
    warm: WarmOption = False,  # taken before parsing: see stockade.engine.cli.warm
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
        chosen = mounts_of(workspace, mounts or [])
        session = Session(
            policy,
            chosen,
            toolkit=standard_toolkit(shell=shell),
            state=choose_state(state, workspace, chosen, in_mount=state_in_mount),
        )
    except (ValueError, SandboxError, AuditError, OSError) as exc:
        fail(str(exc))
    try:
        asyncio.run(_serve(session, http))
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass  # Ctrl-C or SIGTERM ends a server: not an error
    finally:
        session.close()


async def _serve(session: Session, http: int | None) -> None:

    # SIGTERM (what a client sends after closing stdin) and Ctrl-C cancel the calls in flight,
    # whose process trees are killed and whose outcomes are recorded. If stdin is still open,
    # the SDK's reader thread cannot be interrupted and would keep the server up, so after a
    # grace period the audit log and traces are closed and the process exits.
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def stop() -> None:
        if main is not None:
            main.cancel()
        loop.call_later(STOP_GRACE_S, _exit_now, session)

    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop)
    async with session.engine as engine:
        if http is None:
            from stockade.engine.mcp.stdio import StdioService  # no MCP SDK: starts fast

            await StdioService(engine).serve()
        else:
            from stockade.engine.mcp.server import McpService  # the SDK serves HTTP

            await McpService(engine).serve_http(http)


def _exit_now(session: Session) -> None:
    """Leave without waiting for the stdin reader: what was recorded is written first."""
    try:
        session.close()
    finally:
        os._exit(0)
