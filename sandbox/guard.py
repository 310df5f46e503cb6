"""Guards: what a guarded view of the virtual filesystem asks at the moment of use.

A decision taken when a call arrives is about the paths the call named; by the time it runs, a
link may have been made or swapped, and a folder walked may hold what nobody named. A guard is
asked instead about the *final target* of each operation, the logical path of the entry really
opened or changed once the links inside the mount are followed, by the backend that performs it
and under the same descriptor or lock, so nothing can change between the question and the use:

    def guard(path: str, access: Access) -> str | None:
        return None if not path.endswith("/.env") else "credentials are not for tools"

    view = fs.guarded(guard)
    view.read_text("notes.txt")   # a link notes.txt -> .env is refused: PathDeniedError

None goes on; a string refuses, and is the reason the `PathDeniedError` gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

from stockade.sandbox.errors import PathDeniedError, SandboxError
from stockade.sandbox.mounts import FileInfo

Access = Literal["read", "write", "delete"]
Guard = Callable[[str, Access], "str | None"]
"""``guard(logical_path, access)``: None to go on, or the reason of a refusal."""

Check = Callable[[str, Access], None]
"""What a backend calls on a final target: returns to go on, raises `PathDeniedError`."""

MAX_TREE = 20_000  # entries judged for one move or delete of a folder

_DONE = {"read": "read", "write": "written", "delete": "deleted"}


def checker(guard: Guard) -> Check:
    """The check a backend runs for ``guard``: a refusal raised as `PathDeniedError` naming
    the path, what was to be done to it, and the guard's reason."""

    def check(path: str, access: Access) -> None:
        reason = guard(path, access)
        if reason is not None:
            raise PathDeniedError(
                f"{path} may not be {_DONE[access]} by this call: {reason}", path, reason=reason
            )

    return check


def both(first: Guard, second: Guard) -> Guard:
    """A guard that asks ``first``, then ``second`` (a view of a view obeys both)."""

    def guard(path: str, access: Access) -> str | None:
        reason = first(path, access)
        return reason if reason is not None else second(path, access)

    return guard


class _Tree(Protocol):
    def list_dir(self, parts: list[str]) -> list[str]: ...
    def lstat(self, parts: list[str]) -> FileInfo: ...


def check_tree(
    tree: _Tree, parts: list[str], check: Check, judged: list[tuple[str, Access]]
) -> None:
    """Judge every entry below the folder ``parts`` of ``tree``, before a move or a delete
    takes them all with it: each entry is judged under each ``(logical folder, access)`` of
    ``judged`` (where it is, as a delete; where a move puts it, as a write), so moving or
    removing a folder cannot change a path the guard protects on its own. Links inside are
    judged as themselves (they move as themselves). Something a process adds to the folder
    between this walk and the operation is not judged: the walk is not under the operation's
    descriptor."""
    stack = [(list(parts), "")]
    seen = 0
    while stack:
        folder, relative = stack.pop()
        for name in tree.list_dir(folder):
            seen += 1
            if seen > MAX_TREE:
                where = judged[0][0] if judged else "the folder"
                raise SandboxError(
                    f"{where} holds more than {MAX_TREE} entries, too many to judge one by one; "
                    "move or delete its parts separately",
                    where,
                )
            inner = f"{relative}/{name}"
            for base, access in judged:
                check(f"{base.rstrip('/')}{inner}", access)
            if tree.lstat([*folder, name]).kind == "dir":
                stack.append(([*folder, name], inner))
