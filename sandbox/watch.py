"""One started process tree, watched from start to gone: its output read, its limits enforced.

`WatchedRun` starts the argv that `sandbox.process` built and waits on the process's pidfd and
its output pipes at once, so it wakes when the process exits, when output arrives, at the
deadline, or when the tree is due for a look (psutil sums the tree's resident memory, CPU time
and process count). Past a limit, at the deadline or on cancellation it kills the whole tree
(``sandbox.tree``); after a normal exit the same cleanup runs. The first process is reaped
last, once the rest is gone: until then its pid and its process group's number cannot be handed
to anyone else, so killing them cannot hit a stranger. Whatever goes wrong in between (an
error, an interrupt), the tree is killed and reaped before the error leaves. The `Outcome` it
returns becomes the caller's `ProcessResult`.
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
from stockade.sandbox.init_report import InitReport
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
    """One process tree from start to gone: `run` starts it and returns once nothing of it is
    left, whatever happened in between."""

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
        report: InitReport | None = None,
        argv_has_limits: bool = True,
        pass_fds: tuple[int, ...] = (),
        started: Callable[[], None] | None = None,
    ) -> None:
        self.argv = argv
        self.pass_fds = pass_fds
        self.on_started = started
        self.env = env
        self.cwd = cwd
        self.limits = limits
        self.timeout = timeout
        self.cancel = cancel
        self.isolation = isolation
        self.group = group
        self.report = report
        self.argv_has_limits = argv_has_limits
        self.stdout = Output(limits.output_bytes)
        self.stderr = Output(limits.output_bytes)
        self.stdin = stdin
        self.peak_rss = 0
        self.cpu_seen = 0.0
        self.reaped = False

    def run(self) -> Outcome:
        """Start the command and watch it until it, and everything it started, is gone. On
        any error or interruption here the tree is killed and reaped before it propagates."""
        self._start()
        try:
            return self._watch()
        except BaseException:
            self._abandon()
            raise
        finally:
            for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()  # the pipe's own object: closing it twice closes once

    def _start(self) -> None:
        report = (self.report.write_end,) if self.report is not None else ()
        pass_fds = (*report, *self.pass_fds)
        argv = self.argv
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if self.stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,  # its own process group, killed as one
                close_fds=True,
                pass_fds=pass_fds,
                # without prlimit (util-linux), the kernel limits are set between fork and exec
                preexec_fn=_before_exec(None if self.argv_has_limits else self.limits),
            )
        except OSError as exc:
            raise SandboxError(f"cannot start {argv[0]!r}: {exc.strerror}") from None
        except subprocess.SubprocessError as exc:  # raised between fork and exec
            raise SandboxError(f"cannot start {argv[0]!r}: {exc}") from exc
        finally:
            if self.report is not None:
                self.report.started()
            if self.on_started is not None:
                self.on_started()
        self.started = time.monotonic()
        self.deadline = self.started + self.timeout
        self.pid = self.proc.pid
        self.tree = ProcessTree(
            self.pid, group=self.group, boxed=self.isolation != "none", token=self.env[RUN_TOKEN]
        )

    def _watch(self) -> Outcome:
        killed: KilledReason | None = None
        pidfd = os.pidfd_open(self.pid)
        try:
            with selectors.DefaultSelector() as selector:
                out, err = self.proc.stdout, self.proc.stderr
                assert out is not None
                assert err is not None
                streams = {out.fileno(): self.stdout, err.fileno(): self.stderr}
                for fd in streams:
                    os.set_blocking(fd, False)
                    selector.register(fd, selectors.EVENT_READ)
                selector.register(pidfd, selectors.EVENT_READ)
                if self.report is not None:
                    selector.register(self.report.read_end, selectors.EVENT_READ)
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
                        elif self.report is not None and key.fd == self.report.read_end:
                            self._take_report(selector)
                        else:
                            pending_input = self.write(pending_input, selector)
                    if self.stdout.total + self.stderr.total > self.limits.drain_bytes:
                        killed = "output"
                if killed is not None:
                    self.tree.kill()
                # the report is in by now unless bubblewrap failed before it wrote one
                self._take_report(selector, last=True)
                selector.unregister(pidfd)
                # the first process is not reaped until the rest is gone: until then its
                # number, and its process group's, cannot be anyone else's
                left = self.tree.finish()
                if not self.drain(streams, selector):
                    # a writer still holds the output open: one that escaped every search
                    left += self.tree.finish()
                    self.drain(streams, selector)
                status, cpu = self.reap()
        finally:
            os.close(pidfd)
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

    def _take_report(self, selector: selectors.BaseSelector, *, last: bool = False) -> None:
        """Read what bubblewrap's report has brought; once it is complete (or at the ``last``
        look) the report leaves the loop."""
        report = self.report
        if report is None or report.read_end not in selector.get_map():
            return
        if report.read() or last:
            selector.unregister(report.read_end)
        if report.pid is not None:
            self.tree.set_namespace_init(report.pid)

    def _abandon(self) -> None:
        """After an error in the watching: kill the tree, reap the first process."""
        with contextlib.suppress(Exception):
            self.tree.kill()
        with contextlib.suppress(Exception):
            self.tree.finish(wait_s=0.5)
        if not self.reaped:
            with contextlib.suppress(OSError):
                self.proc.kill()  # not reaped yet: the pid is still this child's
            self.reap()

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
                self.reaped = True
                return 0, 0.0
            self.reaped = True
            self.proc.returncode = (
                -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            )
            return status, usage.ru_utime + usage.ru_stime


def _before_exec(limits: Limits | None) -> Callable[[], None] | None:
    """What the child does between fork and exec without prlimit: set its kernel limits; None
    when there is nothing to do (a faster spawn)."""
    if limits is None:
        return None
    pairs = limits.rlimits(processes=False)

    def prepare() -> None:
        for number, soft, hard in pairs:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(number, (soft, hard))

    return prepare
