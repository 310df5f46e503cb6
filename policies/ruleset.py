"""What a policy file compiles to: its rules behind Stockade's own, and its dangerous commands.

Stockade's own rules come first and carry reserved ids (`stockade.policies.policy_file`
refuses them in a file): ``stockade-state`` for Stockade's own files (`Policy.protect`: denied
to every tool, whatever the file says), ``read-only-mode`` when the policy is read-only,
``dangerous-path`` for protected paths (two rules under that one id: the list, and the paths
protected against changes only). Two more ids name decisions that are not rules over atoms: a
dangerous command (``dangerous-command:<id>``) and a command refused because it would not run
isolated (``require-isolation``). Every error names the file, line and key it comes from.
"""

from __future__ import annotations

from collections.abc import Iterable

from stockade.policies.dangerous import dangerous_patterns
from stockade.policies.dangerous_commands import DangerousCommands, dangerous_commands
from stockade.policies.policy_file import PolicyError, PolicySpec, Problem, RuleSpec
from stockade.policies.rules import Rule, RuleError, compile_rule
from stockade.policies.source import SourceMap

STATE_RULE = "stockade-state"
READ_ONLY_RULE = "read-only-mode"
DANGEROUS_RULE = "dangerous-path"
DANGEROUS_COMMAND_RULE = "dangerous-command"
REQUIRE_ISOLATION_RULE = "require-isolation"
HOST_FILES_RULE = "host-files"
FIRST_FILE_POSITION = 2  # the file's rules come after Stockade's own (positions -1 to 1)
DANGEROUS_REASON = "a protected path (credentials, hooks or tool configuration)"
STATE_REASON = (
    "Stockade's own files (its audit log, traces, state or policy file): no tool may read, "
    "change or delete them"
)
REQUIRE_ISOLATION_REASON = (
    "the policy requires isolation for commands, and bubblewrap is not available here: "
    "install the 'bubblewrap' package (and allow unprivileged user namespaces)"
)


def compile_rules(
    spec: PolicySpec, source: str, text: str | None, protected: tuple[str, ...] = ()
) -> list[Rule]:
    """Stockade's own rules, then the file's, compiled; positions keep that order.
    ``protected`` are the patterns of Stockade's own files (`Policy.protect`)."""
    rules: list[Rule] = []
    if protected:
        state = RuleSpec(
            id=STATE_RULE,
            effect="deny",
            reason=STATE_REASON,
            paths=[form for pattern in protected for form in (pattern, f"{pattern}/**")],
        )
        try:
            rules.append(compile_rule(state, -1, folded=True))  # before every other rule
        except RuleError as exc:
            raise PolicyError(f"Stockade's own files cannot be protected: {exc}") from None
    if spec.read_only:
        rules.append(
            compile_rule(
                RuleSpec(
                    id=READ_ONLY_RULE,
                    effect="deny",
                    reason="the policy is read-only: only tools marked read-only may run",
                    read_only_tools=False,
                ),
                0,
            )
        )
    dangers = spec.dangerous_paths
    try:
        patterns = dangerous_patterns(
            extend=dangers.extend, remove=dangers.remove, replace=dangers.replace
        )
    except ValueError as exc:
        raise PolicyError(
            "invalid policy", [problem(source, text, ("dangerous_paths",), str(exc))]
        ) from None
    # the list, then what is protected against changes only (a path named .git), under one id
    for paths, actions in ((patterns.any_access, []), (patterns.changes, ["write", "delete"])):
        if not paths:
            continue
        dangerous = RuleSpec(
            id=DANGEROUS_RULE,
            effect=dangers.effect,
            reason=DANGEROUS_REASON,
            actions=actions,
            paths=paths,
        )
        try:
            rules.append(compile_rule(dangerous, 1, folded=True))
        except RuleError as exc:
            raise PolicyError(
                "invalid policy", [problem(source, text, ("dangerous_paths",), str(exc))]
            ) from None
    for index, approval in enumerate(spec.approvals):  # compiled where used; checked here
        as_rule = RuleSpec(effect="allow", **approval.model_dump(exclude={"reason"}))
        try:
            compile_rule(as_rule, 0)
        except RuleError as exc:
            where: tuple[str | int, ...] = ("approvals", index, *((exc.key,) if exc.key else ()))
            raise PolicyError("invalid policy", [problem(source, text, where, str(exc))]) from None
    for index, rule in enumerate(spec.rules):
        try:
            rules.append(compile_rule(rule, FIRST_FILE_POSITION + index))
        except RuleError as exc:
            location: tuple[str | int, ...] = ("rules", index)
            if exc.key:
                location = ("rules", index, exc.key)
            raise PolicyError(
                "invalid policy", [problem(source, text, location, str(exc))]
            ) from None
    return rules


def new_protected(protected: Iterable[str], patterns: Iterable[str]) -> list[str]:
    """The patterns of ``patterns`` not yet in ``protected`` (`Policy.protect`), each as one
    path (a trailing ``/**`` or ``/`` dropped: the rule protects everything beneath it)."""
    known = set(protected)
    added: list[str] = []
    for pattern in patterns:
        if not pattern.startswith("/"):
            raise PolicyError(
                f"cannot protect {pattern!r}: give an absolute path (a logical path such "
                "as /workspace/.stockade, or a host path)"
            )
        pattern = pattern.removesuffix("/**").rstrip("/") or "/"
        if pattern not in known and pattern not in added:
            added.append(pattern)
    return added


def compile_dangerous_commands(
    spec: PolicySpec, source: str, text: str | None
) -> DangerousCommands:
    """The policy's dangerous-command list (the built-in one, changed as the file says)."""
    dangers = spec.dangerous_commands
    try:
        return dangerous_commands(remove=dangers.remove, extend=dangers.extend)
    except ValueError as exc:
        raise PolicyError(
            "invalid policy", [problem(source, text, ("dangerous_commands",), str(exc))]
        ) from None


def problem(
    source: str, text: str | None, location: tuple[str | int, ...], message: str
) -> Problem:
    """A problem at ``location`` of the file, with its line when the text is known."""
    line = SourceMap(text).line(location) if text is not None else None
    return Problem(source, line, ".".join(str(p) for p in location), message)
