"""Why the sandbox refused or failed: every error names the logical path and what to do.

The error classes also derive from the matching built-in exceptions (a missing file is a
`NotFoundError` *and* a `FileNotFoundError`), so callers can catch either way.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base of every error the sandbox raises on purpose. ``path`` is the logical path."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class PathEscapeError(SandboxError, PermissionError):
    """The path leads outside every mount (by spelling, ``..``, a symlink or a race), or is not
    a path at all (empty, NUL byte, too long)."""


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
