"""A loaded policy: decisions on requests, concurrency limits, and its casbin form.

    policy = Policy.load("stockade.toml")        # or Policy.preset("default"), Policy.from_dict(d)
    decision = policy.decide(Request(subject="agent", tool="write_file",
                                     paths=[("/workspace/.env", "write")]))
    print(decision.explain())

How a request is decided: a command a policy requiring isolation would run unboxed is denied
outright; otherwise each atom (the call, each path, the command) gets its first-matching rule's
effect, or the default, and the strictest atom decides (`Decision.asks` names every atom that
asks: one yes answers them all). The call's own atom gives way to its paths when no rule
matches it and a rule of the file matches a path (`call_atom`). Paths in the request's private
folders are not atoms. A tool's own dangerous paths and the dangerous-command list only make a
decision stricter; in shadow mode a denial becomes a warning saying what would have been denied.
Decisions are cached per request. An "ask" nobody can answer becomes `unanswered`.

`Policy.protect` adds Stockade's own files (audit log, traces, state, the policy file): the
``stockade-state`` rule, deny, before every other, matched like the protected paths and not
softened by shadow mode (a trial of the rules is no reason to let an agent erase its record).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from functools import lru_cache, partial
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stockade.policies.asks import every_ask, unanswered
from stockade.policies.call_atom import defers, speaking, spoke
from stockade.policies.casbin_enforcer import (
    CasbinMatcher,
    csv_text,
    dangerous_commands_line,
    grouping_lines,
    lines_from_enforcer,
    new_enforcer,
    policy_lines,
    spec_from_lines,
)
from stockade.policies.checks import UNBOXED_NOTE, Checks, isolation_required, unboxed
from stockade.policies.compiled import CompiledRules
from stockade.policies.decision import Decision, Effect, strictest
from stockade.policies.egress import EgressRules, NetworkMode
from stockade.policies.limits import CallLimits, Limits
from stockade.policies.paths import PathSpellingError, canonical, fold, looks_canonical, within
from stockade.policies.policy_file import PolicyError, PolicySpec, ProcessSpec, parse, read
from stockade.policies.request import Access, Request
from stockade.policies.rules import Atom, Rule
from stockade.policies.ruleset import (
    DANGEROUS_COMMAND_RULE,
    DANGEROUS_RULE,
    HOST_FILES_RULE,
    READ_ONLY_RULE,
    REQUIRE_ISOLATION_RULE,
    STATE_RULE,
    compile_dangerous_commands,
    compile_rules,
    new_protected,
)
from stockade.policies.shell import CommandLine, parse_command

if TYPE_CHECKING:
    import casbin

    from stockade.policies.store_feed import PolicyFeed

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
        feed: PolicyFeed | None = None,
    ):
        self.spec = spec
        self.feed = feed  # where a newer policy comes from (a policy store), if anywhere
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
        self._decide_cached = lru_cache(maxsize=_DECISION_CACHE)(self.decide_uncached)
        self._path_cached = lru_cache(maxsize=_DECISION_CACHE)(self._decide_path)
        self._parse = lru_cache(maxsize=1024)(parse_command)
        self._checks = Checks(spec, compile_dangerous_commands(spec, source, text), self._parse)
        self._require_isolation = spec.process.require_isolation or spec.network is not None
        self._limits = Limits(spec.limits, spec.roles)
        self._casbin: CasbinMatcher | None = None
        self._egress = None if spec.network is None else EgressRules.from_spec(spec.network)
        if any(rule.examples for rule in spec.rules):  # a policy loads only if they hold
            from stockade.policies.policy_examples import check_examples  # (it imports this)

            if problems := check_examples(self):
                raise PolicyError("the policy's examples do not hold", problems)

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
        network: Mapping[str, Any] | None = None,
        source: str = "<casbin>",
    ) -> Policy:
        """A policy from a casbin enforcer holding Stockade's lines (loaded by any casbin
        adapter: a CSV file, a database). What lines cannot hold (the default, shadow mode,
        limits, the ``[process]``, ``[host_files]`` and ``[network]`` tables) is given here."""
        given = {"limits": limits, "process": process, "host_files": host_files}
        data, protected = spec_from_lines(*lines_from_enforcer(enforcer), default, shadow, given)
        if network is not None:
            data["network"] = dict(network)
        return cls(parse(data, source=source), source=source, protected=protected)

    @classmethod
    def from_store(cls, url: str, *, follow: bool = True) -> Policy:
        """The policy published to the store at ``url`` (a PostgreSQL URL), kept current: the
        result's ``feed`` holds the newest (`PolicyFeed`), and an engine given it decides each
        call by the newest it has (``follow=False``: the policy now, no feed). Raises
        `PolicyStoreError` when none can be loaded now."""
        from stockade.policies.store_feed import PolicyFeed, snapshot  # (they import this)

        if not follow:
            return snapshot(url, cls.from_enforcer)  # type: ignore[no-any-return]
        policy: Policy = PolicyFeed.open(url, cls.from_enforcer).current
        return policy

    def protect(self, patterns: Iterable[str]) -> Policy:
        """This policy, with Stockade's own files protected: ``patterns`` (absolute logical or
        host paths, glob syntax as in a rule's ``paths``; a literal ``*``, ``?``, ``[`` or ``\\``
        escaped with a backslash, as `stockade.policies.globs.escape` does) are denied to every
        tool and access, each with everything beneath it, by the ``stockade-state`` rule, before
        any other rule and whatever the file says. Returns this policy when nothing is new."""
        added = new_protected(self.protected, patterns)
        if not added:
            return self
        protected = (*self.protected, *added)
        return Policy(
            self.spec,
            source=self.source,
            text=self._text,
            protected=protected,
            file=self.file,
            feed=self.feed,
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

    @property
    def network_mode(self) -> NetworkMode:
        """How commands reach the network: ``none``, ``open`` (every host) or ``filtered``
        (the hosts a ``[network]`` table allows, judged by `egress`)."""
        if self._egress is not None:
            return "filtered"
        return "open" if self.spec.process.network else "none"

    @property
    def egress(self) -> EgressRules | None:
        """The ``[network]`` table, compiled (built once, at load); None without one."""
        return self._egress

    # -- deciding ----------------------------------------------------------------------------

    def decide(self, request: Request) -> Decision:
        """The decision on ``request`` (cached)."""
        return self._decide_cached(request)

    def decide_path(self, request: Request, path: str, access: Access) -> Decision:
        """What the policy says about ``access`` of ``path`` alone, by the call ``request``
        describes (subject, tool, read-only claim, dangerous paths), cached: for facts met after
        the call was decided (a file a walk reaches, what a command read or changed). The call
        itself and its command are not judged again: a policy allowing a command by its words
        would then speak about the command instead of the path."""
        return self._path_cached(
            request.subject, request.tool, request.read_only, request.dangerous_paths, path, access
        )

    def _decide_path(
        self,
        subject: str,
        tool: str,
        read_only: bool,
        dangers: tuple[str, ...],
        path: str,
        access: Access,
    ) -> Decision:
        try:
            resolved = path if looks_canonical(path) else canonical(path)
        except PathSpellingError as exc:
            return self._shadowed(Decision(Effect.DENY, "path-spelling", str(exc), access, path))
        rule = self._compiled.first_for_path(
            subject, tool, access, read_only, resolved, fold(resolved)
        )
        if rule is None:
            decision = Decision(self.default, None, self._default_reason, access, resolved)
        else:
            decision = Decision(rule.effect, rule.id, rule.reason, access, resolved)
        if dangers:
            request = Request(
                subject, tool, access, ((resolved, access),), None, read_only, dangers
            )
            decision = strictest(decision, self._checks.tool_danger(request, self.atoms(request)))
        return self._shadowed(decision)

    def decide_uncached(self, request: Request) -> Decision:
        """The decision without the cache (what a first-time request costs).

        The same steps as `decide_with` over the compiled rules, written out without building
        atoms: this is the hot path. Commands and paths that need canonicalising take the
        general route."""
        subject, tool, action, paths, command, read_only, dangers, isolated, private, host = request
        if action == "execute":
            if self._require_isolation and not isolated:
                return isolation_required(command)
            if command is not None:
                return self.decide_with(self._compiled.first_match, request)
        for path, _ in paths:
            if not looks_canonical(path):
                return self.decide_with(self._compiled.first_match, request)
        compiled = self._compiled
        default_severity = self._default_severity
        best_rule = compiled.first_general(subject, tool, action, read_only)[1]
        # the call gives way to its paths when no rule speaks about it (`call_atom`)
        deferred = best_rule is None and action == "call" and bool(paths)
        best_severity = (
            -1 if deferred else default_severity if best_rule is None else best_rule.severity
        )
        best_action: str = action
        best_target: str | None = None
        spoken = False
        for path, access in paths:
            if private and within(path, private):
                continue
            rule = compiled.first_for_path(subject, tool, access, read_only, path, fold(path))
            severity = default_severity if rule is None else rule.severity
            spoken = spoken or spoke(rule)
            if severity > best_severity or (
                severity == best_severity and best_rule is None and rule is not None
            ):
                best_rule, best_severity, best_action, best_target = rule, severity, access, path
        if deferred and not spoken and (best_rule is None or default_severity > best_severity):
            # no rule of the file spoke about a path: the call is judged by the default
            best_rule, best_severity, best_action, best_target = (
                None,
                default_severity,
                action,
                None,
            )
        if best_rule is None:
            said: tuple[Effect, str | None, str] = (self.default, None, self._default_reason)
        else:
            said = (best_rule.effect, best_rule.id, best_rule.reason)
        decision = _new(Decision, (*said, best_action, best_target, False, (), ()))
        if dangers:
            decision = strictest(decision, self._checks.tool_danger(request, self.atoms(request)))
        if host:
            decision = strictest(decision, self._checks.host_files(request))
        if action == "execute" and not isolated:
            decision = unboxed(decision)
        if decision.effect is Effect.ASK:
            decision = self._every_ask(self._compiled.first_match, request, decision)
        return self._shadowed(decision) if self.shadow else decision

    def first_match(self, atom: Atom) -> Rule | None:
        """The rule that decides ``atom`` (None: the default does)."""
        return self._compiled.first_match(atom)

    def closure(self, subject: str) -> frozenset[str]:
        """``subject`` and every role it holds."""
        return self._compiled.closure(subject)

    def decide_with_casbin(self, request: Request) -> Decision:
        """The same decision, reached through casbin's ``enforce`` (slow; the reference)."""
        return self.decide_with(self.casbin().first_match, request)

    def decide_with(self, first_match: Any, request: Request) -> Decision:
        """Decide with a given first-match function over atoms (compiled or casbin)."""
        if request.action == "execute" and self._require_isolation and not request.isolated:
            return isolation_required(request.command)
        try:
            atoms = self.atoms(request)
        except PathSpellingError as exc:
            return self._shadowed(
                Decision(Effect.DENY, "path-spelling", str(exc), request.action, None)
            )
        # the strictest atom decides; among equally strict ones, the first a rule decided (so
        # a decision names a rule when one applies), else the call itself
        default_severity = self._default_severity
        call = best_atom = atoms[0]
        best_rule: Rule | None = first_match(best_atom)
        best_severity = default_severity if best_rule is None else best_rule.severity
        deferred = best_rule is None and defers(atoms)
        if deferred:
            best_severity = -1
        spoken = False
        extra = self.extra_spellings(request)
        for atom in atoms[1:]:
            rule: Rule | None = first_match(atom)
            if rule is None and extra and atom.command in extra:
                continue  # a normal form no rule names says nothing of the command
            severity = default_severity if rule is None else rule.severity
            spoken = spoken or spoke(rule)
            if severity > best_severity or (
                severity == best_severity and best_rule is None and rule is not None
            ):
                best_atom, best_rule, best_severity = atom, rule, severity
        if deferred and not spoken and (best_rule is None or default_severity > best_severity):
            best_atom, best_rule = call, None  # no rule of the file spoke about a path
        target = best_atom.path if best_atom.path is not None else best_atom.command
        if best_rule is None:
            said: tuple[Effect, str | None, str] = (self.default, None, self._default_reason)
        else:
            said = (best_rule.effect, best_rule.id, best_rule.reason)
        best = _new(Decision, (*said, best_atom.action, target, False, (), ()))
        if request.dangerous_paths:
            best = strictest(best, self._checks.tool_danger(request, atoms))
        if request.action == "execute" and request.command is not None:
            best = strictest(best, self._checks.dangerous_command(request.command))
        if request.host_paths:
            best = strictest(best, self._checks.host_files(request))
        if request.action == "execute" and not request.isolated:
            best = unboxed(best)
        if best.effect is Effect.ASK:
            best = self._every_ask(first_match, request, best)
        return self._shadowed(best) if self.shadow else best

    def _every_ask(self, first_match: Any, request: Request, decided: Decision) -> Decision:
        """``decided`` (an ASK) naming every part of the call that asks (`every_ask`): one yes
        approves them all, so the question must show them all."""
        danger = None
        if request.dangerous_paths:
            spec = self._checks.tool_spec(request.dangerous_paths)
            danger = partial(self._checks.tool_danger_on, request, spec)
        more: Iterable[Decision] = ()
        command = request.command
        if command is not None and request.action == "execute":
            more = self._checks.dangerous_commands(command)  # every_ask keeps those that ask
        default = (self.default, self._default_reason)
        atoms = speaking(self.atoms(request), first_match, self.extra_spellings(request))
        return every_ask(decided, atoms, first_match, default, danger, more)

    def extra_spellings(self, request: Request) -> frozenset[str]:
        """The spellings of the request's command that only a normal form gives: judged where a
        rule names them, silent otherwise (`CommandLine.extra_spellings`)."""
        if request.action != "execute" or request.command is None:
            return frozenset()
        return self._parse(request.command).extra_spellings()

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
            resolved = path if looks_canonical(path) else canonical(path)
            if private and within(resolved, private):
                continue
            atoms.append(
                _new(Atom, (subject, tool, access, read_only, resolved, fold(resolved), None))
            )
        return atoms

    unanswered = staticmethod(unanswered)  # what an ask nobody can answer becomes

    def command_line(self, command: str) -> CommandLine:
        """``command`` parsed as bash, as this policy judges it (cached)."""
        return self._parse(command)

    def _shadowed(self, decision: Decision) -> Decision:
        if not self.shadow or decision.rule == STATE_RULE:
            return decision
        if decision.effect is Effect.DENY:
            return decision._replace(
                effect=Effect.WARN,
                reason=f"shadow mode: would be denied ({decision.reason})",
                shadow=True,
            )
        return decision._replace(shadow=True)  # an ask keeps every part that asked

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
        return csv_text(self.casbin_lines(), grouping_lines(self.spec.roles))

    def __repr__(self) -> str:
        return f"<Policy {self.source}: {len(self.spec.rules)} rules, default {self.default.value}>"


_new = tuple.__new__
