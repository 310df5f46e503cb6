"""The engine's decide and schedule steps with real policies (steps 3 to 5 of a call): classify
a call into a `Request`, let the `Policy` and the tool's own permission
hook decide, ask the approver when the answer is "ask", then hold the policy's concurrency caps
while the tool runs.

Everything is real: `Toolkit`, `Engine`, `Policy.from_dict` / presets, the event loop. Whether
a tool body ran is read from ``ran``; concurrency is measured by `Tracker` inside the tools.
Timings use generous margins (a loaded 2-core machine is slow, never fast).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support import collect, until

from stockade.engine import Engine, ToolBase, ToolCall, ToolContext, Toolkit, ToolResult, tool
from stockade.policies import Decision, Effect, Policy, Request

# Seconds a tracked tool stays busy by default: long enough for concurrent calls to overlap.
BUSY_S = 0.05
# The timeout of slow_tool: also how long its calls may wait for a slot.
SLOW_TIMEOUT_S = 1.0
# The timeout of quick_tool: short, so that waiting for a slot times out quickly.
QUICK_TIMEOUT_S = 0.3


class Tracker:
    """How many calls are inside tools now, under each key, and the most there ever were.

    Every tracked call counts under its tool's name, its subject (``subject:<name>``) and
    ``all``. ``alongside[key]`` is the most calls (of any key) that were running at a moment a
    ``key`` call was running: 1 means a ``key`` call always ran alone.
    """

    def __init__(self) -> None:
        self.now: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.alongside: Counter[str] = Counter()

    @contextlib.contextmanager
    def running(self, tool_name: str, subject: str = "agent") -> Iterator[None]:
        keys = (tool_name, f"subject:{subject}", "all")
        for key in keys:
            self.now[key] += 1
            self.peak[key] = max(self.peak[key], self.now[key])
        for key, count in list(self.now.items()):
            if count > 0:
                self.alongside[key] = max(self.alongside[key], self.now["all"])
        try:
            yield
        finally:
            for key in keys:
                self.now[key] -= 1


# Everything tool bodies do is logged here, so a test can tell whether (and what) ran.
ran: list[str] = []
TRACK = Tracker()
# Tools that hold their slot wait on this; set at the end of every test.
RELEASE = asyncio.Event()


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    global TRACK, RELEASE
    ran.clear()
    TRACK = Tracker()
    RELEASE = asyncio.Event()  # a fresh event for every test: each test has its own loop
    yield
    RELEASE.set()


# -- tools ---------------------------------------------------------------------------------------


@tool(read_only=True)
def peek() -> str:
    """Look without changing anything."""
    ran.append("peek")
    return "peeked"


@tool
def poke() -> str:
    """Change something."""
    ran.append("poke")
    return "poked"


@tool(paths={"path": "write"})
def write_file(path: str, text: str = "") -> str:
    """Write text to a file."""
    ran.append(f"write_file {path}")
    return "written"


@tool(read_only=True, paths={"paths": "read"})
def read_many(paths: list[str]) -> str:
    """Read several files."""
    ran.append("read_many")
    return "read"


@tool(paths={"path": "write"})
def maybe_write(path: str | None = None) -> str:
    """Write to a file if one is named."""
    ran.append(f"maybe_write {path}")
    return "maybe"


@tool(paths={"path": "write"})
def write_pathlike(path: Path) -> str:
    """Write to a file named by a path-typed argument."""
    ran.append(f"write_pathlike {path}")
    return "written"


@tool(command="cmd")
def shell(cmd: str) -> str:
    """Run a command line."""
    ran.append(f"shell {cmd}")
    return "ran"


@tool(paths={"path": "write"}, dangerous_paths=("secrets/",))
def write_config(path: str) -> str:
    """Write a configuration file; the secrets folder is dangerous for this tool."""
    ran.append(f"write_config {path}")
    return "configured"


@tool(external=True, paths={"target": "write"})
def deploy(target: str) -> str:
    """Deploy to a target (carried out outside the engine)."""
    raise AssertionError("an external tool's body never runs")


@tool(read_only=True, timeout=SLOW_TIMEOUT_S)
async def slow_tool(
    call: ToolCall, tag: str = "", seconds: float = BUSY_S, hold: bool = False
) -> str:
    """Stay busy for ``seconds``, or until RELEASE is set when ``hold``."""
    with TRACK.running("slow_tool", call.subject):
        if hold:
            await RELEASE.wait()
        else:
            await asyncio.sleep(seconds)
    ran.append(f"slow_tool {tag}".strip())
    return "slow"


@tool(read_only=True, timeout=SLOW_TIMEOUT_S)
async def other_tool(call: ToolCall, tag: str = "") -> str:
    """Stay busy briefly; no policy caps it by name."""
    with TRACK.running("other_tool", call.subject):
        await asyncio.sleep(BUSY_S)
    ran.append(f"other_tool {tag}".strip())
    return "other"


@tool(read_only=True, timeout=5.0)
async def hold_tool(call: ToolCall) -> str:
    """Hold a slot until RELEASE is set."""
    with TRACK.running("hold_tool", call.subject):
        await RELEASE.wait()
    ran.append("hold_tool")
    return "held"


@tool(read_only=True, timeout=QUICK_TIMEOUT_S)
async def quick_tool(call: ToolCall, tag: str = "") -> str:
    """Return at once."""
    ran.append(f"quick_tool {tag}".strip())
    return "quick"


@tool(timeout=5.0)
async def blocker() -> str:
    """An exclusive tool that holds the engine until RELEASE is set."""
    with TRACK.running("blocker"):
        await RELEASE.wait()
    ran.append("blocker")
    return "unblocked"


@tool(timeout=2.0)
async def solo_tool(tag: str = "") -> str:
    """An exclusive (not concurrency-safe) tool that returns at once."""
    ran.append(f"solo_tool {tag}".strip())
    return "solo"


@tool(read_only=True, timeout=SLOW_TIMEOUT_S)
async def stream_tool(call: ToolCall) -> AsyncIterator[str]:
    """Stream three chunks, staying busy between them."""
    with TRACK.running("stream_tool", call.subject):
        for index in range(3):
            await asyncio.sleep(BUSY_S / 3)
            yield f"part {index}"
    ran.append("stream_tool")


class GuardedArgs(BaseModel):
    verdict: str = "none"


# What the permission hook of `Guarded` answers, by the ``verdict`` argument.
HOOK_VERDICTS: dict[str, Decision | None] = {
    "none": None,
    "allow": Decision(Effect.ALLOW, "hook-allow", "the hook allows it"),
    "warn": Decision(Effect.WARN, "hook-warn", "the hook has doubts"),
    "ask": Decision(Effect.ASK, "hook-ask", "the hook wants a person to agree"),
    "deny": Decision(Effect.DENY, "hook-deny", "the hook refuses"),
}


class Guarded(ToolBase):
    """A tool with its own permission check."""

    name = "guarded"
    args_model = GuardedArgs

    def check_permissions(self, args: dict[str, Any], ctx: ToolContext) -> Decision | None:
        if args["verdict"] == "raise":
            raise RuntimeError("the hook broke")
        return HOOK_VERDICTS[args["verdict"]]

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        ran.append("guarded")
        return "guarded ran"


ALL_TOOLS: tuple[Any, ...] = (
    peek,
    poke,
    write_file,
    read_many,
    maybe_write,
    write_pathlike,
    shell,
    write_config,
    deploy,
    slow_tool,
    other_tool,
    hold_tool,
    quick_tool,
    blocker,
    solo_tool,
    stream_tool,
    Guarded(),
)


# -- helpers -------------------------------------------------------------------------------------


def make_engine(policy: Policy | None = None, **kwargs: Any) -> Engine:
    """An engine over a toolkit holding every tool of this module."""
    toolkit = Toolkit()
    for item in ALL_TOOLS:
        toolkit.add(item)
    return Engine(toolkit, policy=policy, **kwargs)


def make_policy(*rules: dict[str, Any], **settings: Any) -> Policy:
    """A policy from rules and top-level settings; no built-in dangerous paths unless given,
    so that only the rules under test decide."""
    settings.setdefault("dangerous_paths", {"replace": []})
    return Policy.from_dict({"rules": list(rules), **settings})


def limited(**limits: Any) -> Policy:
    """An allow-everything policy with concurrency limits."""
    return make_policy(limits=limits)


def rule(rule_id: str, effect: str, **conditions: Any) -> dict[str, Any]:
    return {"id": rule_id, "effect": effect, **conditions}


async def run(engine: Engine, name: str, *, subject: str = "agent", **arguments: Any) -> ToolResult:
    return await engine.call(ToolCall(name=name, arguments=arguments, subject=subject))


def start(
    engine: Engine, name: str, *, subject: str = "agent", **arguments: Any
) -> asyncio.Task[ToolResult]:
    """A call running in the background."""
    return asyncio.ensure_future(run(engine, name, subject=subject, **arguments))


def statuses(results: list[ToolResult]) -> list[str]:
    return [r.status for r in results]


# -- 1. no policy: the default preset ------------------------------------------------------------


def test_an_engine_without_a_policy_decides_with_the_default_preset() -> None:
    engine = make_engine()
    preset = Policy.preset("default")
    requests = [
        Request("agent", "write_file", paths=[("/workspace/.env", "write")]),
        Request("agent", "write_file", paths=[("/workspace/notes.md", "write")]),
        Request("agent", "write_file", paths=[("/etc/passwd", "write")]),
        Request("agent", "write_file", paths=[("/userinput/data.csv", "write")]),
        Request("agent", "shell", "execute", command="ls"),
    ]
    decisions = [engine.policy.decide(r) for r in requests]

    assert [(d.effect, d.rule) for d in decisions] == [
        (Effect.ASK, "dangerous-path"),
        (Effect.ALLOW, "workspace-files"),  # a tie between atoms names the rule that applied
        (Effect.DENY, "outside-namespaces"),
        (Effect.DENY, "userinput-read-only"),
        (Effect.ASK, "commands-ask"),
    ]
    assert decisions == [preset.decide(r) for r in requests]


async def test_default_preset_asks_before_writing_env_and_denies_without_an_approver() -> None:
    engine = make_engine()

    result = await run(engine, "write_file", path="/workspace/.env", text="KEY=1")

    assert result.status == "denied"
    assert result.error is not None
    assert result.error.type == "PermissionDeniedError"
    assert "no approver" in result.error.message
    assert result.decision is not None
    assert result.decision.effect is Effect.DENY
    assert result.decision.rule == "dangerous-path"
    assert result.metadata["approval"] == "refused"
    assert ran == []


async def test_default_preset_runs_the_env_write_when_the_approver_says_yes() -> None:
    engine = make_engine(approver=lambda call, decision: True)

    result = await run(engine, "write_file", path="/workspace/.env", text="KEY=1")

    assert result.status == "ok", result.error
    assert result.text == "written"
    assert result.decision is not None
    assert result.decision.effect is Effect.ALLOW
    assert result.decision.rule == "dangerous-path"
    assert result.metadata["approval"] == "approved"
    assert ran == ["write_file /workspace/.env"]


async def test_default_preset_lets_an_ordinary_workspace_write_run_without_asking() -> None:
    engine = make_engine()

    result = await run(engine, "write_file", path="notes.md")

    assert result.status == "ok", result.error
    assert "approval" not in result.metadata
    assert ran == ["write_file notes.md"]


# -- 2. deny, warn, ask --------------------------------------------------------------------------


async def test_a_deny_rule_stops_the_call_before_the_tool_runs() -> None:
    engine = make_engine(make_policy(rule("no-poke", "deny", tools=["poke"], reason="poking off")))

    result = await run(engine, "poke")

    assert result.status == "denied"
    assert result.error is not None
    assert result.error.type == "PermissionDeniedError"
    assert result.error.message == "poking off"
    assert result.decision is not None
    assert (result.decision.effect, result.decision.rule) == (Effect.DENY, "no-poke")
    assert result.decision.reason == "poking off"
    assert result.content == []
    assert ran == []
    assert engine.calls.result(result.call_id) is result


async def test_a_warn_rule_runs_the_tool_and_carries_the_warning() -> None:
    engine = make_engine(make_policy(rule("mind-poke", "warn", tools=["poke"], reason="careful")))

    result = await run(engine, "poke")

    assert result.status == "ok", result.error
    assert result.metadata["warnings"] == ["careful"]
    assert result.decision is not None
    assert (result.decision.effect, result.decision.rule) == (Effect.WARN, "mind-poke")
    assert ran == ["poke"]


def approve(call: ToolCall, decision: Decision) -> bool:
    return True


async def refuse_async(call: ToolCall, decision: Decision) -> bool:
    await asyncio.sleep(0)
    return False


async def approve_async(call: ToolCall, decision: Decision) -> bool:
    await asyncio.sleep(0)
    return True


def explode(call: ToolCall, decision: Decision) -> bool:
    raise RuntimeError("approver is down")


def answer_one(call: ToolCall, decision: Decision) -> Any:
    return 1


def answer_yes(call: ToolCall, decision: Decision) -> Any:
    return "yes"


async def answer_one_async(call: ToolCall, decision: Decision) -> Any:
    return 1


def answer_none(call: ToolCall, decision: Decision) -> Any:
    return None


ASK_REASON = "peeking needs a yes"
ASK_POLICY = make_policy(rule("ask-peek", "ask", tools=["peek"], reason=ASK_REASON))


@pytest.mark.parametrize(
    ("approver", "status", "approval"),
    [
        pytest.param(approve, "ok", "approved", id="sync-true"),
        pytest.param(approve_async, "ok", "approved", id="async-true"),
        pytest.param(refuse_async, "denied", "refused", id="async-false"),
        pytest.param(explode, "denied", "refused", id="raises"),
        pytest.param(answer_one, "denied", "refused", id="truthy-1"),
        pytest.param(answer_yes, "denied", "refused", id="truthy-yes"),
        pytest.param(answer_one_async, "denied", "refused", id="async-truthy-1"),
        pytest.param(answer_none, "denied", "refused", id="none"),
    ],
)
async def test_only_an_answer_of_exactly_true_approves(
    approver: Any, status: str, approval: str
) -> None:
    seen: list[tuple[ToolCall, Decision]] = []

    def recording(call: ToolCall, decision: Decision) -> Any:
        seen.append((call, decision))
        return approver(call, decision)

    engine = make_engine(ASK_POLICY, approver=recording)
    call = ToolCall(name="peek", subject="alice")

    result = await engine.call(call)

    assert result.status == status
    assert result.metadata["approval"] == approval
    assert ran == (["peek"] if status == "ok" else [])
    assert len(seen) == 1
    asked_call, asked = seen[0]
    assert asked_call is call
    assert (asked.effect, asked.rule, asked.reason) == (Effect.ASK, "ask-peek", ASK_REASON)
    assert result.decision is not None
    assert result.decision.rule == "ask-peek"
    if status == "denied":
        assert result.error is not None
        assert result.error.type == "PermissionDeniedError"
        assert "refused by the approver" in result.error.message


async def test_a_failing_approver_is_a_refusal_and_says_why() -> None:
    engine = make_engine(ASK_POLICY, approver=explode)

    result = await run(engine, "peek")

    assert result.status == "denied"
    assert any("approver is down" in w for w in result.metadata["warnings"])


async def test_the_decision_after_asking_keeps_the_path_it_was_about() -> None:
    engine = make_engine(approver=approve)

    result = await run(engine, "write_file", path="/workspace/.env")

    assert result.status == "ok", result.error
    assert result.decision is not None
    assert (result.decision.action, result.decision.target) == ("write", "/workspace/.env")


async def test_the_decision_after_asking_in_shadow_mode_is_marked_shadow() -> None:
    policy = make_policy(rule("ask-peek", "ask", tools=["peek"]), shadow=True)
    engine = make_engine(policy, approver=approve)

    result = await run(engine, "peek")

    assert result.status == "ok", result.error
    assert result.decision is not None
    assert result.decision.shadow is True


# -- 3. classify: paths, commands, read-only mode, a tool's dangerous paths ----------------------

PATH_RULES = make_policy(
    rule(
        "guarded-files",
        "deny",
        reason="guarded file",
        paths=["/workspace/.env", "/workspace/a.txt", "/workspace/x"],
    )
)


@pytest.mark.parametrize(
    ("spelled", "canonical"),
    [
        pytest.param("src/../.env", "/workspace/.env", id="dotdot"),
        pytest.param("./a.txt", "/workspace/a.txt", id="dot-slash"),
        pytest.param("a.txt", "/workspace/a.txt", id="relative"),
        pytest.param("//workspace/x", "/workspace/x", id="double-slash"),
        pytest.param("/workspace/x/", "/workspace/x", id="trailing-slash"),
        pytest.param("/workspace/./src/../../workspace/.env", "/workspace/.env", id="winding"),
        pytest.param("../../../workspace/x", "/workspace/x", id="above-root"),
    ],
)
async def test_paths_are_canonicalised_before_the_policy_decides(
    spelled: str, canonical: str
) -> None:
    engine = make_engine(PATH_RULES)

    result = await run(engine, "write_file", path=spelled)

    assert result.status == "denied"
    assert result.decision is not None
    assert result.decision.rule == "guarded-files"
    assert (result.decision.action, result.decision.target) == ("write", canonical)
    assert ran == []


@pytest.mark.parametrize(
    "spelled",
    [
        pytest.param("src/a.txt", id="other-folder"),
        pytest.param("a.txt.bak", id="longer-name"),
        pytest.param("x/y", id="below"),
    ],
)
async def test_paths_that_only_look_alike_are_not_guarded(spelled: str) -> None:
    engine = make_engine(PATH_RULES)

    result = await run(engine, "write_file", path=spelled)

    assert result.status == "ok", result.error
    assert ran == [f"write_file {spelled}"]


async def test_a_list_of_paths_is_decided_on_its_protected_element() -> None:
    engine = make_engine()  # default preset: protected paths ask

    result = await run(engine, "read_many", paths=["a.txt", "b/../.env", "c.txt"])

    assert result.status == "denied"
    assert result.decision is not None
    assert result.decision.rule == "dangerous-path"
    assert "no approver" in result.decision.reason
    assert ran == []


async def test_a_list_of_ordinary_paths_runs() -> None:
    engine = make_engine()

    result = await run(engine, "read_many", paths=["a.txt", "b/c.txt"])

    assert result.status == "ok", result.error
    assert ran == ["read_many"]


async def test_a_list_with_one_path_outside_the_namespaces_is_denied_on_that_path() -> None:
    engine = make_engine()

    result = await run(engine, "read_many", paths=["a.txt", "/etc/shadow"])

    assert result.status == "denied"
    assert result.decision is not None
    assert (result.decision.rule, result.decision.target) == ("outside-namespaces", "/etc/shadow")


NO_PATHS_AT_ALL = make_policy(rule("no-paths", "deny", paths=["/**"], reason="no files"))


@pytest.mark.parametrize(
    ("arguments", "status"),
    [
        pytest.param({"path": None}, "ok", id="none-given"),
        pytest.param({}, "ok", id="left-out"),
        pytest.param({"path": "a.txt"}, "denied", id="a-path"),
    ],
)
async def test_an_optional_path_parameter_given_none_is_skipped(
    arguments: dict[str, Any], status: str
) -> None:
    engine = make_engine(NO_PATHS_AT_ALL)

    result = await run(engine, "maybe_write", **arguments)

    assert result.status == status
    if status == "denied":
        assert result.decision is not None
        assert result.decision.rule == "no-paths"


@pytest.mark.parametrize(
    "spelled",
    [
        pytest.param("a\x00b.txt", id="nul-inside"),
        pytest.param("/workspace/.env\x00.txt", id="nul-after-protected-name"),
        pytest.param("", id="empty"),
        pytest.param("   ", id="blank"),
    ],
)
async def test_a_path_no_file_can_have_is_denied_as_path_spelling(spelled: str) -> None:
    engine = make_engine(make_policy())  # allow-all: only the spelling check can refuse

    result = await run(engine, "write_file", path=spelled)

    assert result.status == "denied"
    assert result.decision is not None
    assert result.decision.rule == "path-spelling"
    assert ran == []


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/etc/passwd", id="etc"),
        pytest.param("/", id="root"),
        pytest.param("/workspace-evil/x", id="lookalike-prefix"),
        pytest.param("/workspace/../etc/passwd", id="dotdot-out"),
        pytest.param("/tmp/x", id="tmp"),
    ],
)
async def test_default_preset_denies_paths_outside_the_namespaces(path: str) -> None:
    engine = make_engine()

    result = await run(engine, "write_file", path=path)

    assert result.status == "denied"
    assert result.decision is not None
    assert result.decision.rule == "outside-namespaces"
    assert ran == []


async def test_a_path_typed_parameter_is_judged_like_a_string_one() -> None:
    engine = make_engine()  # default preset

    outside = await run(engine, "write_pathlike", path="/etc/passwd")
    protected = await run(engine, "write_pathlike", path="/workspace/.env")

    assert outside.status == "denied"
    assert outside.decision is not None
    assert outside.decision.rule == "outside-namespaces"
    assert protected.status == "denied"
    assert protected.decision is not None
    assert protected.decision.rule == "dangerous-path"
    assert ran == []


GIT_ONLY = make_policy(
    rule("calls", "allow", actions=["call"]),
    rule("git", "allow", commands=["git *"], reason="git is fine"),
    rule("no-rm", "deny", commands=["rm *"], reason="no removing"),
    default="deny",
)


@pytest.mark.parametrize(
    ("command", "status", "rule_id"),
    [
        pytest.param("git status", "ok", "git", id="git-allowed"),
        pytest.param("git log --oneline", "ok", "git", id="git-with-flags"),
        pytest.param("rm -rf /", "denied", "no-rm", id="rm-denied"),
        pytest.param("ls", "denied", None, id="unlisted-default-deny"),
    ],
)
async def test_a_command_tool_is_judged_as_execute_of_its_command(
    command: str, status: str, rule_id: str | None
) -> None:
    engine = make_engine(GIT_ONLY)

    result = await run(engine, "shell", cmd=command)

    assert result.status == status
    assert result.decision is not None
    assert (result.decision.rule, result.decision.action) == (rule_id, "execute")
    assert result.decision.target == command
    assert ran == ([f"shell {command}"] if status == "ok" else [])


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("git status && rm -rf /", id="and"),
        pytest.param("git status; rm -rf /", id="semicolon"),
        pytest.param("git log | sh", id="pipe"),
        pytest.param("git $(rm -rf /)", id="substitution"),
    ],
)
async def test_an_allowed_command_does_not_carry_a_second_command_through(command: str) -> None:
    # a shell command is judged sub-command by sub-command (a && b, pipes, $(...))
    engine = make_engine(GIT_ONLY)

    result = await run(engine, "shell", cmd=command)

    assert result.status == "denied"
    assert ran == []


async def test_the_default_preset_asks_before_any_command() -> None:
    engine = make_engine()

    result = await run(engine, "shell", cmd="ls")

    assert result.status == "denied"
    assert result.decision is not None
    assert result.decision.rule == "commands-ask"
    assert result.metadata["approval"] == "refused"


@pytest.mark.parametrize(
    ("name", "status", "rule_id"),
    [
        pytest.param("peek", "ok", None, id="read-only-tool-runs"),
        pytest.param("read_many", "ok", None, id="read-only-path-tool-runs"),
        pytest.param("poke", "denied", "read-only-mode", id="other-tool-denied"),
        pytest.param("write_file", "denied", "read-only-mode", id="writing-tool-denied"),
    ],
)
async def test_a_read_only_policy_runs_only_read_only_tools(
    name: str, status: str, rule_id: str | None
) -> None:
    engine = make_engine(make_policy(read_only=True))
    arguments = {"read_many": {"paths": ["a.txt"]}, "write_file": {"path": "a.txt"}}

    result = await run(engine, name, **arguments.get(name, {}))

    assert result.status == status
    assert result.decision is not None
    assert result.decision.rule == rule_id
    assert ran == ([name] if status == "ok" else [])


OWN_DANGER = "dangerous-path:write_config"


@pytest.mark.parametrize(
    ("name", "path", "status", "rule_id"),
    [
        pytest.param("write_config", "secrets/key", "denied", OWN_DANGER, id="own"),
        pytest.param("write_config", "/workspace/a/secrets/x", "denied", OWN_DANGER, id="nested"),
        pytest.param("write_config", "SECRETS/key", "denied", OWN_DANGER, id="case"),
        pytest.param("write_config", "config.toml", "ok", None, id="ordinary-path"),
        pytest.param("write_file", "secrets/key", "ok", None, id="other-tool-unaffected"),
    ],
)
async def test_a_tools_own_dangerous_paths_tighten_the_decision(
    name: str, path: str, status: str, rule_id: str | None
) -> None:
    engine = make_engine(make_policy(dangerous_paths={"replace": [], "effect": "deny"}))

    result = await run(engine, name, path=path)

    assert result.status == status
    assert result.decision is not None
    assert result.decision.rule == rule_id


async def test_a_tools_dangerous_path_asks_under_an_ask_policy() -> None:
    engine = make_engine(make_policy(dangerous_paths={"replace": [], "effect": "ask"}))

    refused = await run(engine, "write_config", path="secrets/key")
    approving = make_engine(engine.policy, approver=approve)
    approved = await run(approving, "write_config", path="secrets/key")

    assert refused.status == "denied"
    assert refused.metadata["approval"] == "refused"
    assert approved.status == "ok", approved.error
    assert approved.decision is not None
    assert approved.decision.rule == "dangerous-path:write_config"
    assert ran == ["write_config secrets/key"]


# -- 4. check_permissions can only tighten -------------------------------------------------------


@pytest.mark.parametrize(
    ("policy_effect", "verdict", "status", "rule_id"),
    [
        pytest.param("allow", "none", "ok", "policy-allow", id="allow+none"),
        pytest.param("allow", "warn", "ok", "hook-warn", id="allow+hook-warn"),
        pytest.param("allow", "ask", "denied", "hook-ask", id="allow+hook-ask"),
        pytest.param("allow", "deny", "denied", "hook-deny", id="allow+hook-deny"),
        pytest.param("deny", "allow", "denied", "policy-deny", id="deny+hook-allow"),
        pytest.param("deny", "none", "denied", "policy-deny", id="deny+none"),
        pytest.param("warn", "deny", "denied", "hook-deny", id="warn+hook-deny"),
        pytest.param("warn", "allow", "ok", "policy-warn", id="warn+hook-allow"),
        pytest.param("ask", "allow", "denied", "policy-ask", id="ask+hook-allow"),
        pytest.param("ask", "warn", "denied", "policy-ask", id="ask+hook-warn"),
        pytest.param("allow", "raise", "denied", "guarded.check_permissions", id="hook-raises"),
    ],
)
async def test_the_permission_hook_can_only_tighten_the_policy(
    policy_effect: str, verdict: str, status: str, rule_id: str
) -> None:
    policy = make_policy(rule(f"policy-{policy_effect}", policy_effect, tools=["guarded"]))
    engine = make_engine(policy)  # no approver: "ask" ends in a denial

    result = await run(engine, "guarded", verdict=verdict)

    assert result.status == status
    assert result.decision is not None
    assert result.decision.rule == rule_id
    assert ran == (["guarded"] if status == "ok" else [])
    if "ask" in (policy_effect, verdict) and status == "denied":
        assert "no approver" in result.decision.reason


async def test_a_hook_ask_on_an_allowed_call_goes_to_the_approver() -> None:
    seen: list[Decision] = []

    def recording(call: ToolCall, decision: Decision) -> bool:
        seen.append(decision)
        return True

    policy = make_policy(rule("policy-allow", "allow", tools=["guarded"]))
    engine = make_engine(policy, approver=recording)

    result = await run(engine, "guarded", verdict="ask")

    assert result.status == "ok", result.error
    assert [d.rule for d in seen] == ["hook-ask"]
    assert result.metadata["approval"] == "approved"


# -- 5. subjects and roles -----------------------------------------------------------------------

ROLE_POLICY = make_policy(
    rule("reviewers-poke", "allow", subjects=["reviewers"], tools=["poke"]),
    rule("staff-peek", "allow", subjects=["staff"], tools=["peek"]),
    rule("bob-poke", "allow", subjects=["bob"], tools=["poke"]),
    roles={"reviewers": ["alice"], "staff": ["reviewers", "dave"]},
    default="deny",
)


@pytest.mark.parametrize(
    ("subject", "name", "status", "rule_id"),
    [
        pytest.param("alice", "poke", "ok", "reviewers-poke", id="alice-via-role"),
        pytest.param("alice", "peek", "ok", "staff-peek", id="alice-via-nested-role"),
        pytest.param("dave", "peek", "ok", "staff-peek", id="dave-via-role"),
        pytest.param("dave", "poke", "denied", None, id="dave-not-a-reviewer"),
        pytest.param("bob", "poke", "ok", "bob-poke", id="bob-by-name"),
        pytest.param("bob", "peek", "denied", None, id="bob-not-staff"),
        pytest.param("carol", "poke", "denied", None, id="carol-no-role"),
        pytest.param("reviewers", "peek", "ok", "staff-peek", id="role-name-as-subject"),
    ],
)
async def test_rules_for_a_role_apply_to_its_members_only(
    subject: str, name: str, status: str, rule_id: str | None
) -> None:
    engine = make_engine(ROLE_POLICY)

    result = await run(engine, name, subject=subject)

    assert result.status == status
    assert result.decision is not None
    assert result.decision.rule == rule_id


async def test_decisions_for_one_subject_never_leak_to_another() -> None:
    engine = make_engine(ROLE_POLICY)  # one engine: its per-(tool, subject) cache is shared

    order = ["alice", "carol", "alice", "carol", "bob", "carol"]
    results = [await run(engine, "poke", subject=s) for s in order]

    assert statuses(results) == ["ok", "denied", "ok", "denied", "ok", "denied"]


# -- 6. shadow mode ------------------------------------------------------------------------------


async def test_shadow_mode_runs_a_would_be_denial_with_a_warning() -> None:
    policy = make_policy(
        rule("no-poke", "deny", tools=["poke"], reason="poking is off"), shadow=True
    )
    engine = make_engine(policy)

    result = await run(engine, "poke")

    assert result.status == "ok", result.error
    assert ran == ["poke"]
    assert result.decision is not None
    assert result.decision.shadow is True
    assert result.decision.effect is Effect.WARN
    assert result.decision.rule == "no-poke"
    warnings = result.metadata["warnings"]
    assert any("shadow mode" in w and "poking is off" in w for w in warnings)


async def test_shadow_mode_runs_a_would_be_denied_path() -> None:
    policy = Policy.from_dict({"shadow": True, "rules": [rule("no-env", "deny", paths=[".env"])]})
    engine = make_engine(policy)

    result = await run(engine, "write_file", path="src/../.env")

    assert result.status == "ok", result.error
    assert result.decision is not None
    assert (result.decision.shadow, result.decision.target) == (True, "/workspace/.env")
    assert any("shadow mode" in w for w in result.metadata["warnings"])


async def test_shadow_mode_marks_allowed_decisions_too() -> None:
    engine = make_engine(make_policy(shadow=True))

    result = await run(engine, "peek")

    assert result.status == "ok"
    assert result.decision is not None
    assert result.decision.shadow is True
    assert "warnings" not in result.metadata


# -- 7. concurrency limits from the policy -------------------------------------------------------


async def test_a_per_tool_cap_of_one_serialises_that_tool_only() -> None:
    engine = make_engine(limited(per_tool={"slow_tool": 1}))

    results = await asyncio.gather(
        *(run(engine, "slow_tool", tag=str(i)) for i in range(4)),
        *(run(engine, "other_tool", tag=str(i)) for i in range(3)),
    )

    assert statuses(results) == ["ok"] * 7
    assert TRACK.peak["slow_tool"] == 1
    assert TRACK.peak["other_tool"] == 3


async def test_without_a_cap_the_same_calls_overlap() -> None:
    # the control for the test above: the tools do overlap when nothing limits them
    engine = make_engine(make_policy())

    await asyncio.gather(*(run(engine, "slow_tool") for _ in range(4)))

    assert TRACK.peak["slow_tool"] == 4


@pytest.mark.parametrize(
    ("pattern", "cap", "peak"),
    [
        pytest.param("slow_tool", 2, 2, id="exact-2"),
        pytest.param("slow_*", 1, 1, id="glob-1"),
        pytest.param("*", 3, 3, id="star-3"),
        pytest.param("other_*", 1, 5, id="other-pattern-no-effect"),
    ],
)
async def test_per_tool_caps_match_tool_names_by_pattern(pattern: str, cap: int, peak: int) -> None:
    engine = make_engine(limited(per_tool={pattern: cap}))

    results = await asyncio.gather(*(run(engine, "slow_tool") for _ in range(5)))

    assert statuses(results) == ["ok"] * 5
    assert TRACK.peak["slow_tool"] == peak


async def test_a_per_subject_cap_limits_that_subject_only() -> None:
    engine = make_engine(limited(per_subject={"alice": 2}))

    results = await asyncio.gather(
        *(run(engine, "slow_tool", subject="alice") for _ in range(5)),
        *(run(engine, "other_tool", subject="alice") for _ in range(2)),
        *(run(engine, "slow_tool", subject="bob") for _ in range(4)),
    )

    assert statuses(results) == ["ok"] * 11
    assert TRACK.peak["subject:alice"] == 2
    assert TRACK.peak["subject:bob"] == 4


async def test_each_capped_subject_has_a_cap_of_its_own() -> None:
    engine = make_engine(limited(per_subject={"alice": 2, "bob": 2}))

    results = await asyncio.gather(
        *(run(engine, "slow_tool", subject=s) for s in ["alice", "bob"] * 4)
    )

    assert statuses(results) == ["ok"] * 8
    assert TRACK.peak["subject:alice"] == 2
    assert TRACK.peak["subject:bob"] == 2
    assert TRACK.peak["all"] == 4  # two caps of two, not one shared cap


async def test_a_per_subject_cap_on_a_role_applies_to_its_members() -> None:
    engine = make_engine(
        make_policy(roles={"interns": ["ivan"]}, limits={"per_subject": {"interns": 1}})
    )

    await asyncio.gather(
        *(run(engine, "slow_tool", subject="ivan") for _ in range(3)),
        *(run(engine, "slow_tool", subject="alice") for _ in range(3)),
    )

    assert TRACK.peak["subject:ivan"] == 1
    assert TRACK.peak["subject:alice"] == 3


async def test_max_in_flight_caps_all_tools_together() -> None:
    engine = make_engine(limited(max_in_flight=3))

    results = await asyncio.gather(
        *(run(engine, "slow_tool", subject="alice") for _ in range(4)),
        *(run(engine, "other_tool", subject="bob") for _ in range(4)),
    )

    assert statuses(results) == ["ok"] * 8
    assert TRACK.peak["all"] == 3


async def test_the_smallest_of_several_caps_wins() -> None:
    engine = make_engine(
        limited(max_in_flight=4, per_tool={"slow_tool": 3, "slow_*": 2}, per_subject={"agent": 5})
    )

    await asyncio.gather(*(run(engine, "slow_tool") for _ in range(6)))

    assert TRACK.peak["slow_tool"] == 2


EXCLUSIVE = limited(exclusive=["slow_*"])


@pytest.mark.parametrize(
    ("policy", "slow_alongside"),
    [
        pytest.param(EXCLUSIVE, 1, id="exclusive"),
        pytest.param(make_policy(), 6, id="shared-control"),
    ],
)
async def test_an_exclusive_tool_runs_alone_among_concurrent_calls(
    policy: Policy, slow_alongside: int
) -> None:
    engine = make_engine(policy)

    results = await asyncio.gather(
        run(engine, "other_tool"),
        *(run(engine, "slow_tool") for _ in range(3)),
        run(engine, "other_tool"),
        run(engine, "other_tool"),
    )

    assert statuses(results) == ["ok"] * 6
    assert TRACK.alongside["slow_tool"] == slow_alongside


@pytest.mark.parametrize(
    ("policy", "slow_alongside"),
    [
        pytest.param(EXCLUSIVE, 1, id="exclusive"),
        pytest.param(make_policy(), 5, id="shared-control"),
    ],
)
async def test_an_exclusive_tool_runs_alone_within_call_many(
    policy: Policy, slow_alongside: int
) -> None:
    engine = make_engine(policy)
    names = ["other_tool", "slow_tool", "other_tool", "other_tool", "slow_tool"]
    calls = [ToolCall(name=n, arguments={"tag": str(i)}) for i, n in enumerate(names)]

    results = await engine.call_many(calls)

    assert [r.call_id for r in results] == [c.id for c in calls]
    assert statuses(results) == ["ok"] * 5
    assert TRACK.alongside["slow_tool"] == slow_alongside
    if slow_alongside == 1:  # run alone, and in order
        assert ran[:2] == ["other_tool 0", "slow_tool 1"]
        assert sorted(ran[2:4]) == ["other_tool 2", "other_tool 3"]
        assert ran[4:] == ["slow_tool 4"]
        assert TRACK.peak["other_tool"] == 2  # the two between the exclusive calls share


async def test_a_call_that_waits_too_long_for_a_per_tool_slot_times_out() -> None:
    engine = make_engine(limited(per_tool={"slow_tool": 1}))
    # first holds the slot for half the timeout, second then holds it until released: the third
    # has waited the whole timeout (1 s) while the second still holds the slot (until ~1.5 s)
    first = start(engine, "slow_tool", tag="first", seconds=SLOW_TIMEOUT_S / 2)
    await until(lambda: TRACK.now["slow_tool"] == 1)
    second = start(engine, "slow_tool", tag="second", hold=True)
    await asyncio.sleep(0.02)
    third = await run(engine, "slow_tool", tag="third")
    RELEASE.set()
    later = await run(engine, "slow_tool", tag="later")

    assert (await first).status == "ok"
    assert (await second).status == "ok"
    assert third.status == "timeout"
    assert third.error is not None
    assert third.error.type == "ToolTimeoutError"
    assert "free slot" in third.error.message
    assert "cap for slow_tool of 1" in third.error.message
    assert "did not run" in third.error.message
    assert third.attempts == 0
    assert later.status == "ok", later.error
    assert ran == ["slow_tool first", "slow_tool second", "slow_tool later"]


@pytest.mark.parametrize(
    ("limits", "cap_named", "bob_status"),
    [
        pytest.param({"per_subject": {"alice": 1}}, "the cap for alice of 1", "ok", id="subject"),
        pytest.param({"max_in_flight": 1}, "the engine's cap of 1", "timeout", id="global"),
    ],
)
async def test_waiting_for_a_slot_names_the_cap_that_was_full(
    limits: dict[str, Any], cap_named: str, bob_status: str
) -> None:
    engine = make_engine(limited(**limits))
    holder = start(engine, "hold_tool", subject="alice")
    await until(lambda: TRACK.now["hold_tool"] == 1)

    alice, bob = await asyncio.gather(
        run(engine, "quick_tool", subject="alice", tag="alice"),
        run(engine, "quick_tool", subject="bob", tag="bob"),
    )
    RELEASE.set()
    assert (await holder).status == "ok"
    after = await run(engine, "quick_tool", subject="alice", tag="after")

    assert alice.status == "timeout"
    assert alice.error is not None
    assert cap_named in alice.error.message
    assert f"waited {QUICK_TIMEOUT_S:g}s for a free slot" in alice.error.message
    assert bob.status == bob_status
    assert after.status == "ok", after.error
    assert "quick_tool alice" not in ran


@pytest.mark.parametrize(
    ("limits", "holder", "holder_args", "waiter"),
    [
        # the waiter waits for the per-tool cap, held by another call of the same tool
        pytest.param(
            {"per_tool": {"slow_tool": 1}},
            "slow_tool",
            {"hold": True},
            "slow_tool",
            id="waits-for-cap",
        ),
        # the waiter holds its cap and waits for the scheduler, held by an exclusive call
        pytest.param({"per_tool": {"solo_tool": 1}}, "blocker", {}, "solo_tool", id="holds-cap"),
    ],
)
async def test_cancelling_a_call_that_waits_for_a_slot_leaves_the_caps_intact(
    limits: dict[str, Any], holder: str, holder_args: dict[str, Any], waiter: str
) -> None:
    engine = make_engine(limited(**limits))
    holding = start(engine, holder, **holder_args)
    await until(lambda: TRACK.now[holder] == 1)
    call = ToolCall(name=waiter, arguments={"tag": "cancelled"})
    waiting = asyncio.ensure_future(engine.call(call))
    await asyncio.sleep(0.05)  # it is queued now

    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    RELEASE.set()
    assert (await holding).status == "ok"

    recorded = engine.calls.result(call.id)
    assert recorded is not None
    assert recorded.status == "cancelled"
    assert f"{waiter} cancelled" not in ran
    # nothing leaked: every later call gets the slot at once, one after another
    for index in range(5):
        result = await run(engine, waiter, tag=str(index))
        assert result.status == "ok", result.error
    # nothing was released twice: the cap still holds
    if waiter == "slow_tool":
        await asyncio.gather(*(run(engine, "slow_tool") for _ in range(4)))
        assert TRACK.peak["slow_tool"] == 1


async def test_cancelled_waiters_under_a_cap_of_two_do_not_widen_it() -> None:
    engine = make_engine(limited(per_tool={"slow_tool": 2}))
    holders = [start(engine, "slow_tool", hold=True) for _ in range(2)]
    await until(lambda: TRACK.now["slow_tool"] == 2)
    waiters = [start(engine, "slow_tool", tag="cancelled") for _ in range(3)]
    await asyncio.sleep(0.05)
    for task in waiters:
        task.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    RELEASE.set()
    assert statuses(list(await asyncio.gather(*holders))) == ["ok", "ok"]

    TRACK.peak.clear()
    results = await asyncio.gather(*(run(engine, "slow_tool") for _ in range(6)))

    assert statuses(results) == ["ok"] * 6
    assert TRACK.peak["slow_tool"] == 2
    assert "slow_tool cancelled" not in ran


# -- 8. streaming goes through the same policy ---------------------------------------------------


async def test_a_denied_streamed_call_yields_one_final_chunk() -> None:
    engine = make_engine(make_policy(rule("no-stream", "deny", tools=["stream_tool"])))

    chunks = await collect(engine, ToolCall(name="stream_tool"))

    assert len(chunks) == 1
    assert chunks[0].is_last
    assert chunks[0].result is not None
    assert chunks[0].result.status == "denied"
    assert chunks[0].result.decision is not None
    assert chunks[0].result.decision.rule == "no-stream"
    assert ran == []


async def test_a_streamed_call_asks_the_approver_like_any_call() -> None:
    seen: list[str | None] = []

    def recording(call: ToolCall, decision: Decision) -> bool:
        seen.append(decision.rule)
        return True

    policy = make_policy(rule("ask-stream", "ask", tools=["stream_tool"]))
    chunks = await collect(make_engine(policy, approver=recording), ToolCall(name="stream_tool"))

    assert seen == ["ask-stream"]
    assert chunks[-1].result is not None
    assert chunks[-1].result.status == "ok"
    assert len(chunks) == 4  # three parts, then the final chunk


async def test_a_streamed_call_that_waits_too_long_for_a_slot_times_out() -> None:
    engine = make_engine(limited(per_subject={"alice": 1}))
    holder = start(engine, "hold_tool", subject="alice")
    await until(lambda: TRACK.now["hold_tool"] == 1)

    chunks = await collect(engine, ToolCall(name="quick_tool", subject="alice"))
    RELEASE.set()
    await holder

    assert len(chunks) == 1
    result = chunks[0].result
    assert result is not None
    assert result.status == "timeout"
    assert result.error is not None
    assert "free slot" in result.error.message
    assert "the cap for alice of 1" in result.error.message
    assert "quick_tool" not in ran


@pytest.mark.parametrize(
    ("policy", "peak"),
    [
        pytest.param(limited(per_tool={"stream_tool": 1}), 1, id="capped"),
        pytest.param(make_policy(), 3, id="uncapped-control"),
    ],
)
async def test_streamed_calls_respect_the_per_tool_cap(policy: Policy, peak: int) -> None:
    engine = make_engine(policy)

    streams = await asyncio.gather(
        *(collect(engine, ToolCall(name="stream_tool")) for _ in range(3))
    )

    for chunks in streams:
        assert chunks[-1].result is not None
        assert chunks[-1].result.status == "ok"
        assert len(chunks) == 4
    assert TRACK.peak["stream_tool"] == peak


# -- 9. external tools ---------------------------------------------------------------------------


async def test_a_denied_external_call_is_denied_and_never_pending() -> None:
    engine = make_engine()  # default preset: outside the namespaces is denied

    result = await run(engine, "deploy", target="/etc/app")

    assert result.status == "denied"
    assert result.decision is not None
    assert result.decision.rule == "outside-namespaces"
    assert engine.pending_external == []
    with pytest.raises(LookupError):
        engine.complete(result.call_id, "deployed anyway")


async def test_an_external_call_needing_approval_is_denied_without_an_approver() -> None:
    engine = make_engine()

    result = await run(engine, "deploy", target=".env")

    assert result.status == "denied"
    assert engine.pending_external == []


async def test_an_allowed_external_call_is_pending_until_completed() -> None:
    engine = make_engine()

    pending = await run(engine, "deploy", target="site")

    assert pending.status == "pending"
    assert engine.pending_external == [pending.call_id]
    assert pending.decision is not None
    assert pending.decision.effect is Effect.ALLOW

    done = engine.complete(pending.call_id, "deployed")

    assert done.status == "ok"
    assert done.text == "deployed"
    assert done.decision == pending.decision
    assert engine.pending_external == []
    assert engine.calls.result(pending.call_id) is done


async def test_a_streamed_external_call_is_denied_by_the_same_policy() -> None:
    engine = make_engine()

    chunks = await collect(engine, ToolCall(name="deploy", arguments={"target": "/etc/app"}))

    assert len(chunks) == 1
    assert chunks[0].result is not None
    assert chunks[0].result.status == "denied"
    assert engine.pending_external == []


# -- 10. deciding is deterministic and cached ----------------------------------------------------


async def test_repeated_identical_calls_get_the_same_cached_decision() -> None:
    engine = make_engine(make_policy(rule("mind-poke", "warn", tools=["poke"], reason="careful")))

    paths = [await run(engine, "write_file", path="notes/a.txt") for _ in range(3)]
    plain = [await run(engine, "poke") for _ in range(3)]

    for results in (paths, plain):
        assert statuses(results) == ["ok"] * 3
        first = results[0].decision
        assert first is not None
        assert all(r.decision == first for r in results)
        assert all(r.decision is first for r in results)  # the cached object, not a new one


def test_policy_decide_is_deterministic_and_cached_per_request() -> None:
    policy = Policy.preset("default")
    request = Request("agent", "write_file", paths=[("/workspace/.env", "write")])
    same = Request("agent", "write_file", paths=[("/workspace/.env", "write")])

    first = policy.decide(request)

    assert policy.decide(same) is first
    assert [policy.decide(request) for _ in range(5)] == [first] * 5
    assert policy.decide(request) == policy.decide_with_casbin(request)
