"""Files on the host, beneath a mount's root, through descriptors only.

Writes never modify a file in place: they go to a temporary file in the same folder, are
flushed to disk, and renamed over the target in one step. A reader sees the old content or the
new, never half; a crash leaves at most a temporary file; and a name hard-linked to a file
outside the mount is replaced, not written through.

Every operation takes an optional ``check`` (`stockade.sandbox.guard`): it is asked about the
logical path of the entry the operation really reaches, once that entry's folder is open and
before anything is read from or done to it, so what is judged is what is used.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import cast

from stockade.sandbox.errors import (
    ExistsError,
    IsADirectoryError_,
    NotADirectoryError_,
    QuotaError,
    SandboxError,
    from_os_error,
)
from stockade.sandbox.guard import Check
from stockade.sandbox.hostroot import HostRoot
from stockade.sandbox.mounts import FileInfo, Kind
from stockade.sandbox.new_file import new_file

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK  # non-blocking: opening a FIFO must not hang


class HostBackend:
    """One host mount."""

    def __init__(self, prefix: str, root: str | Path, *, durable: bool) -> None:
        self.prefix = prefix
        self.root = HostRoot(root, logical=prefix)
        self.durable = durable

    def close(self) -> None:
        """Release the mount's descriptor."""
        self.root.close()

    def name(self, parts: list[str]) -> str:
        """The logical path of ``parts``."""
        return "/".join([self.prefix.rstrip("/"), *parts]) if parts else self.prefix

    # -- reading -----------------------------------------------------------------------------

    def read_bytes(self, parts: list[str], limit: int, check: Check | None = None) -> bytes:
        """The content of a file; QuotaError past ``limit`` bytes."""
        fd, size = self._open_file(parts, check)
        try:
            if size > limit:
                raise QuotaError(
                    f"{self.name(parts)} is {size} bytes, over the {limit}-byte limit for one "
                    "file; read part of it",
                    self.name(parts),
                )
            # one read does for the usual file; asking for a byte more than its size shows
            # whether it grew meanwhile, and the loop then reads on up to the limit
            data = os.read(fd, min(size, limit) + 1)
            if len(data) > size:
                chunks = [data]
                remaining = limit + 1 - len(data)
                while remaining > 0:
                    chunk = os.read(fd, min(remaining, 1 << 20))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    remaining -= len(chunk)
                data = b"".join(chunks)
            if len(data) > limit:
                raise QuotaError(
                    f"{self.name(parts)} grew past the {limit}-byte limit", self.name(parts)
                )
            return data
        finally:
            os.close(fd)

    def read_range(
        self, parts: list[str], offset: int, length: int, check: Check | None = None
    ) -> bytes:
        """Up to ``length`` bytes of a file from byte ``offset`` (fewer at its end), whatever
        its size: read through the descriptor that was judged, as `read_bytes` does."""
        fd, _ = self._open_file(parts, check)
        try:
            chunks: list[bytes] = []
            while length > 0:
                chunk = os.pread(fd, length, offset)
                if not chunk:
                    break
                chunks.append(chunk)
                offset += len(chunk)
                length -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def _open_file(self, parts: list[str], check: Check | None) -> tuple[int, int]:
        if not parts:
            raise IsADirectoryError_(f"{self.prefix} is a folder, not a file", self.prefix)
        try:
            fd, where = self.root.open(parts, _READ_FLAGS)
        except OSError as exc:
            if isinstance(exc, SandboxError):
                raise
            raise from_os_error(exc, self.name(parts)) from None
        if check is not None:
            try:  # what this descriptor holds, and nothing is read until it is judged
                check(self.name(where), "read")
            except BaseException:
                os.close(fd)
                raise
        info = os.fstat(fd)
        mode = info.st_mode
        if stat.S_ISREG(mode):
            return fd, info.st_size
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError_(
                f"{self.name(parts)} is a folder, not a file", self.name(parts)
            )
        raise SandboxError(
            f"{self.name(parts)} is not a regular file (a device, socket or pipe)", self.name(parts)
        )

    def list_dir(self, parts: list[str], check: Check | None = None) -> list[str]:
        """Names in a folder, sorted."""
        fd = self._open_dir(parts, check)
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def _open_dir(self, parts: list[str], check: Check | None) -> int:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        if not parts:
            if check is not None:
                check(self.prefix, "read")
            return os.open(".", flags, dir_fd=self.root.fd)
        dir_fd, name, where = self.root.parent(parts)
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError as exc:
            raise from_os_error(exc, self.name(parts), want_dir=True) from None
        finally:
            os.close(dir_fd)
        if check is not None:
            try:  # the folder this descriptor holds, judged before a name is read from it
                check(self.name(where), "read")
            except BaseException:
                os.close(fd)
                raise
        return fd

    def stat(self, parts: list[str], check: Check | None = None) -> FileInfo:
        """Kind, size, time and mode (symlinks inside the mount followed); judged as a read of
        what it describes."""
        return self._stat(parts, check, follow_last=True)

    def lstat(self, parts: list[str], check: Check | None = None) -> FileInfo:
        """Like `stat`, without following a final symlink."""
        return self._stat(parts, check, follow_last=False)

    def _stat(self, parts: list[str], check: Check | None, *, follow_last: bool) -> FileInfo:
        if not parts:
            if check is not None:
                check(self.prefix, "read")
            info = os.stat(self.root.fd)
        else:
            dir_fd, name, where = self.root.parent(parts, follow_last=follow_last)
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError as exc:
                raise from_os_error(exc, self.name(parts)) from None
            finally:
                os.close(dir_fd)
            if check is not None:  # what was looked at, judged before anything of it is told
                check(self.name(where), "read")
        kind: Kind = (
            "dir"
            if stat.S_ISDIR(info.st_mode)
            else "file"
            if stat.S_ISREG(info.st_mode)
            else "link"
            if stat.S_ISLNK(info.st_mode)
            else "other"
        )
        return FileInfo(
            self.name(parts), kind, info.st_size, info.st_mtime, stat.S_IMODE(info.st_mode)
        )

    def resolve(self, parts: list[str]) -> list[str]:
        """The parts with symlinks resolved (PathEscapeError if one leads out)."""
        return self.root.resolve_parts(parts)

    def host_path(self, parts: list[str]) -> Path:
        """Where the resolved path is on the host."""
        return self.root.path.joinpath(*self.resolve(parts))

    # -- changing ----------------------------------------------------------------------------

    def write_bytes(
        self,
        parts: list[str],
        data: bytes,
        check: Check | None = None,
        *,
        mode: int | None = None,
        follow_last: bool = True,
    ) -> None:
        """Replace (or create) a file atomically, creating missing folders on the way. The
        file keeps its permission bits (or gets ``mode``; 0o644 for a new file). A write
        through a link inside the mount lands on (and is judged at) the link's target; without
        ``follow_last`` a final link is replaced itself."""
        dir_fd, name, _, temp = self._write_aside(
            parts, data, check, mode, follow_last, flush=self.durable
        )
        try:
            self._rename_into_place(dir_fd, temp, name, parts)
            if self.durable:  # the rename itself must survive a crash too
                _fsync_folder(dir_fd)
        finally:
            os.close(dir_fd)

    def write_aside(
        self,
        parts: list[str],
        data: bytes | Path,
        check: Check | None = None,
        *,
        mode: int | None = None,
        follow_last: bool = True,
    ) -> Callable[[bool], None]:
        """The first half of a write done in two (`stockade.sandbox.vfs.WriteBatch`): the
        content is written beside the target under a name of our own, judged and not yet in
        place, and not flushed. Returns the second half: ``finish(True)`` renames it into place
        (judging the target again, where it is then), ``finish(False)`` removes it; a refused or
        failed ``finish(True)`` removes it too."""
        dir_fd, _, where, temp = self._write_aside(
            parts, data, check, mode, follow_last, flush=False
        )
        os.close(dir_fd)

        def finish(place: bool) -> None:
            dir_fd, name, now = self.root.parent(where, follow_last=False)
            try:
                if place:
                    try:
                        if check is not None:
                            check(self.name(now), "write")
                        self._rename_into_place(dir_fd, temp, name, parts)
                        return
                    except BaseException:
                        # refused or failed: the new content must not stay behind either
                        with contextlib.suppress(OSError):
                            os.unlink(temp, dir_fd=dir_fd)
                        raise
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)

        return finish

    def sync(self) -> None:
        """Flush everything written to the mount's file system to disk (one ``syncfs``)."""
        # the root's descriptor is an O_PATH one, which syncfs refuses: open the folder itself
        folder = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.root.fd)
        try:
            if _syncfs(folder) != 0:
                number = ctypes.get_errno()
                raise from_os_error(OSError(number, os.strerror(number)), self.prefix)
        finally:
            os.close(folder)

    def _write_aside(
        self,
        parts: list[str],
        data: bytes | Path,
        check: Check | None,
        mode: int | None,
        follow_last: bool,
        *,
        flush: bool,
    ) -> tuple[int, str, list[str], str]:
        """Judge the target, then write ``data`` to a new file beside it (with ``flush``, to disk):
        the folder's descriptor (the caller closes it), the target's name, its parts with
        links followed, and the new file's name."""
        if not parts:
            raise IsADirectoryError_(f"{self.prefix} is a folder, not a file", self.prefix)
        try:
            dir_fd, name, where = self.root.parent(parts, follow_last=follow_last)
        except (FileNotFoundError, NotADirectoryError):
            # a folder on the way is missing: judge where the file would be before making it,
            # so a refused write leaves no folders behind
            if check is not None:
                check(self.name(self.resolve(parts)), "write")
            self.mkdir(parts[:-1])
            dir_fd, name, where = self.root.parent(parts, follow_last=follow_last)
        try:
            if check is not None:
                check(self.name(where), "write")
            try:
                current = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                mode = 0o644 if mode is None else mode
            except OSError as exc:
                raise from_os_error(exc, self.name(parts)) from None
            else:
                if stat.S_ISDIR(current.st_mode):
                    raise IsADirectoryError_(
                        f"{self.name(parts)} is a folder; cannot write a file over it",
                        self.name(parts),
                    )
                if mode is None:
                    mode = stat.S_IMODE(current.st_mode) if stat.S_ISREG(current.st_mode) else 0o644
            temp = new_file(dir_fd, data, mode, self.name(parts), flush=flush)
        except BaseException:
            os.close(dir_fd)
            raise
        return dir_fd, name, where, temp

    def _rename_into_place(self, dir_fd: int, temp: str, name: str, parts: list[str]) -> None:
        try:
            os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            if isinstance(exc, OSError):
                raise from_os_error(exc, self.name(parts)) from None
            raise

    def chmod(self, parts: list[str], mode: int, check: Check | None = None) -> None:
        """Set the permission bits of what ``parts`` leads to (a final link followed, inside
        the mount), on the entry judged: opened once, changed through that descriptor."""
        dir_fd, name, where = self.root.parent(parts) if parts else (os.dup(self.root.fd), ".", [])
        try:
            if check is not None:
                check(self.name(where), "write")
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                if stat.S_ISLNK(os.fstat(fd).st_mode):
                    raise SandboxError(
                        f"{self.name(parts)} became a link while being changed; try again",
                        self.name(parts),
                    )
                # an O_PATH descriptor cannot be fchmod-ed; its /proc name reaches the same inode
                os.chmod(f"/proc/self/fd/{fd}", mode)
            finally:
                os.close(fd)
        except OSError as exc:
            if isinstance(exc, SandboxError):
                raise
            raise from_os_error(exc, self.name(parts)) from None
        finally:
            os.close(dir_fd)

    def symlink(self, parts: list[str], target: str, check: Check | None = None) -> None:
        """Make ``parts`` a link to ``target``: made under a name of our own, then renamed over
        whatever file or link is there, so the name is never missing."""
        dir_fd, name, where = self.root.parent(parts, follow_last=False)
        temp = f".stockade-{os.urandom(8).hex()}.lnk"
        try:
            if check is not None:
                check(self.name(where), "write")
            os.symlink(target, temp, dir_fd=dir_fd)
            try:
                os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
                raise
        except OSError as exc:
            if isinstance(exc, SandboxError):
                raise
            raise from_os_error(exc, self.name(parts)) from None
        finally:
            os.close(dir_fd)

    def mkdir(self, parts: list[str], check: Check | None = None) -> None:
        """Create a folder and any missing folders above it (existing ones are fine); each
        folder created is judged as a write where it is made."""
        for depth in range(1, len(parts) + 1):
            dir_fd, name, where = self.root.parent(parts[:depth])
            try:
                if check is not None and not _exists(dir_fd, name):
                    check(self.name(where), "write")
                os.mkdir(name, 0o755, dir_fd=dir_fd)
            except FileExistsError:
                info = os.stat(name, dir_fd=dir_fd)  # a link inside is fine: parent() follows it
                if not stat.S_ISDIR(info.st_mode):
                    raise NotADirectoryError_(
                        f"{self.name(parts[:depth])} is a file, not a folder", self.name(parts)
                    ) from None
            except OSError as exc:
                if isinstance(exc, SandboxError):
                    raise
                raise from_os_error(exc, self.name(parts[:depth])) from None
            finally:
                os.close(dir_fd)

    def delete(self, parts: list[str], *, recursive: bool, check: Check | None = None) -> None:
        """Delete a file, a symlink (never its target), or a folder (empty, or ``recursive``)."""
        if not parts:
            raise SandboxError(
                f"{self.prefix} is the mount itself and cannot be deleted", self.prefix
            )
        dir_fd, name, where = self.root.parent(parts, follow_last=False)
        try:
            if check is not None:
                check(self.name(where), "delete")
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                if recursive:
                    shutil.rmtree(name, dir_fd=dir_fd)  # descriptor-based: never follows links
                else:
                    os.rmdir(name, dir_fd=dir_fd)
            else:
                os.unlink(name, dir_fd=dir_fd)
        except OSError as exc:
            if isinstance(exc, SandboxError):
                raise
            raise from_os_error(exc, self.name(parts)) from None
        finally:
            os.close(dir_fd)

    def rename(
        self, source: list[str], target: list[str], *, overwrite: bool, check: Check | None = None
    ) -> None:
        """Move within the mount (a symlink moves as itself): judged as a delete of the source
        and a write of the target, each where it really is."""
        if not source or not target:
            raise SandboxError("the mount itself cannot be moved", self.prefix)
        if check is not None:  # before a folder is made for the target
            check(self.name(self.resolve(source[:-1]) + source[-1:]), "delete")
            check(self.name(self.resolve(target[:-1]) + target[-1:]), "write")
        self.mkdir(target[:-1])
        src_fd, src_name, src_where = self.root.parent(source, follow_last=False)
        try:
            dst_fd, dst_name, dst_where = self.root.parent(target, follow_last=False)
            try:
                if check is not None:
                    check(self.name(src_where), "delete")
                    check(self.name(dst_where), "write")
                os.stat(src_name, dir_fd=src_fd, follow_symlinks=False)
                if not overwrite and _exists(dst_fd, dst_name):
                    raise ExistsError(
                        f"{self.name(target)} already exists; pass overwrite to replace it",
                        self.name(target),
                    )
                os.rename(src_name, dst_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            except OSError as exc:
                if isinstance(exc, SandboxError):
                    raise
                raise from_os_error(exc, self.name(source)) from None
            finally:
                os.close(dst_fd)
        finally:
            os.close(src_fd)


def _fsync_folder(dir_fd: int) -> None:
    folder = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _load_syncfs() -> Callable[[int], int]:
    syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    syncfs.argtypes, syncfs.restype = [ctypes.c_int], ctypes.c_int
    return cast("Callable[[int], int]", syncfs)


_syncfs = _load_syncfs()


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
