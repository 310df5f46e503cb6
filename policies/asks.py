"""Every part of a call that asks: the question an "ask" puts must name them all.

A call is decided by its strictest atom, and one yes approves the whole call. So when the
decision asks, every other atom that asks too (a file a redirection writes beside a command
that asks, a second protected path, a path the tool itself declares dangerous) and each
dangerous command that asks are gathered into `Decision.asks` and named in its reason. This
runs only for a decision that asks (and is cached with it): other decisions never pay for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from stockade.policies.checks import UNBOXED_NOTE
from stockade.policies.decision import Decision, Effect
from stockade.policies.rules import Atom, Rule

FirstMatch = Callable[[Atom], "Rule | None"]
"""The winning rule for an atom (the compiled lookup or casbin's), None for the default."""

AtomDanger = Callable[[Atom], "Decision | None"]
"""What the tool's own dangerous paths say about an atom, None when they say nothing."""

_new = tuple.__new__  # the named tuple without its keyword handling, as the policy builds it


def every_ask(
    decided: Decision,
    atoms: Iterable[Atom],
    first_match: FirstMatch,
    default: tuple[Effect, str],
    danger: AtomDanger | None = None,
    more: Iterable[Decision] = (),
) -> Decision:
    """``decided`` (an ASK) naming every part of its call that asks (see `Decision.asks`):
    each atom by its first-matching rule (``default``, the policy's effect and reason, when
    none matches), else by ``danger``; and each of ``more`` that asks (the line's dangerous
    commands). ``decided`` comes back as it is when it is the only part that asks."""
    parts = [
        part
        for atom in atoms
        if (part := _atom_ask(atom, first_match, default, danger)) is not None
    ]
    parts.extend(part for part in more if part.effect is Effect.ASK)
    return _dangerous_first(decided.with_asks(parts) if len(parts) > 1 else decided)


def _dangerous_first(decision: Decision) -> Decision:
    """``decision`` led by a protected path or dangerous command that asks, if one does: the
    person answering must read first what matters most, not "no rule matched"."""
    asks = decision.asks
    if not asks or _dangerous(asks[0]):
        return decision
    first = next((part for part in asks if _dangerous(part)), None)
    if first is None:
        return decision
    # a note on the whole call (it would run unboxed) stays on the question's first line
    note = UNBOXED_NOTE if UNBOXED_NOTE in decision.reason else ""
    rest = [
        part._replace(reason=part.reason.replace(note, "")) if note else part
        for part in asks
        if part is not first
    ]
    lead = first._replace(shadow=decision.shadow, reason=first.reason + note)
    return lead.with_asks(rest)


def _dangerous(decision: Decision) -> bool:
    return decision.rule is not None and decision.rule.startswith("dangerous-")


def _atom_ask(
    atom: Atom,
    first_match: FirstMatch,
    default: tuple[Effect, str],
    danger: AtomDanger | None,
) -> Decision | None:
    """What one atom alone asks, if it asks: its rule (or the default) first, then the tool's
    dangerous paths, as the call itself is decided (on a tie the rule is named)."""
    rule = first_match(atom)
    effect, reason = default if rule is None else (rule.effect, rule.reason)
    if effect is Effect.ASK:
        rule_id = None if rule is None else rule.id
        return _new(Decision, (effect, rule_id, reason, atom.action, atom.target, False, (), ()))
    if danger is None or effect is Effect.DENY:
        return None
    found = danger(atom)
    return found if found is not None and found.effect is Effect.ASK else None


def unanswered(decision: Decision) -> Decision:
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
            suggestions=(),  # nobody answers: nothing to offer
        )
    return decision._replace(
        effect=Effect.DENY,
        reason=f"{decision.reason} — approval needed, and no approver is configured",
        suggestions=(),
    )
