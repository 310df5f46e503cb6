"""One started process tree, watched from start to gone: its output read, its limits enforced.

`WatchedRun` starts the argv that `sandbox.process` built and waits on the process's pidfd and
its output pipes at once, so it wakes when the process exits, when output arrives, at the
deadline, or when the tree is due for a look (psutil sums the tree's resident memory, CPU time
and process count). Past a limit, at the deadline or on cancellation it kills the whole tree
(``sandbox.tree``); after a normal exit the same cleanup runs. The `Outcome` it returns becomes
the caller's `ProcessResult`.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stockade.sandbox.cgroups import PidsGroup
from stockade.sandbox.errors import SandboxError
from stockade.sandbox.limits import Isolation, KilledReason, Limits, MiB, ProcessResult
from stockade.sandbox.tree import RUN_TOKEN, ProcessTree

SAMPLE_S = 0.02  # how often the tree is looked at
FIRST_SAMPLE_S = 0.01  # the first look comes sooner, so runs of a few ms get a memory figure
CANCEL_POLL_S = 0.05
_CHUNK = 65536


@dataclass
class Output:
    """What a process wrote to one pipe: the first ``keep`` bytes, and how many in all."""

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
class Outcome:
    """How a run ended, as the watcher saw it."""

    status: int
    cpu_s: float
    stdout: Output
    stderr: Output
    killed: KilledReason | None
    peak_rss: int
    duration_s: float
    left_running: int

    def result(
        self, isolation: Isolation, network: bool, warnings: tuple[str, ...]
    ) -> ProcessResult:
        """The result the caller reads: exit or signal, output, and why the run was killed."""
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


class WatchedRun:
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
        enter: Callable[[], None] | None = None,
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
                # between fork and exec: the copy-on-write layers are entered (``enter``), and
                # without prlimit (util-linux) the kernel limits are set
                preexec_fn=_before_exec(enter, None if argv_has_limits else limits),
            )
        except OSError as exc:
            raise SandboxError(f"cannot start {argv[0]!r}: {exc.strerror}") from None
        except subprocess.SubprocessError as exc:  # raised between fork and exec
            raise SandboxError(
                f"cannot start {argv[0]!r}: entering its copy-on-write layers failed ({exc}); "
                "this kernel may not allow an overlay in a user namespace"
            ) from exc
        self.pid = self.proc.pid
        self.tree = ProcessTree(
            self.pid, group=group, boxed=isolation != "none", token=env[RUN_TOKEN]
        )
        self.stdout = Output(limits.output_bytes)
        self.stderr = Output(limits.output_bytes)
        self.stdin = stdin
        self.peak_rss = 0
        self.cpu_seen = 0.0

    def wait(self) -> Outcome:
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
        return Outcome(
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

    def read(self, fd: int, stream: Output, selector: selectors.BaseSelector) -> None:
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

    def drain(self, streams: dict[int, Output], selector: selectors.BaseSelector) -> bool:
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


def _before_exec(
    enter: Callable[[], None] | None, limits: Limits | None
) -> Callable[[], None] | None:
    """What the child does between fork and exec: enter its copy-on-write layers, then (without
    prlimit) set its kernel limits; None when there is nothing to do (a faster spawn)."""
    if enter is None and limits is None:
        return None
    pairs = limits.rlimits(processes=False) if limits is not None else []

    def prepare() -> None:
        if enter is not None:
            enter()
        for number, soft, hard in pairs:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(number, (soft, hard))

    return prepare
