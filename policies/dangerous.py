"""Paths an agent should not touch without a person's say-so, wherever they appear.

The built-in list merges what peer agent frameworks protect: the parts of a git folder that make
git run code or reach credentials, credentials, shell start-up files (code that runs on the next
login), editor, dev-container and agent configuration (settings that change what the next tool
or agent may do), and Stockade's own state and policy file. Entries are names matched anywhere in
a canonical path, case-insensitively and ignoring Unicode look-alikes: ``.ssh/`` protects
``/workspace/.ssh/config`` and ``/workspace/a/.SSH/x``.

**git.** A protected ``.git/`` as a whole blocks ordinary work: ``git add``, ``commit``,
``checkout`` and ``stash`` write objects, refs, the index, logs, ``HEAD``, ``ORIG_HEAD``,
``packed-refs`` and ``COMMIT_EDITMSG``, and none of those is ever run; they are data git reads.
What is protected is what makes git run code or reach credentials, each entry for a reason:

- ``.git`` itself, against writes and deletes only (`CHANGE_ONLY`): a ``.git`` *file*
  (``gitdir: <folder>``, as in worktrees and submodules) sends git to another folder, whose
  config and hooks then run; making or removing the folder makes or unmakes a repository.
  Reading it stays allowed: git reads its own folder through that name, and a command's view
  must not lose it.
- ``config``, ``config.worktree``: aliases (``!cmd``), ``core.hooksPath``, ``core.fsmonitor``,
  ``core.sshCommand``, ``core.pager``, filter and diff drivers all run programs; credential
  helpers and tokens in remote URLs are credentials.
- ``hooks/``: scripts git runs on commit, checkout, merge, push.
- ``info/``: ``attributes`` chooses the filter, diff and merge drivers a path goes through;
  ``exclude`` hides files from ``git status`` (and so from review); ``sparse-checkout`` and
  ``grafts`` change what git shows.
- ``commondir`` (and a worktree's ``worktrees/*/commondir``): moves the folder git takes its
  config and hooks from.
- ``worktrees/*/config*``: a linked worktree's own ``config.worktree``.
- ``objects/info/alternates``, ``objects/info/http-alternates``: object stores anywhere on the
  host (or the web) that git reads as this repository's own. Ordinary git never writes them.
- ``rebase-merge/git-rebase-todo``: its ``exec`` lines run as shell commands on the next
  ``git rebase --continue``. (``sequencer/todo`` is not listed: cherry-pick and revert accept
  only ``pick`` and ``revert`` lines from it.)
- ``modules/**/...``: a submodule's git folder holds the same ``config``, ``config.worktree``,
  ``commondir``, ``hooks/``, ``info/`` and ``git-rebase-todo`` (its ``info/`` entry also covers
  its ``objects/info``, alternates included, which only ``git gc`` writes).

Not protected, on purpose: ``objects/``, ``refs/``, ``logs/``, ``index``, ``HEAD``,
``ORIG_HEAD``, ``FETCH_HEAD``, ``MERGE_HEAD``, ``packed-refs``, ``COMMIT_EDITMSG``,
``description``, ``sequencer/``, ``rebase-apply/``: what ordinary git writes, and never runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

GIT_ENTRIES: tuple[str, ...] = (
    ".git",
    ".git/config", ".git/config.worktree", ".git/commondir",
    ".git/hooks/", ".git/info/",
    ".git/objects/info/alternates", ".git/objects/info/http-alternates",
    ".git/worktrees/*/config*", ".git/worktrees/*/commondir",
    ".git/rebase-merge/git-rebase-todo",
    ".git/modules/**/config", ".git/modules/**/config.worktree", ".git/modules/**/commondir",
    ".git/modules/**/hooks/", ".git/modules/**/info/",
    ".git/modules/**/rebase-merge/git-rebase-todo",
)  # fmt: skip

DEFAULT_DANGEROUS: tuple[str, ...] = (
    *GIT_ENTRIES,
    ".ssh/", ".gnupg/", ".aws/", ".kube/", ".docker/config.json",
    ".git-credentials", ".netrc", ".npmrc", ".pypirc", ".yarnrc.yml",
    ".env", ".env.*", ".envrc",
    ".bashrc", ".bash_profile", ".zshrc", ".zshenv", ".zprofile", ".profile",
    ".gitconfig", ".gitmodules",
    ".vscode/", ".idea/", ".husky/", ".devcontainer/", ".mcp.json",
    ".claude/", ".codex/", ".agents/", ".cursor/", ".gemini/",
    ".stockade/", "stockade.toml",
)  # fmt: skip

# Patterns protected against writes and deletes only, never reads: the path named `.git` (see
# the module docstring). Kept as the pattern, not the entry, so that a policy read back from its
# casbin lines (which hold patterns) means the same.
CHANGE_ONLY: frozenset[str] = frozenset({"**/.git"})

# In `remove`, this names every git entry at once (the list once held `.git/` whole, and
# policy files written then say `remove = [".git/"]`)
GIT_ALIAS = ".git/"


class DangerousPatterns(NamedTuple):
    """The effective list as glob patterns: those protected for every access, and those
    protected against writes and deletes only (`CHANGE_ONLY`)."""

    any_access: list[str]
    changes: list[str]


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
) -> DangerousPatterns:
    """The effective list as glob patterns: the built-in entries (or ``replace``), minus
    ``remove``, plus ``extend``. ``.git/`` in ``remove`` removes every git entry."""
    base = list(DEFAULT_DANGEROUS if replace is None else replace)
    removed = set(remove)
    if GIT_ALIAS in removed and GIT_ALIAS not in base:
        removed = (removed - {GIT_ALIAS}) | (set(GIT_ENTRIES) & set(base))
    unknown = removed - set(base)
    if unknown:
        raise ValueError(
            f"cannot remove {', '.join(sorted(map(repr, unknown)))}: not in the list "
            f"({', '.join(base)})"
        )
    entries = [e for e in base if e not in removed] + [e for e in extend if e not in base]
    patterns = [pattern for entry in entries for pattern in entry_patterns(entry)]
    return DangerousPatterns(
        [p for p in patterns if p not in CHANGE_ONLY], [p for p in patterns if p in CHANGE_ONLY]
    )
