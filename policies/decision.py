"""The answer a policy gives about one tool call: an effect, the rule that chose it, and why."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, NamedTuple


class Effect(StrEnum):
    """What happens to a call. Ordered from least to most restrictive."""

    ALLOW = "allow"
    WARN = "warn"
    ASK = "ask"
    DENY = "deny"

    @property
    def severity(self) -> int:
        """Rank used to combine decisions: deny > ask > warn > allow."""
        return _SEVERITY[self]


_SEVERITY = {Effect.ALLOW: 0, Effect.WARN: 1, Effect.ASK: 2, Effect.DENY: 3}


class Decision(NamedTuple):
    """A verdict on one call (an immutable named tuple: cheap to build, safe to share).

    ``rule`` is the id of the rule that decided (None when the policy's default did);
    ``action`` and ``target`` say which part of the call decided it (the call itself, a path
    and how it is used, or a command); ``shadow`` is set on every decision of a policy in shadow
    mode, where a would-be denial is reported as a warning instead of enforced.

    ``asks`` is set on an ASK when more than one part of the call asked (the call, a command, a
    path, a redirection's file, a tool's own check): every one of them, the one the decision
    reports first, and its ``reason`` names them all (``running a command needs approval
    (execute ls); also asks: write /workspace/.git/hooks/pre-commit (rule dangerous-path:
    ...)``). One yes approves the whole call, so whoever answers must see each thing it
    approves, not only the first.

    ``suggestions`` are set on an ASK put to an approver: the lasting approvals that would
    allow this call next time, narrowest first (`stockade.policies.suggestions`); empty when
    nothing may be approved for longer (a protected path, a dangerous command).
    """

    effect: Effect
    rule: str | None
    reason: str
    action: str | None = None
    target: str | None = None
    shadow: bool = False
    asks: tuple[Decision, ...] = ()
    suggestions: tuple[Any, ...] = ()  # of `stockade.policies.Suggestion` (it imports this)

    @property
    def allowed(self) -> bool:
        """True when the call may run without asking anyone (allow or warn)."""
        return self.effect is Effect.ALLOW or self.effect is Effect.WARN

    def answered(self, approved: bool, verdict: str) -> Decision:
        """This decision after a person or a program answered it (meant for an ASK): allowed
        when ``approved``, denied otherwise, with ``verdict`` (who answered, and how) added to
        the reason. What it was about (rule, action, target, every ask) and the shadow flag are
        kept, so the record still names the rule that asked and everything the answer covered."""
        return Decision(
            Effect.ALLOW if approved else Effect.DENY,
            self.rule,
            f"{self.reason} — {verdict}",
            self.action,
            self.target,
            self.shadow,
            self.asks,
        )  # (without suggestions: the question is answered)

    def with_asks(self, parts: Iterable[Decision]) -> Decision:
        """This ASK, naming every part of its call that asked too: ``asks`` holds this one
        (first) and each of ``parts`` that asks (once each: a rule asking about several
        spellings of one command line asks once), and the reason names the others. When only
        one part asked, this decision comes back as it is."""
        own = self.asks[0] if self.asks else self
        found = {own.ask_key: own}
        # a part that itself names several asks (an earlier combination) gives each of them
        given = (each for part in parts for each in (part.asks or (part,)))
        for part in (*self.asks[1:], *given):
            if part.effect is Effect.ASK:
                found.setdefault(part.ask_key, part)
        if len(found) < 2:
            return self
        asks = tuple(found.values())
        also = "; ".join(part.brief() for part in asks[1:])
        return self._replace(reason=f"{own.reason} ({own.about}); also asks: {also}", asks=asks)

    @property
    def ask_key(self) -> tuple[str | None, str | None, str | None]:
        """What makes two asks the same question: the rule, the action, and the path (a command
        line's spellings are one question per rule: the person sees the whole line)."""
        on_path = self.action in _PATH_ACTIONS
        return (self.rule, self.action, self.target if on_path else None)

    @property
    def about(self) -> str:
        """The part of the call this decision is about: ``write /workspace/.env``,
        ``execute git push``, ``call of the tool``."""
        if not self.action:
            return "the call"
        return f"{self.action} {self.target}" if self.target else f"{self.action} of the tool"

    def brief(self) -> str:
        """One line: what it is about, the rule, and why (``write /workspace/.env (rule
        dangerous-path: a protected path ...)``)."""
        rule = f"rule {self.rule}" if self.rule else "the policy's default"
        return f"{self.about} ({rule}: {self.reason})"

    def explain(self) -> str:
        """A few lines a person can read: the verdict, what it was about, and why; each ask on
        a line of its own when several parts of the call asked."""
        lines = [f"{self.effect.value.upper()}: {self.reason}"]
        if self.action:
            lines.append(f"  decided on: {self.about}")
        lines.append(
            f"  rule: {self.rule}" if self.rule else "  rule: none matched (the policy's default)"
        )
        if self.asks:
            lines.append(f"  asks ({len(self.asks)}, one answer for all):")
            lines.extend(f"    - {part.brief()}" for part in self.asks)
        if self.shadow:
            lines.append("  shadow mode: denials are reported as warnings, not enforced")
        return "\n".join(lines)


_PATH_ACTIONS = frozenset({"read", "write", "delete"})


def strictest(first: Decision, second: Decision | None) -> Decision:
    """Combine two decisions on one call: the more restrictive wins; ties keep ``first``."""
    if second is None or second.effect.severity <= first.effect.severity:
        return first
    return second
