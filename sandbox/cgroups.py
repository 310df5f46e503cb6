"""A pids control group per run: a process limit the kernel enforces even for root, and an exact
list of the run's processes.

``RLIMIT_NPROC`` is what bounds a fork bomb for an ordinary user, but the kernel never applies
it to processes whose real user is root, and inside bubblewrap's user namespace root is still
root to it. Where the pids controller can be written (root, or a delegated cgroup), each run
gets its own group under the caller's: ``pids.max`` makes ``fork`` fail past the limit, and
``cgroup.procs`` lists every process of the run, including one that left the process group
and lost its parent, so cleanup misses nothing. Works with cgroup v1 (a ``pids`` hierarchy)
and v2 (the unified hierarchy with ``pids`` enabled); without either, `PidsGroup.create`
returns None and the run relies on the kernel limit and the watcher.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from pathlib import Path


class PidsGroup:
    """One run's pids cgroup. Create it, start the run's first process in it (see
    `join_argv`), read `pids`, `kill` what is left, then `remove` it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, name: str, limit: int) -> PidsGroup | None:
        """A new group named ``name`` allowing ``limit`` processes, or None when no pids
        controller can be written here."""
        parent = _pids_parent()
        if parent is None:
            return None
        path = parent / name
        try:
            path.mkdir()
        except OSError:
            return None
        group = cls(path)
        try:
            (path / "pids.max").write_text(str(limit))
        except OSError:
            group.remove()
            return None
        return group

    @property
    def procs_file(self) -> str:
        """The file a process joins the group through (by writing its pid)."""
        return str(self.path / "cgroup.procs")

    def join_argv(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the group: a shell writes its own pid to the group, then
        becomes ``argv`` (exec), so the run's first process is in the group before it forks."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', self.procs_file, *argv]

    def pids(self) -> list[int]:
        """The processes in the group now."""
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(line) for line in text.split()]

    def refused(self) -> int:
        """How many times the kernel refused a new process for the limit."""
        try:
            events = (self.path / "pids.events").read_text().split()
        except OSError:
            return 0
        for key, value in zip(events[::2], events[1::2], strict=False):
            if key == "max" and value.isdigit():
                return int(value)
        return 0

    def kill(self, *, wait_s: float = 2.0) -> list[int]:
        """Kill every process in the group until it is empty; the pids that would not go."""
        until = time.monotonic() + wait_s
        while True:
            pids = self.pids()
            if not pids or time.monotonic() > until:
                return pids
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.001)

    def remove(self) -> None:
        """Remove the (empty) group. A group that still holds a process stays (the kernel
        refuses); it is harmless and named for its run."""
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    return
                time.sleep(0.002)  # the last processes are still being reaped


def _pids_parent() -> Path | None:
    """The folder of the caller's own pids cgroup, if it is writable."""
    v1, v2 = _mounts()
    own = _own_groups()
    if v1 is not None and "pids" in own:
        folder = v1 / own["pids"].lstrip("/")
        if os.access(folder, os.W_OK):
            return folder
    if v2 is not None and "" in own:
        folder = v2 / own[""].lstrip("/")
        try:
            enabled = (folder / "cgroup.subtree_control").read_text().split()
        except OSError:
            return None
        if "pids" in enabled and os.access(folder, os.W_OK):
            return folder
    return None


def _mounts() -> tuple[Path | None, Path | None]:
    """Where the v1 ``pids`` hierarchy and the v2 unified hierarchy are mounted."""
    v1: Path | None = None
    v2: Path | None = None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        mount_point = Path(fields[4])
        kind, _, options = line.split(" - ", 1)[1].partition(" ")
        if kind == "cgroup2":
            v2 = mount_point
        elif kind == "cgroup" and "pids" in options.split()[-1].split(","):
            v1 = mount_point
    return v1, v2


def _own_groups() -> dict[str, str]:
    """The caller's cgroup per controller (v1 names; "" for the unified hierarchy)."""
    groups: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return groups
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            groups[controller] = path
    return groups
