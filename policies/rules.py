"""Rules compiled from a policy: who, which tools, which actions, which paths or commands.

A call is judged as a few *atoms*: the call itself (action ``call``, or ``execute`` with its
command line) and one atom per path it touches (action ``read``, ``write`` or ``delete``). A rule
matches an atom when every condition it states holds; conditions it leaves out match anything.
For each atom the matching rule with the strongest effect wins (deny > ask > warn > allow), the
earlier rule on a tie; an atom no rule matches gets the policy's default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from stockade.policies.command_patterns import CommandPattern
from stockade.policies.decision import Effect
from stockade.policies.globs import NamePattern, PathSpec, path_spec
from stockade.policies.policy_file import PolicyError, RuleSpec


class Atom(NamedTuple):
    """One part of a call, as rules see it."""

    subject: str
    tool: str
    action: str
    read_only: bool
    path: str | None = None  # canonical
    folded: str | None = None  # fold(path)
    command: str | None = None

    @property
    def target(self) -> str | None:
        """The path or command this atom is about, if any."""
        return self.path if self.path is not None else self.command


class RuleError(PolicyError):
    """A rule that cannot be compiled; ``key`` names the offending field, if one."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True, slots=True, eq=False)
class Rule:
    """A compiled rule. ``rank`` orders rules for first-match: strongest effect first, then
    position (system rules come before the file's, which keep their file order)."""

    id: str
    effect: Effect
    reason: str
    position: int
    severity: int
    subjects: frozenset[str] | None
    tools: tuple[NamePattern, ...] | None
    actions: frozenset[str] | None
    paths: PathSpec | None
    commands: tuple[CommandPattern, ...] | None
    read_only: bool | None
    # the patterns as written, for the casbin lines and for explanations
    subject_names: tuple[str, ...]
    tool_patterns: tuple[str, ...]
    path_patterns: tuple[str, ...]
    command_patterns: tuple[str, ...]

    @property
    def rank(self) -> tuple[int, int]:
        """Sort key: strongest effect first, then earliest."""
        return (-self.severity, self.position)

    def matches_tool(self, tool: str) -> bool:
        """Whether the tool condition holds for ``tool``."""
        return self.tools is None or any(p.match(tool) for p in self.tools)

    def matches_target(self, atom: Atom) -> bool:
        """The path or command condition alone."""
        if self.paths is not None:
            return (
                atom.path is not None
                and atom.folded is not None
                and self.paths.match(atom.path, atom.folded)
            )
        if self.commands is not None:
            return atom.command is not None and any(p.match(atom.command) for p in self.commands)
        return True


def _star_or(values: list[str]) -> tuple[str, ...] | None:
    return None if "*" in values else tuple(values)


def compile_rule(spec: RuleSpec, position: int, *, folded: bool = False) -> Rule:
    """Compile a rule from the file (or a system rule). Raises PolicyError naming the rule."""
    if spec.paths and spec.commands:
        raise RuleError(
            f"rule {spec.id!r}: a rule matches paths or commands, not both; split it in two"
        )
    try:
        paths = path_spec(spec.paths, folded=folded) if spec.paths else None
    except ValueError as exc:
        raise RuleError(f"rule {spec.id!r}: {exc}", "paths") from None
    subjects = _star_or(spec.subjects)
    tools = _star_or(spec.tools)
    return Rule(
        id=spec.id,
        effect=Effect(spec.effect),
        reason=spec.reason or f"rule {spec.id}",
        position=position,
        severity=Effect(spec.effect).severity,
        subjects=None if subjects is None else frozenset(subjects),
        tools=None if tools is None else tuple(NamePattern(t) for t in tools),
        actions=frozenset(spec.actions) if spec.actions else None,
        paths=paths,
        commands=tuple(CommandPattern(c) for c in spec.commands) if spec.commands else None,
        read_only=spec.read_only_tools,
        subject_names=tuple(spec.subjects),
        tool_patterns=tuple(spec.tools),
        path_patterns=tuple(spec.paths),
        command_patterns=tuple(spec.commands),
    )


def role_closure(subject: str, roles: dict[str, list[str]]) -> frozenset[str]:
    """``subject`` and every role it holds, directly or through other roles."""
    found = {subject}
    frontier = [subject]
    while frontier:
        member = frontier.pop()
        for role, members in roles.items():
            if member in members and role not in found:
                found.add(role)
                frontier.append(role)
    return frozenset(found)
