"""Checks a policy file for mistakes that loading alone does not catch, with line numbers.

Loading refuses what is *invalid* (unknown keys, effects, actions; bad patterns). Linting also
reports what is valid but almost certainly not meant: a rule that can never match, a rule that
can never decide because a stronger one always wins first, switches that disable protection.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stockade.policies.decision import Effect
from stockade.policies.network_lint import network_findings
from stockade.policies.policy import Policy
from stockade.policies.policy_file import PolicyError, parse
from stockade.policies.rules import Rule
from stockade.policies.ruleset import DANGEROUS_RULE, READ_ONLY_RULE, STATE_RULE
from stockade.policies.source import SourceMap

Severity = Literal["error", "warning", "info"]
_PATH_ACTIONS = frozenset({"read", "write", "delete"})


@dataclass(frozen=True, slots=True)
class Finding:
    """One lint finding: how serious, where, and what."""

    severity: Severity
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "file"
        return f"{where}: {self.severity}: {self.key}: {self.message}"


def lint_policy(path: str | Path) -> list[Finding]:
    """Lint a policy file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [Finding("error", None, "(file)", f"cannot read {path}: {exc}")]
    return lint_text(text, source=str(path))


def lint_text(text: str, *, source: str = "<text>") -> list[Finding]:
    """Lint policy text; errors (the policy would not load) come first, then warnings, then
    notes, each in file order."""
    try:
        data = tomllib.loads(text)
        policy = Policy(parse(data, source=source, text=text), source=source, text=text)
    except tomllib.TOMLDecodeError as exc:
        return [Finding("error", _toml_line(exc), "(file)", f"not valid TOML: {exc}")]
    except PolicyError as exc:
        if not exc.problems:
            return [Finding("error", None, "(file)", str(exc))]
        return [Finding("error", p.line, p.key, p.message) for p in exc.problems]
    lines = SourceMap(text)
    findings: list[Finding] = []
    spec = policy.spec

    def add(severity: Severity, location: tuple[str | int, ...], message: str) -> None:
        key = ".".join(str(part) for part in location) or "(file)"
        findings.append(Finding(severity, lines.line(location), key, message))

    if spec.shadow:
        add("warning", ("shadow",), "shadow mode is on: denials are reported, not enforced")
    if spec.dangerous_paths.effect == "allow":
        add(
            "warning",
            ("dangerous_paths", "effect"),
            "protected paths are allowed: credentials and hooks are not protected",
        )
    if spec.dangerous_commands.effect == "allow":
        add(
            "warning",
            ("dangerous_commands", "effect"),
            "dangerous commands are allowed: rm -rf, sudo and curl | sh run without a word",
        )
    if spec.host_files.mode == "allow":
        add(
            "warning",
            ("host_files", "mode"),
            "raw host-file tools run on host paths, outside the sandbox, without a warning on "
            'any call; keep mode = "warn" so every call is logged, or deny their paths by rules',
        )
    if spec.network is not None and not spec.process.require_isolation:
        add(
            "info",
            ("network",),
            "commands may reach the hosts [network] allows, a filter that needs bubblewrap; "
            "consider require_isolation = true so that no command runs without it",
        )
    elif spec.process.network and not spec.process.require_isolation:
        add(
            "info",
            ("process", "network"),
            "commands may reach the network; consider require_isolation = true so that "
            "no command runs without bubblewrap",
        )
    findings += [Finding(*found) for found in network_findings(spec, text)]
    if spec.process.require_isolation:
        add(
            "info",
            ("process", "require_isolation"),
            "commands are denied on machines without bubblewrap (or where unprivileged user "
            "namespaces are off): they run only isolated"
            + ("; shadow mode does not soften this" if spec.shadow else ""),
        )
    for role, members in spec.roles.items():
        if role in members:
            add("warning", ("roles", role), f"role {role!r} lists itself as a member")

    user_rules = {r.id: (i, r) for i, r in enumerate(policy.rules) if _is_user(r)}
    ranked = sorted(policy.rules, key=lambda r: r.rank)
    for index, rule_spec in enumerate(spec.rules):
        _, rule = user_rules[rule_spec.id]
        where: tuple[str | int, ...] = ("rules", index)
        actions = rule.actions
        if rule.paths is not None and actions is not None and not actions & _PATH_ACTIONS:
            add(
                "warning",
                (*where, "actions"),
                f"rule {rule.id!r} never matches: paths are only read, written or deleted, "
                "and the rule's actions include none of those",
            )
        if rule.commands is not None and actions is not None and "execute" not in actions:
            add(
                "warning",
                (*where, "actions"),
                f"rule {rule.id!r} never matches: commands only apply to the execute action",
            )
        if spec.read_only and rule.read_only is False and rule.effect is not Effect.DENY:
            add(
                "warning",
                (*where, "read_only_tools"),
                f"rule {rule.id!r} never decides: the policy is read-only, so tools that are "
                "not read-only are denied first",
            )
        if (
            rule.effect is Effect.DENY
            and rule.subjects is None
            and rule.tools is None
            and rule.actions is None
            and rule.read_only is None
            and rule.paths is None
            and rule.commands is None
        ):
            add("warning", where, f"rule {rule.id!r} denies every call of every tool")
        if rule.effect is Effect.ALLOW and policy.default is Effect.ALLOW:
            add(
                "info",
                (*where, "effect"),
                f"rule {rule.id!r} allows what the default already allows; it only names the "
                "rule in decisions",
            )
        for earlier in ranked:
            if earlier is rule:
                break
            if _covers(earlier, rule):
                add(
                    "warning",
                    where,
                    f"rule {rule.id!r} never decides anything: {_label(earlier)} "
                    f"({earlier.effect.value}) matches every call it matches and wins first",
                )
                break
    order = {"error": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: (order[f.severity], f.line or 0))
    return findings


def _is_user(rule: Rule) -> bool:
    return rule.id not in (READ_ONLY_RULE, DANGEROUS_RULE, STATE_RULE)


def _label(rule: Rule) -> str:
    if rule.id == READ_ONLY_RULE:
        return "the read_only switch"
    if rule.id == DANGEROUS_RULE:
        return "the dangerous-paths rule"
    return f"rule {rule.id!r}"


def _covers(first: Rule, later: Rule) -> bool:
    """Whether every atom ``later`` matches is also matched by ``first`` (conservatively)."""
    if first.subjects is not None and (
        later.subjects is None or not later.subjects <= first.subjects
    ):
        return False
    if first.tools is not None and (
        later.tools is None or not set(later.tool_patterns) <= set(first.tool_patterns)
    ):
        return False
    if first.actions is not None and (later.actions is None or not later.actions <= first.actions):
        return False
    if first.read_only is not None and first.read_only != later.read_only:
        return False
    if first.paths is None and first.commands is None:
        return True
    if first.paths is not None:
        return (
            later.paths is not None
            and later.paths.folded == first.paths.folded
            and set(later.path_patterns) <= set(first.path_patterns)
            and not first.paths.exclude
        )
    return later.commands is not None and set(later.command_patterns) <= set(first.command_patterns)


def _toml_line(exc: tomllib.TOMLDecodeError) -> int | None:
    line = getattr(exc, "lineno", None)  # Python 3.14+; before, only the message says
    if isinstance(line, int):
        return line
    found = re.search(r"at line (\d+)", str(exc))
    return int(found.group(1)) if found else None
