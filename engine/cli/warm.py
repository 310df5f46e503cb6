"""Warm starts: ``stockade serve --warm`` and ``stockade hook claude-code --warm`` run in a process
forked from a warm Stockade kept for this user, instead of loading every module anew.

Loading the engine's modules takes about 0.3 s, which an MCP host pays at each spawn and a hook
at each tool call. With ``--warm``, this module (which loads nothing heavy) connects to the warm
server over a Unix socket and hands it the command line, the environment, the working folder,
the umask and its own stdin, stdout and stderr. The warm server forks, and the fork runs the
command exactly as a cold start would, on those very files. This process stays as the command's
stand-in: it forwards SIGINT, SIGTERM and SIGHUP to the fork and exits with the fork's exit code;
if it dies, the warm server stops the fork. With no warm server running, the command runs cold
here and starts one for next time (``warm_server``), which exits after ``STOCKADE_WARM_IDLE``
seconds (default 900) without a client.

Who may use a warm server: only a process in the warm server's own context, checked by the
server from ``/proc`` the moment it connects, before a byte is read: the same user and groups,
the same namespaces (mount, pid, network, user ...), root, cgroup, capabilities, no_new_privs
and seccomp state, LSM label and resource limits, behind the client's pidfd (Linux 6.5 or
later; without one, every start stays cold), so a pid taken over by another process is not
mistaken for it. A process that differs (a command sandboxed by Stockade differs in nearly all
of these) is refused, so a warm server never runs anything a client could not have run itself.
The launcher checks the server the same way before it hands anything over, so something else
listening at the socket's path gets nothing. The socket lies in a folder only the user can open
(``$XDG_RUNTIME_DIR/stockade``, else ``/tmp/stockade-<uid>``, checked for owner and mode), and
its name holds a digest of that context and of the code (Stockade's files, the installed
distributions), so a client finds only a server like itself. The server is started with
``python -P`` in ``/``: nothing is imported from the folder the command runs in.

Why by hand: no library forks a prepared Python process for a command line; this is the
fork-server of tools such as Emacs' daemon, kept to what Stockade's commands need.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import stat
import struct
import sys
from pathlib import Path

WARM_COMMANDS = frozenset({"serve", "hook"})
WARM_FLAG = "--warm"
IDLE_ENV = "STOCKADE_WARM_IDLE"
DEFAULT_IDLE_S = 900.0
_CONTEXT_FIELDS = (
    b"Uid:",
    b"Gid:",
    b"Groups:",
    b"NoNewPrivs:",
    b"Seccomp:",
    b"CapInh:",
    b"CapPrm:",
    b"CapEff:",
    b"CapBnd:",
    b"CapAmb:",
    b"Seccomp_filters:",
)
_NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "time", "user", "uts")
_HEADER = struct.Struct("!I")  # the length of the request that follows it
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes
_FORK_WAIT_S = 30.0  # for the warm server to take the command (it reads each request in 2 s)
_SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)  # Linux's number; Python 3.11 lacks the name


def failure_code(argv: list[str]) -> int:
    """The exit code of a command that could not run: 2 for a hook (its host blocks the call on
    2 alone, and lets it run on any other failure), else 1."""
    return 2 if len(argv) > 1 and argv[1] == "hook" else 1


def wants_warm(argv: list[str]) -> bool:
    """Whether this command line asks for a warm start (``--warm`` on a command that has it)."""
    return len(argv) > 1 and argv[1] in WARM_COMMANDS and WARM_FLAG in argv[2:]


def process_context(pid: int | str = "self") -> bytes:
    """What must match between a warm server and its client: the process's user, groups,
    namespaces, cgroup, capabilities, no_new_privs, seccomp and resource limits, as ``/proc``
    shows them now. Raises OSError when the process is gone."""
    base = f"/proc/{pid}"
    parts = []
    for name in _NAMESPACES:
        try:
            parts.append(os.readlink(f"{base}/ns/{name}").encode())
        except FileNotFoundError:  # a kernel without this namespace: absent for both sides
            parts.append(b"-")
    with open(f"{base}/status", "rb") as status:
        parts += [line.strip() for line in status if line.startswith(_CONTEXT_FIELDS)]
    for name in ("cgroup", "limits"):
        with open(f"{base}/{name}", "rb") as text:
            parts.append(text.read())
    parts.append(os.readlink(f"{base}/root").encode())  # a chroot
    try:
        with open(f"{base}/attr/current", "rb") as label:  # the LSM's label (AppArmor, SELinux)
            parts.append(label.read())
    except OSError:
        parts.append(b"-")
    return b"\n".join(parts)


def code_digest() -> bytes:
    """The identity of the running Stockade code: the interpreter, the environment, the installed
    distributions' names and versions, and each of Stockade's module files' name, size and
    modification time (a change to any makes a new warm server)."""
    root = Path(__file__).resolve().parents[2]  # the folder holding engine/, policies/, sandbox/
    seen = [sys.executable.encode(), sys.prefix.encode(), str(root).encode()]
    pending = [root / "engine", root / "policies", root / "sandbox", root / "stockade"]
    for folder in sys.path:  # the installed distributions, by name and version
        if folder.endswith("site-packages") and os.path.isdir(folder):
            seen += [name.encode() for name in os.listdir(folder) if name.endswith(".dist-info")]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                    pending.append(Path(entry.path))
                elif entry.name.endswith((".py", ".toml")):
                    info = entry.stat(follow_symlinks=False)
                    seen.append(f"{entry.path} {info.st_size} {info.st_mtime_ns}".encode())
    return b"\n".join(sorted(seen))


def socket_folder() -> Path | None:
    """The folder of this user's warm servers, created private; None when it cannot be trusted
    (another owner, open to others, not a folder)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(runtime, "stockade") if runtime else Path(f"/tmp/stockade-{os.getuid()}")
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return folder


def socket_path(context: bytes | None = None) -> Path | None:
    """Where the warm server for this process's context and code listens, or None (see
    `socket_folder`; also when the path would be too long for a Unix socket)."""
    folder = socket_folder()
    if folder is None:
        return None
    context = process_context() if context is None else context
    digest = hashlib.sha256(context + b"\0" + code_digest()).hexdigest()[:24]
    path = folder / f"warm-{digest}.sock"
    return path if len(str(path)) <= _MAX_SOCKET_PATH else None


def peer_credentials(connection: socket.socket) -> tuple[int, int, int]:
    """The (pid, uid, gid) of the process at the other end of a Unix socket."""
    raw = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def peer_pidfd(connection: socket.socket) -> int | None:
    """A pidfd of the process at the other end (Linux 6.5 and later), or None without one."""
    try:
        raw = connection.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD, 4)
    except OSError:
        return None
    return int(struct.unpack("i", raw)[0])


def still_running(pidfd: int) -> bool:
    """Whether the process of ``pidfd`` has not exited (its pid cannot have been reused)."""
    watch = select.poll()
    watch.register(pidfd, select.POLLIN)  # a pidfd turns readable when its process exits
    return not watch.poll(0)


def peer_in_context(connection: socket.socket, context: bytes) -> str | None:
    """Why the process at the other end of ``connection`` is not in ``context`` (see
    `process_context`), or None when it is. The context is read from ``/proc/<pid>`` of the pid
    the kernel names, behind the peer's pidfd: once that process has exited, the pid could name
    another one, so a peer without a pidfd (a kernel before 6.5) or whose process is gone is
    refused."""
    pid, uid, _ = peer_credentials(connection)
    if uid != os.getuid():
        return "another user"
    pidfd = peer_pidfd(connection)
    if pidfd is None:
        return "no pidfd for the peer (Linux 6.5 or later is needed)"
    try:
        theirs = process_context(pid)
        if not still_running(pidfd):
            return "the peer's process is gone"
    except OSError:
        return "the peer's process is gone"
    finally:
        os.close(pidfd)
    if theirs != context:
        return "the peer runs in another context (namespaces, cgroup, privileges or limits)"
    return None


def run_warm(argv: list[str]) -> int | None:
    """Run ``argv`` in a fork of the warm server and return its exit code; None when no warm
    server took it (none runs: one is started for next time; or it is not trusted, or refused),
    and the caller runs the command cold. Never raises: once the command is handed over it can
    no longer run cold, so a failure then is the command's failure (`failure_code`)."""
    try:
        context = process_context()  # read once: it names the socket and checks the server
        path = socket_path(context)
        if path is None:
            return None
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    with connection:
        try:
            connection.connect(str(path))
        except OSError:
            _start_server(path)
            return None
        try:
            # the server is checked as it checks its clients: a process in another context that
            # took the socket's place would otherwise get this command's files and environment
            if peer_in_context(connection, context) is not None:
                return None
            request = {
                "argv": argv,
                "cwd": os.getcwd(),
                "env": dict(os.environ),
                "umask": _umask(),
            }
            payload = json.dumps(request).encode("utf-8", "surrogateescape")
            fds = array.array("i", [0, 1, 2])
            connection.sendmsg(
                [_HEADER.pack(len(payload))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
            )
            connection.sendall(payload)
        except (OSError, ValueError):  # no fork before the whole request is read: run cold
            return None
        try:
            return _stand_in(connection, argv)
        except Exception as exc:  # handed over: it cannot run cold any more
            print(f"stockade: the warm start failed: {exc}", file=sys.stderr)
            return failure_code(argv)


def _stand_in(connection: socket.socket, argv: list[str]) -> int | None:
    """Forward signals to the fork until it ends; its exit code (None: refused, run cold)."""
    failure = failure_code(argv)
    child: list[int] = []
    pending: list[int] = []

    def forward(number: int, _frame: object) -> None:
        if not child:
            pending.append(number)
            return
        with contextlib.suppress(ProcessLookupError):  # it ended already
            os.kill(child[0], number)

    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, forward)
    connection.settimeout(_FORK_WAIT_S)  # until the fork is made; then as long as it runs
    reader = connection.makefile("rb")
    try:
        for line in reader:
            message = json.loads(line)
            if "refused" in message:
                print(f"stockade: warm start refused ({message['refused']}); starting cold",
                      file=sys.stderr)  # fmt: skip
                return None
            if "pid" in message:
                child.append(int(message["pid"]))
                connection.settimeout(None)
                for waiting in pending:
                    forward(waiting, None)
            if "exit" in message:
                return _exit_code(int(message["exit"]), failure)
    except (ConnectionResetError, BrokenPipeError):
        if not child:
            return None  # refused before the request was read: no fork, so run cold
        raise
    except TimeoutError:
        print("stockade: the warm server did not start the command in time", file=sys.stderr)
        return failure
    print("stockade: the warm server stopped before the command ended", file=sys.stderr)
    return failure


def _exit_code(code: int, failure: int) -> int:
    """The fork's exit status as this process's exit code: 128 + N when killed by signal N; for
    a hook, whose host lets a call run on anything but 0 and 2, every other code is 2."""
    if code < 0:
        code = 128 - code
    if failure == 2 and code not in (0, 2):
        return 2
    return code


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def idle_seconds() -> float:
    """How long a warm server waits for a client before it exits (``STOCKADE_WARM_IDLE``)."""
    text = os.environ.get(IDLE_ENV, "")
    try:
        value = float(text) if text else DEFAULT_IDLE_S
    except ValueError:
        value = DEFAULT_IDLE_S
    return value if value > 0 else DEFAULT_IDLE_S


def _start_server(path: Path) -> None:
    """Start a warm server at ``path`` for next time, detached from this command."""
    import subprocess

    with contextlib.suppress(OSError):  # no warm server, then: every start stays cold
        subprocess.Popen(
            # -P and "/": nothing on the module path from the folder this command runs in,
            # which the agent may write (a cold start does not look there either)
            [sys.executable, "-P", "-m", "stockade.engine.cli.warm_server", str(path)],
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not in the host's process group: it outlives this command
        )
