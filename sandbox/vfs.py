"""The namespaced virtual filesystem: the only way Stockade's file tools reach files.

    fs = VirtualFS([Mount("/workspace", "/home/me/project"),
                    Mount("/userinput", "/home/me/inbox", read_only=True)])
    fs.write_text("notes/todo.md", "ship it")         # /workspace/notes/todo.md
    fs.read_text("/userinput/brief.txt")
    fs.read_range("big.log", 0, 4096)                   # a part of a file of any size
    fs.canonical("src/../.env")                         # "/workspace/.env", links resolved

Every path is logical: relative paths are taken from ``/workspace``; a path is matched to the
mount with the longest prefix on segment boundaries (``/workspace-evil`` is not ``/workspace``);
anything outside every mount, above ``/``, or leading out through a symlink is refused with a
`PathEscapeError` naming the path and why. Writes are atomic, serialised per path, and counted
against the quotas.

``fs.guarded(guard)`` is a view of the same mounts in which every operation first asks ``guard``
about the path it really reaches (`stockade.sandbox.guard`): a read, a listing or a stat about
the final target as ``read``, a write about where it lands (a link's target) as ``write``, a
delete about the name it removes and a move about its source (``delete``) and destination
(``write``), a folder moved or deleted about everything in it too. A refusal raises
`PathDeniedError`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from pathlib import Path

from stockade.errors import ConfigurationError
from stockade.sandbox.backend import Backend
from stockade.sandbox.errors import (
    ExistsError,
    NotADirectoryError_,
    NotFoundError,
    PathEscapeError,
    ReadOnlyError,
    SandboxError,
)
from stockade.sandbox.guard import Access, Check, Guard, both, check_tree, checker
from stockade.sandbox.host import HostBackend
from stockade.sandbox.logical import names_the_path, normalize, split, within
from stockade.sandbox.mounts import Change, FileInfo, Mount
from stockade.sandbox.overlay import OverlayBackend
from stockade.sandbox.shared import Shared
from stockade.sandbox.text import decode_text

MiB = 1 << 20


class VirtualFS:
    """Mounts under one namespace, with quotas.

    ``max_file_bytes`` bounds any one file read or written; ``max_write_bytes`` bounds all
    bytes written through this object (a runaway agent cannot fill the disk). ``durable``
    flushes every write to disk before it counts as done (off: faster, still atomic).
    """

    def __init__(
        self,
        mounts: Iterable[Mount],
        *,
        max_file_bytes: int = 10 * MiB,
        max_write_bytes: int = 1024 * MiB,
        durable: bool = True,
    ) -> None:
        self.mounts = tuple(mounts)
        if not self.mounts:
            raise ConfigurationError(
                "a VirtualFS needs at least one mount, e.g. Mount('/workspace', dir)"
            )
        prefixes = [m.prefix for m in self.mounts]
        duplicates = {p for p in prefixes if prefixes.count(p) > 1}
        if duplicates:
            raise ConfigurationError(f"mount prefix(es) {sorted(duplicates)} given more than once")
        self.max_file_bytes = max_file_bytes
        self.max_write_bytes = max_write_bytes
        self._shared = Shared()
        self._guard: Guard | None = None
        self._check: Check | None = None  # the guard as backends call it, None when unguarded
        self._backends: dict[str, Backend] = {}
        try:
            for mount in self.mounts:
                self._backends[mount.prefix] = self._backend(mount, durable)
        except BaseException:
            self.close()
            raise
        # longest prefix first, so nested mounts win over the ones they sit in
        self._order = sorted(self.mounts, key=lambda m: len(m.prefix), reverse=True)
        # read-only host folders that a writable mount's folder contains: reachable through
        # that mount by a symlink (or a second path) and so checked on every change there
        self._read_only_within: dict[str, list[tuple[str, Path]]] = {}
        for mount in self.mounts:
            if mount.read_only or mount.memory:
                continue
            outer = self._host_root(mount)
            inside = [
                (other.prefix, self._host_root(other))
                for other in self.mounts
                if other.read_only and not other.memory and _contains(outer, self._host_root(other))
            ]
            if inside:
                self._read_only_within[mount.prefix] = inside

    @staticmethod
    def _backend(mount: Mount, durable: bool) -> Backend:
        if mount.memory:
            # imported here, not at the top: pyfakefs brings doctest, unittest and pdb with it
            # (some 20 ms), which a program that mounts nothing in memory should not pay for
            from stockade.sandbox.memory import MemoryBackend

            return MemoryBackend(mount.prefix)
        assert mount.root is not None
        if mount.overlay:
            return OverlayBackend(mount.prefix, mount.root, durable=durable)
        return HostBackend(mount.prefix, mount.root, durable=durable)

    def close(self) -> None:
        """Release every mount (overlay changes not committed are dropped). A guarded view owns
        nothing: closing it releases nothing; close the file system it came from."""
        if self._guard is not None:
            return
        for backend in self._backends.values():
            backend.close()
        self._backends.clear()

    def guarded(self, guard: Guard) -> VirtualFS:
        """A view of these mounts whose every operation asks ``guard(path, access)`` about the
        logical path it really reaches (links inside the mount followed), at the moment of use
        and under the descriptor or lock that performs it; a refusal raises `PathDeniedError`.
        The view shares the mounts, the quotas and the locks; a view of a view obeys both
        guards."""
        view = copy.copy(self)
        view._guard = guard if self._guard is None else both(self._guard, guard)
        view._check = checker(view._guard)
        return view

    @property
    def guard(self) -> Guard | None:
        """The guard of a guarded view (None for the file system itself)."""
        return self._guard

    def __enter__(self) -> VirtualFS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- where a path goes -------------------------------------------------------------------

    def _locate(self, path: str) -> tuple[Mount, Backend, list[str], str]:
        logical = normalize(path)
        if not self._backends:
            raise SandboxError("this VirtualFS is closed; create a new one", logical)
        for mount in self._order:
            if within(logical, mount.prefix):
                rest = logical[len(mount.prefix) :] if mount.prefix != "/" else logical
                return mount, self._backends[mount.prefix], split(rest), logical
        mounts = ", ".join(m.prefix for m in self.mounts)
        spelled = logical if path == logical else f"{path!r} (that is {logical})"
        raise PathEscapeError(
            f"{spelled} is outside every mount ({mounts}); use a path inside one of them", logical
        )

    def _writable(
        self, path: str, *, removes: bool = False
    ) -> tuple[Mount, Backend, list[str], str]:
        """Locate a path that is about to change; ``removes`` when the change takes the name
        away with everything below it (delete, the source of a move)."""
        mount, backend, parts, logical = self._locate(path)
        if mount.read_only:
            raise ReadOnlyError(f"{logical} is in {mount.prefix}, which is read-only", logical)
        guarded = self._read_only_within.get(mount.prefix)
        if guarded and parts:
            # where the change would land on the host, for the name and for what it leads to
            root = self._host_root(mount)
            name = root.joinpath(*backend.resolve(parts[:-1]), parts[-1])
            target = root.joinpath(*backend.resolve(parts))
            for prefix, folder in guarded:
                # removing a folder that holds a read-only mount's folder changes that mount
                # too; the name only, as a link is removed as itself
                holds = removes and _contains(name, folder)
                if holds or _contains(folder, name) or _contains(folder, target):
                    raise ReadOnlyError(
                        f"{logical} leads into the folder of {prefix}, which is read-only",
                        logical,
                    )
        return mount, backend, parts, logical

    def _host_root(self, mount: Mount) -> Path:
        assert mount.root is not None
        return Path(mount.root).resolve()

    @names_the_path
    def canonical(self, path: str, *, follow_last: bool = True) -> str:
        """The logical path with ``..`` and symlinks resolved: what a policy should judge.
        Without ``follow_last`` a final symlink stays itself (the name a delete or a rename acts
        on). Raises PathEscapeError when it leads outside."""
        mount, backend, parts, _ = self._locate(path)
        if follow_last or not parts:
            resolved = backend.resolve(parts)
        else:
            resolved = [*backend.resolve(parts[:-1]), parts[-1]]
        return "/".join([mount.prefix.rstrip("/"), *resolved]) if resolved else mount.prefix

    @names_the_path
    def host_path(self, path: str) -> Path:
        """Where a path of a host or overlay mount is on the host (for binding it into a
        process sandbox; file tools never use it)."""
        _, backend, parts, _ = self._locate(path)
        return backend.host_path(parts)

    # -- reading -----------------------------------------------------------------------------

    @names_the_path
    def read_bytes(self, path: str) -> bytes:
        """A file's content."""
        _, backend, parts, _ = self._locate(path)
        return backend.read_bytes(parts, self.max_file_bytes, self._check)

    @names_the_path
    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of a file from byte ``offset`` (fewer at its end, none past
        it), whatever the file's size: for reading a part of a file too big to read whole.
        ``length`` is bounded by ``max_file_bytes``; reads count against no quota."""
        if offset < 0 or not 0 <= length <= self.max_file_bytes:
            raise SandboxError(
                f"cannot read {length} bytes at offset {offset} of {normalize(path)}: the offset "
                f"must be 0 or more and the length 0 to {self.max_file_bytes} (max_file_bytes)",
                normalize(path),
            )
        _, backend, parts, _ = self._locate(path)
        return backend.read_range(parts, offset, length, self._check)

    def read_text(self, path: str) -> str:
        """A UTF-8 text file's content; NotTextError for binary or other encodings."""
        return decode_text(self.read_bytes(path), normalize(path))

    @names_the_path
    def list_dir(self, path: str = "/workspace") -> list[str]:
        """Names in a folder, sorted. ``/`` lists the mounts' top folders."""
        logical = normalize(path)
        if logical == "/" and not any(m.prefix == "/" for m in self.mounts):
            if self._check is not None:
                self._check("/", "read")
            return sorted({split(m.prefix)[0] for m in self.mounts})
        _, backend, parts, _ = self._locate(logical)
        names = set(backend.list_dir(parts, self._check))
        for mount in self.mounts:  # mounts nested inside this folder show as folders
            if mount.prefix != logical and within(mount.prefix, logical):
                rest = split(mount.prefix[len(logical) :])
                if rest:
                    names.add(rest[0])
        return sorted(names)

    @names_the_path
    def stat(self, path: str) -> FileInfo:
        """Kind, size, modification time and permission bits (of a symlink's target)."""
        _, backend, parts, _ = self._locate(path)
        return backend.stat(parts, self._check)

    @names_the_path
    def lstat(self, path: str) -> FileInfo:
        """Like `stat`, but a final symlink describes itself (kind ``link``)."""
        _, backend, parts, _ = self._locate(path)
        return backend.lstat(parts, self._check)

    def exists(self, path: str) -> bool:
        """Whether something is at the path. Escapes still raise: an escape is not absence (and
        in a guarded view, neither is a refusal)."""
        try:
            self.stat(path)
        except (NotFoundError, NotADirectoryError_):
            return False
        return True

    # -- changing ----------------------------------------------------------------------------

    @names_the_path
    def write_bytes(
        self, path: str, data: bytes, *, mode: int | None = None, replace_link: bool = False
    ) -> None:
        """Replace or create a file atomically (missing folders are created). ``mode`` sets
        its permission bits (else it keeps the replaced file's; a new file gets 0o644). A final
        symlink is written through, to its target (judged there), unless ``replace_link``:
        then the link itself is replaced by the file."""
        _check_mode(path, mode)
        _, backend, parts, logical = self._writable(path)
        self._charge(len(data), logical)
        try:
            with self._shared.locked(logical):
                backend.write_bytes(
                    parts, bytes(data), self._check, mode=mode, follow_last=not replace_link
                )
        except BaseException:
            self._shared.refund(len(data))  # nothing was written
            raise

    @names_the_path
    def write_aside(
        self, path: str, data: bytes | Path, *, mode: int | None = None, replace_link: bool = False
    ) -> Callable[[bool], None]:
        """The first half of a write done in two, for many files applied together: ``data``
        (bytes, or a file of Stockade's own, hard-linked where it can be: `new_file`) is
        written beside ``path`` under a name of Stockade's own, judged, not yet in place and
        not flushed. Call `sync` once for all of them, then each returned ``finish(True)`` to
        rename it into place (judged again, where it then lands), or ``finish(False)`` to drop
        it; a refused or failed ``finish(True)`` drops it too, a second finish does nothing. A
        crash before a file's finish leaves the target as it was, with a ``.stockade-*.tmp``
        beside it. On a mount not on the host the write happens at once and ``finish`` does
        nothing. Options as for `write_bytes`."""
        _check_mode(path, mode)
        _, backend, parts, logical = self._writable(path)
        if isinstance(data, Path) and not isinstance(backend, HostBackend):
            data = data.read_bytes()
        size = len(data) if isinstance(data, bytes) else os.stat(data).st_size
        self._charge(size, logical)
        follow_last = not replace_link
        try:
            with self._shared.locked(logical):
                if isinstance(backend, HostBackend):
                    finish = backend.write_aside(
                        parts, data, self._check, mode=mode, follow_last=follow_last
                    )
                else:
                    backend.write_bytes(
                        parts, bytes(data), self._check, mode=mode, follow_last=follow_last
                    )
                    return _done
        except BaseException:
            self._shared.refund(size)
            raise

        done = [False]

        def finish_locked(place: bool) -> None:
            if done[0]:
                return  # finished already (a refused finish(True) dropped the file)
            done[0] = True
            with self._shared.locked(logical):
                try:
                    finish(place)
                except BaseException:
                    self._shared.refund(size)
                    raise
            if not place:
                self._shared.refund(size)

        return finish_locked

    def sync(self) -> None:
        """Flush to disk everything written to the host mounts (a ``syncfs`` per mount)."""
        for backend in self._backends.values():
            if isinstance(backend, HostBackend):
                backend.sync()

    def write_text(self, path: str, data: str) -> None:
        """Write text as UTF-8."""
        self.write_bytes(path, data.encode("utf-8"))

    @names_the_path
    def mkdir(self, path: str) -> None:
        """Create a folder and any missing ones above it."""
        _, backend, parts, logical = self._writable(path)
        with self._shared.locked(logical):
            backend.mkdir(parts, self._check)

    @names_the_path
    def chmod(self, path: str, mode: int) -> None:
        """Set the permission bits of a file or folder (through a link: of its target)."""
        _check_mode(path, mode)
        _, backend, parts, logical = self._writable(path)
        with self._shared.locked(logical):
            backend.chmod(parts, mode, self._check)

    @names_the_path
    def symlink(self, path: str, target: str) -> None:
        """Make ``path`` a symbolic link to ``target`` (replacing a file or link there, in one
        step). The target is stored as given; the file system never follows a link out of its
        mount, whatever it says. Host mounts only: memory and overlay mounts hold no links."""
        if not target or "\0" in target:
            raise SandboxError(
                f"a link's target must be a non-empty path without NUL, got {target!r}", path
            )
        _, backend, parts, logical = self._writable(path)
        if not parts:
            raise SandboxError(f"{logical} is a mount itself and cannot become a link", logical)
        with self._shared.locked(logical):
            backend.symlink(parts, target, self._check)

    @names_the_path
    def delete(self, path: str, *, recursive: bool = False) -> None:
        """Delete a file, or a folder (empty unless ``recursive``). A symlink is deleted as
        itself, never its target."""
        mount, backend, parts, logical = self._writable(path, removes=True)
        if not parts:
            raise SandboxError(f"{logical} is the mount {mount.prefix} itself", logical)
        with self._shared.locked(logical):
            if recursive:
                self._check_tree(backend, mount, parts, None)
            backend.delete(parts, recursive=recursive, check=self._check)

    @names_the_path
    def move(self, source: str, target: str, *, overwrite: bool = False) -> None:
        """Move or rename a file or folder; across mounts files are copied, then deleted."""
        src_mount, src_backend, src_parts, src = self._writable(source, removes=True)
        dst_mount, dst_backend, dst_parts, dst = self._writable(target, removes=overwrite)
        check = self._check
        first, second = sorted((src, dst))  # always the same order: two moves cannot deadlock
        locks = self._shared
        with locks.locked(first), locks.locked(second) if second != first else nullcontext():
            if src_backend is dst_backend:
                self._check_tree(src_backend, src_mount, src_parts, (dst_mount, dst_parts))
                src_backend.rename(src_parts, dst_parts, overwrite=overwrite, check=check)
                return
            info = src_backend.stat(src_parts)
            if info.kind != "file":
                raise SandboxError(
                    f"{src} is a folder; moving folders between mounts is not supported", src
                )
            if not overwrite and _present(dst_backend, dst_parts):
                raise ExistsError(f"{dst} already exists; pass overwrite to replace it", dst)
            if check is not None:  # the source goes away: judged before anything is written
                check(self._name(src_mount, src_backend, src_parts), "delete")
            # what is copied is read, where it really is (through a link: its target)
            data = src_backend.read_bytes(src_parts, self.max_file_bytes, check)
            self._charge(len(data), dst)
            try:
                dst_backend.write_bytes(dst_parts, data, check)
            except BaseException:
                self._shared.refund(len(data))
                raise
            src_backend.delete(src_parts, recursive=False, check=check)

    def _name(self, mount: Mount, backend: Backend, parts: list[str]) -> str:
        """The logical path of the name ``parts`` (a final link as itself)."""
        where = [*backend.resolve(parts[:-1]), *parts[-1:]]
        return "/".join([mount.prefix.rstrip("/"), *where]) if where else mount.prefix

    def _check_tree(
        self,
        backend: Backend,
        mount: Mount,
        parts: list[str],
        moved_to: tuple[Mount, list[str]] | None,
    ) -> None:
        """In a guarded view, before a folder is deleted (or moved to ``moved_to``): judge
        everything in it, where it is and where it would go."""
        check = self._check
        if check is None or not parts or backend.lstat(parts).kind != "dir":
            return
        judged: list[tuple[str, Access]] = [(self._name(mount, backend, parts), "delete")]
        if moved_to is not None:
            judged.append((self._name(moved_to[0], backend, moved_to[1]), "write"))
        check_tree(backend, parts, check, judged)

    # -- overlays ----------------------------------------------------------------------------

    def _overlays(self) -> list[OverlayBackend]:
        return [b for b in self._backends.values() if isinstance(b, OverlayBackend)]

    def changes(self) -> list[Change]:
        """The staged changes of every overlay mount."""
        return [change for overlay in self._overlays() for change in overlay.changes()]

    def commit(self) -> None:
        """Apply the staged changes of every overlay mount to the host."""
        for overlay in self._overlays():
            overlay.commit()

    def discard(self) -> None:
        """Drop the staged changes of every overlay mount."""
        for overlay in self._overlays():
            overlay.discard()

    # -- guards ------------------------------------------------------------------------------

    def _charge(self, size: int, logical: str) -> None:
        self._shared.charge(size, logical, self.max_file_bytes, self.max_write_bytes)

    @property
    def written(self) -> int:
        """Bytes written through this file system so far (counted against the quota)."""
        return self._shared.written


def _check_mode(path: str, mode: int | None) -> None:
    if mode is not None and not 0 <= mode <= 0o7777:
        raise SandboxError(f"mode {mode:#o} for {path} is not a file mode (0 to 0o7777)", path)


def _done(place: bool) -> None:
    """The finish of a write that was done at once."""


def _present(backend: Backend, parts: list[str]) -> bool:
    try:
        backend.stat(parts)
    except (NotFoundError, NotADirectoryError_):
        return False
    return True


def _contains(folder: Path, path: Path) -> bool:
    return path == folder or folder in path.parents
