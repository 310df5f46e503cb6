"""Logical paths: the names an agent uses, before any file system is asked.

A logical path is POSIX, absolute (relative ones are taken from ``/workspace``), without empty
or ``.`` segments, with ``..`` resolved *lexically*, and must not climb above ``/``. This is
the first gate only: symlinks and races are dealt with where the host is asked.
"""

from __future__ import annotations

from stockade.sandbox.errors import PathEscapeError

WORKSPACE = "/workspace"
MAX_PATH = 4096
MAX_NAME = 255


def normalize(path: str, *, cwd: str = WORKSPACE) -> str:
    """The logical form of ``path``; raises PathEscapeError naming what is wrong with it."""
    if (
        path[:1] == "/"
        and "//" not in path
        and "/." not in path
        and "\x00" not in path
        and path[-1] != "/"
        and len(path) <= MAX_NAME  # short enough that no segment or the whole can be too long
    ):
        return path  # already logical: the common case, decided in a few string scans
    if not isinstance(path, str):
        raise PathEscapeError(f"a path must be text, not {type(path).__name__}")
    if "\x00" in path:
        raise PathEscapeError(f"path {path!r} contains a NUL byte; no file name can", path)
    if not path.strip():
        raise PathEscapeError("the path is empty; name a file or folder, e.g. /workspace/a.txt")
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH:
        raise PathEscapeError(
            f"path {path[:60]!r}... is longer than {MAX_PATH} bytes; use a shorter one",
            path[:80] + "...",
        )
    joined = path if path.startswith("/") else f"{cwd}/{path}"
    parts: list[str] = []
    for segment in joined.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not parts:
                raise PathEscapeError(
                    f"path {path!r} climbs above '/' with '..'; stay inside the mounts", path
                )
            parts.pop()
            continue
        if len(segment.encode("utf-8", "surrogateescape")) > MAX_NAME:
            raise PathEscapeError(f"a name in {path!r} is longer than {MAX_NAME} bytes", path)
        parts.append(segment)
    return "/" + "/".join(parts)


def split(path: str) -> list[str]:
    """The segments of a normalized logical path (``/`` has none)."""
    return [part for part in path.split("/") if part]


def within(path: str, prefix: str) -> bool:
    """Whether normalized ``path`` is ``prefix`` or under it, on segment boundaries
    (``/workspace-evil`` is not within ``/workspace``)."""
    return path == prefix or prefix == "/" or path.startswith(prefix + "/")
