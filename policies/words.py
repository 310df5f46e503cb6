"""A shell word as the command judge sees it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word: its text after unquoting, and whether that text is only known at run
    time (an expansion, a substitution: ``dynamic``) or is a pattern the shell would expand (an
    unquoted glob or brace: ``pattern``). Either way it is kept as written."""

    text: str
    dynamic: bool = False
    pattern: bool = False

    @property
    def static(self) -> bool:
        """Whether the text is exactly what the program will receive."""
        return not self.dynamic and not self.pattern
