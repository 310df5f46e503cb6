"""The warm server behind ``--warm`` (see ``warm``): a process that has loaded Stockade's
command line once and forks a copy of itself for each command it is handed.

    python -m stockade.engine.cli.warm_server SOCKET      # started by `warm`, not by users

It loads every module the warm commands use, listens on ``SOCKET`` (one server per socket: a
lock file beside it keeps a second one out) and, for each client in its own context (same
``process_context``; anything else is refused), forks: the fork takes the client's stdin,
stdout and stderr, environment, working folder, umask and command line, and runs the command
as ``stockade`` would. The server tells the client the fork's pid, then its exit code; when a
client goes away first, its fork gets SIGTERM. No thread runs in the server, so every fork
starts from a consistent copy. It exits after ``STOCKADE_WARM_IDLE`` seconds without a client
or command running, or on SIGTERM.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import fcntl
import importlib
import io
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from stockade.engine.cli.warm import (
    _HEADER,
    failure_code,
    idle_seconds,
    peer_credentials,
    peer_pidfd,
    process_context,
    still_running,
)

_MAX_REQUEST = 16 * 1024 * 1024
# the commands, and what they load only when they run (the hook's judge, the stdio server,
# tracing, the process sandbox)
PRELOADED = (
    "stockade.engine.cli.app",
    "stockade.engine.adapters.claude_code",
    "stockade.engine.mcp.stdio",
    "stockade.engine.observe.tracing",
    "stockade.sandbox.process",
)


def preload() -> None:
    """Load what the warm commands use, and fill the caches a first command fills, without
    starting a thread."""
    for name in PRELOADED:
        importlib.import_module(name)
    from stockade.engine.cli.session import standard_toolkit
    from stockade.engine.mcp.served import tool_entry

    for tool in standard_toolkit().tools():
        tool_entry(tool, network=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m stockade.engine.cli.warm_server SOCKET", file=sys.stderr)
        return 2
    path = Path(argv[1])
    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another warm server holds this socket
    os.ftruncate(lock, 0)
    os.write(lock, f"{os.getpid()}\n".encode())
    preload()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a socket left by a server that died: the lock says none runs
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    try:
        _serve(listener, process_context(), lock)
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return 0


def _serve(listener: socket.socket, context: bytes, lock: int) -> None:
    """Accept clients and reap forks until idle for too long."""
    woken, wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select through the pipe
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    watch = selectors.DefaultSelector()
    watch.register(listener, selectors.EVENT_READ)
    watch.register(woken, selectors.EVENT_READ)
    forks: dict[int, socket.socket] = {}
    idle_s = idle_seconds()
    last = time.monotonic()
    while True:
        wait = None if forks else max(0.0, last + idle_s - time.monotonic())
        if wait == 0.0:
            return
        for key, _ in watch.select(wait):
            if key.fileobj is listener:
                client, _ = listener.accept()
                # the fork keeps none of the server's own files, nor other clients' sockets
                own: tuple[int, ...] = (
                    lock,
                    listener.fileno(),
                    woken,
                    wake,
                    watch.fileno() if isinstance(watch, selectors.EpollSelector) else -1,
                )
                own += tuple(other.fileno() for other in forks.values())
                pid = _start(client, context, own)
                if pid is None:
                    client.close()
                else:
                    forks[pid] = client
                    watch.register(client, selectors.EVENT_READ, pid)
            elif key.fileobj == woken:
                with contextlib.suppress(BlockingIOError):
                    os.read(woken, 4096)
                _reap(forks, watch)
            else:  # a client spoke or went away while its fork runs: stop the fork
                with contextlib.suppress(ProcessLookupError):
                    os.kill(key.data, signal.SIGTERM)
                watch.unregister(key.fileobj)
        if forks:
            last = time.monotonic()


def _reap(forks: dict[int, socket.socket], watch: selectors.BaseSelector) -> None:
    """Tell each client whose fork ended its exit code."""
    while forks:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        client = forks.pop(pid, None)
        if client is None:
            continue
        with contextlib.suppress(KeyError, ValueError):
            watch.unregister(client)
        with contextlib.suppress(OSError):
            client.sendall(_line({"exit": os.waitstatus_to_exitcode(status)}))
        client.close()


def _start(client: socket.socket, context: bytes, own: tuple[int, ...]) -> int | None:
    """Read a client's request and fork its command; the fork's pid, or None when refused."""
    fds: list[int] = []
    try:
        client.settimeout(5.0)
        pid, uid, _ = peer_credentials(client)
        head, ancillary, _, _ = client.recvmsg(_HEADER.size, socket.CMSG_SPACE(3 * 4))
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(data[: len(data) - len(data) % 4])
                fds += received.tolist()
        why = _refusal(client, pid, uid, context, head, fds)
        if why is not None:
            client.sendall(_line({"refused": why}))
            return None
        (size,) = _HEADER.unpack(head)
        if size > _MAX_REQUEST:
            client.sendall(_line({"refused": "request too large"}))
            return None
        request = json.loads(_read_exactly(client, size).decode("utf-8", "surrogateescape"))
        if threading.active_count() != 1:
            client.sendall(_line({"refused": "the warm server runs a thread"}))
            return None
        child = os.fork()
        if child == 0:
            _become(request, fds, (*own, client.fileno()))
        client.settimeout(None)
        client.sendall(_line({"pid": child}))
        return child
    except (OSError, ValueError) as exc:
        with contextlib.suppress(OSError):
            client.sendall(_line({"refused": f"bad request: {exc}"}))
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _refusal(
    client: socket.socket, pid: int, uid: int, context: bytes, head: bytes, fds: list[int]
) -> str | None:
    """Why a client may not use this server, or None. Its context is read from ``/proc/<pid>``;
    the peer's pidfd, held meanwhile, proves that pid still names the process that connected
    (not one that took the pid over after it exited)."""
    if uid != os.getuid():
        return "another user"
    if len(head) != _HEADER.size or len(fds) != 3:
        return "a request without its three files"
    pidfd = peer_pidfd(client)
    try:
        theirs = process_context(pid)
        if pidfd is not None and not still_running(pidfd):
            return "the client's process is gone"
    except OSError:
        return "the client's process is gone"
    finally:
        if pidfd is not None:
            os.close(pidfd)
    if theirs != context:
        return "the client runs in another context (namespaces, cgroup, privileges or limits)"
    return None


def _read_exactly(client: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = client.recv(min(left, 1 << 20))
        if not chunk:
            raise ValueError("the request ended early")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _become(request: dict[str, Any], fds: list[int], close: tuple[int, ...]) -> None:
    """In the fork: take the client's files, environment, folder, umask and command line, run
    the command, and exit with its code (never returns)."""
    code = failure_code(request.get("argv", []))
    try:
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in close:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        fds.clear()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.umask(int(request["umask"]))
        sys.argv = [str(part) for part in request["argv"]]
        for stream, line_buffering in ((sys.stdout, os.isatty(1)), (sys.stderr, True)):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=line_buffering)
        code = _run_command()
    except BaseException as exc:  # the fork must end here, whatever happens
        with contextlib.suppress(Exception):
            print(f"stockade: warm start failed: {exc}", file=sys.stderr)
    finally:
        with contextlib.suppress(Exception):
            atexit._run_exitfuncs()  # what a normal exit runs: traces flushed, logs closed
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run_command() -> int:
    """Run the command line in ``sys.argv`` as the ``stockade`` command does; its exit code."""
    from stockade.engine.cli.app import main

    try:
        main()
    except SystemExit as done:
        if done.code is None:
            return 0
        if isinstance(done.code, int):
            return done.code
        print(done.code, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
