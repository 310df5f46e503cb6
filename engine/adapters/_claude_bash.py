"""The files a Bash command line names, on the host, for Claude Code's hook.

Stockade's own ``run_shell`` runs in a box where only the mounts exist, so its policy judges a
command by its words and the files its redirections open; what the command reads or writes
beyond that is judged after the run, on its copy-on-write layers. Claude Code runs its ``Bash``
commands itself, with the user's rights and nothing around them. So the hook judges, before
the command runs, every file the line names: each argument that is a path (it has a ``/``,
starts with ``~`` or ``.``, or names something that exists where the command runs), each glob's
matches (expanded as bash would, `_claude_glob`), each redirection's target, relative ones
against every folder a ``cd`` in the line may have led to, and every entry of a folder a
program uses whole (``rm -r``, ``grep -r``, ``find -delete``: `_claude_programs.recursion`).

How an argument is used is taken from the program, conservatively (`_claude_programs`):
``rm`` deletes, ``touch``, ``tee``, ``chmod`` ... write, the last argument of ``cp``, ``mv``,
``ln`` is written (and ``mv``'s others deleted), ``sed -i`` writes its files, ``git config``
its config file; every other argument is judged as a read.

What the line cannot show is returned as *unknown*, and the hook never lets a policy allow
such a command without a person's yes: a word known only when it runs (``$HOME/x``,
``$(cmd)``, ``{a,b}``), a line that is not plain shell, a change to the shell for what follows
(``PATH=.; ls``: `_claude_state`), a folder too big to judge entry by entry, and a path that
does not exist yet after a program that may have made it a link (``git checkout x && cat
up/etc/passwd``).

Written by hand because no library reads paths out of shell words: a program's arguments mean
what the program makes of them, so this is a sound-leaning approximation (it errs toward judging
more), not a proof of what a command touches.

    named = named_paths(policy.command_line("cat ~/.ssh/id_rsa > out"), "/home/me/project")
    named.paths    # [('/home/me/.ssh/id_rsa', 'read'), ('/home/me/project/out', 'write')]
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, field

from stockade.engine.adapters import _claude_programs as programs
from stockade.engine.adapters._claude_glob import MAX_SCANNED, shell_matches
from stockade.engine.adapters._claude_state import shell_changes
from stockade.policies import CommandLine, SimpleCommand
from stockade.policies.request import Access
from stockade.policies.shell import HARMLESS_DEVICES

MAX_PATHS = 4096  # paths judged per command line; past it, the rest is unknown
MAX_MATCHES = 1024  # a glob's matches judged one by one; past it, the glob is unknown
MAX_CWDS = 8  # folders a line may `cd` into before relative paths become unknown
MAX_TREE = 1000  # entries of a folder used whole judged one by one; past it, unknown
_FD_PATH = re.compile(r"^/dev/fd/\d+$")


@dataclass
class NamedPaths:
    """What a command line names: host paths (absolute, as spelled: ``..`` and links are left
    for the sandbox's resolution) with how each is used, and what is known only when it runs
    (each as written, or saying what)."""

    paths: list[tuple[str, Access]] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    linking: bool = False  # a program that may leave a link behind has run before this point
    _seen: set[tuple[str, Access]] = field(default_factory=set, repr=False)

    def add(self, path: str, access: Access) -> None:
        if self.linking and not os.path.lexists(path):
            # made by an earlier command of the line (a checkout, an archive): what it leads
            # to is known only then
            self.note(f"{path} (after a command that may make it a link)")
        entry = (path, access)
        if entry in self._seen:
            return
        if len(self.paths) >= MAX_PATHS:
            self.note(f"more than {MAX_PATHS} paths")
            return
        self._seen.add(entry)
        self.paths.append(entry)

    def note(self, word: str) -> None:
        if word not in self.unknown:
            self.unknown.append(word)


def named_paths(line: CommandLine, cwd: str) -> NamedPaths:
    """The files ``line`` names, judged from ``cwd`` (the host folder the command runs in)."""
    named = NamedPaths()
    for problem in line.problems:
        named.note(problem)  # a line not read in full: what the unread part does is unknown
    for change in shell_changes(line):
        named.note(f"{change} (changes the shell for what follows)")
    folders: list[str] | None = [cwd]  # None: a cd led somewhere known only then
    for command in line.commands:
        if command.opaque or not command.words:
            if command.opaque:
                named.note(f"a command run by {'/'.join(command.via) or 'the line'}")
            continue
        _command(command, folders, named)
        folders = _after_cd(command, folders)
        named.linking = named.linking or not programs.makes_no_links(command)
    named.linking = named.linking and len(line.commands) > 1
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
    if "xargs" in command.via or "parallel" in command.via:
        named.note(f"the arguments {command.via[-1]} gives {name}, read when it runs")
    if name in programs.NOT_FILES:
        return
    git = programs.git_effects(command)
    for said in git.unknown:
        named.note(said)
    for config in git.writes:
        _resolve(config, folders, named, "write")
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
        _embedded(value, folders, named)
        if not options_done and value.startswith("-") and value != "-":
            in_place = in_place or value.startswith(("-i", "--in-place"))
            pattern_given = pattern_given or value.startswith(programs.PATTERN_OPTIONS)
            option, sep, given = value.partition("=")
            if sep and option.startswith("--") and _path_like(given):
                _resolve(given, folders, named, "read")
            elif not option.startswith("--") and _path_like(value[2:]):
                _resolve(value[2:], folders, named, "read")  # a value joined on: -o.git/x
            continue
        operands.append(index)
    if name in programs.PATTERN_FIRST and operands and not pattern_given:
        operands = operands[1:]
    used: list[str] = []  # the host paths of the operands
    last = operands[-1] if operands else None
    symbolic = name == "ln" and any(
        w.text == "--symbolic" or (w.text[:1] == "-" and w.text[1:2] != "-" and "s" in w.text)
        for w in command.words[1:]
    )
    for index in operands:
        word = command.words[index]
        if symbolic and index != last:
            continue  # a link's target is read from the link's folder (below), not from here
        access = programs.access(name, index == last, in_place)
        if name == "dd":
            key, sep, given = word.text.partition("=")
            if sep and key in ("if", "of"):
                _resolve(given, folders, named, "write" if key == "of" else "read")
            continue
        if word.pattern:
            found = _pattern(word.text, folders, named, access)
        elif name in programs.FILES_ONLY or _path_like(word.text) or _exists(word.text, folders):
            found = _resolve(word.text, folders, named, access)
        else:
            continue
        if not (index == last and name in programs.COPIES):
            used += found  # (where a copy or move goes is written, not used whole)
    if name in programs.MOVES:
        for index in operands[:-1]:
            if not command.words[index].pattern:
                _resolve(command.words[index].text, folders, named, "delete")
    if symbolic:
        _link_targets(command, operands, folders, named)
    _trees(command, used, folders, named)


def _link_targets(
    command: SimpleCommand, operands: list[int], folders: list[str] | None, named: NamedPaths
) -> None:
    """``ln -s TARGET... LINK``: where each link will lead, judged as a read. A relative
    TARGET is read from the link's folder, not from where the command runs (``cd src && ln -s
    .. ../up`` makes ``up`` lead above the project): LINK and its parent are both tried, as
    LINK may be a folder; with ``-t DIR`` any operand may be the folder."""
    texts = [command.words[i].text for i in operands]
    into = any(w.text.startswith(("-t", "--target-directory")) for w in command.words[1:])
    targets, links = (texts, texts) if into else (texts[:-1], texts[-1:])
    for target in targets:
        if target.startswith(("/", "~")):
            _resolve(target, folders, named, "read")
            continue
        for link in links:
            for base in (link, posixpath.dirname(link)):
                joined = posixpath.join(base, target) if base else target
                _resolve(joined, folders, named, "read")


def _trees(
    command: SimpleCommand, used: list[str], folders: list[str] | None, named: NamedPaths
) -> None:
    """Every entry of each folder ``command`` uses whole (no folder named: where it runs)."""
    how = programs.recursion(command)
    if how is None:
        return
    tops = [path for path in used if os.path.isdir(path)]
    if not used:
        if folders is None:
            named.note(f"the folder {command.name} works in")
            return
        tops = list(folders)
    for top in tops:
        entries = _tree(top, how)
        if entries is None:
            named.note(f"{top} (more than {MAX_TREE} entries, used whole by {command.name})")
            continue
        for entry in entries:
            named.add(entry, how.access)


def _tree(top: str, how: programs.Recursion) -> list[str] | None:
    """Every entry beneath ``top`` the program reaches (hidden ones if it does; links only if
    it follows them, judged where they lead), or None past `MAX_TREE`."""
    found: list[str] = []
    stack = [top]
    scanned = 0
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    scanned += 1
                    if scanned > MAX_SCANNED:
                        return None
                    if not how.hidden and entry.name.startswith("."):
                        continue
                    if entry.is_symlink() and not how.follows:
                        continue  # the link itself is copied, archived or removed
                    found.append(entry.path)
                    if len(found) > MAX_TREE:
                        return None
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except (OSError, ValueError):
            continue
    return found


def _embedded(value: str, folders: list[str] | None, named: NamedPaths) -> None:
    """A file named inside a word, as curl and its kin read it: ``-d @.env``, ``-F
    x=@/etc/passwd``, ``x=<file`` (the file's content is sent)."""
    for mark in ("@", "<"):
        if mark in value:
            rest = value.rsplit(mark, 1)[1]
            if _path_like(rest) or _exists(rest, folders):
                _resolve(rest, folders, named, "read")


def _path_like(text: str) -> bool:
    if not text or "://" in text:
        return False  # a URL is not a file
    return text.startswith(("/", "~", ".")) or "/" in text


def _exists(text: str, folders: list[str] | None) -> bool:
    if folders is None or not text or "\x00" in text:
        return False
    return any(os.path.lexists(posixpath.join(folder, text)) for folder in folders)


def _pattern(text: str, folders: list[str] | None, named: NamedPaths, access: Access) -> list[str]:
    """A glob bash expands where the command runs: each match, and the pattern itself (what
    bash passes on when nothing matches), as host paths added to ``named`` (and returned).
    Braces (``{a,b}``) are not expanded here: unknown."""
    if "{" in text and ("," in text or ".." in text):
        named.note(text)
        return []
    spelled = os.path.expanduser(text) if text.startswith("~") else text
    if spelled.startswith("~"):
        named.note(text)  # ~+, ~-, or a user that does not exist here
        return []
    roots = ["/"] if spelled.startswith("/") else folders
    if roots is None:
        named.note(text)
        return []
    found: list[str] = []
    for root in roots:
        matches = shell_matches(spelled, root, MAX_MATCHES)
        if matches is None:
            named.note(f"{text} (more than {MAX_MATCHES} matches)")
            continue
        found += matches
        if _path_like(text):
            found.append(posixpath.join(root, spelled))
    for path in found:
        named.add(path, access)
    return found


def _resolve(text: str, folders: list[str] | None, named: NamedPaths, access: Access) -> list[str]:
    """``text`` as host paths added to ``named`` (and returned): ``~`` expanded, a relative
    path joined to each folder the command may run in (unknown when a ``cd`` led somewhere
    known only then)."""
    spelled = os.path.expanduser(text) if text.startswith("~") else text
    if spelled.startswith("~") or (folders is None and not spelled.startswith("/")):
        named.note(text)
        return []
    found = [spelled] if spelled.startswith("/") else [_join(f, spelled) for f in folders or []]
    for path in found:
        named.add(path, access)
    return found


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
    if os.environ.get("CDPATH") and not spelled.startswith(("/", "./", "../")):
        return None  # bash looks the name up in $CDPATH first: where it lands is known then
    found = list(dict.fromkeys([*folders, *(_join(f, spelled) for f in folders)]))
    return found if len(found) <= MAX_CWDS else None


__all__ = ["MAX_PATHS", "MAX_TREE", "NamedPaths", "named_paths"]
