"""``stockade serve``: the sandboxed tools as an MCP server, over stdio or loopback HTTP.

    stockade serve --workspace ./project                       # stdio: for an MCP client's config
    stockade serve --workspace ./project --mount /userinput=./docs:ro --http 8765
    stockade serve --workspace ./project --http 8765 --token-file ~/.config/stockade/token

Every call goes through the engine: the policy, the VFS and process sandbox, timeouts, the
audit log and traces (in ``--state``: by default a folder of the user's state folder for this
workspace, outside it; one inside a writable mount is refused unless ``--state-in-mount``).
Standard output carries only the protocol; messages go to standard error: one line once the
server is ready (where it listens, the workspace, the policy, the audit log), and one when it
stops, with the audit log's verdict.

It stops when its client closes stdin (stdio), on SIGTERM (how MCP hosts stop a server) and on
Ctrl-C: the calls in flight are cancelled, their process trees killed and their outcomes
recorded. Exit 0 when stopped so and the audit log verifies, 1 when it does not, 130 after
Ctrl-C (whatever the log's verdict, which is printed all the same).

Over HTTP a bearer token can be required of every client: from ``--token-file`` (its first
line; a file other users may read or change is refused, as ssh refuses such a key) or from the
environment variable ``STOCKADE_SERVE_TOKEN`` (read only with ``--http``, and removed from the
environment once read). Never from the command line, where ``ps`` shows it to every user.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import stat
import sys
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from stockade.engine.cli.common import (
    INTERRUPTED,
    AuditStoreOption,
    MountsOption,
    PolicyOption,
    PolicyStoreOption,
    PresetOption,
    StateInMountOption,
    StateOption,
    WarmOption,
    fail,
    load_policy,
    usage,
)
from stockade.engine.cli.session import (
    WORKSPACE,
    Session,
    choose_state,
    mounts_of,
    standard_toolkit,
)
from stockade.engine.observe import AuditError, AuditStore, verify_audit, verify_store
from stockade.errors import ConfigurationError
from stockade.sandbox import Mount, SandboxError

if TYPE_CHECKING:
    import socket

    from stockade.policies import Policy

STOP_GRACE_S = 5.0  # after SIGTERM or Ctrl-C, for calls in flight to be cancelled and recorded
TOKEN_ENV = "STOCKADE_SERVE_TOKEN"
MIN_TOKEN = 16  # characters: a shorter secret is guessed by a local program soon enough


@dataclass
class _Stopping:
    """How the server came to stop: the first signal, and whether Ctrl-C was among them."""

    signal: int | None = None
    interrupted: bool = False

    def why(self) -> str:
        if self.interrupted:
            return "Ctrl-C"
        if self.signal is not None:
            return signal.Signals(self.signal).name
        return "its client closed stdin"


def serve(
    workspace: Annotated[
        Path, typer.Option(metavar="DIR", help="The folder served as /workspace.")
    ] = Path("."),
    mounts: MountsOption = None,
    policy_file: PolicyOption = None,
    preset: PresetOption = None,
    policy_store: PolicyStoreOption = None,
    audit_store: AuditStoreOption = None,
    http: Annotated[
        int | None,
        typer.Option(
            metavar="PORT", help="Serve streamable HTTP on this loopback port instead of stdio."
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help=f"With --http: require clients to send the bearer token in this file's first "
            f"line (only you may read it: chmod 600). Or set {TOKEN_ENV}.",
        ),
    ] = None,
    shell: Annotated[
        bool, typer.Option(help="Offer run_shell and run_python besides the file tools.")
    ] = True,
    state: StateOption = None,
    state_in_mount: StateInMountOption = False,
    warm: WarmOption = False,  # taken before parsing: see stockade.engine.cli.warm
) -> None:
    """Serve the sandboxed file and shell tools to MCP clients (stdio unless --http)."""
    if http is not None and not 0 < http < 65536:
        usage(f"--http {http}: give a port between 1 and 65535")
    if not workspace.is_dir():
        usage(
            f"--workspace {workspace}: it does not exist or is not a folder; create it first, "
            "or give another"
        )
    if not os.access(workspace, os.W_OK):
        fail(f"the workspace {workspace} is not writable; mount it read-only with --mount")
    policy = load_policy(policy_file, preset, store=policy_store)
    token = _token(token_file, http)
    stopping = _Stopping()
    with _interrupt_exits():  # Ctrl-C while it starts: 130, as once it serves
        sock = _listen(http) if http is not None else None
        with _closed_on_failure(sock):
            try:
                chosen = mounts_of(workspace, mounts or [])
            except (ConfigurationError, ValueError) as exc:
                usage(str(exc))  # a --mount written wrong, or naming no folder
            session = Session(
                policy,
                chosen,
                toolkit=standard_toolkit(shell=shell),
                state=choose_state(state, workspace, chosen, in_mount=state_in_mount),
                audit_store=audit_store,
            )
    where = "stdio" if http is None else f"http://127.0.0.1:{http}/mcp ({_who(token)})"
    ready = _ready_line(where, chosen, policy, session)
    try:
        asyncio.run(_serve(session, http, sock, token, stopping, ready))
    except KeyboardInterrupt:  # between the loop's start and its handlers, or after them
        stopping.interrupted = True
    finally:
        session.close()
    _stopped(session, stopping)


@contextlib.contextmanager
def _interrupt_exits() -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        raise typer.Exit(INTERRUPTED) from None


@contextlib.contextmanager
def _closed_on_failure(sock: socket.socket | None) -> Iterator[None]:
    """Close ``sock`` when the session cannot be opened, and say why in one line."""
    try:
        yield
    except BaseException as exc:
        if sock is not None:
            sock.close()
        if isinstance(exc, (ValueError, SandboxError, AuditError, OSError)):
            fail(str(exc))
        raise


async def _serve(
    session: Session,
    http: int | None,
    sock: socket.socket | None,
    token: str | None,
    stopping: _Stopping,
    ready: str,
) -> None:
    # SIGTERM and Ctrl-C set `requested`: the calls in flight are cancelled, their process
    # trees killed and their outcomes recorded. Should that hang, after a grace period the
    # audit log and traces are closed and the process exits (a second Ctrl-C: at once).
    loop = asyncio.get_running_loop()
    requested = asyncio.Event()

    def stop(number: int) -> None:
        first = stopping.signal is None
        again = stopping.interrupted and number == signal.SIGINT
        stopping.signal = stopping.signal or number
        stopping.interrupted |= number == signal.SIGINT
        requested.set()
        if first:
            loop.call_later(STOP_GRACE_S, _exit_now, session, stopping)
        elif again:
            _exit_now(session, stopping)

    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop, number)
    async with session.engine as engine:
        if http is None or sock is None:
            from stockade.engine.mcp.stdio import StdioService  # no MCP SDK: starts fast

            _say(ready)
            await _until(StdioService(engine).serve(), requested)
        else:
            from stockade.engine.mcp.server import McpService  # the SDK serves HTTP

            await McpService(engine).serve_http(
                http, token=token, sock=sock, stop=requested, ready=lambda: _say(ready)
            )


async def _until(serving: Coroutine[Any, Any, None], requested: asyncio.Event) -> None:
    """Run ``serving`` until it ends or ``requested`` is set; then cancel it and wait for it to
    wind down (the stdio server cancels its calls and waits for their records)."""
    task = asyncio.ensure_future(serving)
    asked = asyncio.ensure_future(requested.wait())
    try:
        await asyncio.wait({task, asked}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        asked.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if not task.cancelled():
        task.result()  # what went wrong, if anything did


def _who(token: str | None) -> str:
    if token is not None:
        return "clients must send the bearer token"
    return "no token required: any program on this machine may connect"


def _ready_line(where: str, mounts: list[Mount], policy: Policy, session: Session) -> str:
    """``stockade serve: <where>, workspace DIR at /workspace, [DIR at PREFIX (read-only)...],
    policy FILE-or-preset:NAME-or-STORE, audit log PATH`` (or ``audit store URL``)."""
    audit = session.audit_path
    shown = [
        f"{'workspace ' * (m.prefix == WORKSPACE)}{m.root} at {m.prefix}"
        + " (read-only)" * m.read_only
        for m in mounts
        if m.root is not None
    ]
    return (
        f"stockade serve: {where}, {', '.join(shown)}, "
        f"policy {policy.file if policy.file is not None else policy.source}, "
        + (
            f"audit store {session.audit.url} (spool {audit})"
            if isinstance(session.audit, AuditStore) and audit is not None
            else f"audit log {audit.absolute() if audit is not None else 'not recorded'}"
        )
    )


def _stopped(session: Session, stopping: _Stopping) -> NoReturn:
    """Say why the server stopped and whether its audit log verifies; exit 130 after Ctrl-C,
    else 1 when the log does not verify, else 0."""
    log = session.audit_path
    intact = True
    if session.audit_store is not None and isinstance(session.audit, AuditStore):
        shipped = verify_store(session.audit_store, writer=session.audit.writer)
        intact = shipped.ok
        verdict = f"audit store {session.audit.url}: {shipped}"
        if not intact:
            verdict += "; see `stockade audit verify --store URL`"
    elif log is None:
        verdict = "no audit log was kept"
    else:
        report = verify_audit(log)
        intact = report.ok
        verdict = str(report).replace("audit log", f"audit log {log.absolute()}", 1)
        if not intact:
            verdict += f"; see `stockade audit verify {log.absolute()}`"
    _say(f"stockade serve: stopped ({stopping.why()}); {verdict}")
    raise typer.Exit(INTERRUPTED if stopping.interrupted else 0 if intact else 1)


def _exit_now(session: Session, stopping: _Stopping) -> None:
    """Leave without waiting for what hangs: what was recorded is written and judged first."""
    code = INTERRUPTED if stopping.interrupted else 1
    try:
        session.close()
        _stopped(session, stopping)
    except typer.Exit as done:
        code = done.exit_code
    finally:
        os._exit(code)


def _say(line: str) -> None:
    """One line on stderr (stdout is the protocol's alone)."""
    with contextlib.suppress(OSError, ValueError):  # nobody reads stderr any more: no matter
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _listen(port: int) -> socket.socket:
    """The loopback socket ``--http`` serves on, bound before anything else starts, so that a
    port in use is said at once, in one line."""
    from stockade.engine.mcp.server import bind_loopback

    try:
        return bind_loopback(port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            fail(
                f"--http {port}: the port is in use (another program listens on "
                f"127.0.0.1:{port}); choose another port"
            )
        fail(f"--http {port}: cannot listen on 127.0.0.1:{port} ({exc.strerror}); choose "
             "another port")  # fmt: skip


def _token(file: Path | None, http: int | None) -> str | None:
    """The bearer token HTTP clients must send (None: none is required), from ``file`` or the
    environment, which is cleared of it either way (no command the server runs inherits it)."""
    from_env = os.environ.pop(TOKEN_ENV, None)
    if file is not None and http is None:
        usage("--token-file is for --http: over stdio the client is whoever started the server")
    if http is None:
        return None  # the variable is for HTTP; an MCP host may set it for every server
    if file is not None and from_env is not None:
        usage(f"give --token-file or {TOKEN_ENV}, not both")
    if file is not None:
        return _checked(_read_token(file), f"--token-file {file}")
    if from_env is not None:
        return _checked(from_env.strip(), TOKEN_ENV)
    return None


def _read_token(file: Path) -> str:
    try:
        with open(file, "rb") as opened:
            mode = os.fstat(opened.fileno()).st_mode
            if stat.S_ISREG(mode) and mode & 0o077:
                fail(
                    f"--token-file {file}: other users may read or change it (mode "
                    f"{stat.filemode(mode)}); make it yours alone with `chmod 600 {file}`"
                )
            first = opened.readline(4096)
    except OSError as exc:
        fail(f"--token-file {file}: cannot read it ({exc.strerror}); give a file you can read")
    try:
        return first.decode("utf-8").strip()
    except UnicodeDecodeError:
        fail(f"--token-file {file}: its first line is not text; write the token there")


def _checked(token: str, where: str) -> str:
    if not token:
        fail(f"{where}: the token is empty; put a secret of {MIN_TOKEN} or more characters there")
    if not all("!" <= c <= "~" for c in token):
        fail(f"{where}: the token holds spaces or characters an HTTP header cannot carry; use "
             "letters, digits and punctuation (`openssl rand -hex 32` makes one)")  # fmt: skip
    if len(token) < MIN_TOKEN:
        fail(f"{where}: the token is {len(token)} characters long; use {MIN_TOKEN} or more "
             "(`openssl rand -hex 32` makes one)")  # fmt: skip
    return token
