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

A group's name records its owner (`sandbox.cgroup_owners`). A process killed outright leaves
its groups behind, so each `create` first sweeps the groups whose owner is dead: kills what is
left in them and removes them. It touches no group of a live owner and none it did not name.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from pathlib import Path

from stockade.sandbox.cgroup_owners import Owner
from stockade.sandbox.safe_kill import kill_pid, may_kill

log = logging.getLogger("stockade.sandbox")
_SWEEP_WAIT_S = 0.2  # how long a sweep waits, in all, for dead owners' processes to go


class PidsGroup:
    """One run's pids cgroup. Create it, start the run's first process in it (see
    `join_argv`), read `pids`, `kill` what is left, then `remove` it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # which file ``cgroup.procs`` is, so that a read of anything else (a descriptor mixed
        # up with another) is never taken for this group's processes
        info = os.stat(path / "cgroup.procs")
        self._procs_id = (info.st_dev, info.st_ino)
        self._refused: set[bytes] = set()  # numbers already reported as not to be killed

    @classmethod
    def create(cls, token: str, limit: int) -> PidsGroup | None:
        """A new group for the run ``token`` (lowercase hex) allowing ``limit`` processes, or
        None when no pids controller can be written here. Sweeps dead owners' groups first."""
        parent = pids_parent()
        owner = Owner.current()
        if parent is None or owner is None:
            return None
        sweep(parent, owner)
        path = parent / owner.group_name(token)
        try:
            path.mkdir()
        except OSError:
            return None
        try:
            (path / "pids.max").write_text(str(limit))
            return cls(path)
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()  # empty: nothing has joined it yet
            return None

    @property
    def procs_file(self) -> str:
        """The file a process joins the group through (by writing its pid)."""
        return str(self.path / "cgroup.procs")

    def join_argv(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the group: a shell writes its own pid to the group, then
        becomes ``argv`` (exec), so the run's first process is in the group before it forks."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', self.procs_file, *argv]

    def pids(self) -> list[int]:
        """The processes in the group now: only numbers read from this group's own
        ``cgroup.procs``, and only those a cleanup may kill (see `sandbox.safe_kill`)."""
        try:
            fd = os.open(self.path / "cgroup.procs", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            info = os.fstat(fd)
        except OSError:
            return []
        finally:
            os.close(fd)
        if (info.st_dev, info.st_ino) != self._procs_id:
            if b"" not in self._refused:
                self._refused.add(b"")
                log.error("%s is not the group's file any more: it is ignored", self.procs_file)
            return []
        found = []
        for line in b"".join(chunks).split():
            if line.isdigit() and len(line) <= 10 and may_kill(int(line)):
                found.append(int(line))
            elif line not in self._refused:
                self._refused.add(line)
                log.error("%s lists %r, not a process a run may have", self.procs_file, line)
        return found

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
                kill_pid(pid)
            time.sleep(0.001)

    def remove(self, *, wait_s: float = 2.0, quiet: bool = False) -> bool:
        """Remove the group, killing what is still in it; whether it is gone. A group the
        kernel will not let go (a process that cannot die) stays, and the error says so
        (unless ``quiet``: a sweep tries again at the next group made)."""
        until = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > until:
                    (log.debug if quiet else log.error)(
                        "cannot remove the pids group %s (%s); the first group made after "
                        "this process ends sweeps it",
                        self.path,
                        exc.strerror,
                    )
                    return False
            self.kill(wait_s=0)  # a process still in it, or the last ones still being reaped
            time.sleep(0.002)


def sweep(parent: Path, owner: Owner) -> int:
    """Kill what is left in, and remove, the groups under ``parent`` whose owner is dead (other
    than ``owner``, this process); how many were removed. Groups of live owners, of other pid
    namespaces and not named by Stockade are not touched."""
    removed = 0
    judged: dict[Owner, bool] = {}
    # one short wait for the whole sweep: a process that cannot die (stuck in the kernel)
    # must not make every run wait for it; its group is tried again at the next sweep
    until = time.monotonic() + _SWEEP_WAIT_S
    try:
        with os.scandir(parent) as listing:
            entries = list(listing)
    except OSError:
        return 0
    for entry in entries:
        made_by = Owner.of_group(entry.name)
        if made_by is None or made_by == owner:
            continue
        if made_by not in judged:
            judged[made_by] = made_by.alive()
        if judged[made_by]:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            group = PidsGroup(Path(entry.path))
        except OSError:
            continue  # gone already: another process swept it
        group.kill(wait_s=max(0.0, until - time.monotonic()))
        if group.remove(wait_s=max(0.0, until - time.monotonic()), quiet=True):
            removed += 1
            log.info("removed the pids group %s of a process that ended", entry.name)
    return removed


def pids_parent() -> Path | None:
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
