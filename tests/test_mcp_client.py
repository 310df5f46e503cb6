"""Tools of external MCP servers (engine/mcp/client.py), with a REAL server subprocess.

The tests start tests/mcp_servers/notes_server.py (an MCP server written with the SDK; one test
uses refusing_server.py, whose tool fails with a message of its own) over stdio; nothing is
mocked. What a user relies on:

1. registration: ``mcp__{server}__{tool}`` names safe for model APIs, the server's schemas,
   enable/disable lists and hidden presets; a list naming a tool the server lacks is an error
   naming it (and the server is stopped); bad arguments are a `ValueError` before anything runs;
2. `tool_name`: always ``^[A-Za-z0-9_-]{1,64}$``, long names cut and kept apart by a hash;
3. calls through the engine: values come back, arguments are checked against the server's
   schema before the server sees them, ``isError`` is an error result, the audit log records
   the call;
4. trust: a server's ``readOnlyHint`` counts for the policy only when it trusts that server;
5. bad servers: one that cannot start is a clear `McpServerError`, junk on stdout is survived,
   one that hangs is a timeout and restarted, one that dies is restarted on the next call, and
   one that keeps dying is given up on; nothing ever waits for ever;
6. ``close`` stops the process and removes the tools.

Each test runs under a hard timeout (`hard_timeout`), so a hang fails the test instead of the
run.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import sys
import time
import tomllib
from collections.abc import AsyncIterator, Callable, Coroutine
from importlib import resources
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult
from stockade.engine.errors import DuplicateToolError, ToolDefinitionError
from stockade.engine.mcp.client import (
    McpServer,
    McpServerError,
    add_mcp_server,
    tool_name,
)
from stockade.engine.observe import AuditLog, read_audit, verify_audit
from stockade.policies import Effect, Policy
from stockade.policies.policy import READ_ONLY_RULE

SERVER = Path(__file__).parent / "mcp_servers" / "notes_server.py"
NOTES = [sys.executable, str(SERVER)]
ALL_TOOLS = [
    "mcp__notes__add",
    "mcp__notes__save_note",
    "mcp__notes__fail",
    "mcp__notes__hang",
    "mcp__notes__crash",
    "mcp__notes__odd_name_with_spaces",
]
OFFERED = "add, crash, fail, hang, odd.name/with spaces, save_note"
SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ALLOW = Policy.from_dict({"default": "allow"})

P = ParamSpec("P")
R = TypeVar("R")


def hard_timeout(
    seconds: float = 60.0,
) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], Callable[P, Coroutine[Any, Any, R]]]:
    """Fail the test (instead of hanging the run) when it takes longer than ``seconds``."""

    def wrap(test: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
        @functools.wraps(test)
        async def bounded(*args: P.args, **kwargs: P.kwargs) -> R:
            return await asyncio.wait_for(test(*args, **kwargs), seconds)

        return bounded

    return wrap


# -- helpers -----------------------------------------------------------------------------------


@pytest.fixture
def notes_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    return folder


@pytest.fixture
def env(notes_dir: Path) -> dict[str, str]:
    """What the server needs: the SDK's stdio client does not pass the whole environment."""
    return {"PATH": os.environ["PATH"], "NOTES_DIR": str(notes_dir)}


@pytest.fixture
async def notes(env: dict[str, str]) -> AsyncIterator[tuple[Toolkit, McpServer]]:
    """A toolkit holding the notes server's tools (timeout 3 s); stopped afterwards."""
    kit = Toolkit()
    server = await asyncio.wait_for(
        kit.add_mcp_server("notes", command=NOTES, env=env, timeout_s=3), 30
    )
    yield kit, server
    await server.close()


def live_children() -> list[psutil.Process]:
    """This process's descendants that are still running (zombies are not)."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.NoSuchProcess:
            continue
    return alive


def server_pids() -> set[int]:
    """The notes servers this test process has running."""
    found = set()
    for child in live_children():
        try:
            if str(SERVER) in child.cmdline():
                found.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def no_children_left(before: set[int], limit: float = 10.0) -> None:
    """Wait until every child process started since ``before`` has ended; fail naming them."""
    deadline = time.monotonic() + limit
    while True:
        extra = [p for p in live_children() if p.pid not in before]
        if not extra:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"processes left running: {[(p.pid, p.cmdline()) for p in extra]}")
        await asyncio.sleep(0.05)


def children_now() -> set[int]:
    return {p.pid for p in live_children()}


async def call(kit: Toolkit, tool: str, policy: Policy = ALLOW, /, **arguments: Any) -> ToolResult:
    """One call of ``tool`` through an engine with ``policy``."""
    async with Engine(kit, policy=policy) as engine:
        return await engine.call(ToolCall(name=tool, arguments=arguments))


def schema_of(kit: Toolkit, name: str) -> dict[str, Any]:
    for entry in kit.schemas():
        if entry["function"]["name"] == name:
            parameters: dict[str, Any] = entry["function"]["parameters"]
            return parameters
    raise AssertionError(f"{name} is not in the schemas: {kit.schemas()}")


def schema_names(kit: Toolkit) -> list[str]:
    return [entry["function"]["name"] for entry in kit.schemas()]


# -- 1. registration ---------------------------------------------------------------------------


@hard_timeout()
async def test_every_tool_is_registered_as_mcp_server_tool(
    notes: tuple[Toolkit, McpServer],
) -> None:
    kit, server = notes
    assert server.name == "notes"
    assert server.tools == ALL_TOOLS
    assert schema_names(kit) == ALL_TOOLS
    assert all(SAFE_NAME.match(name) for name in schema_names(kit))
    # the name that needed replacing still calls the server's tool of that name
    odd = await call(kit, "mcp__notes__odd_name_with_spaces")
    assert odd.status == "ok", odd.text
    assert odd.text == "odd"


@hard_timeout()
async def test_the_servers_schemas_descriptions_and_hints_are_carried(
    notes: tuple[Toolkit, McpServer],
) -> None:
    kit, _ = notes
    add = schema_of(kit, "mcp__notes__add")
    assert add["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
    assert sorted(add["required"]) == ["a", "b"]
    assert sorted(schema_of(kit, "mcp__notes__save_note")["properties"]) == ["name", "text"]
    descriptions = {e["function"]["name"]: e["function"]["description"] for e in kit.schemas()}
    assert descriptions["mcp__notes__add"] == "Add two integers."

    add_spec = kit.get("mcp__notes__add").spec
    assert add_spec.origin == "mcp:notes"
    assert add_spec.read_only_hint is True
    assert add_spec.read_only is False  # a hint, not the tool's own word
    save_spec = kit.get("mcp__notes__save_note").spec
    assert save_spec.origin == "mcp:notes"
    assert save_spec.read_only_hint is False


@hard_timeout()
async def test_enable_registers_only_the_tools_named(env: dict[str, str]) -> None:
    kit = Toolkit()
    server = await kit.add_mcp_server(
        "notes", command=NOTES, env=env, enable=["add", "odd.name/with spaces"]
    )
    try:
        assert server.tools == ["mcp__notes__add", "mcp__notes__odd_name_with_spaces"]
        assert schema_names(kit) == server.tools
        assert "mcp__notes__save_note" not in kit
        left_out = await call(kit, "mcp__notes__save_note", name="x", text="y")
        assert left_out.status == "error"
        assert left_out.error is not None
        assert left_out.error.type == "UnknownToolError"
    finally:
        await server.close()


@hard_timeout()
async def test_disable_leaves_the_tools_named_out(env: dict[str, str]) -> None:
    kit = Toolkit()
    server = await add_mcp_server(kit, "notes", command=NOTES, env=env, disable=["hang", "crash"])
    try:
        expected = [t for t in ALL_TOOLS if t not in ("mcp__notes__hang", "mcp__notes__crash")]
        assert server.tools == expected
        assert schema_names(kit) == expected
    finally:
        await server.close()


@hard_timeout()
async def test_presets_are_hidden_from_the_model_and_always_sent(
    env: dict[str, str], notes_dir: Path
) -> None:
    kit = Toolkit()
    server = await kit.add_mcp_server(
        "notes", command=NOTES, env=env, presets={"save_note": {"name": "fixed.txt"}}
    )
    try:
        schema = schema_of(kit, "mcp__notes__save_note")
        assert list(schema["properties"]) == ["text"]
        assert schema["required"] == ["text"]
        assert list(schema_of(kit, "mcp__notes__add")["properties"]) == ["a", "b"]

        plain = await call(kit, "mcp__notes__save_note", text="hello")
        assert plain.status == "ok", plain.text
        assert plain.text == "saved 5 characters"
        assert (notes_dir / "fixed.txt").read_text() == "hello"

        # a model that names the hidden argument anyway does not get its way
        sneaky = await call(kit, "mcp__notes__save_note", name="evil.txt", text="again")
        assert sneaky.status == "ok", sneaky.text
        assert (notes_dir / "fixed.txt").read_text() == "again"
        assert not (notes_dir / "evil.txt").exists()
        assert sorted(os.listdir(notes_dir)) == ["fixed.txt"]
    finally:
        await server.close()


@pytest.mark.parametrize(
    ("option", "value", "label"),
    [
        ("enable", ["add", "nope"], "enable"),
        ("disable", ["nope"], "disable"),
        ("presets", {"nope": {"x": 1}}, "presets"),
    ],
)
@hard_timeout()
async def test_naming_a_tool_the_server_lacks_is_an_error_and_stops_the_server(
    env: dict[str, str], option: str, value: Any, label: str
) -> None:
    before = children_now()
    kit = Toolkit()
    with pytest.raises(ToolDefinitionError) as raised:
        await kit.add_mcp_server("notes", command=NOTES, env=env, **{option: value})
    message = str(raised.value)
    assert "'notes'" in message
    assert "nope" in message
    assert f"named in {label}" in message
    assert f"it offers: {OFFERED}" in message
    assert len(kit) == 0
    await no_children_left(before)


@pytest.mark.parametrize(
    ("name", "options", "words"),
    [
        pytest.param("notes", {"command": "python x.py"}, "command is a list", id="str-command"),
        pytest.param("notes", {"command": []}, "command is a list", id="empty-command"),
        pytest.param(
            "notes",
            {"command": ["python", "x.py"], "url": "http://127.0.0.1:1/mcp"},
            "exactly one",
            id="command-and-url",
        ),
        pytest.param("notes", {}, "exactly one", id="neither"),
        pytest.param("no tes", {"command": ["python"]}, "letters, digits", id="space-in-name"),
        pytest.param("a.b", {"command": ["python"]}, "letters, digits", id="dot-in-name"),
        pytest.param("", {"command": ["python"]}, "letters, digits", id="empty-name"),
        pytest.param(
            "notes", {"command": ["python"], "timeout_s": 0}, "timeout_s", id="zero-timeout"
        ),
    ],
)
@hard_timeout()
async def test_bad_arguments_are_a_value_error_before_anything_starts(
    name: str, options: dict[str, Any], words: str
) -> None:
    before = children_now()
    kit = Toolkit()
    with pytest.raises(ValueError, match=words):
        await kit.add_mcp_server(name, **options)
    with pytest.raises(ValueError, match=words):
        await add_mcp_server(kit, name, **options)
    assert len(kit) == 0
    assert children_now() <= before


# -- 2. tool_name ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "tool", "expected"),
    [
        ("notes", "add", "mcp__notes__add"),
        ("notes", "save_note", "mcp__notes__save_note"),
        ("notes", "odd.name/with spaces", "mcp__notes__odd_name_with_spaces"),
        ("my-server", "get-item", "mcp__my-server__get-item"),
        ("s", "ünï/cødé", "mcp__s___n__c_d_"),
        ("s", "a" * 55, "mcp__s__" + "a" * 55),  # 63 characters: kept whole
        ("s", "a" * 56, "mcp__s__" + "a" * 56),  # exactly 64: kept whole
    ],
)
def test_tool_name_table(server: str, tool: str, expected: str) -> None:
    assert tool_name(server, tool) == expected


def test_tool_name_past_64_characters_is_cut_and_hashed() -> None:
    first = tool_name("notes", "x" * 80 + "_first")
    second = tool_name("notes", "x" * 80 + "_second")
    for name in (first, second):
        assert len(name) == 64
        assert SAFE_NAME.match(name)
        assert name.startswith("mcp__notes__xxxx")
        assert re.search(r"_[0-9a-f]{8}$", name)
    assert first != second  # they differ only past the cut: the hash keeps them apart
    assert first[:55] == second[:55]
    assert tool_name("notes", "x" * 80 + "_first") == first  # stable
    assert tool_name("s", "a" * 57) != "mcp__s__" + "a" * 57  # 65 characters: cut


@settings(max_examples=300, deadline=None)
@given(server=st.text(max_size=80), tool=st.text(max_size=120))
def test_tool_name_is_always_safe_for_model_apis(server: str, tool: str) -> None:
    name = tool_name(server, tool)
    assert SAFE_NAME.match(name), name
    assert name.startswith("mcp__")
    assert tool_name(server, tool) == name


@settings(max_examples=200, deadline=None)
@given(
    tool=st.text(alphabet="abc_-", min_size=60, max_size=100),
    other=st.text(alphabet="abc_-", min_size=60, max_size=100),
)
def test_long_tool_names_stay_distinct(tool: str, other: str) -> None:
    if tool != other:  # both safe already, so distinct inputs are distinct full names
        assert tool_name("notes", tool) != tool_name("notes", other)


# -- 3. calls through the engine ---------------------------------------------------------------


@hard_timeout()
async def test_an_allowed_call_returns_the_servers_value(
    notes: tuple[Toolkit, McpServer], notes_dir: Path
) -> None:
    kit, _ = notes
    added = await call(kit, "mcp__notes__add", a=2, b=40)
    assert added.status == "ok", added.text
    assert added.text == "42"
    assert added.decision is not None
    assert added.decision.effect is Effect.ALLOW

    saved = await call(kit, "mcp__notes__save_note", name="n.txt", text="abc")
    assert saved.status == "ok", saved.text
    assert saved.text == "saved 3 characters"
    assert (notes_dir / "n.txt").read_text() == "abc"


@hard_timeout()
async def test_arguments_are_checked_against_the_servers_schema_before_the_call(
    env: dict[str, str], notes_dir: Path
) -> None:
    # this server exits on its second call: if a refused call reached it, the good one would fail
    kit = Toolkit()
    server = await kit.add_mcp_server(
        "notes", command=[*NOTES, "--exit-after", "1"], env=env, timeout_s=3, max_restarts=0
    )
    try:
        bad: list[tuple[str, dict[str, Any]]] = [
            ("mcp__notes__add", {"a": "two", "b": 1}),
            ("mcp__notes__add", {"a": 1}),
            ("mcp__notes__save_note", {"name": "n.txt", "text": 5}),
        ]
        for name, arguments in bad:
            refused = await call(kit, name, **arguments)
            assert refused.status == "error", refused.text
            assert refused.error is not None
            assert refused.error.type == "ArgumentError"
        assert not (notes_dir / "n.txt").exists()

        good = await call(kit, "mcp__notes__add", a=1, b=2)
        assert good.status == "ok", good.text
        assert good.text == "3"
        assert server.connection.restarts == 0
    finally:
        await server.close()


@hard_timeout()
async def test_a_tool_error_is_an_error_result_with_the_servers_message(
    notes: tuple[Toolkit, McpServer],
) -> None:
    kit, server = notes
    failed = await call(kit, "mcp__notes__fail", reason="no paper")
    assert failed.status == "error"
    assert failed.error is not None
    assert failed.error.type == "McpToolError"
    # what the server said: the SDK keeps an unexpected exception's own text to itself
    assert failed.error.message == "Error executing tool fail"
    assert failed.attempts == 1  # not retried: a remote call may have had effects
    # the server is fine afterwards
    assert (await call(kit, "mcp__notes__add", a=1, b=1)).text == "2"
    assert server.connection.restarts == 0


@hard_timeout()
async def test_the_audit_log_records_mcp_calls_and_verifies(
    notes: tuple[Toolkit, McpServer], tmp_path: Path
) -> None:
    kit, _ = notes
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path)
    async with Engine(kit, policy=ALLOW, audit=audit) as engine:
        ok = await engine.call(ToolCall(name="mcp__notes__add", arguments={"a": 1, "b": 2}))
        failed = await engine.call(ToolCall(name="mcp__notes__fail", arguments={"reason": "x"}))
    audit.close()
    assert ok.ok
    assert failed.status == "error"

    added = list(read_audit(path, tool="mcp__notes__add"))
    assert [r["kind"] for r in added] == ["intent", "outcome"]
    assert {r["call_id"] for r in added} == {ok.call_id}
    assert added[0]["effect"] == "allow"
    assert added[1]["status"] == "ok"

    fails = list(read_audit(path, tool="mcp__notes__fail"))
    assert [r["kind"] for r in fails] == ["intent", "outcome"]
    assert fails[1]["status"] == "error"
    assert fails[1]["error"] == "McpToolError"

    report = verify_audit(path)
    assert report.ok, report.problem
    assert report.records == 4


@hard_timeout()
async def test_a_tool_errors_own_message_reaches_the_model() -> None:
    kit = Toolkit()
    server = await kit.add_mcp_server(
        "refusing", command=[sys.executable, str(SERVER.parent / "refusing_server.py")]
    )
    try:
        refused = await call(kit, "mcp__refusing__refuse", reason="no paper")
        assert refused.status == "error"
        assert refused.error is not None
        assert refused.error.type == "McpToolError"
        assert refused.error.message == "Error executing tool refuse: refused: no paper"
        assert refused.text == "McpToolError: Error executing tool refuse: refused: no paper"
    finally:
        await server.close()


# -- 4. trust ----------------------------------------------------------------------------------


def read_only_policy(trusted: list[str]) -> Policy:
    """The shipped ``read-only`` preset, plus ``[mcp] trusted_servers``."""
    text = (
        resources.files("stockade.policies.presets").joinpath("read-only.toml").read_text("utf-8")
    )
    data = tomllib.loads(text)
    data["mcp"] = {"trusted_servers": trusted}
    policy = Policy.from_dict(data)
    assert policy.read_only
    return policy


def test_the_read_only_policy_helper_is_the_preset() -> None:
    built = read_only_policy([])
    preset = Policy.preset("read-only")
    assert built.spec.model_dump(exclude={"mcp"}) == preset.spec.model_dump(exclude={"mcp"})
    assert read_only_policy(["notes"]).trusted_origins == {"mcp:notes"}


@pytest.mark.parametrize(
    ("trusted", "allowed"),
    [
        pytest.param([], False, id="untrusted"),
        pytest.param(["notes"], True, id="trusted"),
        pytest.param(["other"], False, id="another-server-trusted"),
        pytest.param(["other", "notes"], True, id="among-others"),
    ],
)
@hard_timeout()
async def test_a_read_only_hint_counts_only_when_the_server_is_trusted(
    notes: tuple[Toolkit, McpServer], trusted: list[str], allowed: bool
) -> None:
    kit, _ = notes
    result = await call(kit, "mcp__notes__add", read_only_policy(trusted), a=2, b=3)
    assert result.decision is not None
    if allowed:
        assert result.status == "ok", result.text
        assert result.text == "5"
        assert result.decision.effect is Effect.ALLOW
    else:
        assert result.status == "denied", result.text
        assert result.decision.effect is Effect.DENY
        assert result.decision.rule == READ_ONLY_RULE


@pytest.mark.parametrize("trusted", [[], ["notes"]])
@hard_timeout()
async def test_a_tool_without_the_hint_stays_denied_even_when_trusted(
    notes: tuple[Toolkit, McpServer], notes_dir: Path, trusted: list[str]
) -> None:
    kit, _ = notes
    for name, arguments in [
        ("mcp__notes__save_note", {"name": "n.txt", "text": "x"}),
        ("mcp__notes__fail", {"reason": "x"}),
    ]:
        result = await call(kit, name, read_only_policy(trusted), **arguments)
        assert result.status == "denied", result.text
        assert result.decision is not None
        assert result.decision.rule == READ_ONLY_RULE
    assert not (notes_dir / "n.txt").exists()


# -- 5. bad servers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "words"),
    [
        pytest.param(["/nonexistent/stockade-mcp-server"], "stockade-mcp-server", id="absolute"),
        pytest.param(["stockade-no-such-program"], "stockade-no-such-program", id="on-path"),
    ],
)
@hard_timeout()
async def test_a_command_that_does_not_exist_is_a_clear_error(
    env: dict[str, str], command: list[str], words: str
) -> None:
    before = children_now()
    kit = Toolkit()
    started = time.monotonic()
    with pytest.raises(McpServerError) as raised:
        await kit.add_mcp_server("notes", command=command, env=env, timeout_s=5)
    assert time.monotonic() - started < 5  # said at once, not after the timeout
    message = str(raised.value)
    assert "'notes'" in message
    assert "could not be started" in message
    assert words in message
    assert "No such file" in message
    assert len(kit) == 0
    await no_children_left(before)


@pytest.mark.parametrize(
    "code", ["pass", "import sys; sys.exit(1)", "import sys; print('hello'); sys.exit(2)"]
)
@hard_timeout()
async def test_a_server_that_exits_at_once_is_a_clear_error(env: dict[str, str], code: str) -> None:
    before = children_now()
    kit = Toolkit()
    with pytest.raises(McpServerError, match=r"'notes' could not be started"):
        await kit.add_mcp_server("notes", command=[sys.executable, "-c", code], env=env)
    assert len(kit) == 0
    await no_children_left(before)


@hard_timeout()
async def test_junk_on_stdout_before_serving_is_survived(env: dict[str, str]) -> None:
    kit = Toolkit()
    server = await kit.add_mcp_server("notes", command=[*NOTES, "--garbage"], env=env)
    try:
        assert server.tools == ALL_TOOLS
        result = await call(kit, "mcp__notes__add", a=20, b=22)
        assert result.status == "ok", result.text
        assert result.text == "42"
    finally:
        await server.close()


@hard_timeout()
async def test_a_hanging_call_times_out_restarts_the_server_and_the_next_call_works(
    env: dict[str, str],
) -> None:
    timeout_s = 2.0
    kit = Toolkit()
    server = await kit.add_mcp_server("notes", command=NOTES, env=env, timeout_s=timeout_s)
    try:
        (first,) = server_pids()
        started = time.monotonic()
        hung = await call(kit, "mcp__notes__hang")
        took = time.monotonic() - started
        assert hung.status == "timeout", hung.text
        assert hung.error is not None
        assert hung.error.type == "ToolTimeoutError"
        assert "did not answer 'hang' within 2 s" in hung.error.message
        assert "restarted" in hung.error.message
        assert timeout_s <= took < timeout_s + 1  # the hung server is closed in the background
        assert server.connection.restarts == 0  # restarted for the next call, not this one

        after = await call(kit, "mcp__notes__add", a=1, b=2)
        assert after.status == "ok", after.text
        assert after.text == "3"
        assert server.connection.restarts == 1
        assert not running(first)  # the hung process was stopped, not left behind
        (second,) = server_pids()
        assert second != first
    finally:
        await server.close()


@hard_timeout()
async def test_a_server_that_dies_mid_call_is_an_error_and_started_again_next_call(
    notes: tuple[Toolkit, McpServer],
) -> None:
    kit, server = notes
    (first,) = server_pids()
    crashed = await call(kit, "mcp__notes__crash")
    assert crashed.status == "error"
    assert crashed.error is not None
    assert crashed.error.type == "McpServerError"
    assert "went away during 'crash'" in crashed.error.message
    assert crashed.attempts == 1  # not repeated: it may have had effects
    assert not running(first)
    assert server.connection.restarts == 0

    after = await call(kit, "mcp__notes__add", a=1, b=2)
    assert after.status == "ok", after.text
    assert after.text == "3"
    assert server.connection.restarts == 1
    assert len(server_pids()) == 1


@hard_timeout()
async def test_a_server_that_keeps_dying_is_given_up_on_and_never_hangs(
    env: dict[str, str],
) -> None:
    before = children_now()
    kit = Toolkit()
    server = await kit.add_mcp_server(
        "notes", command=[*NOTES, "--exit-after", "1"], env=env, timeout_s=3, max_restarts=1
    )
    try:
        results: list[ToolResult] = []
        for b in range(8):
            started = time.monotonic()
            results.append(await call(kit, "mcp__notes__add", a=1, b=b))
            assert time.monotonic() - started < 10
            if "restarted 1 time(s) already" in results[-1].text:
                break
        statuses = [r.status for r in results]
        # call, die, restart and call, die, give up
        assert statuses == ["ok", "error", "ok", "error", "error"], [r.text for r in results]
        assert "went away" in results[1].text
        assert results[-1].error is not None
        assert results[-1].error.type == "McpServerError"
        assert "restarted 1 time(s) already" in results[-1].error.message
        assert "removed" in results[-1].error.message
        assert server.connection.gone
        assert server.connection.restarts == 1

        # its tools are gone with it: the model is no longer offered them, and a call of one
        # is an unknown tool, answered at once; nothing is started again
        assert not [t for t in kit.tools() if t.name.startswith("mcp__notes__")]
        for _ in range(3):
            started = time.monotonic()
            later = await call(kit, "mcp__notes__add", a=1, b=1)
            assert time.monotonic() - started < 1
            assert later.status == "error"
            assert later.error is not None
            assert later.error.type == "UnknownToolError"
        assert server.connection.restarts == 1
        await no_children_left(before)
    finally:
        await server.close()


# -- 6. close ----------------------------------------------------------------------------------


@hard_timeout()
async def test_close_stops_the_server_and_removes_its_tools(env: dict[str, str]) -> None:
    before = children_now()
    kit = Toolkit()

    def local() -> str:
        """A tool of the user's own."""
        return "mine"

    kit.add(local)
    server = await kit.add_mcp_server("notes", command=NOTES, env=env)
    (pid,) = server_pids()
    assert len(kit) == 1 + len(ALL_TOOLS)

    await server.close()
    assert schema_names(kit) == ["local"]
    assert all(name not in kit for name in ALL_TOOLS)
    assert not running(pid)
    await no_children_left(before)
    gone = await call(kit, "mcp__notes__add", a=1, b=2)
    assert gone.error is not None
    assert gone.error.type == "UnknownToolError"

    await server.close()  # twice is harmless


@hard_timeout()
async def test_close_can_keep_the_tools(env: dict[str, str]) -> None:
    kit = Toolkit()
    server = await kit.add_mcp_server("notes", command=NOTES, env=env)
    (pid,) = server_pids()
    await server.close(remove_tools=False)
    assert not running(pid)
    assert schema_names(kit) == ALL_TOOLS
    await server.close()
    assert len(kit) == 0


# -- where the library falls short (see the report that came with this file) -------------------


@hard_timeout()
async def test_tools_of_a_server_given_up_on_are_removed(env: dict[str, str]) -> None:
    kit = Toolkit()
    server = await kit.add_mcp_server(
        "notes", command=[*NOTES, "--exit-after", "1"], env=env, timeout_s=3, max_restarts=0
    )
    try:
        for b in range(3):
            await call(kit, "mcp__notes__add", a=1, b=b)
        assert server.connection.gone
        assert schema_names(kit) == []
    finally:
        await server.close()


@hard_timeout()
async def test_a_failed_registration_leaves_nothing_behind(env: dict[str, str]) -> None:
    kit = Toolkit()

    def mcp__notes__hang() -> str:
        """A user's tool whose name the server's 'hang' tool also gets."""
        return "mine"

    kit.add(mcp__notes__hang)
    with pytest.raises(DuplicateToolError, match="already registered"):
        await kit.add_mcp_server("notes", command=NOTES, env=env)
    assert schema_names(kit) == ["mcp__notes__hang"]


@hard_timeout()
async def test_a_preset_naming_a_missing_argument_is_an_error(env: dict[str, str]) -> None:
    kit = Toolkit()
    server: McpServer | None = None
    try:
        with pytest.raises(ToolDefinitionError, match="'c'"):
            server = await kit.add_mcp_server(
                "notes", command=NOTES, env=env, presets={"add": {"c": 1}}
            )
    finally:
        if server is not None:
            await server.close()


@hard_timeout()
async def test_calls_timing_out_together_restart_the_server_once(env: dict[str, str]) -> None:
    """Two calls hung on the same server (the engine runs tools that change things one at a
    time, so they go straight to the connection) retire it once: one restart, not two."""
    kit = Toolkit()
    server = await kit.add_mcp_server("notes", command=NOTES, env=env, timeout_s=2, max_restarts=1)
    try:
        hung = await asyncio.gather(
            *(server.connection.call("hang", {}) for _ in range(2)), return_exceptions=True
        )
        assert [type(h).__name__ for h in hung] == ["ToolTimeoutError", "ToolTimeoutError"]
        async with Engine(kit, policy=ALLOW) as engine:
            after = await engine.call(ToolCall(name="mcp__notes__add", arguments={"a": 1, "b": 2}))
        assert after.status == "ok", after.text
        assert server.connection.restarts == 1
        assert not server.connection.gone
    finally:
        await server.close()
