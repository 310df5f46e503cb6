"""Paths as a policy sees them: one canonical spelling, and a folded form for protected names.

A policy must decide on what a path *is*, not on how a model spelled it: ``a/../.env``,
``//workspace/.env/`` and ``.env`` are the same file. `canonical` resolves spellings lexically
(the engine resolves symlinks through the virtual filesystem before asking). `fold` erases the
differences a filesystem or a person may not see — case, Unicode compatibility forms such as
fullwidth letters, invisible format characters — and is used only to *recognise protected
names*, never to widen what an allow rule grants.
"""

from __future__ import annotations

import unicodedata

from stockade.errors import StockadeError

WORKSPACE = "/workspace"


class PathSpellingError(StockadeError, ValueError):
    """A path that cannot name any file: empty, or containing a NUL byte."""


def canonical(path: str, *, cwd: str = WORKSPACE) -> str:
    """The absolute, normalised POSIX form of ``path``: relative paths are taken from ``cwd``,
    ``.`` and empty segments dropped, ``..`` resolved (never above ``/``), no trailing slash.

    ``~`` and ``$VAR`` are ordinary characters here, as they are to a filesystem: a model that
    writes ``~/.ssh/id_rsa`` names ``/workspace/~/.ssh/id_rsa``.
    """
    if not isinstance(path, str):
        raise PathSpellingError(f"a path must be a string, not {type(path).__name__}")
    if "\x00" in path:
        raise PathSpellingError(f"path {path!r} contains a NUL byte, which no file name can hold")
    if not path.strip():
        raise PathSpellingError("the path is empty; name a file or folder")
    joined = path if path.startswith("/") else f"{cwd}/{path}"
    parts: list[str] = []
    for segment in joined.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if parts:
                parts.pop()
            continue
        parts.append(segment)
    return "/" + "/".join(parts)


def fold(path: str) -> str:
    """``path`` with case, compatibility forms and invisible format characters erased, for
    matching protected names (``.ENV``, ``．env`` and ``.e\\u200bnv`` all fold to ``.env``)."""
    if path.isascii():  # the common case: nothing to normalise, and casefold is lower
        return path.lower()
    normal = unicodedata.normalize("NFKC", path)
    visible = "".join(ch for ch in normal if unicodedata.category(ch) != "Cf")
    return unicodedata.normalize("NFKC", visible.casefold())


def ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/", "/a", "/a/b", "/a/b/c"]``: the path and every folder above it."""
    found = ["/"]
    end = path.find("/", 1)
    while end != -1:
        found.append(path[:end])
        end = path.find("/", end + 1)
    if path != "/":
        found.append(path)
    return found


def within(path: str, folders: tuple[str, ...]) -> bool:
    """Whether canonical ``path`` is one of the canonical ``folders`` or lies below one."""
    for folder in folders:
        if path == folder or folder == "/" or path.startswith(folder + "/"):
            return True
    return False


def looks_canonical(path: str) -> bool:
    """Whether ``path`` is plainly canonical already (then `canonical` need not be called)."""
    # canonical() is idempotent; skipping it for paths that are plainly canonical already (as
    # the engine's are) keeps the hot path short. Anything dotted or doubled goes through it.
    return (
        path.startswith("/")
        and "//" not in path
        and "/." not in path
        and "\x00" not in path
        and (path == "/" or not path.endswith("/"))
    )
