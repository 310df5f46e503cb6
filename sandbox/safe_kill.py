"""Which process ids a run's cleanup may signal, and the two ways it signals them.

Cleanup kills by numbers it read: from a run's ``cgroup.procs``, from bubblewrap's report,
from the process it started. A number read wrong (a file mixed up with another, a process long
gone) must never become a signal to someone else: ``kill(0)`` is this process's own group,
``kill(-1)`` every process this user may signal, ``kill(1)`` the machine's init. So every
signal goes through here, and a number that is not a plain positive pid of another process is
refused (and logged: it means a bug, not a stubborn process).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal

log = logging.getLogger("stockade.sandbox")


def may_kill(pid: object) -> bool:
    """Whether ``pid`` may be signalled by a run's cleanup: an int above 1 that is neither
    this process, nor its process group, nor its session (their leaders are the caller's)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        return False
    return pid not in (os.getpid(), os.getpgrp(), os.getsid(0))


def kill_pid(pid: int) -> None:
    """SIGKILL one process, if ``may_kill`` allows it; a process already gone is fine."""
    if not may_kill(pid):
        log.error("refused to kill process id %r: not a process of a sandboxed run", pid)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def kill_group(pgid: int) -> None:
    """SIGKILL a process group, if ``may_kill`` allows its number; a group already gone is
    fine. (Call it while the group's leader is not yet reaped: until then its number cannot be
    handed to a new group.)"""
    if not may_kill(pgid):
        log.error("refused to kill process group %r: not a group of a sandboxed run", pgid)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
