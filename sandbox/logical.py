"""Logical paths: the names an agent uses, before any file system is asked.

A logical path is POSIX, absolute (relative ones are taken from ``/workspace``), without empty
or ``.`` segments, with ``..`` resolved *lexically*, and must not climb above ``/``; it names
bytes a file system can hold, by one spelling only (see `_file_name_bytes`). This is the first
gate only: symlinks and races are dealt with where the host is asked.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from stockade.sandbox.errors import PathEscapeError

WORKSPACE = "/workspace"
MAX_PATH = 4096
MAX_NAME = 255


def normalize(path: str, *, cwd: str = WORKSPACE) -> str:
    """The logical form of ``path``; raises PathEscapeError naming what is wrong with it."""
    if not isinstance(path, str):
        raise PathEscapeError(f"a path must be text, not {type(path).__name__}")
    if (
        path[:1] == "/"
        and "//" not in path
        and "/." not in path
        and "\x00" not in path
        and path[-1] != "/"
        # ASCII and short: no segment and not the whole can be too long, and no escaped bytes
        and len(path) <= MAX_NAME
        and path.isascii()
    ):
        return path  # already logical: the common case, decided in a few string scans
    if "\x00" in path:
        raise PathEscapeError(f"path {path!r} contains a NUL byte; no file name can", path)
    if not path.strip():
        raise PathEscapeError("the path is empty; name a file or folder, e.g. /workspace/a.txt")
    if len(_file_name_bytes(path)) > MAX_PATH:
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
    logical = "/" + "/".join(parts)
    if not path.startswith("/") and len(logical.encode("utf-8", "surrogateescape")) > MAX_PATH:
        # short enough as given, too long once taken from cwd: refused now, or it would be
        # refused later, when the logical path is asked for again
        raise PathEscapeError(
            f"path {path[:60]!r}... is longer than {MAX_PATH} bytes once taken from {cwd}; "
            "use a shorter one",
            path[:80] + "...",
        )
    return logical


def _file_name_bytes(path: str) -> bytes:
    """The bytes ``path`` names on disk; PathEscapeError when it names none, or names them by a
    second spelling.

    A file name is bytes: text stands for its UTF-8, and a byte that is not part of any UTF-8
    is written as a surrogate U+DC80-U+DCFF (as ``os.listdir`` returns it). Any other surrogate
    stands for no byte. Surrogates that spell bytes which *are* UTF-8 (``caf\\udcc3\\udca9``)
    name the file the text names (``café``) while differing from it as a string, so a policy
    that judged the string would judge the wrong name: only the text spelling is accepted.
    """
    try:
        raw = path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise PathEscapeError(
            f"path {path!r} contains a surrogate character that stands for no byte, so no "
            "file name can hold it; remove it",
            path,
        ) from None
    text = raw.decode("utf-8", "surrogateescape")
    if text != path:
        raise PathEscapeError(
            f"path {path!r} spells UTF-8 text in escaped bytes; write it as text: {text!r}",
            path,
        )
    return raw


def split(path: str) -> list[str]:
    """The segments of a normalized logical path (``/`` has none)."""
    return [part for part in path.split("/") if part]


def within(path: str, prefix: str) -> bool:
    """Whether normalized ``path`` is ``prefix`` or under it, on segment boundaries
    (``/workspace-evil`` is not within ``/workspace``)."""
    return path == prefix or prefix == "/" or path.startswith(prefix + "/")


F = TypeVar("F", bound=Callable[..., Any])


def names_the_path(method: F) -> F:
    """For a `VirtualFS` method: make a refusal name the path that was asked for, not only the
    link it passed through: "/workspace/a/b.txt: on the way, /workspace/a, a symbolic link
    that leads outside ..."."""

    @functools.wraps(method)
    def named(self: object, *paths: Any, **options: Any) -> Any:
        try:
            return method(self, *paths, **options)
        except PathEscapeError as exc:
            asked = [normalize(p) for p in paths if isinstance(p, str) and _normal(p)]
            if exc.path and asked and exc.path not in asked:
                # name the path asked for first; the message goes on to name the link
                raise PathEscapeError(f"{asked[0]}: on the way, {exc}", asked[0]) from None
            raise

    return cast(F, named)


def _normal(path: str) -> bool:
    try:
        normalize(path)
    except PathEscapeError:
        return False
    return True
