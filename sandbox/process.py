"""Run a command an agent wrote: boxed by bubblewrap where it exists, limited and watched always.

    result = run_process("pytest -q", fs=fs, timeout=60, limits=Limits(memory_mb=1024))
    result.exit_code, result.stdout, result.killed_reason, result.isolation

One run, start to end:

1. The command line runs as ``bash -c`` (a list runs as it is) inside the bubblewrap box of
   ``sandbox.bubblewrap`` (the VFS mounts at their logical paths, nothing else of the host's
   files, no network unless asked), under ``prlimit`` for the per-process kernel limits; its
   environment is an allow-list (``PATH``, ``HOME``, ``LANG`` ...) plus what the caller gives,
   never the host's.
2. One loop waits on the process's pidfd and its output pipes at once, so it wakes when the
   process exits, when output arrives, at the deadline, or when the tree is due for a look:
   psutil sums the tree's resident memory, CPU time and process count, and the tree is killed
   past a limit. Output past the limit is read and dropped (a full pipe would stall the command).
3. On any limit, timeout or cancellation, the whole tree is killed (``sandbox.tree``): its
   process group, every process seen in it, its pids control group where it has one (which
   also bounds how many processes it may have, even for root), and under bubblewrap the PID
   namespace, whose every process the kernel kills when bubblewrap's init dies. After a normal
   exit the same cleanup runs, so a child left sleeping in the background does not outlive the
   call either.

Without bubblewrap (not installed, or user namespaces forbidden) the run has the same limits
and watching but sees the host as this user does; the result and the log say so, and a policy
can refuse such runs (``require_isolation``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import resource
import secrets
import select
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from stockade.sandbox.bubblewrap import SANDBOX_PATH, box, bubblewrap
from stockade.sandbox.cgroups import PidsGroup
from stockade.sandbox.errors import SandboxError
from stockade.sandbox.limits import Isolation, KilledReason, Limits, MiB, ProcessResult
from stockade.sandbox.logical import normalize
from stockade.sandbox.tree import RUN_TOKEN, ProcessTree
from stockade.sandbox.vfs import VirtualFS

log = logging.getLogger("stockade.sandbox")
_CHILD_PID = re.compile(rb'"child-pid"\s*:\s*(\d+)\s*[,}\n]')  # in --info-fd's report

SAMPLE_S = 0.02  # how often the tree is looked at
FIRST_SAMPLE_S = 0.01  # the first look comes sooner, so runs of a few ms get a memory figure
CANCEL_POLL_S = 0.05
_CHUNK = 65536
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NO_BUBBLEWRAP = "bubblewrap is not available"
NO_ISOLATION_WARNING = (
    "the command ran WITHOUT isolation, with resource limits only; it could read and write "
    "anything this user can, and reach the network"
)

IsolationChoice = Literal["auto", "bubblewrap", "none"]


def run_process(
    argv_or_command: str | Sequence[str],
    *,
    fs: VirtualFS,
    cwd: str = "/workspace",
    timeout: float,
    limits: Limits | None = None,
    network: bool = False,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    isolation: IsolationChoice = "auto",
    cancel: threading.Event | None = None,
) -> ProcessResult:
    """Run a command line (with bash) or an argv inside the sandbox and wait for it.

    ``cwd`` is a logical folder of a host mount of ``fs``. ``timeout`` is wall-clock seconds;
    ``cancel`` stops the run from another thread. ``isolation="auto"`` uses bubblewrap when it
    works here and says loudly when it does not; ``"bubblewrap"`` raises SandboxError instead;
    ``"none"`` runs with limits only. Raises SandboxError for a bad ``cwd``, ``env`` or
    ``timeout`` (nothing ran); everything the command does is in the result.
    """
    limits = limits or Limits()
    if not timeout > 0:
        raise SandboxError(f"timeout must be a positive number of seconds, got {timeout}")
    command = _argv(argv_or_command)
    extra_env = _checked_env(env)
    cwd = normalize(cwd)
    _check_cwd(fs, cwd)
    bwrap = bubblewrap() if isolation != "none" else None
    if isolation == "bubblewrap" and bwrap is None:
        raise SandboxError(
            "isolation was required but bubblewrap is not available here: install the "
            "'bubblewrap' package (and allow unprivileged user namespaces), or run without it"
        )
    with contextlib.ExitStack() as cleanup:
        token = secrets.token_hex(8)
        prlimit = shutil.which("prlimit")
        warnings: list[str] = []
        info_fd: int | None = None
        if bwrap is not None:
            info_read, info_fd = os.pipe()  # bubblewrap reports its init's pid here
            cleanup.callback(os.close, info_read)
            cleanup.callback(_close_quietly, info_fd)
            boxed = box(fs.mounts, cwd, network=network, executable=bwrap, info_fd=info_fd)
            warnings += boxed.warnings
            argv = [*boxed.argv, *_limited(prlimit, limits, boxed=True), *command]
            host_cwd: str | None = None
            home = "/tmp"
            used: Isolation = "bubblewrap"
        else:
            host_cwd = str(fs.host_path(cwd))
            why = "isolation was turned off" if isolation == "none" else NO_BUBBLEWRAP
            warnings.append(f"{why}: {NO_ISOLATION_WARNING}")
            if isolation == "auto":
                log.warning("%s: %s: %s", why, NO_ISOLATION_WARNING, _shown(command))
            home = tempfile.mkdtemp(prefix="stockade-home-")
            cleanup.callback(shutil.rmtree, home, ignore_errors=True)
            argv = [*_limited(prlimit, limits, boxed=False), *command]
            used = "none"
        # bubblewrap's two processes (its outer one and the namespace's init) are not the
        # command's, but they count in the group
        group = PidsGroup.create(f"stockade-{token}", limits.max_procs + (2 if bwrap else 0))
        if group is not None:
            cleanup.callback(group.remove)
            argv = group.join_argv(argv)
        environment = {
            "PATH": _path_with_python(),
            "HOME": home,
            "TMPDIR": home,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PWD": host_cwd or cwd,
            "USER": "sandbox",
            "LOGNAME": "sandbox",
            "SHELL": "/bin/bash",
            **extra_env,
            RUN_TOKEN: token,
        }
        run = _Run(
            argv,
            environment,
            host_cwd,
            limits,
            timeout,
            input,
            cancel,
            used,
            group,
            pass_fds=(info_fd,) if info_fd is not None else (),
            argv_has_limits=prlimit is not None,
        )
        if info_fd is not None:
            run.tree.namespace_init = _namespace_init(info_read, info_fd)
        outcome = run.wait()
    # without a box the command could reach the network whatever was asked
    reachable = network if bwrap is not None else True
    return outcome.result(used, reachable, tuple(warnings))


async def run_process_async(
    argv_or_command: str | Sequence[str],
    *,
    fs: VirtualFS,
    cwd: str = "/workspace",
    timeout: float,  # noqa: ASYNC109 - the process's own deadline, enforced by run_process
    limits: Limits | None = None,
    network: bool = False,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    isolation: IsolationChoice = "auto",
) -> ProcessResult:
    """`run_process` from async code. Cancelling the awaiting task kills the process tree, and
    the cancellation propagates only once the tree is gone."""
    cancel = threading.Event()
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(
        None,
        lambda: run_process(
            argv_or_command,
            fs=fs,
            cwd=cwd,
            timeout=timeout,
            limits=limits,
            network=network,
            env=env,
            input=input,
            isolation=isolation,
            cancel=cancel,
        ),
    )
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        cancel.set()
        with contextlib.suppress(Exception):
            await future
        raise


# -- the run -----------------------------------------------------------------------------------


@dataclass
class _Stream:
    keep: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)

    def text(self) -> str:
        return bytes(self.data).decode("utf-8", "replace")


@dataclass
class _Outcome:
    status: int
    cpu_s: float
    stdout: _Stream
    stderr: _Stream
    killed: KilledReason | None
    peak_rss: int
    duration_s: float
    left_running: int

    def result(
        self, isolation: Isolation, network: bool, warnings: tuple[str, ...]
    ) -> ProcessResult:
        exit_code: int | None = None
        ended_by: int | None = None
        if os.WIFSIGNALED(self.status):
            ended_by = os.WTERMSIG(self.status)
        else:
            exit_code = os.WEXITSTATUS(self.status)
            if exit_code > 128 and exit_code - 128 in _SIGNALS:
                ended_by = exit_code - 128  # a shell's or bubblewrap's way to say a signal
        killed = self.killed
        if killed is None and ended_by == signal.SIGXCPU:
            killed = "cpu"  # the kernel's CPU limit
        elif killed is None and ended_by == signal.SIGXFSZ:
            killed = "file_size"  # the kernel's file-size limit (Python ignores it: EFBIG)
        notes = list(warnings)
        if self.left_running and self.killed is None:
            notes.append(
                f"{self.left_running} process(es) the command started were still running when "
                "it ended; they were killed"
            )
        return ProcessResult(
            exit_code=exit_code,
            signal=ended_by,
            stdout=self.stdout.text(),
            stderr=self.stderr.text(),
            stdout_bytes=self.stdout.total,
            stderr_bytes=self.stderr.total,
            truncated=self.stdout.truncated or self.stderr.truncated,
            timed_out=self.killed == "timeout",
            killed_reason=killed,
            peak_rss=self.peak_rss,
            cpu_s=round(self.cpu_s, 4),
            duration_s=round(self.duration_s, 4),
            isolation=isolation,
            network=network,
            warnings=tuple(notes),
        )


_SIGNALS = frozenset(s.value for s in signal.Signals)


class _Run:
    """One process tree from start to gone."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        limits: Limits,
        timeout: float,
        stdin: bytes | None,
        cancel: threading.Event | None,
        isolation: Isolation,
        group: PidsGroup | None,
        pass_fds: tuple[int, ...] = (),
        argv_has_limits: bool = True,
    ) -> None:
        self.limits = limits
        self.cancel = cancel
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
                start_new_session=True,  # its own process group, killed as one
                close_fds=True,
                pass_fds=pass_fds,
                # without prlimit (util-linux) the kernel limits are set between fork and exec
                preexec_fn=None if argv_has_limits else _preexec(limits),
            )
        except OSError as exc:
            raise SandboxError(f"cannot start {argv[0]!r}: {exc.strerror}") from None
        self.pid = self.proc.pid
        self.tree = ProcessTree(
            self.pid, group=group, boxed=isolation == "bubblewrap", token=env[RUN_TOKEN]
        )
        self.stdout = _Stream(limits.output_bytes)
        self.stderr = _Stream(limits.output_bytes)
        self.stdin = stdin
        self.peak_rss = 0
        self.cpu_seen = 0.0

    def wait(self) -> _Outcome:
        killed: KilledReason | None = None
        selector = selectors.DefaultSelector()
        pidfd = os.pidfd_open(self.pid)
        try:
            out, err = self.proc.stdout, self.proc.stderr
            assert out is not None
            assert err is not None
            streams = {out.fileno(): self.stdout, err.fileno(): self.stderr}
            for fd in streams:
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            selector.register(pidfd, selectors.EVENT_READ)
            pending_input = memoryview(self.stdin or b"")
            if self.proc.stdin is not None:
                os.set_blocking(self.proc.stdin.fileno(), False)
                selector.register(self.proc.stdin.fileno(), selectors.EVENT_WRITE)
            next_look = self.started + FIRST_SAMPLE_S
            exited = False
            while not exited and killed is None:
                now = time.monotonic()
                if now >= self.deadline:
                    killed = "timeout"
                    break
                if self.cancel is not None and self.cancel.is_set():
                    killed = "cancelled"
                    break
                if now >= next_look:
                    killed = self.look()
                    next_look = now + SAMPLE_S
                    if killed is not None:
                        break
                wake = min(self.deadline, next_look) - now
                if self.cancel is not None:
                    wake = min(wake, CANCEL_POLL_S)
                for key, _ in selector.select(max(0.0, wake)):
                    if key.fd == pidfd:
                        exited = True
                    elif key.fd in streams:
                        self.read(key.fd, streams[key.fd], selector)
                    else:
                        pending_input = self.write(pending_input, selector)
                if self.stdout.total + self.stderr.total > self.limits.drain_bytes:
                    killed = "output"
            if killed is not None:
                self.tree.kill()
            status, cpu = self.reap()
            left = self.tree.finish()
            selector.unregister(pidfd)
            if not self.drain(streams, selector):
                # a writer still holds the output open: one that escaped every search
                left += self.tree.finish()
                self.drain(streams, selector)
        finally:
            selector.close()
            os.close(pidfd)
            for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        return _Outcome(
            status=status,
            cpu_s=max(cpu, self.cpu_seen),
            stdout=self.stdout,
            stderr=self.stderr,
            killed=killed,
            peak_rss=self.peak_rss,
            duration_s=time.monotonic() - self.started,
            left_running=left,
        )

    def look(self) -> KilledReason | None:
        """Sample the tree; the limit it passed, if one."""
        sample = self.tree.sample()
        self.peak_rss = max(self.peak_rss, sample.rss)
        self.cpu_seen = max(self.cpu_seen, sample.cpu_s)
        if sample.rss > self.limits.memory_mb * MiB:
            return "memory"
        if sample.processes > self.limits.max_procs or sample.refused:
            return "processes"  # past the limit, or the kernel refused a process for it
        if sample.cpu_s > self.limits.cpu_s:
            return "cpu"
        return None

    # -- output ------------------------------------------------------------------------------

    def read(self, fd: int, stream: _Stream, selector: selectors.BaseSelector) -> None:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            selector.unregister(fd)
            return
        stream.add(chunk)

    def write(self, pending: memoryview, selector: selectors.BaseSelector) -> memoryview:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            written = os.write(stdin.fileno(), pending[:_CHUNK]) if pending else 0
        except BlockingIOError:
            return pending
        except BrokenPipeError:
            written = len(pending)  # the command stopped reading: the rest is not wanted
        pending = pending[written:]
        if not pending:
            selector.unregister(stdin.fileno())
            stdin.close()
        return pending

    def drain(self, streams: dict[int, _Stream], selector: selectors.BaseSelector) -> bool:
        """Read what is left in the pipes; False when a writer still held them open after
        a short while (every writer should be dead by now: one that is not escaped)."""
        until = time.monotonic() + 0.25
        while any(fd in streams for fd in selector.get_map()):
            left = until - time.monotonic()
            if left <= 0:
                return False
            for key, _ in selector.select(left):
                if key.fd in streams:
                    self.read(key.fd, streams[key.fd], selector)
        return True

    def reap(self) -> tuple[int, float]:
        """Wait for the first process: its status and the CPU seconds of it and everything it
        reaped. (Its ``ru_maxrss`` is not used: a vforked child's counts the parent's memory.)"""
        while True:
            try:
                _, status, usage = os.wait4(self.pid, 0)
            except InterruptedError:
                continue
            except ChildProcessError:  # reaped elsewhere (not by us): nothing to report
                return 0, 0.0
            self.proc.returncode = (
                -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            )
            return status, usage.ru_utime + usage.ru_stime


# -- helpers -----------------------------------------------------------------------------------


def _argv(argv_or_command: str | Sequence[str]) -> list[str]:
    if isinstance(argv_or_command, str):
        if "\x00" in argv_or_command:
            raise SandboxError("the command line contains a NUL byte; remove it")
        if not argv_or_command.strip():
            raise SandboxError("the command line is empty; give a command to run")
        return ["/bin/bash", "-c", argv_or_command]
    argv = [str(a) for a in argv_or_command]
    if not argv:
        raise SandboxError("the argv is empty; give at least the program to run")
    if any("\x00" in a for a in argv):
        raise SandboxError("an argument contains a NUL byte; remove it")
    return argv


def _checked_env(env: Mapping[str, str] | None) -> dict[str, str]:
    if not env:
        return {}
    checked = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise SandboxError(
                f"environment variable name {name!r} is not valid; use letters, digits and _"
            )
        if not isinstance(value, str) or "\x00" in value:
            raise SandboxError(f"environment variable {name} must be text without NUL bytes")
        checked[name] = value
    return checked


def _check_cwd(fs: VirtualFS, cwd: str) -> None:
    try:
        info = fs.stat(cwd)
    except SandboxError:
        raise
    except OSError as exc:
        raise SandboxError(f"cannot run in {cwd}: {exc}", cwd) from None
    if info.kind != "dir":
        raise SandboxError(f"cannot run in {cwd}: it is a {info.kind}, not a folder", cwd)


_PRLIMIT_FLAGS = {
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_NOFILE: "--nofile",
    resource.RLIMIT_CORE: "--core",
    resource.RLIMIT_NPROC: "--nproc",
}


def _limited(prlimit: str | None, limits: Limits, *, boxed: bool) -> list[str]:
    """The ``prlimit`` prefix that sets the kernel limits. Inside the box it also sets the
    process limit, which the kernel counts per user namespace, so there it counts the box's
    processes alone (plus bubblewrap's init); outside, it would count every process of this
    user, so the watcher alone bounds processes there. Empty when prlimit is missing (then a
    pre-exec hook sets the other limits)."""
    if prlimit is None:
        return []
    argv = [prlimit]
    for number, soft, hard in limits.rlimits(processes=boxed):
        if number == resource.RLIMIT_NPROC:
            soft = hard = soft + 1  # bubblewrap's init runs as the same user in the namespace
        argv.append(f"{_PRLIMIT_FLAGS[number]}={soft}:{hard}")
    return [*argv, "--"]


def _preexec(limits: Limits) -> Callable[[], None]:
    pairs = limits.rlimits(processes=False)

    def apply() -> None:
        for number, soft, hard in pairs:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(number, (soft, hard))

    return apply


def _path_with_python() -> str:
    return f"{os.path.dirname(sys.executable)}:{SANDBOX_PATH}"


def _namespace_init(info_read: int, info_write: int) -> int | None:
    """The pid of bubblewrap's init, from what ``--info-fd`` reports (None if bubblewrap
    failed before reporting). bubblewrap writes its report a line at a time, so it is read
    until the pid has arrived, not in one read (a busy machine split it, and the run then
    counted bubblewrap's init as a process the command left behind)."""
    _close_quietly(info_write)  # ours: the pipe ends when bubblewrap's copy closes
    report = b""
    deadline = time.monotonic() + 5.0
    while (found := _CHILD_PID.search(report)) is None:
        ready, _, _ = select.select([info_read], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return None
        try:
            chunk = os.read(info_read, 4096)
        except OSError:
            return None
        if not chunk:
            return None  # closed before the pid came: bubblewrap failed
        report += chunk
    return int(found.group(1))


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _shown(command: list[str]) -> str:
    text = command[-1] if command[:2] == ["/bin/bash", "-c"] else " ".join(command)
    return text if len(text) <= 200 else text[:200] + "..."
