"""The warm server behind ``--warm`` (see ``warm``): a process that has loaded Stockade's
command line once and forks a copy of itself for each command it is handed.

    python -P -m stockade.engine.cli.warm_server SOCKET   # started by `warm`, not by users

It loads every module the warm commands use, listens on ``SOCKET`` (in a private folder it
checks itself; one server per socket: a lock file beside it, never followed if a link, keeps a
second one out) and judges each client the moment it connects, before reading a byte: a client
not in its own context (`warm.peer_in_context`) is refused at once, so a process it would refuse
cannot hold it up either. A client's request is read within 2 seconds, then the server forks:
the fork takes the client's stdin, stdout and stderr, environment, working folder, umask and
command line, and runs the command as ``stockade`` would. The server tells the client the
fork's pid, then its exit code; when a client goes away first, its fork gets SIGTERM, and a fork
whose server dies gets SIGTERM from the kernel. No thread runs in the server, so every fork
starts from a consistent copy; signals are blocked across each fork so that none lands in the
server's code inside the fork. It exits after ``STOCKADE_WARM_IDLE`` seconds without a command
running; on SIGTERM it stops taking commands, passes SIGTERM to the running ones and exits once
they have ended, having told their clients how.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import ctypes
import fcntl
import importlib
import io
import json
import os
import selectors
import signal
import socket
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

from stockade.engine.cli.warm import (
    _HEADER,
    failure_code,
    idle_seconds,
    peer_in_context,
    process_context,
)
from stockade.errors import StockadeError

_MAX_REQUEST = 16 * 1024 * 1024
_READ_S = 2.0  # for a client's whole request, once it is let in
_PR_SET_PDEATHSIG = 1
_BLOCKED = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD}
# the commands, and what they load only when they run (the hook's judge, the stdio server,
# tracing, the process sandbox)
PRELOADED = (
    "stockade.engine.cli.app",
    "stockade.engine.adapters.claude_code",
    "stockade.engine.mcp.stdio",
    "stockade.engine.observe.tracing",
    "stockade.sandbox.process",
)


class BadRequest(StockadeError, ValueError):
    """A client's request that cannot be run (said back to the client, then closed)."""


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
        print("usage: python -P -m stockade.engine.cli.warm_server SOCKET", file=sys.stderr)
        return 2
    path = Path(argv[1])
    lock = _lock(path)
    if lock is None:
        return 1
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
    listener.listen(64)
    try:
        _serve(listener, process_context(), lock)
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return 0


def _lock(path: Path) -> int | None:
    """The lock file beside ``path``, opened in a folder that is this user's alone, never
    through a link; None when the folder or the file cannot be trusted."""
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(folder)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        lock = os.open(f"{path.name}.lock", flags, 0o600, dir_fd=folder)
    except OSError:
        return None
    finally:
        os.close(folder)
    info = os.fstat(lock)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_nlink != 1:
        os.close(lock)
        return None
    return lock


def _serve(listener: socket.socket, context: bytes, lock: int) -> None:
    """Accept clients and reap forks until idle for too long, or stopped and drained."""
    woken, wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake)
    stopping: list[bool] = []
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select through the pipe
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    watch = selectors.DefaultSelector()
    watch.register(listener, selectors.EVENT_READ)
    watch.register(woken, selectors.EVENT_READ)
    forks: dict[int, socket.socket] = {}
    idle_s = idle_seconds()
    last = time.monotonic()
    while True:
        if stopping and listener.fileno() >= 0:
            watch.unregister(listener)
            listener.close()  # no new commands; the running ones are asked to stop
            for pid in forks:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        if stopping and not forks:
            return
        wait = None if forks or stopping else max(0.0, last + idle_s - time.monotonic())
        if wait == 0.0:
            return
        events = watch.select(wait)
        if events or forks:
            last = time.monotonic()  # idle counts from the last client or command's end
        for key, _ in events:
            if key.fileobj is listener:
                client, _ = listener.accept()
                own = (lock, listener.fileno(), woken, wake, _selector_fd(watch))
                child = _take(client, context, own + tuple(s.fileno() for s in forks.values()))
                if child is None:
                    client.close()
                else:
                    forks[child] = client
                    watch.register(client, selectors.EVENT_READ, child)
            elif key.fileobj == woken:
                with contextlib.suppress(BlockingIOError):
                    os.read(woken, 4096)
                _reap(forks, watch)
            else:  # a client spoke or went away while its fork runs: stop the fork
                with contextlib.suppress(ProcessLookupError):
                    os.kill(key.data, signal.SIGTERM)
                watch.unregister(key.fileobj)


def _selector_fd(watch: selectors.BaseSelector) -> int:
    return watch.fileno() if isinstance(watch, selectors.EpollSelector) else -1


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


def _take(client: socket.socket, context: bytes, own: tuple[int, ...]) -> int | None:
    """Judge a client, read its request and fork its command; the fork's pid, or None when
    refused (the client is told why)."""
    fds: list[int] = []
    try:
        why = peer_in_context(client, context)  # before reading anything it sends
        if why is not None:
            raise BadRequest(why)
        request = _read_request(client, fds)
        if threading.active_count() != 1:
            raise BadRequest("the warm server runs a thread")
        server = os.getpid()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
        try:
            child = os.fork()
            if child == 0:
                _become(request, fds, (*own, client.fileno()), server)  # never returns
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        client.sendall(_line({"pid": child}))
        return child
    except (OSError, BadRequest) as exc:
        with contextlib.suppress(OSError):
            client.sendall(_line({"refused": str(exc)}))
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _read_request(client: socket.socket, fds: list[int]) -> dict[str, Any]:
    """The client's request and its three files (into ``fds``), read within `_READ_S`."""
    deadline = time.monotonic() + _READ_S

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BadRequest("the request did not come in time")
        return left

    client.settimeout(remaining())
    head, ancillary, _, _ = client.recvmsg(_HEADER.size, socket.CMSG_SPACE(3 * 4))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received = array.array("i")
            received.frombytes(data[: len(data) - len(data) % 4])
            fds += received.tolist()
    if len(head) != _HEADER.size or len(fds) != 3:
        raise BadRequest("a request without its three files")
    (size,) = _HEADER.unpack(head)
    if size > _MAX_REQUEST:
        raise BadRequest("request too large")
    chunks: list[bytes] = []
    left = size
    while left:
        client.settimeout(remaining())
        chunk = client.recv(min(left, 1 << 20))
        if not chunk:
            raise BadRequest("the request ended early")
        chunks.append(chunk)
        left -= len(chunk)
    client.settimeout(None)
    try:
        request = json.loads(b"".join(chunks).decode("utf-8", "surrogateescape"))
    except ValueError as exc:
        raise BadRequest(f"the request is not JSON: {exc}") from None
    _check(request)
    return request  # type: ignore[no-any-return]


def _check(request: object) -> None:
    """Raise BadRequest unless ``request`` has the shape the fork relies on."""
    if not isinstance(request, dict):
        raise BadRequest("the request is not an object")
    argv, env = request.get("argv"), request.get("env")
    if not isinstance(argv, list) or not all(isinstance(part, str) for part in argv):
        raise BadRequest("argv must be a list of strings")
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise BadRequest("env must map strings to strings")
    if not isinstance(request.get("cwd"), str) or not isinstance(request.get("umask"), int):
        raise BadRequest("cwd must be a string and umask an integer")


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _become(request: dict[str, Any], fds: list[int], close: tuple[int, ...], server: int) -> None:
    """In the fork (signals blocked): take the client's files, environment, folder, umask and
    command line, run the command, and exit with its code; never returns to the server's code."""
    code = 1
    try:
        code = failure_code(request["argv"])
        _die_with_server(server)
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
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
        os.umask(request["umask"])
        sys.argv = list(request["argv"])
        for stream, line_buffering in ((sys.stdout, os.isatty(1)), (sys.stderr, True)):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=line_buffering)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        code = _run_command()
    except BaseException as exc:  # the fork must end here, whatever happens
        with contextlib.suppress(BaseException):
            print(f"stockade: warm start failed: {exc}", file=sys.stderr)
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # what a normal exit runs: traces flushed, logs closed
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _die_with_server(server: int) -> None:
    """SIGTERM from the kernel when the server dies, as if the command's client had gone."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != server:  # it died before the request took
        os._exit(1)


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
