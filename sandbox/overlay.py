"""An overlay: the host folder as it is, plus changes held in memory until committed.

Reads see the staged version when there is one, the host otherwise. Writes, deletes and new
folders are only recorded. `changes` lists them (with unified diffs for text); `commit` applies
them to the host all at once — what is deleted or replaced is first moved aside and new content
written to temporary files, so a failure part-way puts everything back; `discard` forgets them.

Staged entries are keyed by where they really are: a write through a symlink inside the mount is
staged for the link's target, as a host write would land there. A symlink itself is deleted
as itself (never its target); moving a symlink is refused, because a staged file cannot be one.
An operation's ``check`` (`stockade.sandbox.guard`) is asked under the overlay's lock about that
same key (a read that falls through to the host is judged by the host, where it opens).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

from stockade.sandbox.errors import (
    ExistsError,
    IsADirectoryError_,
    NotADirectoryError_,
    NotFoundError,
    QuotaError,
    SandboxError,
)
from stockade.sandbox.guard import Check
from stockade.sandbox.host import HostBackend
from stockade.sandbox.mounts import Change, ChangeKind, FileInfo

# re-exported: callers that show an overlay's changes take the diff from here
from stockade.sandbox.text import unified_diff as unified_diff

Key = tuple[str, ...]
_UNLIMITED = 1 << 62


class OverlayBackend:
    """One overlay mount over a host folder."""

    def __init__(self, prefix: str, root: str | Path, *, durable: bool) -> None:
        self.prefix = prefix
        self.host = HostBackend(prefix, root, durable=durable)
        self._files: dict[Key, bytes] = {}
        self._deleted: set[Key] = set()  # host entries removed (a folder: with all it held)
        self._dirs: set[Key] = set()  # folders created (over a deleted one: a fresh, empty one)
        self._modes: dict[Key, int] = {}  # permission bits set on staged files
        self._lock = threading.RLock()

    def close(self) -> None:
        """Release the host mount (staged changes are dropped)."""
        self.host.close()

    def name(self, parts: list[str] | Key) -> str:
        """The logical path of ``parts``."""
        return self.host.name(list(parts))

    # -- the merged view ---------------------------------------------------------------------

    def _key(self, parts: list[str]) -> Key:
        """Where ``parts`` lead: staged paths as written, host paths with links resolved."""
        key = tuple(parts)
        if self._staged(key) or self._hidden(key):
            return key
        try:
            return tuple(self.host.resolve(parts))
        except (NotFoundError, NotADirectoryError_):
            return key

    def _staged(self, key: Key) -> bool:
        return key in self._files or key in self._dirs

    def _hidden(self, key: Key) -> bool:
        """Whether the host's entry at ``key`` is out of the merged view: it, or a folder above
        it, was deleted (a folder re-created after deletion starts empty)."""
        return any(key[:depth] in self._deleted for depth in range(1, len(key) + 1))

    def _kind(self, key: Key) -> str | None:
        """ "file", "dir" or None (absent) in the merged view (links followed)."""
        if key in self._files:
            return "file"
        if key in self._dirs or not key:
            return "dir"
        if any(key[:depth] in self._files for depth in range(1, len(key))):
            raise NotADirectoryError_(
                f"{self.name(key)} is under a file, not a folder", self.name(key)
            )
        if any(k[: len(key)] == key and len(k) > len(key) for k in (*self._files, *self._dirs)):
            return "dir"
        if self._hidden(key):
            return None
        try:
            return self.host.stat(list(key)).kind
        except NotFoundError:
            return None

    def read_bytes(self, parts: list[str], limit: int, check: Check | None = None) -> bytes:
        """The staged content, or the host's."""
        with self._lock:
            data = self._staged_content(parts, check)
            if data is None:  # the host names the path asked for, and judges the file it opens
                return self.host.read_bytes(parts, limit, check)
            if len(data) > limit:
                raise QuotaError(
                    f"{self.name(parts)} is over the {limit}-byte limit", self.name(parts)
                )
            return data

    def read_range(
        self, parts: list[str], offset: int, length: int, check: Check | None = None
    ) -> bytes:
        """Up to ``length`` bytes from ``offset`` of the staged content, or of the host's."""
        with self._lock:
            data = self._staged_content(parts, check)
            if data is None:
                return self.host.read_range(parts, offset, length, check)
            return data[offset : offset + length]

    def _staged_content(self, parts: list[str], check: Check | None) -> bytes | None:
        """The staged content of the file at ``parts`` (judged), or None when the file is the
        host's; errors for a folder or nothing there. Called under the lock."""
        key = self._key(parts)
        if key in self._files:
            if check is not None:
                check(self.name(key), "read")
            return self._files[key]
        kind = self._kind(key)
        if kind == "dir":
            raise IsADirectoryError_(
                f"{self.name(parts)} is a folder, not a file", self.name(parts)
            )
        if kind is None:
            raise NotFoundError(f"{self.name(parts)} does not exist", self.name(parts))
        return None

    def list_dir(self, parts: list[str], check: Check | None = None) -> list[str]:
        """Host names minus deletions plus staged names."""
        with self._lock:
            key = self._key(parts)
            if check is not None:
                check(self.name(key), "read")
            kind = self._kind(key)
            if kind is None:
                raise NotFoundError(f"{self.name(parts)} does not exist", self.name(parts))
            if kind != "dir":
                raise NotADirectoryError_(
                    f"{self.name(parts)} is a file, not a folder", self.name(parts)
                )
            names: set[str] = set()
            if not self._hidden(key) and key not in self._dirs:
                with contextlib.suppress(NotFoundError, NotADirectoryError_):
                    names.update(self.host.list_dir(list(key)))
            names = {n for n in names if (*key, n) not in self._deleted}
            for staged in (*self._files, *self._dirs):
                if len(staged) > len(key) and staged[: len(key)] == key:
                    names.add(staged[len(key)])
            return sorted(names)

    def stat(self, parts: list[str], check: Check | None = None) -> FileInfo:
        """The merged view's kind and size."""
        with self._lock:
            key = self._key(parts)
            if check is not None:
                check(self.name(key), "read")
            if key in self._files:
                mode = self._staged_mode(key)
                return FileInfo(self.name(key), "file", len(self._files[key]), time.time(), mode)
            kind = self._kind(key)
            if kind is None:
                raise NotFoundError(f"{self.name(parts)} does not exist", self.name(parts))
            if kind == "dir" and (key in self._dirs or not self._on_host(key)):
                return FileInfo(self.name(key), "dir", 0, time.time(), 0o755)
            return self.host.stat(list(key))

    def lstat(self, parts: list[str], check: Check | None = None) -> FileInfo:
        """Like `stat`, without following a final host symlink."""
        with self._lock:
            key = tuple(parts)
            if self._staged(key) or self._hidden(key):
                return self.stat(parts, check)
            try:
                return self.host.lstat(parts, check)
            except NotFoundError:
                return self.stat(parts, check)

    def _staged_mode(self, key: Key) -> int:
        """The bits a staged file will have once committed: those staged, else those of the
        host file it replaces (a commit keeps them), else 0o644."""
        if key in self._modes:
            return self._modes[key]
        with contextlib.suppress(SandboxError):
            info = None if self._hidden(key) else self.host.lstat(list(key))
            if info is not None and info.kind == "file":
                return info.mode
        return 0o644

    def _on_host(self, key: Key) -> bool:
        if self._hidden(key):
            return False
        try:
            self.host.lstat(list(key))
        except (NotFoundError, NotADirectoryError_):
            return False
        return True

    def _is_host_link(self, key: Key) -> bool:
        if self._staged(key) or self._hidden(key):
            return False
        try:
            return self.host.lstat(list(key)).kind == "link"
        except (NotFoundError, NotADirectoryError_):
            return False

    def resolve(self, parts: list[str]) -> list[str]:
        """The canonical parts in the merged view."""
        with self._lock:
            return list(self._key(parts))

    def host_path(self, parts: list[str]) -> Path:
        """Where the path is on the host (staged changes are not there yet)."""
        return self.host.host_path(parts)

    # -- staging -----------------------------------------------------------------------------

    def write_bytes(
        self,
        parts: list[str],
        data: bytes,
        check: Check | None = None,
        *,
        mode: int | None = None,
        follow_last: bool = True,
    ) -> None:
        """Stage new content (through a link: for the link's target, unless not
        ``follow_last``: then in the link's place), with ``mode`` if given."""
        if not parts:
            raise IsADirectoryError_(f"{self.prefix} is a folder, not a file", self.prefix)
        with self._lock:
            # without follow_last a final link is replaced, never followed (wherever it leads)
            key = self._key(parts) if follow_last else (*self._key(parts[:-1]), parts[-1])
            if check is not None:  # before any folder is staged for it
                check(self.name(key), "write")
            self.mkdir(parts[:-1])
            replaces_link = not follow_last and self._is_host_link(key)
            if not replaces_link and self._kind(key) == "dir":
                raise IsADirectoryError_(
                    f"{self.name(key)} is a folder; cannot write a file over it", self.name(key)
                )
            self._files[key] = bytes(data)
            if mode is not None:
                self._modes[key] = mode

    def chmod(self, parts: list[str], mode: int, check: Check | None = None) -> None:
        """Stage new permission bits for a file (its content staged with them)."""
        with self._lock:
            key = self._key(parts)
            if check is not None:
                check(self.name(key), "write")
            if key not in self._files:
                kind = self._kind(key)
                if kind is None:
                    raise NotFoundError(f"{self.name(key)} does not exist", self.name(key))
                if kind != "file":
                    raise SandboxError(
                        f"{self.name(key)} is not a file: an overlay mount stages the modes of "
                        "files only",
                        self.name(key),
                    )
                self._files[key] = self.host.read_bytes(list(key), _UNLIMITED)
            self._modes[key] = mode

    def symlink(self, parts: list[str], target: str, check: Check | None = None) -> None:
        """Refused: an overlay mount stages file content, not links."""
        raise SandboxError(
            f"{self.name(parts)} is in an overlay mount, which cannot stage a symbolic link",
            self.name(parts),
        )

    def mkdir(self, parts: list[str], check: Check | None = None) -> None:
        """Stage missing folders (each one judged)."""
        with self._lock:
            for depth in range(1, len(parts) + 1):
                key = self._key(parts[:depth])
                kind = self._kind(key)
                if kind == "dir":
                    continue
                if kind == "file":
                    raise NotADirectoryError_(
                        f"{self.name(key)} is a file, not a folder", self.name(parts)
                    )
                if check is not None:
                    check(self.name(key), "write")
                self._dirs.add(key)  # over a deleted folder: a new, empty one

    def delete(self, parts: list[str], *, recursive: bool, check: Check | None = None) -> None:
        """Stage a deletion. A symlink is deleted as itself, never its target."""
        if not parts:
            raise SandboxError(
                f"{self.prefix} is the mount itself and cannot be deleted", self.prefix
            )
        with self._lock:
            name = tuple(parts)
            if self._is_host_link(name):
                if check is not None:  # the link itself, in the folder it really is in
                    check(self.name([*self._key(parts[:-1]), parts[-1]]), "delete")
                self._deleted.add(name)
                return
            key = self._key(parts)
            if check is not None:
                check(self.name(key), "delete")
            kind = self._kind(key)
            if kind is None:
                raise NotFoundError(f"{self.name(parts)} does not exist", self.name(parts))
            if kind == "dir" and not recursive and self.list_dir(list(key)):
                raise SandboxError(
                    f"folder {self.name(key)} is not empty; delete what is in it first",
                    self.name(key),
                )
            for staged in [k for k in (*self._files, *self._dirs) if k[: len(key)] == key]:
                self._files.pop(staged, None)
                self._dirs.discard(staged)
            if self._on_host(key):
                self._deleted.add(key)

    def rename(
        self, source: list[str], target: list[str], *, overwrite: bool, check: Check | None = None
    ) -> None:
        """Stage a move of a file (folders and links: not in an overlay)."""
        with self._lock:
            if self._is_host_link(tuple(source)):
                raise SandboxError(
                    f"{self.name(source)} is a symbolic link; an overlay cannot move links "
                    "(move the file it points to, or use a plain mount)",
                    self.name(source),
                )
            src = self._key(source)
            kind = self._kind(src)
            if kind is None:
                raise NotFoundError(f"{self.name(source)} does not exist", self.name(source))
            if kind == "dir":
                raise SandboxError(
                    f"{self.name(source)} is a folder; an overlay moves files only, one by one",
                    self.name(source),
                )
            if check is not None:
                check(self.name(src), "delete")
                check(self.name(self._key(target)), "write")
            if not overwrite and self._kind(self._key(target)) is not None:
                raise ExistsError(
                    f"{self.name(target)} already exists; pass overwrite to replace it",
                    self.name(target),
                )
            data = self.read_bytes(list(src), _UNLIMITED)
            self.write_bytes(target, data)
            self.delete(list(src), recursive=False)

    # -- review and apply --------------------------------------------------------------------

    def changes(self) -> list[Change]:
        """Every staged change, in path order, with a unified diff for text."""
        with self._lock:
            found: list[Change] = []
            for key in sorted(self._deleted):
                diff = unified_diff(self.name(key), self._old(key), None)
                found.append(Change(self.name(key), "deleted", diff))
            for key in sorted(self._dirs):
                if not any(f[: len(key)] == key for f in self._files):
                    found.append(Change(self.name(key), "created_dir", ""))
            for key in sorted(self._files):
                old = None if self._hidden(key) else self._old(key)
                new = self._files[key]
                if old == new:
                    continue
                kind: ChangeKind = "added" if old is None else "modified"
                found.append(Change(self.name(key), kind, unified_diff(self.name(key), old, new)))
            return sorted(found, key=lambda c: c.path)

    def _old(self, key: Key) -> bytes | None:
        try:
            if self.host.lstat(list(key)).kind != "file":
                return None
            return self.host.read_bytes(list(key), _UNLIMITED)
        except SandboxError:
            return None

    def discard(self) -> None:
        """Forget every staged change."""
        with self._lock:
            self._files.clear()
            self._deleted.clear()
            self._dirs.clear()
            self._modes.clear()

    def commit(self) -> None:
        """Apply every staged change to the host, all or nothing. On failure the host is as
        before and the changes stay staged, so the commit can be retried."""
        with self._lock:
            _Commit(self.host, self._files, self._deleted, self._dirs, self._modes).run()
            self.discard()


class _Commit:
    """Applying staged changes with a way back: everything deleted or replaced is first moved
    aside, new folders are made, new content goes to temporary files, and only then are the
    temporary files renamed into place. Any failure undoes all of it; after success the moved-
    aside entries are removed."""

    def __init__(
        self,
        host: HostBackend,
        files: dict[Key, bytes],
        deleted: set[Key],
        dirs: set[Key],
        modes: dict[Key, int],
    ) -> None:
        self.host = host
        self.modes = modes
        self.files = files
        self.deleted = deleted
        self.dirs = dirs
        self.aside: list[tuple[Key, str]] = []
        self.made_dirs: list[Key] = []
        self.temps: list[tuple[Key, str]] = []
        self.placed: list[Key] = []

    def run(self) -> None:
        try:
            for key in sorted(self.deleted, key=len):
                if self._exists(key) and not any(
                    key[:d] in self.deleted for d in range(1, len(key))
                ):
                    self._move_aside(key)
            self._make_dirs()
            for key, data in self.files.items():
                temp = _temp_name("new")
                mode = self._mode(key)
                self.host.write_bytes([*key[:-1], temp], data, mode=mode)
                self.temps.append((key, temp))
            for key, temp in self.temps:
                if self._exists(key):
                    self._move_aside(key)
                self.host.rename([*key[:-1], temp], list(key), overwrite=False)
                self.placed.append(key)
        except BaseException:
            self._undo()
            raise
        for key, backup in self.aside:
            self._remove(key[:-1], backup)

    def _make_dirs(self) -> None:
        for key in sorted({*self.dirs, *(k[:-1] for k in self.files)}, key=len):
            for depth in range(1, len(key) + 1):
                if not self._exists(key[:depth]):
                    self.host.mkdir(list(key[:depth]))
                    self.made_dirs.append(key[:depth])

    def _mode(self, key: Key) -> int | None:
        """The bits staged for the file, else those of the file it replaces (a commit keeps
        them)."""
        if key in self.modes:
            return self.modes[key]
        try:
            info = self.host.lstat(list(key))
        except SandboxError:
            return None
        return info.mode if info.kind == "file" else None

    def _move_aside(self, key: Key) -> None:
        backup = _temp_name("old")
        self.host.rename(list(key), [*key[:-1], backup], overwrite=False)
        self.aside.append((key, backup))

    def _undo(self) -> None:
        for key in reversed(self.placed):
            with contextlib.suppress(SandboxError):
                self.host.delete(list(key), recursive=False)
        for key, temp in self.temps:
            if key not in self.placed:
                self._remove(key[:-1], temp)
        for key in reversed(self.made_dirs):
            with contextlib.suppress(SandboxError):
                self.host.delete(list(key), recursive=False)
        for key, backup in reversed(self.aside):
            with contextlib.suppress(SandboxError):
                self.host.rename([*key[:-1], backup], list(key), overwrite=True)

    def _remove(self, folder: Key, name: str) -> None:
        with contextlib.suppress(SandboxError):
            self.host.delete([*folder, name], recursive=True)

    def _exists(self, key: Key) -> bool:
        try:
            self.host.lstat(list(key))
        except (NotFoundError, NotADirectoryError_):
            return False
        return True


def _temp_name(kind: str) -> str:
    # short and our own: a name already at the length limit must still get a temporary twin
    return f".stockade-{kind}-{os.urandom(8).hex()}"
