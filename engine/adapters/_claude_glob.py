"""Glob patterns as the programs that read them expand them, erring toward more matches, for
Claude Code's hook: bash's globs in a ``Bash`` line (`shell_matches`), and the patterns of
Claude Code's ``Glob`` and ``Grep`` tools (`alternatives`, `fixed_folder`, `climbs`,
`may_reach_hidden`).

    shell_matches(".[^x]nv", "/home/me/project", 1024)  # ['/home/me/project/.env']
    alternatives("src/{a,../..}/*.py")                   # ['src/a/*.py', 'src/../../*.py']

Written by hand because Python's `glob` is not bash's: it reads ``[^x]`` as "``^`` or ``x``"
where bash reads "not ``x``", knows no ``[[:lower:]]``, and never yields ``.`` or ``..`` (which
bash before 5.2 matches with ``.*``, so ``cat .*/x`` reads the parent folder's ``x``). Bash's
rules here: a name starting with a dot is matched only by a pattern component starting with a
literal dot, and then ``.`` and ``..`` are candidates too; a bracket expression other than a
plain list of characters (a range, a class, a negation) matches any one character; ``**`` also
matches any depth of folders (in case ``globstar`` is on). Each approximation can only add
matches, never lose one: a path judged for nothing costs a question at most, a path missed is
a file read unjudged.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterator
from itertools import pairwise

from stockade.policies.dangerous import DEFAULT_DANGEROUS

MAX_SCANNED = 20_000  # folder entries one pattern may look at; past it, its matches are unknown
MAX_ALTERNATIVES = 64  # patterns one brace expression may stand for; past it, unknown
_WILDCARDS = frozenset("*?[")

# -- bash ----------------------------------------------------------------------------------------


def shell_matches(pattern: str, root: str, limit: int) -> list[str] | None:
    """The host paths bash may expand ``pattern`` to (from ``root`` unless it is absolute),
    sorted; None when there are more than ``limit``, or more than `MAX_SCANNED` entries to
    look at (then what it reaches is unknown)."""
    parts = [part for part in pattern.split("/") if part]
    current = ["/" if pattern.startswith("/") else root]
    budget = _Budget()
    for index, part in enumerate(parts):
        if not any(ch in _WILDCARDS for ch in part):
            current = [posixpath.join(folder, part) for folder in current]
            continue
        regex = _component(part)
        folders_only = index < len(parts) - 1
        found: list[str] = []
        for folder in current:
            found.extend(_matching(folder, part, regex, folders_only, budget))
            if budget.spent or len(found) > limit:
                return None
        current = found
    if pattern.endswith("/"):
        current = [path for path in current if os.path.isdir(path)]
    return sorted(path for path in set(current) if os.path.lexists(path))


class _Budget:
    """Folder entries looked at for one pattern; ``spent`` once past `MAX_SCANNED`."""

    def __init__(self) -> None:
        self.left = MAX_SCANNED

    @property
    def spent(self) -> bool:
        return self.left < 0

    def names(self, folder: str) -> list[os.DirEntry[str]]:
        """The entries of ``folder`` (none when it cannot be read, or the budget is spent)."""
        try:
            with os.scandir(folder) as entries:
                found = []
                for entry in entries:
                    self.left -= 1
                    if self.spent:
                        return []
                    found.append(entry)
                return found
        except (OSError, ValueError):
            return []


def _matching(
    folder: str, part: str, regex: re.Pattern[str], folders_only: bool, budget: _Budget
) -> Iterator[str]:
    """The entries of ``folder`` bash's ``part`` matches (``**``: of every folder below)."""
    dotted = part.startswith(".")
    for place in _below(folder, budget) if part == "**" else [folder]:
        names = [".", ".."] if dotted else []
        names += [entry.name for entry in budget.names(place)]
        for name in names:
            if name.startswith(".") and not dotted:
                continue  # bash's dotglob is off unless the line turns it on (then it asks)
            path = posixpath.join(place, name)
            if regex.fullmatch(name) and (not folders_only or os.path.isdir(path)):
                yield path
        if part == "**":
            yield place  # `**/x` also matches `x` itself


def _below(folder: str, budget: _Budget) -> Iterator[str]:
    """``folder`` and every folder beneath it (not hidden ones, nor through links)."""
    stack = [folder]
    while stack and not budget.spent:
        place = stack.pop()
        yield place
        for entry in budget.names(place):
            if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)


def _component(part: str) -> re.Pattern[str]:
    """One component of a bash glob as a regex over names, matching at least what bash does."""
    out: list[str] = []
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[" and (end := _bracket_end(part, i)) is not None:
            body = part[i + 1 : end]
            plain = body[0] not in "!^" and "-" not in body[1:-1] and "[" not in body
            out.append("[" + re.escape(body) + "]" if plain else ".")
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _bracket_end(part: str, start: int) -> int | None:
    """Where the bracket expression opening at ``start`` closes (None: a literal ``[``)."""
    j = start + 1
    if j < len(part) and part[j] in "!^":
        j += 1
    if j < len(part) and part[j] == "]":
        j += 1  # a `]` first is one of the characters
    while j < len(part) and part[j] != "]":
        if part[j] == "[" and j + 1 < len(part) and part[j + 1] in ":=.":
            close = part.find(part[j + 1] + "]", j + 2)
            if close < 0:
                return None
            j = close + 2
            continue
        j += 1
    return j if j < len(part) else None


# -- Claude Code's Glob and Grep ----------------------------------------------------------------


def alternatives(pattern: str) -> list[str] | None:
    """The patterns a glob with braces stands for (``a/{b,c}`` is ``a/b`` and ``a/c``,
    nested ones too), as the Glob tool and ripgrep expand them; None when more than
    `MAX_ALTERNATIVES`."""
    done: list[str] = []
    todo = [pattern]
    while todo:
        current = todo.pop()
        split = _first_braces(current)
        if split is None:
            done.append(current)
        else:
            head, choices, tail = split
            todo.extend(head + choice + tail for choice in choices)
        if len(done) + len(todo) > MAX_ALTERNATIVES:
            return None
    return sorted(done)


def _first_braces(pattern: str) -> tuple[str, list[str], str] | None:
    """The first brace expression with a comma at its own level: what comes before it, its
    choices, and what follows."""
    for start, ch in enumerate(pattern):
        if ch != "{":
            continue
        depth, commas = 0, [start]
        for end in range(start, len(pattern)):
            if pattern[end] == "{":
                depth += 1
            elif pattern[end] == "}":
                depth -= 1
                if depth == 0:
                    if len(commas) == 1:
                        break  # `{x}` is not a choice: look for the next brace
                    bounds = [*commas, end]
                    choices = [pattern[a + 1 : b] for a, b in pairwise(bounds)]
                    return pattern[:start], choices, pattern[end + 1 :]
            elif pattern[end] == "," and depth == 1:
                commas.append(end)
    return None


def fixed_folder(pattern: str) -> str:
    """The part of a glob before its first wildcard, as a folder (``../x/*.py`` -> ``../x``;
    ``""`` when there is none)."""
    fixed: list[str] = []
    for part in pattern.split("/")[:-1]:
        if any(ch in part for ch in "*?[{"):
            break
        fixed.append(part)
    return "/".join(fixed) if fixed != [""] else "/"


def climbs(pattern: str) -> bool:
    """Whether a ``..`` follows a wildcard (``*/../../x``): where it leads is known only once
    the wildcard is matched."""
    wild = False
    for part in pattern.split("/"):
        if part == ".." and wild:
            return True
        wild = wild or any(ch in part for ch in "*?[{")
    return False


# names that start with a dot among the protected paths, and one any dot-name pattern matches
_HIDDEN = sorted(
    {entry.split("/")[0].replace("*", "x") for entry in DEFAULT_DANGEROUS if entry[0] == "."}
    | {".x"}
)


def may_reach_hidden(pattern: str) -> bool:
    """Whether ripgrep's ``--glob pattern`` may match a file or folder whose name starts with a
    dot: a glob that matches overrides ripgrep's skipping of hidden files, so ``Grep`` with
    ``glob = "*"`` reads ``.env``. Case is ignored (a case-insensitive disk matches either)."""
    found = alternatives(pattern)
    if found is None:
        return True
    for alternative in found:
        regex = re.compile(_ripgrep_regex(alternative.lstrip("/")), re.IGNORECASE | re.DOTALL)
        for name in _HIDDEN:
            if any(regex.fullmatch(path) for path in (name, f"x/{name}", f"x/y/{name}")):
                return True
    return False


def _ripgrep_regex(pattern: str) -> str:
    """A ripgrep glob as a regex over paths (a glob without ``/`` matches a name anywhere)."""
    out: list[str] = [] if "/" in pattern else ["(?:.*/)?"]
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[" and (end := _bracket_end(pattern, i)) is not None:
            out.append("[^/]")  # any one character: a superset of the class
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


__all__ = [
    "MAX_ALTERNATIVES",
    "MAX_SCANNED",
    "alternatives",
    "climbs",
    "fixed_folder",
    "may_reach_hidden",
    "shell_matches",
]
