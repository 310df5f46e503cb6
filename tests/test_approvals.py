"""Approvals name every part of a call that asks: one yes never approves more than was shown.

A call's decision is the strictest of its parts (the call, each command of its line, each path
it names, each file a redirection opens, the tool's own dangerous paths and permission check).
When several of them ask, the approver (a program's callback, `stockade run --approve ask`, an
MCP client's elicitation) gets every one, each with its rule, action and target, and the reason
every approver shows names them all: approving a command must not approve, unseen, a write to
a git hook on the same line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from pydantic import BaseModel
from support import stockade_cli

from stockade.engine import Engine, ToolBase, ToolCall, ToolContext, Toolkit, tool
from stockade.engine.builtin.files import add_file_tools
from stockade.engine.builtin.shell import add_shell_tools
from stockade.engine.mcp.server import McpService
from stockade.policies import Decision, Effect, Policy, Request
from stockade.policies.request import Access
from stockade.sandbox import VirtualFS

HOOK = "/workspace/.git/hooks/pre-commit"
DOTENV = "/workspace/.env"
PROTECTED = "a protected path"  # the dangerous-path rule's reason, as it begins

Ask = tuple[str | None, str | None, str | None]  # rule, action, target


# -- tools of a program's own ---------------------------------------------------------------


@tool(command="command", paths={"report": "write"}, dangerous_paths=("reports/",))
def build(command: str, report: str) -> str:
    """Run a build command and write its report (refused in these tests before it runs)."""
    raise AssertionError("a refused call must not run")


class _PublishArgs(BaseModel):
    path: str


class Publish(ToolBase):
    """Send a file to the world: the tool's own check asks, whatever the policy says."""

    name = "publish"
    args_model = _PublishArgs
    paths = {"path": "read"}  # noqa: RUF012 - a ToolSpec attribute, read once

    def check_permissions(self, args: dict[str, Any], ctx: ToolContext) -> Decision:
        return Decision(Effect.ASK, "publish-asks", "publishing sends the file to the world")

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        raise AssertionError("a refused call must not run")


def toolkit() -> Toolkit:
    kit = Toolkit()
    add_file_tools(kit)
    add_shell_tools(kit)
    kit.add(build)
    kit.add(Publish())
    return kit


@pytest.fixture
def project(workspace: Path) -> Path:
    """A workspace with a git folder and a credentials file: what the calls below reach for."""
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".env").write_text("KEY=secret\n")
    return workspace


class Recorder:
    """An approver that keeps what it was asked and answers ``answer``."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[Decision] = []

    def __call__(self, call: ToolCall, decision: Decision) -> bool:
        self.asked.append(decision)
        return self.answer


def asks_of(decision: Decision) -> set[Ask]:
    return {(a.rule, a.action, a.target) for a in decision.asks}


# -- every ask reaches the approver ---------------------------------------------------------

CASES: list[tuple[str, dict[str, Any], set[Ask]]] = [
    (
        "run_shell",
        {"command": "ls; echo id > .git/hooks/pre-commit"},
        {("commands-ask", "execute", "ls"), ("dangerous-path", "write", HOOK)},
    ),
    (
        "run_shell",
        {"command": "cat < .env"},
        {("commands-ask", "execute", "cat"), ("dangerous-path", "read", DOTENV)},
    ),
    (
        "move_file",
        {"source": ".env", "destination": ".git/hooks/x"},
        {
            ("dangerous-path", "delete", DOTENV),
            ("dangerous-path", "write", "/workspace/.git/hooks/x"),
        },
    ),
    (
        "build",
        {"command": "make", "report": "reports/out.txt"},
        {
            ("commands-ask", "execute", "make"),
            ("dangerous-path:build", "write", "/workspace/reports/out.txt"),
        },
    ),
    (
        "publish",
        {"path": ".env"},
        {("dangerous-path", "read", DOTENV), ("publish-asks", None, None)},
    ),
]


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    CASES,
    ids=["redirection", "input-redirection", "two-paths", "tool-dangerous-path", "tool-check"],
)
async def test_the_approver_gets_every_part_that_asks_and_a_refusal_refuses_them_all(
    fs: VirtualFS, project: Path, name: str, arguments: dict[str, Any], expected: set[Ask]
) -> None:
    approver = Recorder(answer=False)
    async with Engine(toolkit(), policy=Policy.preset("default"), fs=fs) as engine:
        result = await engine.call(ToolCall(name=name, arguments=arguments), approver=approver)
    assert len(approver.asked) == 1  # one question for the call, naming everything
    asked = approver.asked[0]
    assert asked.effect is Effect.ASK
    assert asks_of(asked) == expected
    assert all(part.effect is Effect.ASK and not part.asks for part in asked.asks)
    # the reason every approver shows names each one: what it is about, and its rule
    first, *others = asked.asks
    assert (first.rule, first.action, first.target) == (asked.rule, asked.action, asked.target)
    assert asked.reason.startswith(f"{first.reason} ({first.about}); also asks: ")
    for part in others:
        assert part.brief() in asked.reason
    # refused: nothing ran, and the result still says what was asked
    assert result.status == "denied"
    assert result.decision is not None
    assert result.decision.effect is Effect.DENY
    assert asks_of(result.decision) == expected
    assert "refused by the approver" in result.decision.reason
    assert not (project / ".git" / "hooks" / "pre-commit").exists()
    assert not (project / ".git" / "hooks" / "x").exists()
    assert (project / ".env").read_text() == "KEY=secret\n"


async def test_an_approver_that_allows_commands_but_never_protected_paths_can_tell_them_apart(
    fs: VirtualFS, project: Path
) -> None:
    asked: list[Decision] = []

    def commands_only(call: ToolCall, decision: Decision) -> bool:
        asked.append(decision)
        return all(part.rule == "commands-ask" for part in decision.asks or (decision,))

    async with Engine(toolkit(), policy=Policy.preset("default"), fs=fs) as engine:
        plain = ToolCall(name="run_shell", arguments={"command": "echo hi > notes.txt"})
        hooked = ToolCall(name="run_shell", arguments={"command": "echo id > .git/hooks/x"})
        await engine.call(plain, approver=commands_only)
        refused = await engine.call(hooked, approver=commands_only)
    assert [bool(d.asks) for d in asked] == [False, True]  # the plain line asks once
    assert refused.status == "denied"
    assert not (project / ".git" / "hooks" / "x").exists()


# -- the decision itself ----------------------------------------------------------------------


def both_routes(policy: Policy, request: Request) -> Decision:
    """The decision, checked to be the same through casbin (the engine of record)."""
    decision = policy.decide(request)
    assert decision == policy.decide_with_casbin(request)
    return decision


def shell(command: str, *paths: tuple[str, Access], isolated: bool = True) -> Request:
    return Request("agent", "run_shell", "execute", paths, command, isolated=isolated)


def test_one_ask_per_rule_for_a_command_line_however_many_spellings_it_has() -> None:
    decision = both_routes(
        Policy.preset("default"), shell("env A=1 nice ls -la | xargs cat; echo x > .bashrc")
    )
    assert asks_of(decision) == {
        ("commands-ask", "execute", "env A=1 nice ls -la"),
        ("dangerous-path", "write", "/workspace/.bashrc"),
    }
    assert decision.reason.count("also asks") == 1


def test_dangerous_commands_that_ask_are_each_named() -> None:
    policy = Policy.from_dict({"default": "allow", "dangerous_commands": {"effect": "ask"}})
    decision = both_routes(policy, shell("sudo ls; rm -rf build; cat < .env"))
    assert asks_of(decision) == {
        ("dangerous-command:privilege-escalation", "execute", "sudo ls"),
        ("dangerous-command:rm-recursive-force", "execute", "rm -rf build"),
        ("dangerous-path", "read", DOTENV),
    }


def test_a_command_run_without_the_box_says_so_once_and_names_every_ask() -> None:
    decision = both_routes(Policy.preset("default"), shell("cat < .env", isolated=False))
    assert asks_of(decision) == {
        ("commands-ask", "execute", "cat"),
        ("dangerous-path", "read", DOTENV),
    }
    assert decision.reason.count("WITHOUT isolation") == 1
    assert decision.reason.index("WITHOUT isolation") < decision.reason.index("also asks")


def test_one_ask_or_none_leaves_the_decision_as_it_was() -> None:
    policy = Policy.preset("default")
    alone = both_routes(policy, Request("agent", "write_file", paths=[(DOTENV, "write")]))
    assert (alone.effect, alone.asks, alone.target) == (Effect.ASK, (), DOTENV)
    assert alone.reason == "a protected path (credentials, hooks or tool configuration)"
    # a denial is the answer: what else asked is no question anybody is put
    denied = both_routes(
        policy, Request("agent", "move_file", paths=[(DOTENV, "read"), ("/etc/x", "write")])
    )
    assert (denied.effect, denied.asks) == (Effect.DENY, ())


def test_what_becomes_of_an_ask_keeps_every_part_of_it() -> None:
    policy = Policy.preset("default")
    decision = policy.decide(shell("ls; echo id > .git/hooks/pre-commit"))
    expected = asks_of(decision)
    assert len(expected) == 2
    unanswered = policy.unanswered(decision)
    assert (unanswered.effect, asks_of(unanswered)) == (Effect.DENY, expected)
    assert HOOK in unanswered.reason
    approved = decision.answered(True, "approved by a test")
    assert (approved.effect, asks_of(approved), approved.rule) == (
        Effect.ALLOW,
        expected,
        decision.rule,
    )
    explained = decision.explain().splitlines()
    assert f"    - write {HOOK} (rule dangerous-path: {PROTECTED}" in "\n".join(explained)
    assert any(line.startswith("    - execute ls (rule commands-ask") for line in explained)


def test_shadow_mode_keeps_every_ask_on_a_decision_it_marks() -> None:
    policy = Policy.from_dict(
        {"shadow": True, "rules": [{"id": "ask-all", "effect": "ask", "actions": ["execute"]}]}
    )
    decision = both_routes(policy, shell("echo id > .git/hooks/pre-commit"))
    assert decision.shadow
    assert asks_of(decision) == {
        ("ask-all", "execute", "echo id"),
        ("dangerous-path", "write", HOOK),
    }


PROTECTED_NAMES = [".env", ".env.local", ".ssh/id_rsa", ".bashrc", ".vscode/settings.json",
                   ".npmrc", ".aws/credentials", ".git/hooks/pre-push", ".git/config"]  # fmt: skip
FOLDERS = ["", "src/", "a/b/"]
ACCESSES: list[Access] = ["read", "write", "delete"]
paths_drawn = st.lists(
    st.tuples(
        st.sampled_from(FOLDERS), st.sampled_from(PROTECTED_NAMES), st.sampled_from(ACCESSES)
    ).map(lambda t: (f"/workspace/{t[0]}{t[1]}", t[2])),
    min_size=1,
    max_size=6,
    unique=True,
)
FIRST_SPELLING = {
    "ls": "ls",
    "cat x > /workspace/ok.txt": "cat x",
    "nice -n 5 make": "nice -n 5 make",
}
ordinary = st.lists(
    st.tuples(st.sampled_from(["/workspace/a.txt", "/workspace/src/m.py"]), st.just("write")),
    max_size=2,
    unique=True,
)


@settings(max_examples=200, deadline=None)
@given(paths_drawn, ordinary, st.sampled_from([None, *FIRST_SPELLING]))
def test_every_asking_path_appears_in_the_asks(
    protected: list[tuple[str, Access]], plain: list[tuple[str, Access]], command: str | None
) -> None:
    policy = Policy.preset("default")
    request = Request(
        "agent",
        "run_shell" if command else "files",
        "execute" if command else "call",
        (*plain, *protected),
        command,
        isolated=True,
    )
    decision = both_routes(policy, request)
    assert decision.effect is Effect.ASK
    wanted: set[tuple[str, str, str]] = {("dangerous-path", a, p) for p, a in protected}
    if command:
        wanted.add(("commands-ask", "execute", FIRST_SPELLING[command]))
    if len(wanted) == 1:
        assert decision.asks == ()
        assert {(decision.rule, decision.action, decision.target)} == wanted
    else:
        assert asks_of(decision) == wanted
        for _, action, target in wanted:
            assert f"{action} {target}" in decision.reason


# -- the people who answer: stockade run, and an MCP client -----------------------------------


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "state-home"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


def test_stockade_run_shows_every_ask_on_the_prompt(
    tmp_path: Path, project: Path, state_home: Path
) -> None:
    calls = [
        {"name": "run_shell", "arguments": {"command": "ls; echo id > .git/hooks/pre-commit"}},
        # markup in a path is shown as written: it must not hide what is asked
        {
            "name": "move_file",
            "arguments": {"source": ".env", "destination": "[conceal]/.git/hooks/x"},
        },
    ]
    transcript = tmp_path / "calls.jsonl"
    transcript.write_text("".join(json.dumps(c) + "\n" for c in calls))
    done = stockade_cli("run", str(transcript), "--workspace", str(project), cwd=tmp_path,
                    stdin="n\nn\n")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("Allow this call?") == 2
    out = done.stdout
    assert "asks about 2 things, one answer for all:" in out
    assert "  - execute ls (rule commands-ask: running a command needs approval" in out
    assert f"  - write {HOOK} (rule dangerous-path: {PROTECTED}" in out
    assert f"  - delete {DOTENV} (rule dangerous-path: {PROTECTED}" in out
    assert f"  - write /workspace/[conceal]/.git/hooks/x (rule dangerous-path: {PROTECTED}" in out
    assert not (project / ".git" / "hooks" / "pre-commit").exists()
    assert (project / ".env").exists()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_mcp_client_is_asked_about_every_part(
    fs: VirtualFS, project: Path, mode: str
) -> None:
    asked: list[str] = []

    async def decline(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    async with Engine(toolkit(), policy=Policy.preset("default"), fs=fs) as engine:
        service = McpService(engine)
        async with Client(service.server, mode=mode, elicitation_callback=decline) as client:
            result = await client.call_tool(
                "run_shell", {"command": "ls; echo id > .git/hooks/pre-commit"}
            )
    assert len(asked) == 1
    lines = asked[0].splitlines()
    assert "The policy asks about 2 things:" in lines[0]
    # the protected path first: the person reads first what matters most
    assert lines[1] == (
        f"- write {HOOK} (rule dangerous-path: {PROTECTED} (credentials, hooks or tool "
        "configuration))"
    )
    assert lines[2].startswith("- execute ls (rule commands-ask: running a command needs")
    assert result.is_error
    assert not (project / ".git" / "hooks" / "pre-commit").exists()
