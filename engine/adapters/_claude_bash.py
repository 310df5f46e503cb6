"""The files a Bash command line names, on the host, for Claude Code's hook.

Stockade's own ``run_shell`` runs in a box where only the mounts exist, so its policy judges a
command by its words and the files its redirections open; what the command reads or writes
beyond that is judged after the run, on its copy-on-write layers. Claude Code runs its ``Bash``
commands itself, with the user's rights and nothing around them. So the hook judges, before
the command runs, every file the line names: each argument that is a path (it has a ``/``,
starts with ``~`` or ``.``, or names something that exists where the command runs), each glob's
matches (expanded as bash would, where the command runs), and each redirection's target,
relative ones against every folder a ``cd`` in the line may have led to.

How an argument is used is taken from the program, conservatively: ``rm`` deletes, ``touch``,
``tee``, ``chmod`` ... write, the last argument of ``cp``, ``mv``, ``ln`` is written (and
``mv``'s others deleted), ``sed -i`` writes its files; every other argument is judged as a
read. What the line cannot show (``$HOME/x``, ``$(cmd)``, ``{a,b}``, a relative path after a
``cd`` to a folder known only then) is returned as *unknown*: the hook never lets a policy
allow such a command without a person's yes.

Written by hand because no library reads paths out of shell words: a program's arguments mean
what the program makes of them, so this is a sound-leaning approximation (it errs toward judging
more), not a proof of what a command touches.

    named = named_paths(policy.command_line("cat ~/.ssh/id_rsa > out"), "/home/me/project")
    named.paths    # [('/home/me/.ssh/id_rsa', 'read'), ('/home/me/project/out', 'write')]
"""

from __future__ import annotations

import glob
import os
import posixpath
import re
from dataclasses import dataclass, field

from stockade.policies import CommandLine, SimpleCommand
from stockade.policies.request import Access
from stockade.policies.shell import HARMLESS_DEVICES

MAX_PATHS = 4096  # paths judged per command line; past it, the rest is unknown
MAX_MATCHES = 1024  # a glob's matches judged one by one; past it, the glob is unknown
MAX_CWDS = 8  # folders a line may `cd` into before relative paths become unknown

_DELETES = frozenset({"rm", "rmdir", "unlink", "shred"})
_WRITES = frozenset(
    {"touch", "mkdir", "tee", "truncate", "chmod", "chown", "chgrp", "chattr", "mkfifo", "mknod"}
)
_LAST_WRITES = frozenset({"cp", "ln", "install", "rsync", "scp"})
_MOVES = frozenset({"mv"})
_IN_PLACE = frozenset({"sed", "perl"})  # with -i, their files are rewritten
# programs whose every operand is a file or folder, whether it exists yet or not
_FILES_ONLY = (
    _DELETES
    | _WRITES
    | _LAST_WRITES
    | _MOVES
    | frozenset({"cd", "pushd", "cat", "head", "tail", "less", "more", "source", "."})
)
# programs whose first operand is a pattern or a program text, not a file (unless given by -e)
_PATTERN_FIRST = frozenset({"grep", "egrep", "fgrep", "rg", "sed", "awk", "gawk", "mawk", "jq"})
_PATTERN_OPTIONS = ("-e", "-f", "--regexp", "--file", "--expression")
# programs that print their arguments rather than open them
_NOT_FILES = frozenset({"echo", "printf", "true", "false", ":"})
_FD_PATH = re.compile(r"^/dev/fd/\d+$")


@dataclass
class NamedPaths:
    """What a command line names: host paths (absolute, as spelled: ``..`` and links are left
    for the sandbox's resolution) with how each is used, and the words known only when it
    runs."""

    paths: list[tuple[str, Access]] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    def add(self, path: str, access: Access) -> None:
        if len(self.paths) >= MAX_PATHS:
            self.note(f"more than {MAX_PATHS} paths")
            return
        entry = (path, access)
        if entry not in self.paths:
            self.paths.append(entry)

    def note(self, word: str) -> None:
        if word not in self.unknown:
            self.unknown.append(word)


def named_paths(line: CommandLine, cwd: str) -> NamedPaths:
    """The files ``line`` names, judged from ``cwd`` (the host folder the command runs in)."""
    named = NamedPaths()
    folders: list[str] | None = [cwd]  # None: a cd led somewhere known only then
    for command in line.commands:
        if command.opaque or not command.words:
            if command.opaque:
                named.note(f"a command run by {'/'.join(command.via) or 'the line'}")
            continue
        _command(command, folders, named)
        folders = _after_cd(command, folders)
    for redirect in line.redirects:
        target = redirect.target
        if target in HARMLESS_DEVICES or _FD_PATH.match(target):
            continue
        if redirect.paths or target.startswith("~"):
            # a static target (Stockade resolved it against its own /workspace: the host's
            # folders are what count here)
            _resolve(target, folders, named, redirect.access)
        else:
            named.note(target)
    return named


def _command(command: SimpleCommand, folders: list[str] | None, named: NamedPaths) -> None:
    program = command.words[0]
    text = program.text
    if program.static and not text.startswith("/") and ("/" in text or text.startswith("~")):
        # a program run from a relative path (or the home folder) is a file it reads; an
        # absolute one is a system program, judged by the command rules
        _resolve(text, folders, named, "read")
    name = command.name
    if name in _NOT_FILES:
        return
    operands: list[int] = []  # indexes of the words that are operands
    options_done = False
    in_place = False
    pattern_given = False
    for index, word in enumerate(command.words[1:], start=1):
        value = word.text
        if word.dynamic:
            named.note(value)
            continue
        if not options_done and value == "--":
            options_done = True
            continue
        if not options_done and value.startswith("-") and value != "-":
            in_place = in_place or value.startswith(("-i", "--in-place"))
            pattern_given = pattern_given or value.startswith(_PATTERN_OPTIONS)
            option, sep, given = value.partition("=")
            if sep and option.startswith("--") and _path_like(given):
                _resolve(given, folders, named, "read")
            continue
        operands.append(index)
    if name in _PATTERN_FIRST and operands and not pattern_given:
        operands = operands[1:]
    last = operands[-1] if operands else None
    for index in operands:
        word = command.words[index]
        access = _access(name, index == last, in_place)
        if name == "dd":
            key, sep, given = word.text.partition("=")
            if sep and key in ("if", "of"):
                _resolve(given, folders, named, "write" if key == "of" else "read")
            continue
        if word.pattern:
            _pattern(word.text, folders, named, access)
        elif name in _FILES_ONLY or _path_like(word.text) or _exists(word.text, folders):
            _resolve(word.text, folders, named, access)
    if name in _MOVES:
        for index in operands[:-1]:
            if not command.words[index].pattern:
                _resolve(command.words[index].text, folders, named, "delete")


def _access(name: str, last: bool, in_place: bool) -> Access:
    if name in _DELETES:
        return "delete"
    if name in _WRITES or (name in _IN_PLACE and in_place):
        return "write"
    if last and (name in _LAST_WRITES or name in _MOVES):
        return "write"
    return "read"


def _path_like(text: str) -> bool:
    if not text or "://" in text:
        return False  # a URL is not a file
    return text.startswith(("/", "~", ".")) or "/" in text


def _exists(text: str, folders: list[str] | None) -> bool:
    if folders is None or not text or "\x00" in text:
        return False
    return any(os.path.lexists(posixpath.join(folder, text)) for folder in folders)


def _pattern(text: str, folders: list[str] | None, named: NamedPaths, access: Access) -> None:
    """A glob bash expands where the command runs: each match, and the pattern itself (what
    bash passes on when nothing matches). Braces (``{a,b}``) are not expanded here: unknown."""
    if "{" in text and ("," in text or ".." in text):
        named.note(text)
        return
    spelled = os.path.expanduser(text) if text.startswith("~") else text
    if spelled.startswith("~"):
        named.note(text)  # ~+, ~-, or a user that does not exist here
        return
    roots = ["/"] if spelled.startswith("/") else folders
    if roots is None:
        named.note(text)
        return
    for root in roots:
        pattern = posixpath.join(root, spelled)
        try:
            matches = glob.glob(pattern)
        except (OSError, ValueError, RecursionError):
            matches = []
        if len(matches) > MAX_MATCHES:
            named.note(f"{text} ({len(matches)} matches)")
            continue
        for match in sorted(matches):
            named.add(match, access)
        if _path_like(text):
            named.add(pattern, access)


def _resolve(text: str, folders: list[str] | None, named: NamedPaths, access: Access) -> None:
    """``text`` as host paths: ``~`` expanded, a relative path joined to each folder the
    command may run in (unknown when a ``cd`` led somewhere known only then)."""
    spelled = os.path.expanduser(text) if text.startswith("~") else text
    if spelled.startswith("~"):
        named.note(text)
        return
    if spelled.startswith("/"):
        named.add(spelled, access)
        return
    if folders is None:
        named.note(text)
        return
    for folder in folders:
        named.add(_join(folder, spelled), access)


def _join(folder: str, spelled: str) -> str:
    """``spelled`` under ``folder``, without ``.`` segments (``..`` is kept: where it leads
    depends on the links before it, which the sandbox resolves)."""
    parts = [part for part in spelled.split("/") if part not in (".", "")]
    return posixpath.join(folder, *parts) if parts else folder


def _after_cd(command: SimpleCommand, folders: list[str] | None) -> list[str] | None:
    """The folders the rest of the line may run in after ``command`` (a sound
    over-approximation, as Stockade's own parser keeps for redirections)."""
    if folders is None or command.name not in ("cd", "pushd", "popd"):
        return folders
    targets = [w for w in command.words[1:] if not w.text.startswith("-")]
    if command.name == "popd" or not targets or not targets[0].static:
        return None  # popd, `cd` alone (home) or a dynamic target: known only then
    spelled = os.path.expanduser(targets[0].text)
    if spelled.startswith("~"):
        return None
    found = list(dict.fromkeys([*folders, *(_join(f, spelled) for f in folders)]))
    return found if len(found) <= MAX_CWDS else None


__all__ = ["MAX_PATHS", "NamedPaths", "named_paths"]
