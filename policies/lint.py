"""Checks a policy file for mistakes that loading alone does not catch, with line numbers.

Loading refuses what is *invalid* (unknown keys, effects, actions; bad patterns). Linting also
reports what is valid but almost certainly not meant: a rule that can never match, a rule that
can never decide because a stronger one always wins first, switches that disable protection.
The findings on rules and patterns live beside this module: `rule_lint` (rules beaten first,
allows over protected paths and dangerous commands), `pattern_lint` (host paths, unclosed
classes, backslashes, edge spaces, ``:*``), `depth_lint` (folders the project has only deeper,
when its folder is given), `network_lint` (the ``[network]`` table).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from stockade.policies.decision import Effect
from stockade.policies.depth_lint import depth_findings
from stockade.policies.lint_report import Report, Severity
from stockade.policies.network_lint import network_findings
from stockade.policies.pattern_lint import failing_pattern, pattern_findings
from stockade.policies.policy import Policy
from stockade.policies.policy_file import PolicyError, Problem, parse
from stockade.policies.rule_coverage import PATH_ACTIONS
from stockade.policies.rule_lint import is_user, protected_findings, shadow_findings
from stockade.policies.source import SourceMap


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


def lint_policy(path: str | Path, *, workspace: Path | None = None) -> list[Finding]:
    """Lint a policy file; ``workspace`` is the project's folder, looked into for patterns
    that name a folder at its top which it has only deeper (None: not looked into)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [Finding("error", None, "(file)", f"cannot read {path}: {exc}")]
    return lint_text(text, source=str(path), workspace=workspace)


def lint_text(text: str, *, source: str = "<text>", workspace: Path | None = None) -> list[Finding]:
    """Lint policy text; errors (the policy would not load) come first, then warnings, then
    notes, each in file order. ``workspace``: as for `lint_policy`."""
    try:
        data = tomllib.loads(text)
        policy = Policy(parse(data, source=source, text=text), source=source, text=text)
    except tomllib.TOMLDecodeError as exc:
        return [Finding("error", _toml_line(exc), "(file)", f"not valid TOML: {exc}")]
    except PolicyError as exc:
        if not exc.problems:
            return [Finding("error", None, "(file)", str(exc))]
        return [_load_error(p, data, text) for p in exc.problems]
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

    if workspace is not None and not workspace.is_dir():
        add("warning", ("(workspace)",), f"{workspace} is not a folder: its checks were skipped")
    report = Report(text)
    protected = protected_findings(policy, report)
    unsaid = protected | shadow_findings(policy, report, protected)
    pattern_findings(spec.rules, report, None if workspace is None else workspace.resolve().name)
    if workspace is not None and workspace.is_dir():
        depth_findings(spec.rules, report, workspace)
    findings += [Finding(*found) for found in report.found]
    user_rules = {r.id: r for r in policy.rules if is_user(r)}
    for index, rule_spec in enumerate(spec.rules):
        rule = user_rules[rule_spec.id]
        where: tuple[str | int, ...] = ("rules", index)
        actions = rule.actions
        if rule.paths is not None and actions is not None and not actions & PATH_ACTIONS:
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
            unsaid.add(rule.id)
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
        if (
            rule.effect is Effect.ALLOW
            and policy.default is Effect.ALLOW
            and rule.id not in unsaid  # it never decides, or cannot allow what it names
        ):
            add(
                "info",
                (*where, "effect"),
                f"rule {rule.id!r} allows what the default already allows; it only names the "
                "rule in decisions",
            )
    for index, approval in enumerate(spec.approvals):
        broad = (not approval.paths and not approval.commands and approval.tools == ["*"]) or bool(
            {"*", "* *"} & set(approval.commands) | {"**", "/**"} & set(approval.paths)
        )
        if broad:
            add(
                "warning",
                ("approvals", index),
                f"approval {approval.id!r} answers every ask of every tool it names, whatever "
                "the call does; name the commands or paths it is for",
            )
    order = {"error": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: (order[f.severity], f.line or 0))
    return findings


def _load_error(problem: Problem, data: object, text: str) -> Finding:
    """A problem that stops the policy loading, pointed at the pattern to blame if one is."""
    location = failing_pattern(data, problem.key)
    if location is None:
        return Finding("error", problem.line, problem.key, problem.message)
    key = ".".join(map(str, location))
    return Finding("error", Report(text).line(location), key, problem.message)


def _toml_line(exc: tomllib.TOMLDecodeError) -> int | None:
    line = getattr(exc, "lineno", None)  # Python 3.14+; before, only the message says
    if isinstance(line, int):
        return line
    found = re.search(r"at line (\d+)", str(exc))
    return int(found.group(1)) if found else None
