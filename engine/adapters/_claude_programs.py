"""How programs use the words of a Bash command, for Claude Code's hook: which operands are
files and how each is used, which programs use a folder's whole tree, which may leave a
symbolic link behind them, and what git's own options do to files.

    access("cp", last=True, in_place=False)   # 'write': cp writes its last operand
    recursion(command)                        # Recursion('delete') for `rm -r build`
    makes_no_links(command)                   # True for `cat x`, False for `git checkout x`
    git_effects(command)                      # GitEffects(writes=[...], unknown=[...])

Written by hand because no library says what a program makes of its arguments; every table
here errs toward judging more (an operand taken for a file it is not costs a question at most).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from itertools import pairwise
from typing import NamedTuple

from stockade.policies import SimpleCommand
from stockade.policies.command_forms import PROGRAMS
from stockade.policies.request import Access

_DELETES = frozenset({"rm", "rmdir", "unlink", "shred"})
_WRITES = frozenset(
    {"touch", "mkdir", "tee", "truncate", "chmod", "chown", "chgrp", "chattr", "mkfifo", "mknod"}
)
_LAST_WRITES = frozenset({"cp", "ln", "install", "rsync", "scp"})
MOVES = frozenset({"mv"})
COPIES = _LAST_WRITES | MOVES  # programs whose last operand is where the others go
_IN_PLACE = frozenset({"sed", "perl"})  # with -i, their files are rewritten
# programs whose every operand is a file or folder, whether it exists yet or not
FILES_ONLY = (
    _DELETES
    | _WRITES
    | _LAST_WRITES
    | MOVES
    | frozenset({"cd", "pushd", "cat", "head", "tail", "less", "more", "source", "."})
)
# programs whose first operand is a pattern or a program text, not a file (unless given by -e)
PATTERN_FIRST = frozenset({"grep", "egrep", "fgrep", "rg", "sed", "awk", "gawk", "mawk", "jq"})
PATTERN_OPTIONS = ("-e", "-f", "--regexp", "--file", "--expression")
# programs that print their arguments rather than open them
NOT_FILES = frozenset({"echo", "printf", "true", "false", ":"})

# programs that cannot leave a symbolic link (or a folder swapped for one) behind them: after
# any other, a path that does not exist yet may be made to lead anywhere before it is used
_LINK_FREE = frozenset(
    {"cat", "ls", "echo", "printf", "grep", "egrep", "fgrep", "rg", "head", "tail", "wc"}
    | {"sort", "uniq", "cut", "tr", "diff", "cmp", "comm", "mkdir", "touch", "test", "["}
    | {"true", "false", ":", "pwd", "cd", "pushd", "popd", "date", "sleep", "which", "type"}
    | {"stat", "file", "du", "df", "basename", "dirname", "realpath", "readlink", "tee"}
    | {"chmod", "rm", "rmdir", "nl", "od", "xxd", "md5sum", "sha1sum", "sha256sum", "less"}
    | {"more", "seq", "jq", "column", "env", "xargs", "find", "sed", "wc", "tree", "whoami"}
)
# git commands that change the work tree (so may check a link out); others only read it
_GIT_WORK_TREE = frozenset(
    {"checkout", "switch", "restore", "reset", "merge", "pull", "rebase", "cherry-pick"}
    | {"revert", "stash", "apply", "am", "clone", "worktree", "submodule", "sparse-checkout"}
    | {"read-tree", "checkout-index", "mv", "rm", "clean", "filter-branch", "bisect"}
)
# `git -c` keys that run nothing and reach no file
_GIT_HARMLESS_KEYS = ("color.", "advice.", "column.", "i18n.")
_GIT_HARMLESS = frozenset(
    {"core.quotepath", "user.name", "user.email", "init.defaultbranch", "diff.noprefix"}
)
_GIT_CONFIG_READS = frozenset(
    {"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l", "--get-color"}
    | {"--get-colorbool", "get", "list", "--blob"}
)


def access(name: str, last: bool, in_place: bool) -> Access:
    """How ``name`` uses an operand (``last``: its last one; ``in_place``: given ``-i``)."""
    if name in _DELETES:
        return "delete"
    if name in _WRITES or (name in _IN_PLACE and in_place):
        return "write"
    if last and (name in _LAST_WRITES or name in MOVES):
        return "write"
    return "read"


def _flags(command: SimpleCommand) -> list[str]:
    """The option words before ``--`` (static ones; a dynamic one makes the line unknown)."""
    found = []
    for word in command.words[1:]:
        if word.text == "--":
            break
        if word.text.startswith("-") and word.text != "-":
            found.append(word.text)
    return found


def _short(flags: list[str], letters: str, *long: str) -> bool:
    """Whether a short option in ``letters`` (alone or in a cluster) or a ``long`` one is set."""
    for flag in flags:
        if flag.startswith("--"):
            if flag.split("=", 1)[0] in long:
                return True
        elif any(ch in letters for ch in flag[1:]):
            return True
    return False


class Recursion(NamedTuple):
    """How a program uses the whole tree of a folder it names: the access, whether hidden
    entries are in it, and whether it follows the links it meets there."""

    access: Access
    hidden: bool = True
    follows: bool = False


def recursion(command: SimpleCommand) -> Recursion | None:
    """How ``command`` uses the whole tree of a folder it names; None when it uses folders as
    they are (or is no such program)."""
    name, flags = command.name, _flags(command)
    given = {w.text for w in command.words}
    if name in ("grep", "egrep", "fgrep"):
        follows = _short(flags, "R", "--dereference-recursive")
        texts = [w.text for w in command.words]
        recurse = "--directories=recurse" in given or "-drecurse" in given
        recurse = recurse or any(a == "-d" and b == "recurse" for a, b in pairwise(texts))
        if recurse or _short(flags, "rR", "--recursive", "--dereference-recursive"):
            return Recursion("read", True, follows)
        return None
    if name in ("rg", "ag"):
        hidden = _short(flags, ".", "--hidden", "--unrestricted") or any(
            f.startswith("-uu") for f in flags
        )
        return Recursion("read", hidden, _short(flags, "Lf", "--follow"))
    if name in ("ack", "ack-grep"):
        return Recursion("read", True, "--follow" in given)
    if name == "find":
        follows = "-L" in given or "-follow" in given
        if "-delete" in given:
            return Recursion("delete", True, follows)
        if given & {"-exec", "-execdir", "-ok", "-okdir"}:
            return Recursion("read", True, follows)
        return None
    if name in ("rm", "cp", "rsync", "scp", "zip"):
        letters = {"rm": "rR", "cp": "rRa", "rsync": "ra", "scp": "r", "zip": "r"}[name]
        if not _short(flags, letters, "--recursive", "--archive", "--recurse-paths"):
            return None
        if name == "rm":
            return Recursion("delete")  # removes links, never what they lead to
        # scp and zip follow links unless told not to; cp and rsync when told to
        follows = name in ("scp", "zip") or _short(flags, "L", "--dereference", "--copy-links")
        return Recursion("read", True, follows and "-y" not in given)
    if name in MOVES:
        return Recursion("delete")  # a folder moved is every entry in it gone from there
    if name in ("chmod", "chown", "chgrp"):
        return (
            Recursion("write", True, "-L" in given) if _short(flags, "R", "--recursive") else None
        )
    if name in ("tar", "bsdtar"):
        first = command.words[1].text if len(command.words) > 1 else ""
        create = "c" in first.lstrip("-") and not first.startswith("--")
        if create or _short(flags, "c", "--create"):
            return Recursion("read", True, _short(flags, "h", "--dereference"))
        return None
    return None


def makes_no_links(command: SimpleCommand) -> bool:
    """Whether ``command`` certainly leaves no symbolic link behind (a program of the list;
    git but for the commands that change the work tree)."""
    if command.name == "git":
        sub = _git_subcommand(command)
        return sub is not None and sub[0] not in _GIT_WORK_TREE
    return command.name in _LINK_FREE


def _git_subcommand(command: SimpleCommand) -> tuple[str, int] | None:
    """git's subcommand and its index among the words, past git's own options."""
    valued = PROGRAMS["git"].valued
    words = command.words
    i = 1
    while i < len(words):
        text = words[i].text
        if text in valued:
            i += 2
        elif text.startswith("-"):
            i += 1
        else:
            return text, i
    return None


@dataclass
class GitEffects:
    """What git's own options do besides the command: config files written (paths as given,
    with ``.git/config`` relative to the repository), and what is known only when it runs."""

    writes: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def git_effects(command: SimpleCommand) -> GitEffects:
    """``git -c KEY=VALUE`` (a key that may run a program: unknown) and ``git config`` (a
    write of the config file it changes)."""
    found = GitEffects()
    if command.name != "git":
        return found
    words = command.words
    sub = _git_subcommand(command)
    for index, word in enumerate(words[1 : sub[1] if sub else None], start=1):
        text = word.text  # git's own options, before its command
        if text == "--config-env" or text.startswith("--config-env="):
            found.unknown.append(text)
        if text == "-c" and index + 1 < len(words):
            key = words[index + 1].text.split("=", 1)[0].lower()
            if key not in _GIT_HARMLESS and not key.startswith(_GIT_HARMLESS_KEYS):
                found.unknown.append(f"git -c {words[index + 1].text}"[:80])
    if sub is None or sub[0] != "config":
        return found
    rest = [w.text for w in words[sub[1] + 1 :]]
    options = [text for text in rest if text.startswith("-")]
    operands = [text for text in rest if not text.startswith("-")]
    if set(rest) & _GIT_CONFIG_READS or (len(operands) <= 1 and not set(options) - {"--local"}):
        return found  # a read: `git config user.name`, `git config --get x`, `--list`
    found.writes.extend(_git_config_files(rest))
    return found


def _git_config_files(rest: list[str]) -> list[str]:
    """The files ``git config`` with these words changes."""
    for index, text in enumerate(rest):
        if text in ("-f", "--file") and index + 1 < len(rest):
            return [rest[index + 1]]
        if text.startswith("--file="):
            return [text.split("=", 1)[1]]
    if "--global" in rest:
        xdg = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
        return ["~/.gitconfig", f"{xdg}/git/config"]
    if "--system" in rest:
        return ["/etc/gitconfig"]
    return [".git/config.worktree" if "--worktree" in rest else ".git/config"]


__all__ = [
    "COPIES",
    "FILES_ONLY",
    "MOVES",
    "NOT_FILES",
    "PATTERN_FIRST",
    "PATTERN_OPTIONS",
    "GitEffects",
    "Recursion",
    "access",
    "git_effects",
    "makes_no_links",
    "recursion",
]
