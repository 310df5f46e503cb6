"""How many calls may be in flight at once: the caps that apply to one tool and one subject."""

from __future__ import annotations

from dataclasses import dataclass

from stockade.policies.globs import NamePattern
from stockade.policies.policy_file import LimitsSpec
from stockade.policies.rules import role_closure

_MAX_REMEMBERED = 4096


@dataclass(frozen=True, slots=True)
class CallLimits:
    """The concurrency limits that apply to one tool called by one subject."""

    global_cap: int | None
    tool_cap: int | None
    subject_cap: int | None
    exclusive: bool


class Limits:
    """A policy's ``[limits]``, looked up per (tool, subject) and remembered."""

    def __init__(self, spec: LimitsSpec, roles: dict[str, list[str]]) -> None:
        self.spec = spec
        self._roles = roles
        self._found: dict[tuple[str, str], CallLimits] = {}

    def for_call(self, tool: str, subject: str) -> CallLimits:
        """The limits for ``tool`` called by ``subject``. Where several patterns match, the
        smallest cap applies."""
        key = (tool, subject)
        found = self._found.get(key)
        if found is None:
            spec = self.spec
            closure = role_closure(subject, self._roles) | {"*"}
            tool_caps = [c for p, c in spec.per_tool.items() if NamePattern(p).match(tool)]
            subject_caps = [c for s, c in spec.per_subject.items() if s in closure]
            found = CallLimits(
                global_cap=spec.max_in_flight,
                tool_cap=min(tool_caps) if tool_caps else None,
                subject_cap=min(subject_caps) if subject_caps else None,
                exclusive=any(NamePattern(p).match(tool) for p in spec.exclusive),
            )
            # bounded: subjects and tools come from callers, and need not be few
            if len(self._found) < _MAX_REMEMBERED:
                self._found[key] = found
        return found

    @property
    def configured(self) -> bool:
        """Whether any concurrency limit is set."""
        spec = self.spec
        return bool(spec.max_in_flight or spec.per_tool or spec.per_subject or spec.exclusive)
