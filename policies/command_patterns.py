"""Command patterns: what a rule's ``commands`` (and a dangerous-command ``extend``) match.

A pattern is matched against each spelling of a simple command (words joined by one space) with
fnmatch's meaning, whole string and case-sensitive: ``*`` matches any characters, spaces and
slashes included, ``?`` one character, ``[...]`` a class. One form means more than fnmatch says:
a pattern ending in a space and a star (the *prefix form*, ``git push *``) also matches the words
before it alone (``git push``). People write ``git push *`` to mean "git push, with whatever
arguments", and a bare ``git push`` slipping past a deny rule was the trap. It still needs whole
words: ``git push *`` matches neither ``git pushx`` nor ``git``.

Hand-written because the hot path matches every command rule against every spelling: literal
patterns and literal prefix forms are string tests, the rest one compiled regex. `command_match`
is the reference the casbin path uses, written straight from fnmatch, so the differential test
compares two independent readings of the same definition.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

PREFIX_SUFFIX = " *"
_WILDCARDS = frozenset("*?[")


def _literal(text: str) -> bool:
    return not any(ch in _WILDCARDS for ch in text)


class CommandPattern:
    """One compiled command pattern; ``pattern`` is the text as the policy wrote it."""

    __slots__ = ("_exact", "_prefix", "_regex", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._exact: str | None = None  # a literal pattern: equality
        self._prefix: str | None = None  # a literal prefix form: these words, then maybe more
        self._regex: re.Pattern[str] | None = None
        words = pattern[: -len(PREFIX_SUFFIX)] if pattern.endswith(PREFIX_SUFFIX) else None
        if _literal(pattern):
            self._exact = pattern
        elif words is not None and _literal(words):
            self._prefix = words
        else:
            # the prefix form is fnmatch's own meaning, or the words before " *" alone
            forms = [pattern] if words is None else [pattern, words]
            self._regex = re.compile("|".join(fnmatch.translate(f) for f in forms))

    def match(self, command: str) -> bool:
        """Whether one spelling of a command (``git push origin main``) matches."""
        if self._exact is not None:
            return command == self._exact
        if self._prefix is not None:
            prefix = self._prefix
            return command.startswith(prefix) and (
                len(command) == len(prefix) or command.startswith(" ", len(prefix))
            )
        regex = self._regex
        return regex is not None and regex.match(command) is not None

    def __repr__(self) -> str:
        return f"CommandPattern({self.pattern!r})"


def command_match(command: str, patterns: Iterable[str]) -> bool:
    """Whether ``command`` matches any of ``patterns`` (the reference reading, for casbin)."""
    for pattern in patterns:
        if fnmatch.fnmatchcase(command, pattern):
            return True
        if pattern.endswith(PREFIX_SUFFIX) and fnmatch.fnmatchcase(
            command, pattern[: -len(PREFIX_SUFFIX)]
        ):
            return True
    return False
