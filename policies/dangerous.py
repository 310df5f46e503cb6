"""Paths an agent should not touch without a person's say-so, wherever they appear.

The built-in list merges what peer agent frameworks protect: version-control internals and
hooks (code that runs on the next commit), credentials, shell start-up files (code that runs on
the next login), editor and agent configuration (settings that change what the next agent may
do). Entries are names matched anywhere in a canonical path, case-insensitively and ignoring
Unicode look-alikes: ``.ssh/`` protects ``/workspace/.ssh/config`` and ``/workspace/a/.SSH/x``.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_DANGEROUS: tuple[str, ...] = (
    ".git/", ".ssh/", ".gnupg/", ".aws/", ".kube/", ".docker/config.json",
    ".git-credentials", ".netrc", ".npmrc", ".pypirc",
    ".env", ".env.*", ".envrc",
    ".bashrc", ".bash_profile", ".zshrc", ".zprofile", ".profile",
    ".gitconfig", ".gitmodules",
    ".vscode/", ".idea/", ".husky/", ".mcp.json",
    ".claude/", ".codex/", ".agents/",
)  # fmt: skip


def entry_patterns(entry: str) -> list[str]:
    """Glob patterns for one list entry: ``name/`` is a folder (itself and everything in it),
    ``name`` a file, ``/abs/path`` an absolute pattern; any of them may use glob syntax."""
    if not entry or not entry.strip("/"):
        raise ValueError(f"dangerous path entry {entry!r} names nothing")
    if entry.startswith(("/", "**")):
        return [entry]
    if entry.endswith("/"):
        name = entry.rstrip("/")
        return [f"**/{name}", f"**/{name}/**"]
    return [f"**/{entry}"]


def dangerous_patterns(
    *,
    extend: Iterable[str] = (),
    remove: Iterable[str] = (),
    replace: Iterable[str] | None = None,
) -> list[str]:
    """The effective list as glob patterns: the built-in entries (or ``replace``), minus
    ``remove``, plus ``extend``."""
    base = list(DEFAULT_DANGEROUS if replace is None else replace)
    removed = set(remove)
    unknown = removed - set(base)
    if unknown:
        raise ValueError(
            f"cannot remove {', '.join(sorted(map(repr, unknown)))}: not in the list "
            f"({', '.join(base)})"
        )
    entries = [e for e in base if e not in removed] + [e for e in extend if e not in base]
    return [pattern for entry in entries for pattern in entry_patterns(entry)]
