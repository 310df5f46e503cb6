"""Lasting approvals: a yes that answers an ask before anyone is asked.

An approval (``[[approvals]]`` in the policy file, written by an "always" answer, or kept in
memory by the engine for a "session" answer) matches atoms like a rule: subjects, tools,
actions, and paths or commands. A call the policy would ask about is allowed without asking
when approvals cover **every** part of it that asks: each atom that asks (each spelling of
each command of its line, each path) is matched by an approval, and nothing else asks.

What an approval can never answer: a protected path, a dangerous command, a tool's own
dangerous paths or permission check, a host the command wants to reach, and a command that
would run without isolation (the person answering allowed a boxed command). Those parts are
asked every time; the ask is answered by an approval only when it names none of them. And an
approval never softens a deny: it only ever turns an ask into an allow.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from stockade.policies.call_atom import speaking
from stockade.policies.decision import Decision, Effect
from stockade.policies.policy import Policy
from stockade.policies.policy_file import ApprovalSpec, RuleSpec
from stockade.policies.request import ACCESSES, Request
from stockade.policies.rules import Atom, Rule, compile_rule

Scope = Literal["session", "always"]


@dataclass(frozen=True, slots=True)
class Approval:
    """One approval, compiled: ``spec`` as written, ``rule`` its matcher, ``scope`` whether it
    lives in the policy file (always) or in this engine's memory (session)."""

    spec: ApprovalSpec
    rule: Rule
    scope: Scope

    def covers(self, atom: Atom, closure: frozenset[str]) -> bool:
        """Whether this approval matches ``atom`` (whose subject holds the roles ``closure``)."""
        rule = self.rule
        return (
            (rule.subjects is None or not rule.subjects.isdisjoint(closure))
            and rule.matches_tool(atom.tool)
            and (rule.actions is None or atom.action in rule.actions)
            and (rule.paths is not None or rule.commands is not None or atom.target is None)
            and rule.matches_target(atom)
        )


def compile_approval(spec: ApprovalSpec, scope: Scope) -> Approval:
    """An approval ready to match; a pattern that cannot be compiled is a `PolicyError`."""
    as_rule = RuleSpec(effect="allow", **spec.model_dump(exclude={"reason"}))
    return Approval(spec, compile_rule(as_rule, 0), scope)


class Approvals:
    """The approvals one engine consults: the policy file's, then those of this session."""

    def __init__(self, policy: Policy, session: Iterable[ApprovalSpec] = ()) -> None:
        self._file_rules = frozenset(rule.id for rule in policy.spec.rules)
        self._list = [compile_approval(spec, "always") for spec in policy.spec.approvals]
        self._list += [compile_approval(spec, "session") for spec in session]

    def __iter__(self) -> Iterator[Approval]:
        return iter(self._list)

    def __len__(self) -> int:
        return len(self._list)

    def add(self, spec: ApprovalSpec, scope: Scope) -> Approval:
        """Consult ``spec`` from now on (compiled first: a bad pattern raises, adds nothing)."""
        approval = compile_approval(spec, scope)
        self._list.append(approval)
        return approval

    def taken(self, name: str) -> bool:
        """Whether ``name`` is already the id of a rule or an approval."""
        return name in self._file_rules or any(a.spec.id == name for a in self._list)

    def approve(self, policy: Policy, request: Request, decision: Decision) -> Decision | None:
        """``decision`` (an ask on ``request``) allowed by the approvals that cover every part
        of it that asks, or None when some part is not covered (or cannot be)."""
        found = self.covering(policy, request, decision)
        if not found:
            return None
        first = found[0]
        names = ", ".join(dict.fromkeys(a.spec.id for a in found))
        reason = f"approved ({first.scope}) by {names}"
        if first.spec.reason:
            reason += f": {first.spec.reason}"
        return Decision(
            Effect.ALLOW, first.spec.id, reason, decision.action, decision.target, decision.shadow
        )

    def covering(self, policy: Policy, request: Request, decision: Decision) -> list[Approval]:
        """The approvals that answer ``decision``, one per part that asks; empty when any part
        is not covered, cannot be, or the decision is not an ask."""
        if decision.effect is not Effect.ASK or not self._list:
            return []
        parts = asking_atoms(policy, request, decision, self._file_rules)
        if parts is None:
            return []
        closure = policy.closure(request.subject)
        found: list[Approval] = []
        for atom in parts:
            approval = next((a for a in self._list if a.covers(atom, closure)), None)
            if approval is None:
                return []
            found.append(approval)
        return found


def asking_atoms(
    policy: Policy, request: Request, decision: Decision, file_rules: frozenset[str]
) -> list[Atom] | None:
    """Every atom of ``request`` that asks, or None when the ask cannot be answered by an
    approval at all: a part of it was asked by Stockade's own checks (not a rule of the file,
    nor the default), a command line that cannot be read, or a command run unboxed."""
    if request.action == "execute" and not request.isolated:
        return None
    for part in decision.asks or (decision,):
        if part.rule is not None and part.rule not in file_rules:
            return None  # a protected path, a dangerous command, a tool's own check ...
    first_match = policy.first_match
    atoms = speaking(policy.atoms(request), first_match, policy.extra_spellings(request))
    asking: list[tuple[Atom, str | None]] = []
    for atom in atoms:
        rule = first_match(atom)
        effect = policy.default if rule is None else rule.effect
        if effect is not Effect.ASK:
            continue
        if rule is not None and rule.id not in file_rules:
            return None
        if atom.action == "execute" and atom.command is None:
            return None  # what cannot be read cannot be approved for later
        asking.append((atom, None if rule is None else rule.id))
    # every part of the question must be one of these atoms: a part that is not (a tool's own
    # permission check, whatever rule name it gives) is the tool's question, asked every time
    keys = {(rule_id, atom.action, atom.path) for atom, rule_id in asking}
    for part in decision.asks or (decision,):
        if (part.rule, part.action, part.target if part.action in ACCESSES else None) not in keys:
            return None
    return [atom for atom, _ in asking]
