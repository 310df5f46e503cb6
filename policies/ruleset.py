"""What a policy file compiles to: its rules behind Stockade's own, and its dangerous commands.

Stockade's own rules come first and carry reserved ids (`stockade.policies.policy_file`
refuses them in a file): ``read-only-mode`` when the policy is read-only, ``dangerous-path``
for protected paths. Two more ids name decisions that are not rules over atoms: a dangerous
command (``dangerous-command:<id>``) and a command refused because it would not run isolated
(``require-isolation``). Every error names the file, line and key it comes from.
"""

from __future__ import annotations

from stockade.policies.dangerous import dangerous_patterns
from stockade.policies.dangerous_commands import DangerousCommands, dangerous_commands
from stockade.policies.policy_file import PolicyError, PolicySpec, Problem, RuleSpec
from stockade.policies.rules import Rule, RuleError, compile_rule
from stockade.policies.source import SourceMap

READ_ONLY_RULE = "read-only-mode"
DANGEROUS_RULE = "dangerous-path"
DANGEROUS_COMMAND_RULE = "dangerous-command"
REQUIRE_ISOLATION_RULE = "require-isolation"
HOST_FILES_RULE = "host-files"
REQUIRE_ISOLATION_REASON = (
    "the policy requires isolation for commands, and bubblewrap is not available here: "
    "install the 'bubblewrap' package (and allow unprivileged user namespaces)"
)


def compile_rules(spec: PolicySpec, source: str, text: str | None) -> list[Rule]:
    """Stockade's own rules, then the file's, compiled; positions keep that order."""
    rules: list[Rule] = []
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
    if patterns:
        protected = RuleSpec(
            id=DANGEROUS_RULE,
            effect=dangers.effect,
            reason="a protected path (credentials, hooks or tool configuration)",
            paths=patterns,
        )
        try:
            rules.append(compile_rule(protected, 1, folded=True))
        except RuleError as exc:
            raise PolicyError(
                "invalid policy", [problem(source, text, ("dangerous_paths",), str(exc))]
            ) from None
    for index, rule in enumerate(spec.rules):
        try:
            rules.append(compile_rule(rule, 2 + index))
        except RuleError as exc:
            location: tuple[str | int, ...] = ("rules", index)
            if exc.key:
                location = ("rules", index, exc.key)
            raise PolicyError(
                "invalid policy", [problem(source, text, location, str(exc))]
            ) from None
    return rules


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
