"""Why the sandbox refused or failed: every error names the logical path and what to do.

Every class derives from `StockadeError` and from `OSError` (the sandbox is a file system), each
also from the matching built-in exception (a missing file is a `NotFoundError`, a
`StockadeError` *and* a `FileNotFoundError`), so callers can catch either way.
"""

from __future__ import annotations

import errno

from stockade.errors import StockadeError


class SandboxError(StockadeError, OSError):
    """Base of every error the sandbox raises on purpose. ``path`` is the logical path."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class PathEscapeError(SandboxError, PermissionError):
    """The path leads outside every mount (by spelling, ``..``, a symlink or a race), or is not
    a path at all (empty, NUL byte, too long)."""


class PathDeniedError(SandboxError, PermissionError):
    """A guarded view's guard refused the path an operation reached (after following links):
    ``path`` is that logical path, ``reason`` the guard's words."""

    def __init__(self, message: str, path: str | None = None, *, reason: str = "") -> None:
        super().__init__(message, path)
        self.reason = reason


class ReadOnlyError(SandboxError, PermissionError):
    """A write, delete or move on a read-only mount."""


class QuotaError(SandboxError, OSError):
    """A file or the total written would exceed the file system's limits."""


class NotFoundError(SandboxError, FileNotFoundError):
    """No file or folder at the path."""


class IsADirectoryError_(SandboxError, IsADirectoryError):
    """A file operation on a folder."""


class NotADirectoryError_(SandboxError, NotADirectoryError):
    """A folder operation on a file, or a file where a folder is needed on the way."""


class ExistsError(SandboxError, FileExistsError):
    """Something already exists where it must not."""


class NotTextError(SandboxError, ValueError):
    """A file read as text is not UTF-8 text."""


def from_os_error(
    exc: OSError, name: str, *, want_dir: bool = False, folder: bool = False
) -> SandboxError:
    """The sandbox error for an OS error on the logical path ``name`` (host and memory mounts
    alike). ``want_dir``: a folder was asked for; ``folder``: ``name`` is a folder on the way."""
    code = exc.errno
    if code == errno.ENOENT:
        return NotFoundError(f"{'folder ' if folder else ''}{name} does not exist", name)
    if code == errno.ELOOP:
        return PathEscapeError(
            f"{name} is a symbolic link that changed while it was being opened, or leads in "
            "a loop; the operation was stopped",
            name,
        )
    if code == errno.ENOTDIR:
        return NotADirectoryError_(
            f"{name} is a file, not a folder" if want_dir else f"{name} is not a folder", name
        )
    if code == errno.EISDIR:
        return IsADirectoryError_(f"{name} is a folder, not a file", name)
    if code == errno.ENOTEMPTY:
        return SandboxError(f"folder {name} is not empty; delete what is in it first", name)
    if code == errno.EEXIST:
        return ExistsError(f"{name} already exists", name)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return QuotaError(f"no space left to write {name}", name)
    if code == errno.ENAMETOOLONG:
        return PathEscapeError(f"{name} is too long for the file system", name)
    return SandboxError(f"{name}: {exc.strerror}", name)
