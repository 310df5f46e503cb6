"""Who made a run's pids group, written into the group's name: so that a later process can tell
the group of an owner that died (a SIGKILLed process runs no cleanup, and its groups stay) from
one a live process still uses, and sweep the first kind only.

    stockade-<pid namespace>-<pid>-<start>-<run token>

The pid alone would not do: pids are reused (often only 32768 of them), so the owner's start
time (clock ticks after boot, from ``/proc/<pid>/stat``) is part of it, and a pid reused by a
later process does not make a dead owner look alive. A pid means something only in its pid
namespace, so a group made from another namespace (a container sharing the hierarchy) is never
judged from this one. When in doubt an owner counts as alive: a group left too long costs
nothing, a group swept under a live run would end it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from stockade.sandbox.errors import SandboxError

_NAME = re.compile(r"stockade-([0-9]{1,20})-([0-9]{1,10})-([0-9]{1,20})-([0-9a-f]{1,64})")
_DEAD_STATES = ("Z", "X", "x")  # a zombie or a dying process runs no code any more


@dataclass(frozen=True, slots=True)
class Owner:
    """A process that makes pids groups: its pid namespace (the inode number of
    ``/proc/<pid>/ns/pid``), its pid there, and its start time in clock ticks after boot."""

    namespace: int
    pid: int
    start: int

    @classmethod
    def current(cls) -> Owner | None:
        """This process; None when ``/proc`` cannot tell (then no group can be made either)."""
        return cls.of_process(os.getpid())

    @classmethod
    def of_process(cls, pid: int) -> Owner | None:
        """The process ``pid`` of this pid namespace as an owner; None when it is gone (or a
        zombie) or ``/proc`` cannot tell."""
        try:
            namespace = os.stat("/proc/self/ns/pid").st_ino
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = _fields(stat.read())
        except OSError:
            return None
        start = _start(fields)
        if start is None or fields[0] in _DEAD_STATES:
            return None
        return cls(namespace, pid, start)

    @classmethod
    def of_group(cls, name: str) -> Owner | None:
        """The owner a group's name records; None for a name Stockade did not make this way."""
        found = _NAME.fullmatch(name)
        if found is None:
            return None
        owner = cls(int(found.group(1)), int(found.group(2)), int(found.group(3)))
        # written exactly as `group_name` writes it (no leading zeros), or not Stockade's
        return owner if owner._name(found.group(4)) == name else None

    def group_name(self, token: str) -> str:
        """The name of this owner's group for the run ``token`` (lowercase hex)."""
        name = self._name(token)
        if Owner.of_group(name) != self:
            raise SandboxError(
                f"cannot name a pids group for run token {token!r}: a token is 1 to 64 "
                "lowercase hex digits (secrets.token_hex)"
            )
        return name

    def _name(self, token: str) -> str:
        return f"stockade-{self.namespace}-{self.pid}-{self.start}-{token}"

    def alive(self) -> bool:
        """Whether this owner may still use its groups, as seen from this process: False only
        when its pid is gone from this pid namespace, belongs to a later process, or is a
        zombie."""
        try:
            here = os.stat("/proc/self/ns/pid").st_ino
        except OSError:
            return True  # cannot tell which namespace this is: in doubt
        if here != self.namespace:
            return True  # another namespace's process: not ours to judge
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                fields = _fields(stat.read())
        except (FileNotFoundError, ProcessLookupError):
            return False
        except OSError:
            return True
        start = _start(fields)
        if start is None:
            return True  # unreadable: in doubt
        return start == self.start and fields[0] not in _DEAD_STATES


def _fields(text: bytes) -> list[str]:
    """The fields of a ``/proc/<pid>/stat`` after the command name (which may hold spaces and
    parentheses itself): the first is the state, the 20th the start time."""
    _, _, rest = text.rpartition(b")")
    return rest.decode("ascii", "replace").split()


def _start(fields: list[str]) -> int | None:
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    return int(fields[19])
