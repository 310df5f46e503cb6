"""A loaded policy: decisions on requests, concurrency limits, and its casbin form.

    policy = Policy.load("stockade.toml")        # or Policy.preset("default"), Policy.from_dict(d)
    decision = policy.decide(Request(subject="agent", tool="write_file",
                                     paths=[("/workspace/.env", "write")]))
    print(decision.explain())

How a request is decided: a command that a policy requiring isolation would run unboxed is
denied outright; otherwise every atom of it (the call, each path, the command) gets the
first-matching rule's effect, or the default, and the strictest atom decides the request. Paths
in the request's private folders are not atoms: nothing else can see them. A tool's own
dangerous paths and the dangerous-command list can only make a decision stricter; in shadow mode
a denial becomes a warning that says what would have been denied. Decisions are cached per
request (requests are hashable). What an "ask" becomes when nobody can answer is `unanswered`.

Stockade's own files (its audit log, traces, state folder, the policy file itself) are added
with `Policy.protect`, which returns a policy with one more rule of Stockade's own, before every
other: ``stockade-state``, deny, for every tool and access, matched like the protected paths
(case-insensitively, anywhere the pattern says), and not softened by shadow mode (a trial of the
rules is no reason to let an agent erase the record of the trial). An "ask" on a command that
would run without isolation says so in its reason, so whoever answers knows what they allow.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stockade.policies.casbin_enforcer import (
    CasbinMatcher,
    dangerous_commands_line,
    grouping_lines,
    lines_from_enforcer,
    new_enforcer,
    policy_lines,
    spec_from_lines,
)
from stockade.policies.compiled import CompiledRules
from stockade.policies.dangerous import dangerous_patterns
from stockade.policies.decision import Decision, Effect, strictest
from stockade.policies.globs import PathSpec, path_spec
from stockade.policies.limits import CallLimits, Limits
from stockade.policies.paths import PathSpellingError, canonical, fold, within
from stockade.policies.policy_file import PolicyError, PolicySpec, ProcessSpec, parse, read
from stockade.policies.request import Request
from stockade.policies.rules import Atom, Rule
from stockade.policies.ruleset import (
    DANGEROUS_COMMAND_RULE,
    DANGEROUS_RULE,
    HOST_FILES_RULE,
    READ_ONLY_RULE,
    REQUIRE_ISOLATION_REASON,
    REQUIRE_ISOLATION_RULE,
    STATE_RULE,
    compile_dangerous_commands,
    compile_rules,
)
from stockade.policies.shell import CommandLine, parse_command

if TYPE_CHECKING:
    import casbin

__all__ = [
    "DANGEROUS_COMMAND_RULE",
    "DANGEROUS_RULE",
    "HOST_FILES_RULE",
    "PRESETS",
    "READ_ONLY_RULE",
    "REQUIRE_ISOLATION_RULE",
    "STATE_RULE",
    "UNBOXED_NOTE",
    "CallLimits",
    "Policy",
]

PRESETS = ("default", "read-only", "strict", "permissive")
_DECISION_CACHE = 8192
UNBOXED_NOTE = (
    "; it would run WITHOUT isolation (no bubblewrap here), with your user's rights: it could "
    "read, change or send anything you can"
)


class Policy:
    """A compiled policy. Build it with `load`, `preset`, `from_dict` or `from_enforcer`;
    `protect` adds Stockade's own files. ``file`` is the file it was loaded from (resolved),
    None when it came from elsewhere; ``protected`` the patterns `protect` added."""

    def __init__(
        self,
        spec: PolicySpec,
        *,
        source: str = "<policy>",
        text: str | None = None,
        protected: Iterable[str] = (),
        file: Path | None = None,
    ):
        self.spec = spec
        self.source = source
        self.file = file
        self._text = text
        self.protected: tuple[str, ...] = tuple(protected)
        self.default: Effect = spec.default_effect
        self._default_severity = self.default.severity
        self._default_reason = f"no rule matched; the policy's default is {self.default.value}"
        self.shadow = spec.shadow
        self.read_only = spec.read_only
        self.rules = compile_rules(spec, source, text, self.protected)
        self._compiled = CompiledRules(self.rules, spec.roles)
        self._dangerous_effect = Effect(spec.dangerous_paths.effect)
        self._decide_cached = lru_cache(maxsize=_DECISION_CACHE)(self.decide_uncached)
        self._tool_dangers = lru_cache(maxsize=256)(_tool_danger_spec)
        self._dangerous_commands = compile_dangerous_commands(spec, source, text)
        self._dangerous_command_effect = Effect(spec.dangerous_commands.effect)
        self._parse = lru_cache(maxsize=1024)(parse_command)
        self._require_isolation = spec.process.require_isolation
        self._limits = Limits(spec.limits, spec.roles)
        self._casbin: CasbinMatcher | None = None

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Load a TOML policy file. Raises PolicyError naming file, line and key."""
        spec, text = read(Path(path))
        return cls(spec, source=str(path), text=text, file=Path(path).resolve())

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
        process: Mapping[str, Any] | None = None,
        host_files: Mapping[str, Any] | None = None,
        source: str = "<casbin>",
    ) -> Policy:
        """A policy from a casbin enforcer holding Stockade's lines (loaded by any casbin
        adapter: a CSV file, a database). What lines cannot hold (the default, shadow mode,
        limits, the ``[process]`` and ``[host_files]`` tables) is given here."""
        lines, groups = lines_from_enforcer(enforcer)
        data, protected = spec_from_lines(
            lines,
            groups,
            default=default,
            shadow=shadow,
            limits=limits,
            process=process,
            host_files=host_files,
        )
        return cls(parse(data, source=source), source=source, protected=protected)

    def protect(self, patterns: Iterable[str]) -> Policy:
        """This policy, with Stockade's own files protected: ``patterns`` (absolute logical or
        host paths, glob syntax as in a rule's ``paths``; a literal ``*``, ``?``, ``[`` or ``\\``
        escaped with a backslash, as `stockade.policies.globs.escape` does) are denied to every
        tool and access, each with everything beneath it, by the ``stockade-state`` rule, before
        any other rule and whatever the file says. Returns this policy when nothing is new."""
        added: list[str] = []
        for pattern in patterns:
            if not pattern.startswith("/"):
                raise PolicyError(
                    f"cannot protect {pattern!r}: give an absolute path (a logical path such "
                    "as /workspace/.stockade, or a host path)"
                )
            pattern = pattern.removesuffix("/**").rstrip("/") or "/"
            if pattern not in self.protected and pattern not in added:
                added.append(pattern)
        if not added:
            return self
        return Policy(
            self.spec,
            source=self.source,
            text=self._text,
            protected=(*self.protected, *added),
            file=self.file,
        )

    @property
    def trusted_origins(self) -> frozenset[str]:
        """Tool origins whose read-only claims the policy believes (``mcp:<server>`` for each
        server in ``[mcp] trusted_servers``)."""
        return frozenset(f"mcp:{name}" for name in self.spec.mcp.trusted_servers)

    @property
    def process(self) -> ProcessSpec:
        """How commands run under this policy: isolation required or not, network, limits."""
        return self.spec.process

    # -- deciding ----------------------------------------------------------------------------

    def decide(self, request: Request) -> Decision:
        """The decision on ``request`` (cached)."""
        return self._decide_cached(request)

    def decide_uncached(self, request: Request) -> Decision:
        """The decision without the cache (what a first-time request costs).

        The same steps as `decide_with` over the compiled rules, written out without building
        atoms: this is the hot path. Commands and paths that need canonicalising take the
        general route."""
        subject, tool, action, paths, command, read_only, dangers, isolated, private, host = request
        if action == "execute":
            if self._require_isolation and not isolated:
                return self._isolation_required(command)
            if command is not None:
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
            if private and within(path, private):
                continue
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
        if host:
            decision = strictest(decision, self._host_files(request))
        if action == "execute" and not isolated:
            decision = _unboxed(decision)
        return self._shadowed(decision) if self.shadow else decision

    def decide_with_casbin(self, request: Request) -> Decision:
        """The same decision, reached through casbin's ``enforce`` (slow; the reference)."""
        return self.decide_with(self.casbin().first_match, request)

    def decide_with(self, first_match: Any, request: Request) -> Decision:
        """Decide with a given first-match function over atoms (compiled or casbin)."""
        if request.action == "execute" and self._require_isolation and not request.isolated:
            return self._isolation_required(request.command)
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
        if request.host_paths:
            best = strictest(best, self._host_files(request))
        if request.action == "execute" and not request.isolated:
            best = _unboxed(best)
        return self._shadowed(best) if self.shadow else best

    def atoms(self, request: Request) -> list[Atom]:
        """The parts of a request rules are matched against: the call, then each path (those
        in the request's private folders left out)."""
        subject, tool, action, paths, command, read_only, _, _, private, _ = request
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
            if private and within(resolved, private):
                continue
            atoms.append(
                _new(Atom, (subject, tool, access, read_only, resolved, fold(resolved), None))
            )
        return atoms

    def _host_files(self, request: Request) -> Decision | None:
        """The ``[host_files]`` table's word on a call on host paths (decided on its first
        path, or on the call when it names none)."""
        mode = self.spec.host_files.mode
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

    def _isolation_required(self, command: str | None) -> Decision:
        # before any rule: no allow rule can make an unboxed run acceptable to this policy, and
        # neither can shadow mode (a trial of the rules, not of this guarantee: a command run
        # without the box it requires could do anything)
        return Decision(
            Effect.DENY, REQUIRE_ISOLATION_RULE, REQUIRE_ISOLATION_REASON, "execute", command
        )

    def unanswered(self, decision: Decision) -> Decision:
        """What an ASK decision becomes when nobody can answer it: a denial that says approval
        was needed; in shadow mode (``decision.shadow``) a warning that says what would have
        been asked, since a trial rollout blocks nothing. Other decisions are returned as they
        are."""
        if decision.effect is not Effect.ASK:
            return decision
        if decision.shadow:
            return decision._replace(
                effect=Effect.WARN,
                reason=f"shadow mode: would ask for approval ({decision.reason}); none configured",
            )
        return decision._replace(
            effect=Effect.DENY,
            reason=f"{decision.reason} — approval needed, and no approver is configured",
        )

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
        if not self.shadow or decision.rule == STATE_RULE:
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
        return self._limits.for_call(tool, subject)

    @property
    def has_limits(self) -> bool:
        """Whether any concurrency limit is configured."""
        return self._limits.configured

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
    # a tool's own list is judged on every access (its changes-only entries too)
    found = dangerous_patterns(replace=patterns)
    return path_spec([*found.any_access, *found.changes], folded=True)


def _unboxed(decision: Decision) -> Decision:
    """An ask on a command that would run without the box says so: a person answering it allows
    a command with their own rights, not a boxed one."""
    if decision.effect is not Effect.ASK or UNBOXED_NOTE in decision.reason:
        return decision
    return decision._replace(reason=decision.reason + UNBOXED_NOTE)
