"""The processes of one run, found, measured and killed as a whole.

Where the run has a pids cgroup (`sandbox.cgroups`), its ``cgroup.procs`` is the exact list:
every process the run started, wherever it went. Otherwise the tree is walked through parent
links from the first process, reading only process ids newer than the first one (ids grow, so
this skips the machine's older processes: far cheaper than psutil's scan of every process);
and without bubblewrap a process that left the tree is still found by the run's token in its
environment. Under bubblewrap, killing the namespace's first process (bubblewrap's init, whose
pid ``--info-fd`` reports) makes the kernel kill everything in the namespace.

Every number killed comes from the run itself: its group's ``cgroup.procs``, its first
process (whose process group is killed only while that process is not yet reaped, so the
number cannot belong to anyone else), the processes met in it (killed through psutil, which
refuses a pid reused since), and bubblewrap's init, accepted only as a child of the first
process. `sandbox.safe_kill` refuses the rest.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

import psutil

from stockade.sandbox.cgroups import PidsGroup
from stockade.sandbox.safe_kill import kill_group, may_kill

log = logging.getLogger("stockade.sandbox")
RUN_TOKEN = "STOCKADE_RUN"  # in every run's environment: finds its strays without a box


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at the tree: resident memory (bytes), CPU seconds, processes of the command."""

    rss: int
    cpu_s: float
    processes: int
    refused: int = 0  # new processes the kernel refused for the group's limit


class ProcessTree:
    """The processes of the run whose first process is ``root`` (bubblewrap's, when ``boxed``)."""

    def __init__(self, root: int, *, group: PidsGroup | None, boxed: bool, token: str) -> None:
        self.root = root
        self.group = group
        self.boxed = boxed
        self.token = token
        self.seen: dict[int, float] = {}  # pid -> create time: every process met in the run
        self._init: psutil.Process | None = None  # bubblewrap's init, once reported

    @property
    def namespace_init(self) -> int | None:
        """The pid of bubblewrap's init, once reported (see `set_namespace_init`)."""
        return self._init.pid if self._init is not None else None

    def set_namespace_init(self, pid: int) -> None:
        """Take the pid bubblewrap reported for its init, if it is a child of the first process
        (a report read wrong, or an init gone already, is ignored: the group and the process
        group still find what is left)."""
        if not may_kill(pid):
            return
        with contextlib.suppress(psutil.Error):
            init = psutil.Process(pid)
            if init.ppid() == self.root:
                self._init = init

    # -- finding -----------------------------------------------------------------------------

    def members(self) -> list[psutil.Process]:
        """The run's processes now, other than the first; each is recorded in ``seen``."""
        if self.group is not None:
            found = []
            for pid in self.group.pids():
                if pid == self.root:
                    continue
                with contextlib.suppress(psutil.Error):
                    found.append(psutil.Process(pid))
        else:
            found = self._descendants()
        for process in found:
            with contextlib.suppress(psutil.Error):
                self.seen.setdefault(process.pid, process.create_time())
        return found

    def _descendants(self) -> list[psutil.Process]:
        parents: dict[int, list[psutil.Process]] = {}
        for pid in self._newer_pids():
            try:
                process = psutil.Process(pid)
                parents.setdefault(process.ppid(), []).append(process)
            except psutil.Error:
                continue
        found: list[psutil.Process] = []
        frontier = [self.root]
        while frontier:
            for child in parents.get(frontier.pop(), ()):
                found.append(child)
                frontier.append(child.pid)
        return found

    def _newer_pids(self) -> list[int]:
        """Process ids handed out since the run started (all of them if the ids wrapped)."""
        pids = psutil.pids()
        if pids and max(pids) < self.root:
            return pids
        return [p for p in pids if p > self.root]

    def _strays(self) -> None:
        """Without a box or a group: processes that left the tree, by the run's token."""
        marker = f"{RUN_TOKEN}={self.token}".encode()
        for pid in self._newer_pids():
            if pid in self.seen:
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as environ:
                    if marker not in environ.read().split(b"\0"):
                        continue
                self.seen[pid] = psutil.Process(pid).create_time()
            except (OSError, psutil.Error):
                continue

    # -- measuring ---------------------------------------------------------------------------

    def sample(self) -> Sample:
        """Sum the tree's resident memory and CPU time, and count the command's processes
        (bubblewrap's own two are not the command's)."""
        members = self.members()
        rss = 0
        cpu = 0.0
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.root)
            with root.oneshot():
                rss += root.memory_info().rss
                times = root.cpu_times()
                cpu += times.user + times.system + times.children_user + times.children_system
        for process in members:
            try:
                with process.oneshot():
                    rss += process.memory_info().rss
                    times = process.cpu_times()
                    cpu += times.user + times.system
            except psutil.Error:
                continue
        # the command's processes: under bubblewrap one member is its init; without a box the
        # first process is the command itself
        count = len(members) - 1 if self.boxed else len(members) + 1
        refused = self.group.refused() if self.group is not None else 0
        return Sample(rss, cpu, max(0, count), refused)

    # -- killing -----------------------------------------------------------------------------

    def kill(self) -> None:
        """Kill the whole tree now (a limit, a timeout, a cancellation). Call it before the
        first process is reaped."""
        self.members()
        kill_group(self.root)
        self._kill_namespace()
        if self.group is not None:
            self.group.kill(wait_s=0)
        for process in self.alive():
            _kill(process)

    def finish(self, *, wait_s: float = 2.0) -> int:
        """After the first process ended, before it is reaped: kill whatever of the run still
        runs and wait until it is gone (a zombie is gone in every way that matters). Returns
        how many of the command's processes were still running."""
        if self.group is None and not self.boxed:
            self.members()
            self._strays()
        left = [p for p in self.alive() if p.pid != self.namespace_init]
        left_pids = {p.pid for p in left}
        if self.group is not None:
            left_pids |= set(self.group.pids()) - {self.root}
            left_pids.discard(self.namespace_init or -1)
        kill_group(self.root)
        stubborn = self.group.kill(wait_s=wait_s) if self.group is not None else []
        stubborn = [pid for pid in stubborn if pid != self.root]  # a zombie until it is reaped
        self._kill_namespace()
        for process in left:
            _kill(process)
        until = time.monotonic() + wait_s
        while (self.alive() or self._namespace_alive()) and time.monotonic() < until:
            time.sleep(0.001)
        stubborn += [p.pid for p in self.alive()]
        if stubborn:
            log.error("processes %s of a sandboxed run would not die", sorted(set(stubborn)))
        return len(left_pids)

    def _kill_namespace(self) -> None:
        if self._init is not None:
            _kill(self._init)

    def _namespace_alive(self) -> bool:
        """Whether bubblewrap's init still runs: it exits only once the kernel has killed
        every process of its namespace."""
        if self._init is None:
            return False
        try:
            return self._init.is_running() and self._init.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def alive(self) -> list[psutil.Process]:
        """The processes met in the run that still run (the same processes: a reused pid is
        someone else's)."""
        found = []
        for pid, created in self.seen.items():
            try:
                process = psutil.Process(pid)
                if process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process)
            except psutil.Error:
                continue
        return found


def _kill(process: psutil.Process) -> None:
    """SIGKILL a process met in the run (psutil refuses one whose pid was reused since)."""
    if may_kill(process.pid):
        with contextlib.suppress(psutil.Error):
            process.kill()
