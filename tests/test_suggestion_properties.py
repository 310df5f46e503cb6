"""Suggested rules, as properties over many calls.

For every call that asks: each suggestion, once approved, answers that very call; none is
offered when the call asks about a protected path or a dangerous command; no approval made
from a suggestion ever answers such a call later, nor softens anything but an ask; and no
suggestion is broader than the kind of call it was made for (its program, and its subcommand
when it has one; for paths, the files or their own folders).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.policies import Effect, Policy, Request, suggest
from stockade.policies.approvals import Approvals
from stockade.policies.globs import path_spec

POLICIES = {
    "default": Policy.preset("default"),
    "ask": Policy.from_dict(
        {
            "default": "ask",
            "dangerous_commands": {"effect": "ask"},
            "rules": [
                {"id": "reads", "effect": "allow", "actions": ["read"], "paths": ["src/**"]},
                {"id": "ask-push", "effect": "ask", "commands": ["git push *"]},
            ],
        }
    ),
}

PROGRAMS = ["git", "npm", "ls", "/usr/bin/ls", "rm", "sudo", "pytest", "curl"]
WORDS = ["push", "run", "test:unit", "-rf", "-x", "/", "src/a.py", "origin", "main", "*", "[x]"]
commands = st.builds(
    lambda program, words: " ".join([program, *words]),
    st.sampled_from(PROGRAMS),
    st.lists(st.sampled_from(WORDS), max_size=4),
)
lines = st.lists(commands, min_size=1, max_size=3).map(" && ".join)
segments = st.sampled_from(["src", "docs", ".env", ".git", "a*b", "q?", "[x]", "notes.md", "x"])
paths = st.lists(segments, min_size=1, max_size=4).map(lambda s: "/workspace/" + "/".join(s))
accesses = st.sampled_from(["read", "write", "delete"])


def run(line: str) -> Request:
    return Request("agent", "run_shell", "execute", command=line, isolated=True)


def touch(path: str, access: str) -> Request:
    return Request("agent", "some_tool", paths=[(path, access)])  # type: ignore[list-item]


requests = st.one_of(
    lines.map(run), st.builds(touch, paths, accesses), st.just(Request("agent", "deploy"))
)
fast = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def dangerous(policy: Policy, request: Request) -> bool:
    decision = policy.decide(request)
    parts = decision.asks or (decision,)
    return any(str(part.rule).startswith("dangerous-") for part in parts)


@fast
@given(name=st.sampled_from(sorted(POLICIES)), request=requests)
def test_each_suggestion_answers_the_call_it_was_made_for(name: str, request: Request) -> None:
    policy = POLICIES[name]
    decision = policy.decide(request)
    offered = suggest(policy, request, decision)
    if decision.effect is not Effect.ASK:
        assert offered == ()
        return
    if dangerous(policy, request):
        assert offered == ()  # a protected path or a dangerous command: asked every time
    for suggestion in offered:
        approved = Approvals(policy, suggestion.approvals).approve(policy, request, decision)
        assert approved is not None
        assert approved.effect is Effect.ALLOW


@fast
@given(name=st.sampled_from(sorted(POLICIES)), first=requests, later=requests)
def test_an_approval_never_answers_danger_nor_softens_a_deny(
    name: str, first: Request, later: Request
) -> None:
    policy = POLICIES[name]
    for suggestion in suggest(policy, first, policy.decide(first)):
        approvals = Approvals(policy, suggestion.approvals)
        decided = policy.decide(later)
        approved = approvals.approve(policy, later, decided)
        if approved is None:
            continue
        assert decided.effect is Effect.ASK  # only an ask is ever answered
        assert not dangerous(policy, later)


@fast
@given(name=st.sampled_from(sorted(POLICIES)), line=lines)
def test_no_command_suggestion_is_broader_than_its_program_and_subcommand(
    name: str, line: str
) -> None:
    policy = POLICIES[name]
    request = run(line)
    programs = {command.split(" ")[0] for command in line.split(" && ")}
    programs |= {p.rsplit("/", 1)[-1] for p in programs}
    for suggestion in suggest(policy, request, policy.decide(request)):
        for approval in suggestion.approvals:
            assert approval.tools == ["run_shell"]
            assert approval.subjects == ["agent"]
            for pattern in approval.commands:
                words = pattern.split(" ")
                assert words[0] in programs  # never "*" alone, never another program
                if pattern.endswith(" *"):
                    kept = len(words) > 2  # a word besides the program and the star
                    assert any(
                        words[0] in (said[0], said[0].rsplit("/", 1)[-1])
                        and (kept or not _has_subcommand(said))
                        for said in (c.split(" ") for c in line.split(" && "))
                    ), f"{pattern!r} drops the subcommand of every {words[0]!r} in {line!r}"


def _has_subcommand(words: list[str]) -> bool:
    return len(words) > 1 and not words[1].startswith("-") and "/" not in words[1]


@fast
@given(path=paths, access=accesses)
def test_a_file_suggestion_is_that_file_and_a_folder_one_its_own_folder(
    path: str, access: str
) -> None:
    policy = POLICIES["ask"]
    request = touch(path, access)
    for suggestion in suggest(policy, request, policy.decide(request)):
        for approval in suggestion.approvals:
            if not approval.paths:
                assert approval.actions == ["call"]  # the call itself, its paths judged
                continue
            assert approval.actions == [access]
            spec = path_spec(approval.paths)
            assert spec.match(path, path)
            sibling = path.rsplit("/", 1)[0] + "/sibling-file"
            outside = (
                "/workspace/elsewhere/x" if not path.startswith("/workspace/elsewhere") else ""
            )
            if suggestion.kind == "file":
                assert not spec.match(sibling, sibling)
            else:
                assert spec.match(sibling, sibling)
            if outside and path.count("/") > 2:
                assert not spec.match(outside, outside)
