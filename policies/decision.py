"""The answer a policy gives about one tool call: an effect, the rule that chose it, and why."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict on one call. ``rule`` is the id of the rule that decided, if any."""

    effect: Effect
    rule: str | None
    reason: str

    @property
    def allowed(self) -> bool:
        """True when the call may run without asking anyone (allow or warn)."""
        return self.effect is Effect.ALLOW or self.effect is Effect.WARN


def strictest(first: Decision, second: Decision | None) -> Decision:
    """Combine two decisions on one call: the more restrictive wins; ties keep ``first``."""
    if second is None or second.effect.severity <= first.effect.severity:
        return first
    return second
