"""What a policy is asked about: the facts of one call, gathered before it runs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple

Access = Literal["read", "write", "delete"]
Action = Literal["read", "write", "delete", "execute", "call"]
ACCESSES: frozenset[str] = frozenset({"read", "write", "delete"})
ACTIONS: frozenset[str] = frozenset({"read", "write", "delete", "execute", "call"})


class _RequestFields(NamedTuple):
    subject: str
    tool: str
    action: Action = "call"
    paths: tuple[tuple[str, Access], ...] = ()
    command: str | None = None
    read_only: bool = False
    dangerous_paths: tuple[str, ...] = ()


class Request(_RequestFields):
    """One call as the policy sees it.

    ``action`` is what the call is as a whole: ``call`` for an ordinary tool, ``execute`` for a
    tool that runs ``command``. Each entry of ``paths`` is a path the call touches and how
    (read / write / delete); the engine gives them canonical, resolved through the virtual
    filesystem. ``dangerous_paths`` are patterns the tool itself declares dangerous, on top of
    the policy's list. A request is an immutable, hashable tuple, so decisions can be cached;
    lists given for ``paths`` or ``dangerous_paths`` become tuples.
    """

    __slots__ = ()

    def __new__(
        cls,
        subject: str,
        tool: str,
        action: Action = "call",
        paths: Iterable[tuple[str, Access]] = (),
        command: str | None = None,
        read_only: bool = False,
        dangerous_paths: Iterable[str] = (),
    ) -> Request:
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; use one of {', '.join(sorted(ACTIONS))}")
        if type(paths) is not tuple or any(type(p) is not tuple for p in paths):
            paths = tuple((str(path), access) for path, access in paths)
        for path, access in paths:
            if access not in ACCESSES:
                raise ValueError(
                    f"unknown access {access!r} for {path!r}; use read, write or delete"
                )
        if type(dangerous_paths) is not tuple:
            dangerous_paths = tuple(dangerous_paths)
        return tuple.__new__(
            cls, (subject, tool, action, paths, command, read_only, dangerous_paths)
        )
