"""Whether one rule matches every atom another matches: the test behind lint's "never decides".

Only "yes" is ever reported, so every test here may say "no" when unsure, never "yes" when
wrong. Paths: a later pattern is covered when each path it can match lies in a tree the earlier
rule names (``src/**``, ``/**``, ``**/.ssh/**`` around the later pattern's literal folder), or
is a path the earlier rule matches; an earlier rule with exclusions covers nothing (what its
exclusions take out is not worked out). Commands: ``*`` covers every command, ``git *`` (the
prefix form: ``git`` alone or with any arguments) covers ``git push *`` and ``git``, a pattern
ending in a star covers every pattern whose literal start begins with what it names.
"""

from __future__ import annotations

from stockade.policies.globs import Glob, PathSpec, compile_glob
from stockade.policies.paths import ancestors, fold
from stockade.policies.rules import Rule

PATH_ACTIONS = frozenset({"read", "write", "delete"})
_WILDCARDS = "*?["


def actions_of(rule: Rule) -> frozenset[str] | None:
    """The actions a rule can match at all: a path rule only reads, writes or deletes, a
    command rule only executes; None for any."""
    if rule.paths is not None:
        return PATH_ACTIONS if rule.actions is None else rule.actions & PATH_ACTIONS
    if rule.commands is not None:
        return frozenset({"execute"}) if rule.actions is None else rule.actions & {"execute"}
    return rule.actions


def covers(first: Rule, later: Rule) -> bool:
    """Whether every atom ``later`` matches is also matched by ``first`` (conservatively: a
    later rule that matches nothing is covered by nothing, lint says so on its own)."""
    later_actions = actions_of(later)
    if later_actions is not None and not later_actions:
        return False
    if first.subjects is not None and (
        later.subjects is None or not later.subjects <= first.subjects
    ):
        return False
    if first.tools is not None and (
        later.tools is None or not set(later.tool_patterns) <= set(first.tool_patterns)
    ):
        return False
    if first.actions is not None and (later_actions is None or not later_actions <= first.actions):
        return False
    if first.read_only is not None and first.read_only != later.read_only:
        return False
    if first.paths is not None:
        return later.paths is not None and paths_cover(first.paths, later.paths)
    if first.commands is not None:
        return later.commands is not None and all(
            any(command_covers(mine, theirs) for mine in first.command_patterns)
            for theirs in later.command_patterns
        )
    return True


def paths_cover(first: PathSpec, later: PathSpec) -> bool:
    """Whether every path ``later`` matches is matched by ``first`` (its exclusions ignored:
    they only take paths away)."""
    if first.exclude:
        return False
    return all(
        any(_glob_covers(mine, first.folded, theirs) for mine in first.include)
        for theirs in later.include
    )


def _glob_covers(mine: Glob, folded: bool, theirs: Glob) -> bool:
    if theirs.folded and not folded:
        return False  # a folded pattern matches spellings an unfolded one does not
    if mine.pattern in ("/**", "**"):
        return True
    if mine.pattern == theirs.pattern and (not folded or "[" not in mine.pattern):
        return True
    if theirs.anchor_kind != "prefix":
        return False  # "**/name": anywhere, which only "/**" holds
    literal = fold(theirs.literal) if folded else theirs.literal
    if theirs.shape == "exact":
        return mine.match(literal)
    # every path ``theirs`` matches is its literal folder or lies below it: a tree pattern
    # "<base>/**" whose base matches that folder, or a folder above it, holds them all
    if not mine.pattern.endswith("/**"):
        return False
    base = compile_glob(mine.pattern[:-3], folded=folded)
    return any(base.match(folder) for folder in ancestors(literal))


def prefix_words(pattern: str) -> str | None:
    """The words of a prefix-form command pattern (``git push *``: ``git push``), else None."""
    if pattern.endswith(" *") and pattern[:-2].strip():
        return pattern[:-2]
    return None


def literal_start(pattern: str) -> str:
    """What every command ``pattern`` matches begins with: its text up to the first wildcard
    (for the prefix form, of its words, which may stand alone)."""
    body = prefix_words(pattern) or pattern
    for index, char in enumerate(body):
        if char in _WILDCARDS:
            return body[:index]
    return body


def command_covers(mine: str, theirs: str) -> bool:
    """Whether command pattern ``mine`` matches every command ``theirs`` does."""
    if mine == theirs or mine == "*":
        return True
    words = prefix_words(mine)
    if words is not None:
        if any(char in words for char in _WILDCARDS):
            return False
        own = prefix_words(theirs)
        if own == words:
            return True
        if not any(char in theirs for char in _WILDCARDS) and (
            theirs == words or theirs.startswith(words + " ")
        ):
            return True
        return literal_start(theirs).startswith(words + " ")
    # "rm*": a literal start, then one star that takes anything
    if mine.endswith("*") and not any(char in mine[:-1] for char in _WILDCARDS):
        return literal_start(theirs).startswith(mine[:-1])
    return False
