"""A file's new content, made beside its target under a name of Stockade's own before it is
renamed into place: written from bytes, or, for a file of Stockade's own (what a command left in
its copy-on-write layer), hard-linked, so that applying a command's thousand files does not copy
them a second time. A link is made only for a regular file with no other name, on the same file
system; anything else is copied.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from stockade.sandbox.errors import from_os_error


def new_file(dir_fd: int, data: bytes | Path, mode: int, logical: str, *, flush: bool) -> str:
    """A new file in the folder ``dir_fd`` under a name of Stockade's own (returned), holding
    ``data`` with exactly the permission bits ``mode`` (with ``flush``, on disk); errors name
    ``logical``."""
    # a short name of our own: the target's name may already be at the length limit
    temp = f".stockade-{os.urandom(8).hex()}.tmp"
    if isinstance(data, Path):
        if _linked(data, dir_fd, temp, mode):
            if flush:
                fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            return temp
        data = data.read_bytes()
    try:
        fd = os.open(
            temp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            mode,
            dir_fd=dir_fd,
        )
    except OSError as exc:
        raise from_os_error(exc, logical) from None
    try:
        try:
            os.fchmod(fd, mode)  # exactly these bits: the umask must not change them
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if flush:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        if isinstance(exc, OSError):
            raise from_os_error(exc, logical) from None
        raise
    return temp


def _linked(source: Path, dir_fd: int, temp: str, mode: int) -> bool:
    """``source`` (a file of Stockade's own with no other name) hard-linked as ``temp``, with
    ``mode``: its content lands without being copied. False where it cannot be (another file
    system, another name already): then it is copied."""
    try:
        info = os.lstat(source)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return False
        os.link(source, temp, dst_dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    try:
        os.chmod(temp, mode, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        return False
    return True


__all__ = ["new_file"]
