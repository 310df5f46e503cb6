"""Policy tests: the examples a rule carries, and cases files, run against a whole policy.

A rule may list calls with the effect the policy must give each (``examples``, checked when
the policy loads); a cases file (TOML ``[[case]]`` tables) states the same from outside the
policy, optionally naming the rule that must decide. Both become `Case`s, which `run_cases`
decides with the policy as it stands: every rule, the default, the dangerous-path and
dangerous-command checks, shadow mode. An example is a command line, as the ``run_shell``
tool runs it (boxed), or an `ExampleCall`: a tool with the command or paths it would touch.

    [[case]]
    name = "pushing asks"
    call = "git push origin main"
    expect = "ask"
    rule = "ask-push"            # optional: the rule that must decide

    [[case]]
    call = { tool = "write_file", write = ".env" }
    expect = "deny"
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
)

from stockade.policies.array_lines import array_item_line
from stockade.policies.decision import Decision, Effect
from stockade.policies.paths import PathSpellingError, canonical
from stockade.policies.policy_file import (
    EffectName,
    Example,
    ExampleCall,
    PolicyError,
    PolicySpec,
    Problem,
    read_toml,
)
from stockade.policies.request import Access, Request
from stockade.policies.rules import Rule
from stockade.policies.source import SourceMap

EFFECTS: tuple[EffectName, ...] = ("allow", "warn", "ask", "deny")
_PAST = {"allow": "allowed", "warn": "warned about", "ask": "asked", "deny": "denied"}
_ACCESSES: tuple[Access, ...] = ("read", "write", "delete")
SHELL_TOOL = "run_shell"


class ExampleError(PolicyError):
    """An example or case that describes no call a tool could make (a blank command line, a
    path with a NUL byte). ``field`` names the part of the call at fault, when one is."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class CasesError(PolicyError):
    """A cases file that cannot be used: the message names the file, line and key of each
    problem (also in ``problems``)."""


class PolicyLike(Protocol):
    """What running cases needs of a `stockade.policies.Policy` (which checks its examples
    with this module when it loads, so this module does not import it)."""

    @property
    def spec(self) -> PolicySpec: ...
    @property
    def source(self) -> str: ...
    @property
    def _text(self) -> str | None: ...
    @property
    def rules(self) -> Iterable[Rule]: ...
    def decide(self, request: Request) -> Decision: ...


# -- the call an example stands for -------------------------------------------------------------


def example_request(example: Example) -> Request:
    """The request ``example`` stands for. A string is a command line as ``run_shell`` runs it
    (action ``execute``, boxed); an `ExampleCall` calls its tool with its command (``execute``)
    or its paths (``call``), relative paths taken from /workspace. Raises `ExampleError` when
    it describes no call (a blank command line, an empty path, a path with a NUL byte)."""
    if isinstance(example, str):
        return Request("agent", SHELL_TOOL, "execute", (), _command(example), False, (), True)
    paths: list[tuple[str, Access]] = []
    for access in _ACCESSES:
        for path in getattr(example, access):
            try:
                paths.append((canonical(path), access))
            except PathSpellingError as exc:
                raise ExampleError(f"{access} path {path!r}: {exc}", access) from None
    command = None if example.command is None else _command(example.command)
    read_only = example.read_only
    if read_only is None:  # a call that only reads is what a read-only tool makes
        read_only = command is None and bool(example.read) and len(paths) == len(example.read)
    return Request(
        example.subject,
        example.tool,
        "call" if command is None else "execute",
        tuple(paths),
        command,
        read_only,
        (),
        True,  # commands run boxed, as the engine runs them where isolation is available
    )


def _command(line: str) -> str:
    if not line.strip():
        raise ExampleError(
            "the command line is empty; write the command as it would run", "command"
        )
    return line


def describe(example: Example) -> str:
    """``example`` in a few words: the command line quoted, or the tool and what it touches."""
    if isinstance(example, str):
        return repr(example)
    parts = [example.tool]
    if example.subject != "agent":
        parts.append(f"as {example.subject}")
    if example.command is not None:
        parts.append(repr(example.command))
    parts += [f"{a} {', '.join(getattr(example, a))}" for a in _ACCESSES if getattr(example, a)]
    return " ".join(parts)


# -- cases and their results ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Case:
    """One policy test: a call, the effect the policy must give it and, when ``rule`` is set,
    the rule that must decide it. ``source``, ``line`` and ``key`` say where it was written."""

    call: Example
    expect: Effect
    rule: str | None = None
    name: str | None = None
    source: str = "<cases>"
    line: int | None = None
    key: str = "case"

    @property
    def label(self) -> str:
        """How the case is shown: its name, else where it was written."""
        return self.name or self.key


@dataclass(frozen=True, slots=True)
class CaseResult:
    """What the policy said about a case. ``decision`` is None when the case describes no call
    (``message`` says why); ``message`` explains a failure and is empty on a pass."""

    case: Case
    decision: Decision | None
    passed: bool
    message: str = ""


def run_cases(policy: PolicyLike, cases: list[Case]) -> list[CaseResult]:
    """Decide each case's call with ``policy`` and compare with what the case expects."""
    ids = {rule.id for rule in policy.rules}
    results = []
    for case in cases:
        try:
            request = example_request(case.call)
        except ExampleError as exc:
            results.append(CaseResult(case, None, False, str(exc)))
            continue
        decision = policy.decide(request)
        results.append(_compare(case, decision, ids))
    return results


def _compare(case: Case, decision: Decision, ids: set[str]) -> CaseResult:
    effect_ok = decision.effect is case.expect
    rule_ok = case.rule is None or decision.rule == case.rule
    if effect_ok and rule_ok:
        return CaseResult(case, decision, True)
    what = f"{describe(case.call)} is {_PAST[decision.effect.value]}"
    if effect_ok:
        by = "the default" if decision.rule is None else f"rule {decision.rule!r}"
        message = f"{what} by {by}, expected rule {case.rule!r}"
    else:
        why = decision.reason  # the default's reason says it is the default
        if decision.rule is not None:
            said = "" if why == f"rule {decision.rule}" else f": {why}"  # no reason written
            why = f"rule {decision.rule!r}{said}"
        message = f"{what} ({why}), expected {case.expect.value}"
        if not rule_ok:
            message += f" by rule {case.rule!r}"
    if not rule_ok and case.rule not in ids:
        message += f"; the policy has no rule {case.rule!r}"
    return CaseResult(case, decision, False, message)


# -- the examples in a policy's rules ------------------------------------------------------------


def example_cases(policy: PolicyLike) -> list[Case]:
    """The examples of ``policy``'s rules as cases, each naming its line when the policy's text
    is known (``rules.2.examples.deny.0``)."""
    return examples_in(policy.spec, policy._text, policy.source)


def check_examples(policy: PolicyLike) -> list[Problem]:
    """A problem for each example of ``policy``'s rules that the policy does not decide as the
    example says (none, at once, when no rule has examples)."""
    cases = example_cases(policy)
    if not cases:
        return []
    return [
        Problem(r.case.source, r.case.line, r.case.key, r.message)
        for r in run_cases(policy, cases)
        if not r.passed
    ]


def examples_in(spec: PolicySpec, text: str | None, source: str) -> list[Case]:
    """The examples of the rules of ``spec`` as cases; ``text`` (the file's, when known) gives
    their lines, ``source`` names where they come from."""
    if not any(rule.examples for rule in spec.rules):
        return []
    lines = SourceMap(text) if text is not None else None
    cases = []
    for index, rule in enumerate(spec.rules):
        if rule.examples is None:
            continue
        for effect in EFFECTS:
            for item, example in enumerate(getattr(rule.examples, effect)):
                line = None
                if lines is not None and text is not None:
                    line = _example_line(text, lines, index, effect, item)
                key = f"rules.{index}.examples.{effect}.{item}"
                name = f"{rule.id} {effect}.{item}"
                cases.append(Case(example, Effect(effect), None, name, source, line, key))
    return cases


_ARRAY_HEADER = re.compile(r"^\s*\[\[([^\]]+)\]\]")
_HEADER = re.compile(r"^\s*\[([^\]]+)\]")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\s-]+?)\s*=")


def _example_line(text: str, lines: SourceMap, index: int, effect: str, item: int) -> int | None:
    """The line of example ``item`` of ``effect`` in rule ``index``: its own line in an array
    of strings, else its array's (or table's) line, else the rule's."""
    rule_line = lines.line(("rules", index))
    found = lines.line(("rules", index, "examples", effect))
    if found is not None and found != rule_line:  # examples.deny = [...] or examples = {...}
        return array_item_line(text, found, item) or found
    if rule_line is None:
        return None
    # SourceMap does not number the tables under an array's item ([rules.examples],
    # [[rules.examples.deny]]): read the rule's own lines for them
    table = "rule"
    count = 0
    for number, line in enumerate(text.splitlines()[rule_line:], rule_line + 1):
        array = _ARRAY_HEADER.match(line)
        header = array or _HEADER.match(line)
        if header:
            name = re.sub(r"[\s\"']", "", header.group(1))
            if array and name == f"rules.examples.{effect}":
                if count == item:
                    return number
                count += 1
            elif name == "rules" or not name.startswith("rules."):
                break  # the next rule, or another table: this rule has ended
            table = "examples" if name == "rules.examples" else "other"
            continue
        key = _KEY.match(line)
        if key and table == "examples" and re.sub(r"\s", "", key.group(1)) == effect:
            return array_item_line(text, number, item) or number
    return rule_line


# -- cases files ---------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _kind(value: Any) -> str:
    return "line" if isinstance(value, str) else "call"


class _CaseSpec(_Strict):
    name: str | None = Field(default=None, min_length=1)
    # a string is a command line, anything else must be a call's table: one message, not two
    call: Annotated[
        Annotated[str, Tag("line")] | Annotated[ExampleCall, Tag("call")], Discriminator(_kind)
    ]
    expect: EffectName
    rule: str | None = Field(default=None, min_length=1)


class _CasesFile(_Strict):
    case: list[_CaseSpec] = Field(default_factory=list)


def load_cases(path: str | Path) -> list[Case]:
    """The cases of a TOML cases file (``[[case]]`` tables with ``call``, ``expect`` and
    optional ``rule`` and ``name``). Raises `CasesError` naming the file, line and key."""
    path = Path(path)
    source = str(path)
    data, text = read_toml(path, "cases file", CasesError)
    lines = SourceMap(text)
    try:
        specs = _CasesFile.model_validate(data).case
    except ValidationError as exc:
        raise CasesError("invalid cases file", _problems(exc, source, lines)) from None
    if not specs:
        problem = Problem(source, None, "case", "no [[case]] tables; add one per call to test")
        raise CasesError("invalid cases file", [problem])
    cases = []
    problems = []
    for index, spec in enumerate(specs):
        where = ("case", index)
        try:
            example_request(spec.call)
        except ExampleError as exc:
            part = exc.field if exc.field and not isinstance(spec.call, str) else None
            location = (*where, "call") if part is None else (*where, "call", part)
            problems.append(Problem(source, lines.line(location), _dotted(location), str(exc)))
            continue
        line = lines.line(where)
        key = _dotted(where)
        cases.append(Case(spec.call, Effect(spec.expect), spec.rule, spec.name, source, line, key))
    if problems:
        raise CasesError("invalid cases file", problems)
    return cases


_KEYS = {
    1: "a cases file holds [[case]] tables",
    3: "a case has call, expect, rule and name",
    0: "a call has tool, subject, command, read, write, delete and read_only",
}


def _problems(exc: ValidationError, source: str, lines: SourceMap) -> list[Problem]:
    problems = []
    for err in exc.errors(include_url=False):
        location = tuple(err["loc"])
        if location[2:3] == ("call",) and location[3:4] in (("line",), ("call",)):
            location = location[:3] + location[4:]  # the tag of the call's kind: not a key
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown key; " + _KEYS.get(len(location), _KEYS[0])
        elif err["type"] == "missing":
            message = "missing; every case needs call and expect"
        elif err["type"] == "list_type" and location[-1:] in (("read",), ("write",), ("delete",)):
            message = "give a path, or a list of paths"
        elif err["type"] == "literal_error" and location[-1:] == ("expect",):
            message = "unknown effect; use allow, warn, ask or deny"
        elif err["type"] == "model_type" and location[2:] == ("call",):
            message = 'give a command line, or a table such as { tool = "write_file", write = "a" }'
        elif err["type"] in ("model_type", "list_type") and len(location) <= 2:
            message = "write each case as a [[case]] table"
        problems.append(Problem(source, lines.line(location), _dotted(location), message))
    return problems


def _dotted(location: tuple[str | int, ...]) -> str:
    return ".".join(str(part) for part in location) or "(file)"
