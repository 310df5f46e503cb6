"""The call's own atom, and when it gives way to the call's paths.

A call is judged as atoms: the call itself, then each path it names. A policy that allows
reading ``src/**`` with ``default = "ask"`` (or ``"deny"``) means that reading there may
happen, but the call's own atom would still be decided by the default, and the call asked
(or denied) whatever its paths. So: **a policy whose rules allow a tool's paths allows calling
it, unless a rule about the call itself says otherwise** — the call's atom, when no rule
matches it, gives way to its paths once a rule of the file matches one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from stockade.policies.rules import Atom, Rule
from stockade.policies.ruleset import FIRST_FILE_POSITION


def defers(atoms: list[Atom]) -> bool:
    """Whether the call's own atom may give way to its paths: a call of a tool (not a command)
    that names paths. It does when no rule matches it and a rule of the file matches one of its
    paths (the callers check; `spoke`): a policy whose rules allow a tool's paths allows
    calling it, unless a rule about the call itself says otherwise."""
    return atoms[0].action == "call" and len(atoms) > 1


def spoke(rule: Rule | None) -> bool:
    """Whether ``rule`` is one of the file's (Stockade's own, like the protected paths when
    their effect is allow, grant no call)."""
    return rule is not None and rule.position >= FIRST_FILE_POSITION


def speaking(
    atoms: list[Atom], first_match: Callable[[Atom], Rule | None], extra: Collection[str]
) -> list[Atom]:
    """The atoms that say something about a request: all of them, but the call's own when it
    gave way to its paths, and the ``extra`` spellings (normal forms) no rule names."""
    gives_way = defers(atoms) and first_match(atoms[0]) is None
    if gives_way and any(spoke(first_match(atom)) for atom in atoms[1:]):
        atoms = atoms[1:]
    if extra:
        atoms = [a for a in atoms if a.command not in extra or first_match(a) is not None]
    return atoms
