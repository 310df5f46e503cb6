"""A loaded policy: decisions on requests, concurrency limits, and its casbin form.

    policy = Policy.load("stockade.toml")        # or Policy.preset("default"), Policy.from_dict(d)
    decision = policy.decide(Request(subject="agent", tool="write_file",
                                     paths=[("/workspace/.env", "write")]))
    print(decision.explain())

How a request is decided: every atom of it (the call, each path, the command) gets the
first-matching rule's effect, or the default; the strictest atom decides the request; a tool's own
dangerous paths can only make it stricter; in shadow mode a denial becomes a warning that says
what would have been denied. Decisions are cached per request (requests are hashable).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import casbin

from stockade.policies.compiled import CompiledRules
from stockade.policies.dangerous import dangerous_patterns
from stockade.policies.dangerous_commands import BUILT_IN_IDS, DangerousCommands, dangerous_commands
from stockade.policies.decision import Decision, Effect, strictest
from stockade.policies.globs import NamePattern, PathSpec, path_spec
from stockade.policies.oracle import (
    CasbinMatcher,
    dangerous_commands_line,
    decode_field,
    grouping_lines,
    lines_from_enforcer,
    new_enforcer,
    policy_lines,
)
from stockade.policies.paths import PathSpellingError, canonical, fold
from stockade.policies.request import Request
from stockade.policies.rules import Atom, Rule, RuleError, compile_rule, role_closure
from stockade.policies.shell import CommandLine, parse_command
from stockade.policies.source import SourceMap
from stockade.policies.spec import (
    DangerousSpec,
    PolicyError,
    PolicySpec,
    Problem,
    ProcessSpec,
    RuleSpec,
    parse,
    read,
)

PRESETS = ("default", "read-only", "strict", "permissive")
READ_ONLY_RULE = "read-only-mode"
DANGEROUS_RULE = "dangerous-path"
DANGEROUS_COMMAND_RULE = "dangerous-command"
_DECISION_CACHE = 8192


@dataclass(frozen=True, slots=True)
class CallLimits:
    """The concurrency limits that apply to one tool called by one subject."""

    global_cap: int | None
    tool_cap: int | None
    subject_cap: int | None
    exclusive: bool


class Policy:
    """A compiled policy. Build it with `load`, `preset`, `from_dict` or `from_enforcer`."""

    def __init__(self, spec: PolicySpec, *, source: str = "<policy>", text: str | None = None):
        self.spec = spec
        self.source = source
        self.default: Effect = spec.default_effect
        self._default_severity = self.default.severity
        self._default_reason = f"no rule matched; the policy's default is {self.default.value}"
        self.shadow = spec.shadow
        self.read_only = spec.read_only
        self.rules = self._compile_rules(spec, source, text)
        self._compiled = CompiledRules(self.rules, spec.roles)
        self._dangerous_effect = Effect(spec.dangerous_paths.effect)
        self._decide_cached = lru_cache(maxsize=_DECISION_CACHE)(self.decide_uncached)
        self._tool_dangers = lru_cache(maxsize=256)(_tool_danger_spec)
        self._dangerous_commands = self._compile_dangerous_commands(spec, source, text)
        self._dangerous_command_effect = Effect(spec.dangerous_commands.effect)
        self._parse = lru_cache(maxsize=1024)(parse_command)
        self._limits: dict[tuple[str, str], CallLimits] = {}
        self._casbin: CasbinMatcher | None = None

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Load a TOML policy file. Raises PolicyError naming file, line and key."""
        spec, text = read(Path(path))
        return cls(spec, source=str(path), text=text)

    @classmethod
    def preset(cls, name: str) -> Policy:
        """One of the shipped presets: default, read-only, strict, permissive."""
        if name not in PRESETS:
            raise PolicyError(f"no preset named {name!r}; presets: {', '.join(PRESETS)}")
        text = (
            resources.files("stockade.policies.presets").joinpath(f"{name}.toml").read_text("utf-8")
        )
        source = f"preset:{name}"
        return cls(parse(tomllib.loads(text), source=source, text=text), source=source, text=text)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>") -> Policy:
        """A policy from data shaped like the TOML file."""
        return cls(parse(data, source=source), source=source)

    @classmethod
    def from_enforcer(
        cls,
        enforcer: casbin.Enforcer,
        *,
        default: str = "allow",
        shadow: bool = False,
        limits: Mapping[str, Any] | None = None,
        source: str = "<casbin>",
    ) -> Policy:
        """A policy from a casbin enforcer holding Stockade's lines (loaded by any casbin
        adapter: a CSV file, a database). What lines cannot hold (the default, shadow mode,
        limits) is given here."""
        lines, groups = lines_from_enforcer(enforcer)
        return cls.from_dict(
            _spec_from_lines(lines, groups, default=default, shadow=shadow, limits=limits),
            source=source,
        )

    @staticmethod
    def _compile_dangerous_commands(
        spec: PolicySpec, source: str, text: str | None
    ) -> DangerousCommands:
        dangers = spec.dangerous_commands
        try:
            return dangerous_commands(remove=dangers.remove, extend=dangers.extend)
        except ValueError as exc:
            raise PolicyError(
                "invalid policy", [_problem(source, text, ("dangerous_commands",), str(exc))]
            ) from None

    @property
    def trusted_origins(self) -> frozenset[str]:
        """Tool origins whose read-only claims the policy believes (``mcp:<server>`` for each
        server in ``[mcp] trusted_servers``)."""
        return frozenset(f"mcp:{name}" for name in self.spec.mcp.trusted_servers)

    @property
    def process(self) -> ProcessSpec:
        """How commands run under this policy: isolation required or not, network, limits."""
        return self.spec.process

    @staticmethod
    def _compile_rules(spec: PolicySpec, source: str, text: str | None) -> list[Rule]:
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
                "invalid policy", [_problem(source, text, ("dangerous_paths",), str(exc))]
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
                    "invalid policy", [_problem(source, text, ("dangerous_paths",), str(exc))]
                ) from None
        for index, rule in enumerate(spec.rules):
            try:
                rules.append(compile_rule(rule, 2 + index))
            except RuleError as exc:
                location: tuple[str | int, ...] = ("rules", index)
                if exc.key:
                    location = ("rules", index, exc.key)
                raise PolicyError(
                    "invalid policy", [_problem(source, text, location, str(exc))]
                ) from None
        return rules

    # -- deciding ----------------------------------------------------------------------------

    def decide(self, request: Request) -> Decision:
        """The decision on ``request`` (cached)."""
        return self._decide_cached(request)

    def decide_uncached(self, request: Request) -> Decision:
        """The decision without the cache (what a first-time request costs).

        The same steps as `decide_with` over the compiled rules, written out without building
        atoms: this is the hot path. Commands and paths that need canonicalising take the
        general route."""
        subject, tool, action, paths, command, read_only, dangers = request
        if action == "execute" and command is not None:
            return self.decide_with(self._compiled.first_match, request)
        for path, _ in paths:
            if not _looks_canonical(path):
                return self.decide_with(self._compiled.first_match, request)
        compiled = self._compiled
        default_severity = self._default_severity
        best_rule = compiled.first_general(subject, tool, action, read_only)[1]
        best_severity = default_severity if best_rule is None else best_rule.severity
        best_action: str = action
        best_target: str | None = None
        for path, access in paths:
            rule = compiled.first_for_path(subject, tool, access, read_only, path, fold(path))
            severity = default_severity if rule is None else rule.severity
            if severity > best_severity or (
                severity == best_severity and best_rule is None and rule is not None
            ):
                best_rule, best_severity, best_action, best_target = rule, severity, access, path
        if best_rule is None:
            decision = _new(
                Decision,
                (self.default, None, self._default_reason, best_action, best_target, False),
            )
        else:
            decision = _new(
                Decision,
                (best_rule.effect, best_rule.id, best_rule.reason, best_action, best_target, False),
            )
        if dangers:
            decision = strictest(decision, self._tool_danger(request, self.atoms(request)))
        return self._shadowed(decision) if self.shadow else decision

    def decide_with_casbin(self, request: Request) -> Decision:
        """The same decision, reached through casbin's ``enforce`` (slow; the reference)."""
        return self.decide_with(self.casbin().first_match, request)

    def decide_with(self, first_match: Any, request: Request) -> Decision:
        """Decide with a given first-match function over atoms (compiled or casbin)."""
        try:
            atoms = self.atoms(request)
        except PathSpellingError as exc:
            return self._shadowed(
                Decision(Effect.DENY, "path-spelling", str(exc), request.action, None)
            )
        # the strictest atom decides; among equally strict ones, the first a rule decided (so
        # a decision names a rule when one applies), else the call itself
        default_severity = self._default_severity
        best_atom = atoms[0]
        best_rule: Rule | None = first_match(best_atom)
        best_severity = default_severity if best_rule is None else best_rule.severity
        for atom in atoms[1:]:
            rule: Rule | None = first_match(atom)
            severity = default_severity if rule is None else rule.severity
            if severity > best_severity or (
                severity == best_severity and best_rule is None and rule is not None
            ):
                best_atom, best_rule, best_severity = atom, rule, severity
        target = best_atom.path if best_atom.path is not None else best_atom.command
        if best_rule is None:
            best = _new(
                Decision,
                (self.default, None, self._default_reason, best_atom.action, target, False),
            )
        else:
            best = _new(
                Decision,
                (best_rule.effect, best_rule.id, best_rule.reason, best_atom.action, target, False),
            )
        if request.dangerous_paths:
            best = strictest(best, self._tool_danger(request, atoms))
        if request.action == "execute" and request.command is not None:
            best = strictest(best, self._dangerous_command(request.command))
        return self._shadowed(best) if self.shadow else best

    def atoms(self, request: Request) -> list[Atom]:
        """The parts of a request rules are matched against: the call, then each path."""
        subject, tool, action, paths, command, read_only, _ = request
        # tuple.__new__ skips the named tuple's keyword handling: this runs on every decision
        extra: list[tuple[str, str]] = []
        if action == "execute" and command is not None:
            line = self._parse(command)
            atoms = [
                _new(Atom, (subject, tool, action, read_only, None, None, spelling))
                for spelling in line.spellings()
            ]
            if line.opaque or not atoms:
                # what cannot be read is judged without a command: no command rule allows it
                atoms.append(_new(Atom, (subject, tool, action, read_only, None, None, None)))
            extra = [p for p in line.paths() if p not in paths]  # redirections' files
        else:
            atoms = [_new(Atom, (subject, tool, action, read_only, None, None, None))]
        for path, access in (*paths, *extra):
            resolved = path if _looks_canonical(path) else canonical(path)
            atoms.append(
                _new(Atom, (subject, tool, access, read_only, resolved, fold(resolved), None))
            )
        return atoms

    def _dangerous_command(self, command: str) -> Decision | None:
        found = self._dangerous_commands.find(self._parse(command))
        if found is None:
            return None
        return Decision(
            self._dangerous_command_effect,
            f"{DANGEROUS_COMMAND_RULE}:{found.id}",
            f"a dangerous command: {found.reason}",
            "execute",
            found.command,
        )

    def command_line(self, command: str) -> CommandLine:
        """``command`` parsed as bash, as this policy judges it (cached)."""
        return self._parse(command)

    def _tool_danger(self, request: Request, atoms: list[Atom]) -> Decision | None:
        spec = self._tools_dangers(request.dangerous_paths)
        for atom in atoms[1:]:
            if (
                atom.path is not None
                and atom.folded is not None
                and spec.match(atom.path, atom.folded)
            ):
                return Decision(
                    self._dangerous_effect,
                    f"{DANGEROUS_RULE}:{request.tool}",
                    f"{request.tool} declares this path dangerous",
                    atom.action,
                    atom.path,
                )
        return None

    def _tools_dangers(self, patterns: tuple[str, ...]) -> PathSpec:
        try:
            return self._tool_dangers(patterns)
        except ValueError as exc:
            raise PolicyError(f"a tool's dangerous_paths cannot be compiled: {exc}") from None

    def _shadowed(self, decision: Decision) -> Decision:
        if not self.shadow:
            return decision
        if decision.effect is Effect.DENY:
            return Decision(
                Effect.WARN,
                decision.rule,
                f"shadow mode: would be denied ({decision.reason})",
                decision.action,
                decision.target,
                shadow=True,
            )
        return Decision(
            decision.effect, decision.rule, decision.reason, decision.action, decision.target, True
        )

    # -- limits ------------------------------------------------------------------------------

    def limits_for(self, tool: str, subject: str) -> CallLimits:
        """Concurrency limits for ``tool`` called by ``subject`` (cached). Where several
        patterns match, the smallest cap applies."""
        key = (tool, subject)
        found = self._limits.get(key)
        if found is None:
            limits = self.spec.limits
            closure = role_closure(subject, self.spec.roles) | {"*"}
            tool_caps = [c for p, c in limits.per_tool.items() if NamePattern(p).match(tool)]
            subject_caps = [c for s, c in limits.per_subject.items() if s in closure]
            found = CallLimits(
                global_cap=limits.max_in_flight,
                tool_cap=min(tool_caps) if tool_caps else None,
                subject_cap=min(subject_caps) if subject_caps else None,
                exclusive=any(NamePattern(p).match(tool) for p in limits.exclusive),
            )
            if len(self._limits) < 4096:
                self._limits[key] = found
        return found

    @property
    def has_limits(self) -> bool:
        """Whether any concurrency limit is configured."""
        limits = self.spec.limits
        return bool(
            limits.max_in_flight or limits.per_tool or limits.per_subject or limits.exclusive
        )

    # -- casbin ------------------------------------------------------------------------------

    def casbin(self) -> CasbinMatcher:
        """The casbin enforcer holding this policy, with a first-match function over it."""
        if self._casbin is None:
            enforcer = new_enforcer(self.casbin_lines(), grouping_lines(self.spec.roles))
            self._casbin = CasbinMatcher(enforcer, self.rules)
        return self._casbin

    def casbin_lines(self) -> list[list[str]]:
        """casbin policy lines (``p``), in first-match order, and the dangerous-command list."""
        dangers = self.spec.dangerous_commands
        return [
            *policy_lines(self._compiled.ranked),
            dangerous_commands_line(dangers.effect, dangers.remove, dangers.extend),
        ]

    def casbin_csv(self) -> str:
        """The policy as casbin's file adapter reads it (``p, ...`` and ``g, ...`` lines)."""
        rows = [["p", *line] for line in self.casbin_lines()]
        rows += [["g", *line] for line in grouping_lines(self.spec.roles)]
        return "".join(", ".join(row) + "\n" for row in rows)

    def __repr__(self) -> str:
        return f"<Policy {self.source}: {len(self.spec.rules)} rules, default {self.default.value}>"


_new = tuple.__new__


def _looks_canonical(path: str) -> bool:
    # canonical() is idempotent; skipping it for paths that are plainly canonical already (as
    # the engine's are) keeps the hot path short. Anything dotted or doubled goes through it.
    return (
        path.startswith("/")
        and "//" not in path
        and "/." not in path
        and "\x00" not in path
        and (path == "/" or not path.endswith("/"))
    )


def _tool_danger_spec(patterns: tuple[str, ...]) -> PathSpec:
    return path_spec(dangerous_patterns(replace=patterns), folded=True)


def _problem(
    source: str, text: str | None, location: tuple[str | int, ...], message: str
) -> Problem:
    line = SourceMap(text).line(location) if text is not None else None
    return Problem(source, line, ".".join(str(p) for p in location), message)


def _spec_from_lines(
    lines: Iterable[list[str]],
    groups: Iterable[list[str]],
    *,
    default: str,
    shadow: bool,
    limits: Mapping[str, Any] | None,
) -> dict[str, Any]:
    rules: dict[str, dict[str, Any]] = {}
    data: dict[str, Any] = {"default": default, "shadow": shadow, "limits": dict(limits or {})}
    for sub, tool, act, ro, target, effect, rule_id, reason in (line[:8] for line in lines):
        if target.startswith("danger:"):
            data["dangerous_commands"] = {"effect": effect, **json.loads(decode_field(target[7:]))}
            continue
        tool, rule_id, reason = decode_field(tool), decode_field(rule_id), decode_field(reason)
        rule = rules.setdefault(
            rule_id,
            {
                "id": rule_id,
                "effect": effect,
                "reason": reason,
                "subjects": [],
                "tools": [],
                "actions": [],
            },
        )
        for key, value in (("subjects", sub), ("tools", tool), ("actions", act)):
            if value not in rule[key]:
                rule[key].append(value)
        if ro != "*":
            rule["read_only_tools"] = ro == "true"
        kind, _, encoded = target.partition(":")
        if kind in ("path", "ipath"):
            rule["paths"] = json.loads(decode_field(encoded))
        elif kind == "cmd":
            rule["commands"] = json.loads(decode_field(encoded))
    roles: dict[str, list[str]] = {}
    for member, role in (g[:2] for g in groups):
        roles.setdefault(role, []).append(member)
    data["roles"] = roles
    user_rules = []
    for rule in rules.values():
        if rule["actions"] == ["*"]:
            rule["actions"] = []
        if rule["id"] == READ_ONLY_RULE:
            data["read_only"] = True
        elif rule["id"] == DANGEROUS_RULE:
            data["dangerous_paths"] = DangerousSpec(
                effect=rule["effect"], replace=rule["paths"]
            ).model_dump(exclude_defaults=False)
        else:
            user_rules.append(rule)
    data.setdefault("dangerous_paths", {"replace": []})
    # lines without the list (written by hand, or by an older Stockade) check no commands
    data.setdefault("dangerous_commands", {"remove": list(BUILT_IN_IDS)})
    data["rules"] = user_rules
    return data
