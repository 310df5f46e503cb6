"""The answer a policy gives about one tool call: an effect, the rule that chose it, and why."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


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
    """

    effect: Effect
    rule: str | None
    reason: str
    action: str | None = None
    target: str | None = None
    shadow: bool = False

    @property
    def allowed(self) -> bool:
        """True when the call may run without asking anyone (allow or warn)."""
        return self.effect is Effect.ALLOW or self.effect is Effect.WARN

    def answered(self, approved: bool, verdict: str) -> Decision:
        """This decision after a person or a program answered it (meant for an ASK): allowed
        when ``approved``, denied otherwise, with ``verdict`` (who answered, and how) added to
        the reason. What it was about (rule, action, target) and the shadow flag are kept, so
        the record still names the rule that asked."""
        return Decision(
            Effect.ALLOW if approved else Effect.DENY,
            self.rule,
            f"{self.reason} — {verdict}",
            self.action,
            self.target,
            self.shadow,
        )

    def explain(self) -> str:
        """A few lines a person can read: the verdict, what it was about, and why."""
        lines = [f"{self.effect.value.upper()}: {self.reason}"]
        if self.action:
            about = f"{self.action} {self.target}" if self.target else f"{self.action} of the tool"
            lines.append(f"  decided on: {about}")
        lines.append(
            f"  rule: {self.rule}" if self.rule else "  rule: none matched (the policy's default)"
        )
        if self.shadow:
            lines.append("  shadow mode: denials are reported as warnings, not enforced")
        return "\n".join(lines)


def strictest(first: Decision, second: Decision | None) -> Decision:
    """Combine two decisions on one call: the more restrictive wins; ties keep ``first``."""
    if second is None or second.effect.severity <= first.effect.severity:
        return first
    return second
