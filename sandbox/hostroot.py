"""A host folder as a root that nothing resolves out of.

Every lookup starts from a file descriptor of the root, opened once, and proceeds relative to
descriptors, never from a path string the kernel resolves from ``/``:

* The fast path asks the kernel to do it: ``openat2`` with ``RESOLVE_BENEATH`` refuses any
  resolution that leaves the root (``..``, absolute symlinks, symlinks out), race-free.
* When that refuses (an absolute symlink that points back inside the root is legitimate but
  refused by ``RESOLVE_BENEATH``), or ``openat2`` is missing, the walk takes over: component by
  component, each opened with ``O_NOFOLLOW`` relative to its parent's descriptor (as Go's
  ``os.Root`` and filepath-securejoin do). A symlink is read and followed only if its target
  stays inside the root; a component swapped for a symlink between the check and the open makes
  the open fail (``ELOOP``), which is reported, never followed.

Everything returned is a ``(directory descriptor, name)`` pair whose final name was not a
symlink when resolved, with the parts that lead to it: the names the descriptor was reached by,
links on the way already followed, so the caller knows where the entry it is about to use
really is (and can judge that path, not the one asked for). Callers open it with
``O_NOFOLLOW`` so a later swap fails too. The kernel's fast path therefore refuses every link
(``RESOLVE_NO_SYMLINKS``), and a path through one takes the walk, which records where it leads.
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import stat
from collections.abc import Callable
from pathlib import Path

from stockade.sandbox.errors import (
    NotADirectoryError_,
    NotFoundError,
    PathEscapeError,
    SandboxError,
    from_os_error,
)

_O_PATH = getattr(os, "O_PATH", 0)
_DIR_FLAGS = _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_MAX_LINKS = 40

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(os.uname().machine)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_openat2() -> Callable[[int, str, int], int] | None:
    if _SYS_OPENAT2 is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    syscall = libc.syscall

    def openat2(dir_fd: int, path: str, flags: int) -> int:
        # no link at all, not even one inside: where a link leads is for the walk to record
        resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_SYMLINKS
        how = _OpenHow(flags | os.O_CLOEXEC, 0, resolve)
        fd = int(
            syscall(_SYS_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
        )
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return fd

    # probe once: a kernel without openat2 (before 5.6) or a seccomp filter says ENOSYS/EPERM
    try:
        os.close(openat2(os.open("/", _DIR_FLAGS), ".", _DIR_FLAGS))
    except OSError:
        return None
    return openat2


_OPENAT2 = _load_openat2()


class HostRoot:
    """Resolution of relative paths beneath one host folder, opened once."""

    def __init__(self, root: str | Path, *, logical: str) -> None:
        self.logical = logical  # the mount prefix, for messages
        try:
            self.path = Path(root).resolve(strict=True)
        except FileNotFoundError:
            raise NotFoundError(
                f"mount root {root} does not exist; create it first", logical
            ) from None
        if not self.path.is_dir():
            raise NotADirectoryError_(f"mount root {root} is not a folder", logical)
        self.fd = os.open(self.path, _DIR_FLAGS)

    def close(self) -> None:
        """Release the root's descriptor."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _name(self, parts: list[str]) -> str:
        return posixpath.join(self.logical, *parts)

    def parent(self, parts: list[str], *, follow_last: bool = True) -> tuple[int, str, list[str]]:
        """The descriptor of the folder holding ``parts`` (a new descriptor the caller must
        close), the final name in it, and the parts that lead to that name with every link on
        the way followed: the canonical location of what the caller is about to use. With
        ``follow_last`` a final symlink is followed (when it stays inside); without, the final
        name is returned as it is. The final name need not exist; every folder on the way must.
        """
        if not parts:
            raise SandboxError(
                f"{self.logical} is the mount itself, not a file in it", self.logical
            )
        if _OPENAT2 is not None:
            try:
                dir_fd = (
                    _OPENAT2(self.fd, "/".join(parts[:-1]), _DIR_FLAGS)
                    if len(parts) > 1
                    else os.dup(self.fd)
                )
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ELOOP):
                    raise from_os_error(exc, self._name(parts[:-1]), folder=True) from None
                # a link on the way (followed by the walk, which records where it leads), an
                # escape attempt, or an absolute link back inside: let the walk decide
            else:
                name = parts[-1]
                if follow_last and _is_link(dir_fd, name):
                    os.close(dir_fd)
                    return self._walk(parts, follow_last=True)
                return dir_fd, name, list(parts)
        return self._walk(parts, follow_last=follow_last)

    def _walk(self, parts: list[str], *, follow_last: bool) -> tuple[int, str, list[str]]:
        todo = list(parts)
        done: list[str] = []
        fd = os.dup(self.fd)
        links = 0
        try:
            while True:
                name = todo.pop(0)
                last = not todo
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    if last:
                        return fd, name, [*done, name]
                    raise NotFoundError(
                        f"{self._name([*done, name])} does not exist (on the way to "
                        f"{self._name(parts)})",
                        self._name(parts),
                    ) from None
                if stat.S_ISLNK(info.st_mode) and (follow_last or not last):
                    links += 1
                    if links > _MAX_LINKS:
                        raise SandboxError(
                            f"too many symbolic links while resolving {self._name(parts)}",
                            self._name(parts),
                        )
                    try:
                        target = os.readlink(name, dir_fd=fd)
                    except OSError:  # no longer a link: it was swapped while we looked
                        raise self._changed([*done, name], parts) from None
                    todo = self._inside(target, done, name) + todo
                    os.close(fd)
                    fd = os.dup(self.fd)
                    done = []
                    if not todo:  # the link leads to the mount's folder itself
                        return fd, ".", []
                    continue
                if last:
                    return fd, name, [*done, name]
                if not stat.S_ISDIR(info.st_mode):
                    raise NotADirectoryError_(
                        f"{self._name([*done, name])} is a file, not a folder (on the way to "
                        f"{self._name(parts)})",
                        self._name(parts),
                    )
                try:
                    child = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                        raise self._changed([*done, name], parts) from None
                    raise from_os_error(exc, self._name([*done, name]), folder=True) from None
                os.close(fd)
                fd = child
                done.append(name)
        except BaseException:
            os.close(fd)
            raise

    def _changed(self, where: list[str], parts: list[str]) -> PathEscapeError:
        return PathEscapeError(
            f"{self._name(where)} changed (a folder and a link were swapped) while "
            f"{self._name(parts)} was being resolved; the operation was stopped",
            self._name(parts),
        )

    def _inside(self, target: str, done: list[str], name: str) -> list[str]:
        """The parts, relative to the root, the symlink ``name`` in folder ``done`` means;
        PathEscapeError naming the link when it leaves the root."""
        link = self._name([*done, name])
        if target.startswith("/"):
            host = posixpath.normpath(target)
            root = str(self.path)
            if host != root and not host.startswith(root.rstrip("/") + "/"):
                raise PathEscapeError(  # the host target is not named: it would map the host
                    f"{link} is a symbolic link that leads outside {self.logical}; links may "
                    "only point inside the mount",
                    link,
                )
            relative = host[len(root) :].lstrip("/")
            return [p for p in relative.split("/") if p]
        resolved: list[str] = list(done)
        for part in target.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if not resolved:
                    raise PathEscapeError(
                        f"{link} is a symbolic link to {target}, which climbs out of "
                        f"{self.logical}; links may only point inside the mount",
                        link,
                    )
                resolved.pop()
            else:
                resolved.append(part)
        return resolved

    def open(self, parts: list[str], flags: int) -> tuple[int, list[str]]:
        """Open an existing entry beneath the root (``O_NOFOLLOW`` is added: a final symlink is
        followed only by resolving it here, inside the root); the descriptor, and the parts
        that lead to what it holds. One system call when no link is on the way."""
        flags |= os.O_NOFOLLOW | os.O_CLOEXEC
        if _OPENAT2 is not None and parts:
            try:
                return _OPENAT2(self.fd, "/".join(parts), flags), list(parts)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ELOOP):
                    raise
                # a link on the way or at the end: resolve it ourselves, inside the root
        dir_fd, name, where = self.parent(parts)
        try:
            return os.open(name, flags, dir_fd=dir_fd), where
        finally:
            os.close(dir_fd)

    def resolve_parts(self, parts: list[str]) -> list[str]:
        """``parts`` with every symlink resolved (missing tail segments kept as they are):
        the canonical location, as a policy should judge it."""
        for index in range(len(parts), 0, -1):
            try:  # the walk, not the kernel's lookup: it reports where links lead
                dir_fd, _, resolved = self._walk(parts[:index], follow_last=True)
            except NotFoundError:
                continue
            os.close(dir_fd)
            return resolved + parts[index:]
        return list(parts)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def openat2_available() -> bool:
    """Whether the kernel's race-free resolution is in use (otherwise the walk is)."""
    return _OPENAT2 is not None
