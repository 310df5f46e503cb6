"""The checks beside a policy's rules, which can only make a decision stricter.

A tool's own dangerous paths, the dangerous-command list, the ``[host_files]`` table and
``[process] require_isolation`` are not rules a file orders: each says its word on a call after
the rules have, and `Policy` keeps the stricter. They live here so the policy module holds the
rules' part of a decision and this one the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import lru_cache

from stockade.policies.dangerous import dangerous_patterns
from stockade.policies.dangerous_commands import DangerousCommands, Found
from stockade.policies.decision import Decision, Effect
from stockade.policies.globs import PathSpec, path_spec
from stockade.policies.policy_file import PolicyError, PolicySpec
from stockade.policies.request import Request
from stockade.policies.rules import Atom
from stockade.policies.ruleset import (
    DANGEROUS_COMMAND_RULE,
    DANGEROUS_RULE,
    HOST_FILES_RULE,
    REQUIRE_ISOLATION_REASON,
    REQUIRE_ISOLATION_RULE,
)
from stockade.policies.shell import CommandLine

UNBOXED_NOTE = (
    "; it would run WITHOUT isolation (no bubblewrap here), with your user's rights: it could "
    "read, change or send anything you can"
)


class Checks:
    """A policy's checks beside its rules, compiled once from its spec."""

    def __init__(
        self, spec: PolicySpec, commands: DangerousCommands, parse: Callable[[str], CommandLine]
    ):
        self._spec = spec
        self._commands = commands
        self._parse = parse
        self._path_effect = Effect(spec.dangerous_paths.effect)
        self._command_effect = Effect(spec.dangerous_commands.effect)
        self._tool_specs = lru_cache(maxsize=256)(_tool_danger_spec)

    # -- a tool's own dangerous paths -------------------------------------------------------

    def tool_danger(self, request: Request, atoms: list[Atom]) -> Decision | None:
        """The tool's dangerous paths' word on the first path atom they name, if any."""
        spec = self.tool_spec(request.dangerous_paths)
        for atom in atoms[1:]:
            found = self.tool_danger_on(request, spec, atom)
            if found is not None:
                return found
        return None

    def tool_danger_on(self, request: Request, spec: PathSpec, atom: Atom) -> Decision | None:
        """The tool's own word on one atom: its dangerous paths' effect when the atom's path is
        one of them."""
        if atom.path is None or atom.folded is None or not spec.match(atom.path, atom.folded):
            return None
        return Decision(
            self._path_effect,
            f"{DANGEROUS_RULE}:{request.tool}",
            f"{request.tool} declares this path dangerous",
            atom.action,
            atom.path,
        )

    def tool_spec(self, patterns: tuple[str, ...]) -> PathSpec:
        """A tool's ``dangerous_paths`` compiled (cached); a pattern that cannot be compiled is
        a `PolicyError`."""
        try:
            return self._tool_specs(patterns)
        except ValueError as exc:
            raise PolicyError(f"a tool's dangerous_paths cannot be compiled: {exc}") from None

    # -- dangerous commands -----------------------------------------------------------------

    def dangerous_command(self, command: str) -> Decision | None:
        """The first dangerous command of ``command``'s line, as a decision, if any."""
        found = self._commands.find(self._parse(command))
        return None if found is None else self._command_decision(found)

    def dangerous_commands(self, command: str) -> Iterator[Decision]:
        """Every dangerous command of ``command``'s line, as decisions (for an ask that must
        name them all)."""
        return map(self._command_decision, self._commands.every(self._parse(command)))

    def _command_decision(self, found: Found) -> Decision:
        return Decision(
            self._command_effect,
            f"{DANGEROUS_COMMAND_RULE}:{found.id}",
            f"a dangerous command: {found.reason}",
            "execute",
            found.command,
        )

    # -- host files and isolation -----------------------------------------------------------

    def host_files(self, request: Request) -> Decision | None:
        """The ``[host_files]`` table's word on a call on host paths (decided on its first
        path, or on the call when it names none)."""
        mode = self._spec.host_files.mode
        if mode == "allow":
            return None
        action, target = (
            (request.paths[0][1], request.paths[0][0]) if request.paths else ("call", None)
        )
        if mode == "warn":  # the engine logs every warned call as a WARNING when it runs
            reason = f"{request.tool} reaches host files outside the sandbox"
            return Decision(Effect.WARN, HOST_FILES_RULE, reason, action, target)
        reason = (
            'raw host file access is off ([host_files] mode = "deny"); set the mode to "warn" '
            'or "allow" in the policy to permit it'
        )
        return Decision(Effect.DENY, HOST_FILES_RULE, reason, action, target)


def isolation_required(command: str | None) -> Decision:
    """The denial of a command a policy requiring isolation would run unboxed."""
    # before any rule: no allow rule can make an unboxed run acceptable to this policy, and
    # neither can shadow mode (a trial of the rules, not of this guarantee: a command run
    # without the box it requires could do anything)
    return Decision(
        Effect.DENY, REQUIRE_ISOLATION_RULE, REQUIRE_ISOLATION_REASON, "execute", command
    )


def unboxed(decision: Decision) -> Decision:
    """An ask on a command that would run without the box says so: a person answering it allows
    a command with their own rights, not a boxed one."""
    if decision.effect is not Effect.ASK or UNBOXED_NOTE in decision.reason:
        return decision
    return decision._replace(reason=decision.reason + UNBOXED_NOTE)


def _tool_danger_spec(patterns: tuple[str, ...]) -> PathSpec:
    # a tool's own list is judged on every access (its changes-only entries too)
    found = dangerous_patterns(replace=patterns)
    return path_spec([*found.any_access, *found.changes], folded=True)
