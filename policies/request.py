"""What a policy is asked about: the facts of one call, gathered before it runs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, NamedTuple

from stockade.errors import ConfigurationError
from stockade.policies.paths import canonical

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
    isolated: bool = False
    private_paths: tuple[str, ...] = ()
    host_paths: bool = False


class Request(_RequestFields):
    """One call as the policy sees it.

    ``action`` is what the call is as a whole: ``call`` for an ordinary tool, ``execute`` for a
    tool that runs ``command``. Each entry of ``paths`` is a path the call touches and how
    (read / write / delete); the engine gives them canonical, resolved through the virtual
    filesystem. ``dangerous_paths`` are patterns the tool itself declares dangerous, on top of
    the policy's list.

    ``isolated`` says the call's commands will run boxed by the process sandbox; a request that
    does not say so is taken as not isolated, which a policy requiring isolation denies.
    ``private_paths`` are absolute folders the call's commands have to themselves (a boxed
    run's private ``/tmp``), made canonical: a path in one of them, or the folder itself, is not
    judged. ``host_paths`` says the paths are host paths, reached outside the sandbox (the raw
    host-file tools); the policy's ``[host_files]`` table then applies too.

    A request is an immutable, hashable tuple, so decisions can be cached; lists given for
    ``paths``, ``dangerous_paths`` or ``private_paths`` become tuples.
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
        isolated: bool = False,
        private_paths: Iterable[str] = (),
        host_paths: bool = False,
    ) -> Request:
        if action not in ACTIONS:
            raise ConfigurationError(
                f"unknown action {action!r}; use one of {', '.join(sorted(ACTIONS))}"
            )
        if type(paths) is not tuple or any(type(p) is not tuple for p in paths):
            paths = tuple((str(path), access) for path, access in paths)
        for path, access in paths:
            if access not in ACCESSES:
                raise ConfigurationError(
                    f"unknown access {access!r} for {path!r}; use read, write or delete"
                )
        if type(dangerous_paths) is not tuple:
            dangerous_paths = tuple(dangerous_paths)
        if private_paths:
            private_paths = tuple(_private_folder(folder) for folder in private_paths)
        elif type(private_paths) is not tuple:
            private_paths = ()
        return tuple.__new__(
            cls,
            (
                subject,
                tool,
                action,
                paths,
                command,
                read_only,
                dangerous_paths,
                isolated,
                private_paths,
                host_paths,
            ),
        )


def _private_folder(folder: str) -> str:
    # canonical here, once, so that deciding compares plain strings; a relative folder would
    # be taken from /workspace and silently exempt a part of it, so it is refused instead
    if not isinstance(folder, str) or not folder.startswith("/"):
        raise ConfigurationError(
            f"private path {folder!r} is not absolute; give the folder's full path, such as '/tmp'"
        )
    return canonical(folder)
