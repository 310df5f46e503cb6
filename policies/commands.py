"""The simple commands inside a command line, so each is judged on its own.

``git status && rm -rf /`` runs two programs; a rule allowing ``git *`` must not wave the second
one through. A command line is split on control operators (``;``, ``&&``, ``||``, ``|``, ``&``),
newlines, subshell parentheses, ``$(...)`` and backticks, and redirections start a new part, so
every piece is judged; the strictest piece decides the call. Two spellings that could hide what
runs are judged both ways: leading ``NAME=value`` assignments (``GIT_SSH_COMMAND=... git fetch``
is not plain ``git fetch``) and path-qualified programs (``/tmp/x/git`` is judged as written and
as ``git``), so a deny rule catches either spelling and an allow rule must match both.

This is a lexical reading (Python's ``shlex``); a line it cannot read, such as one with an
unbalanced quote, gives None, and no command rule can then allow it.
"""

from __future__ import annotations

import posixpath
import re
import shlex

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATOR = re.compile(r"^[;&|()<>$]+$")


def sub_commands(command: str) -> list[str] | None:
    """Every spelling of every simple command in ``command``, in order, without duplicates;
    None when the line cannot be read."""
    # backticks and newlines separate commands as surely as ";" does
    text = command.replace("`", " ; ").replace("\n", " ; ")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return None
    parts: list[list[str]] = [[]]
    for token in tokens:
        if _OPERATOR.match(token):
            parts.append([])
        else:
            parts[-1].append(token)
    found: dict[str, None] = {}
    for words in parts:
        if not words:
            continue
        for spelling in _spellings(words):
            found.setdefault(spelling, None)
    return list(found) if found else [""]


def _spellings(words: list[str]) -> list[str]:
    spellings = [" ".join(words)]
    bare = list(words)
    while bare and _ASSIGNMENT.match(bare[0]):
        bare.pop(0)
    if bare and "/" in bare[0]:
        bare = [posixpath.basename(bare[0]) or bare[0], *bare[1:]]
    if bare and bare != words:
        spellings.append(" ".join(bare))
    return spellings
