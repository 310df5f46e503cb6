"""Suggested rules and lasting approvals: what an approver may answer, and what it leaves.

For a call that asks, the approver sees the rules that would allow it next time, narrowest
first (`Decision.suggestions`). It answers no, yes once, yes for this session (kept in the
engine's memory: a new engine forgets it) or yes always (appended to the policy file, which
still loads and lints clean, and holds for every engine loaded from it). Protected paths and
dangerous commands are never offered for longer. Everything is real: engine, policy file,
audit log on disk.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stockade.engine import (
    Approve,
    AuditLog,
    Engine,
    ToolBase,
    ToolCall,
    ToolContext,
    Toolkit,
    tool,
)
from stockade.policies import Decision, Effect, Policy, PolicyError, Request, lint_policy
from stockade.policies.suggestions import suggest

POLICY = """\
version = 1
default = "ask"

[[rules]]
id = "read-src"
effect = "allow"
actions = ["read"]
paths = ["src/**"]
"""


class Asker:
    """An approver that answers from a script and remembers each question."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.questions: list[Decision] = []

    def __call__(self, call: ToolCall, decision: Decision) -> Any:
        self.questions.append(decision)
        return self.answers.pop(0) if self.answers else False


@tool(paths={"path": "write"})
def save(path: str, text: str) -> str:
    """Pretend to save ``text`` at ``path``."""
    return f"saved {path}"


@tool
def deploy_tool(target: str) -> str:
    """Pretend to deploy."""
    return f"deployed {target}"


def toolkit() -> Toolkit:
    kit = Toolkit()
    kit.add(save)
    kit.add(deploy_tool, name="deploy")
    return kit


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "stockade.toml"
    path.write_text(POLICY)
    return path


def engine(policy_file: Path, approver: Asker, audit: AuditLog | None = None) -> Engine:
    return Engine(toolkit(), policy=Policy.load(policy_file), approver=approver, audit=audit)


def deploy(target: str = "staging") -> ToolCall:
    return ToolCall(name="deploy", arguments={"target": target})


def test_the_approver_sees_suggestions_narrowest_first(policy_file: Path) -> None:
    asker = Asker(True)
    result = asyncio.run(engine(policy_file, asker).call(deploy()))
    assert result.status == "ok"
    (question,) = asker.questions
    assert [s.summary for s in question.suggestions] == ["calling deploy"]
    assert question.suggestions[0].approvals[0].tools == ["deploy"]


def test_once_asks_again_and_session_does_not(policy_file: Path) -> None:
    asker = Asker(True, Approve("session"))
    eng = engine(policy_file, asker)

    async def three() -> list[str]:
        return [(await eng.call(deploy(t))).status for t in ("a", "b", "c")]

    assert asyncio.run(three()) == ["ok", "ok", "ok"]
    assert len(asker.questions) == 2  # once, then session: the third is not asked
    # a new engine forgets the session
    again = Asker(False)
    assert asyncio.run(engine(policy_file, again).call(deploy())).status == "denied"
    assert len(again.questions) == 1
    assert policy_file.read_text() == POLICY  # a session answer writes nothing


def test_always_is_appended_to_the_file_and_holds_after_a_reload(
    policy_file: Path, tmp_path: Path
) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    asker = Asker("always")
    result = asyncio.run(engine(policy_file, asker, audit).call(deploy()))
    assert result.status == "ok"
    text = policy_file.read_text()
    assert text.startswith(POLICY)
    assert "# Approved always on " in text
    assert "[[approvals]]" in text
    assert 'tools = ["deploy"]' in text
    # the file still loads and lints clean (no error and no warning)
    assert not [f for f in lint_policy(policy_file) if f.severity != "info"]
    reloaded = Policy.load(policy_file)
    assert [a.id for a in reloaded.spec.approvals] == ["approved-1"]
    # a new engine loaded from the file is not asked again
    nobody = Asker()
    assert asyncio.run(engine(policy_file, nobody).call(deploy("prod"))).status == "ok"
    assert nobody.questions == []
    # the answer is in the audit log
    audit.close()
    outcomes = [
        json.loads(line)
        for line in (tmp_path / "audit.jsonl").read_text().splitlines()
        if '"outcome"' in line
    ]
    assert outcomes[-1]["approval"] == "approved"
    assert outcomes[-1]["approval_scope"] == "always"


def test_a_chosen_suggestion_is_the_one_kept(policy_file: Path) -> None:
    asker = Asker()
    eng = engine(policy_file, asker)

    def choose(call: ToolCall, decision: Decision) -> Approve:
        asker.questions.append(decision)
        folder = next(s for s in decision.suggestions if s.kind == "folder")
        return Approve("session", folder)

    eng.approver = choose
    first = asyncio.run(
        eng.call(ToolCall(name="save", arguments={"path": "docs/a.md", "text": ""}))
    )
    assert first.status == "ok"
    kinds = [s.kind for s in asker.questions[0].suggestions]
    assert kinds == ["file", "folder"]
    eng.approver = Asker()  # nobody answers now: only the kept folder rule can allow

    async def more() -> list[str]:
        return [
            (await eng.call(ToolCall(name="save", arguments={"path": p, "text": ""}))).status
            for p in ("docs/b.md", "other/c.md")
        ]

    assert asyncio.run(more()) == ["ok", "denied"]


def test_always_without_a_policy_file_keeps_it_for_the_session_and_says_so() -> None:
    eng = Engine(toolkit(), policy=Policy.from_dict({"default": "ask"}), approver=Asker("always"))
    result = asyncio.run(eng.call(deploy()))
    assert result.status == "ok"
    assert any("not loaded from a file" in w for w in result.metadata["warnings"])
    assert result.metadata["approval_scope"] == "session"


def test_a_protected_path_is_never_offered_for_longer(policy_file: Path) -> None:
    asker = Asker("always")
    eng = engine(policy_file, asker)
    result = asyncio.run(eng.call(ToolCall(name="save", arguments={"path": ".env", "text": "x"})))
    assert result.status == "ok"  # approved once: the approver said yes
    assert asker.questions[0].suggestions == ()
    assert result.metadata["approval_scope"] == "once"
    assert "[[approvals]]" not in policy_file.read_text()
    # and it is asked again
    asyncio.run(eng.call(ToolCall(name="save", arguments={"path": ".env", "text": "y"})))
    assert len(asker.questions) == 2


def test_an_approval_never_softens_a_deny(policy_file: Path) -> None:
    text = POLICY + '\n[[approvals]]\nid = "all"\ntools = ["*"]\n'
    text += '\n[[rules]]\nid = "no-deploy"\neffect = "deny"\ntools = ["deploy"]\n'
    policy_file.write_text(text)
    assert asyncio.run(engine(policy_file, Asker(True)).call(deploy())).status == "denied"


def test_suggestions_for_commands_are_exact_then_prefixes() -> None:
    policy = Policy.preset("default")
    request = Request("agent", "run_shell", "execute", command="npm run test:unit", isolated=True)
    decision = policy.decide(request)
    assert decision.effect is Effect.ASK
    shown = [(s.kind, s.approvals[0].commands) for s in suggest(policy, request, decision)]
    assert shown[0] == ("command", ["npm run test:unit"])
    assert ("prefix", ["npm run test:unit *"]) in shown
    assert shown[-1] == ("prefix", ["npm run *"])


def test_a_dangerous_command_gets_no_suggestion() -> None:
    policy = Policy.from_dict({"dangerous_commands": {"effect": "ask"}})
    request = Request("agent", "run_shell", "execute", command="rm -rf /", isolated=True)
    decision = policy.decide(request)
    assert decision.effect is Effect.ASK
    assert suggest(policy, request, decision) == ()


class _ConfirmArgs(BaseModel):
    target: str


class Confirm(ToolBase):
    """A tool whose own check asks every time, under a rule name it chooses (None here)."""

    name = "confirm"
    args_model = _ConfirmArgs

    def check_permissions(self, args: dict[str, Any], ctx: ToolContext) -> Decision:
        return Decision(Effect.ASK, None, "the tool asks for itself")

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return "done"


def test_a_tools_own_question_is_asked_every_time(policy_file: Path) -> None:
    """A session answer keeps what the policy asked (calling the tool), never the tool's own
    check, even when that check gives no rule name, as the policy's default does."""
    kit = Toolkit()
    kit.add(Confirm())
    asker = Asker(Approve("session"), True)
    eng = Engine(kit, policy=Policy.load(policy_file), approver=asker)

    async def twice() -> list[str]:
        call = ToolCall(name="confirm", arguments={"target": "x"})
        return [(await eng.call(call)).status, (await eng.call(call)).status]

    assert asyncio.run(twice()) == ["ok", "ok"]
    assert len(asker.questions) == 2  # the second was asked again
    assert asker.questions[0].suggestions == ()  # and nothing was offered for longer


@pytest.mark.parametrize(
    ("command", "never"),
    [
        ("python3 -c 'print(1 + 1)'", None),  # a word with a space: spelled like two words
        ("find . -name 'x -delete'", None),
        ("python3 -c pass", "python3 *"),  # an interpreter: never any program at all
        ("bash", "bash *"),
    ],
)
def test_no_suggestion_says_more_than_the_command(command: str, never: str | None) -> None:
    policy = Policy.from_dict({"default": "ask"})
    request = Request("agent", "run_shell", "execute", command=command, isolated=True)
    offered = suggest(policy, request, policy.decide(request))
    patterns = [p for s in offered for a in s.approvals for p in a.commands]
    if never is None:
        assert offered == ()
    else:
        assert offered  # the exact command at least
        assert never not in patterns


@pytest.mark.parametrize(
    ("request_", "offered"),
    [
        (Request("*", "deploy"), False),  # "*" would be every subject
        (Request("a,b", "deploy"), False),  # a name no rule can hold
        (Request("agent", "save", paths=[("/workspace/!x", "write")]), True),
        (Request("agent", "save", paths=[("/top", "write")]), True),
    ],
)
def test_odd_subjects_and_paths_never_break_a_question(request_: Request, offered: bool) -> None:
    policy = Policy.from_dict({"default": "ask"})
    found = suggest(policy, request_, policy.decide(request_))
    assert bool(found) is offered
    for suggestion in found:
        for approval in suggestion.approvals:
            assert "/**" not in approval.paths  # never everything
            assert not any(p.startswith("!") for p in approval.paths)


def test_an_approval_that_cannot_compile_stops_the_load_and_a_broad_one_is_linted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stockade.toml"
    path.write_text(POLICY + '\n[[approvals]]\nid = "bad"\npaths = ["!x"]\n')
    with pytest.raises(PolicyError) as caught:
        Policy.load(path)
    assert "approvals.0.paths" in str(caught.value)
    path.write_text(POLICY + '\n[[approvals]]\nid = "all"\ncommands = ["*"]\n')
    found = [f for f in lint_policy(path) if f.key == "approvals.0"]
    assert [f.severity for f in found] == ["warning"]
    assert found[0].line == 10  # its [[approvals]] line


def test_two_writers_at_once_both_keep_theirs_and_a_planted_link_is_not_followed(
    policy_file: Path, tmp_path: Path
) -> None:
    import os
    import threading

    from stockade.engine.pipeline._approval_file import append_approvals

    outside = tmp_path / "outside.txt"
    outside.write_text("untouched")
    planted = policy_file.with_name(f".{policy_file.name}.{os.getpid()}.approval")
    planted.symlink_to(outside)  # where an older writer would have written
    policy = Policy.load(policy_file)
    offers = []
    for name in ("one", "two"):
        request = Request("agent", name)
        offers.append(suggest(policy, request, policy.decide(request))[0])
    writers = [
        threading.Thread(
            target=append_approvals,
            args=(policy_file, offer.named([f"approved-{i}"]), "test", f"writer {i}"),
        )
        for i, offer in enumerate(offers)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    kept = Policy.load(policy_file)
    assert sorted(a.id for a in kept.spec.approvals) == ["approved-0", "approved-1"]
    assert outside.read_text() == "untouched"


def test_an_approval_that_cannot_be_written_leaves_the_file_as_it_was(policy_file: Path) -> None:
    from stockade.engine.pipeline._approval_file import append_approvals

    policy = Policy.load(policy_file)
    request = Request("agent", "deploy")
    offer = suggest(policy, request, policy.decide(request))[0].named(["approved-1"])
    for reason, comment in (("\udcff", "fine"), ("fine", "a \x07 bell"), ("fine", "\udcff")):
        with pytest.raises(PolicyError):
            append_approvals(policy_file, offer, reason, comment)
        assert policy_file.read_text() == POLICY
