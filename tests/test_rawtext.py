"""The raw text tools: host files by host path, governed by the policy's ``[host_files]`` table.

``view_text_file``, ``write_text_file`` and ``insert_text_file`` are never registered by
default. When registered, every call of them is a call on host paths, and the policy decides it
as a whole: its rules judge the host paths (the default preset refuses paths outside /workspace
and /userinput), and its ``[host_files] mode`` adds its own word, the strictest winning:
``"warn"`` (the default) lets the call run with a warning (logged, and in the result's
``warnings``), ``"allow"`` adds nothing, ``"deny"`` refuses with the rule ``host-files`` and a
reason that says how to permit it. Any other mode is refused when the policy is built. Shadow
mode turns that denial into a warning, as any other. The decision is the policy's like any
other: ``engine.preview`` shows it and the audit log's intent record names its rule. Every
result of these tools is marked ``metadata["dangerous_io"]``, denied or not. No environment
variable has a say. Everything runs through a real `Engine` on real files in tmp_path.
"""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult
from stockade.engine.builtin.files import FILE_TOOLS, add_file_tools
from stockade.engine.builtin.host_files import add_raw_text_tools
from stockade.engine.observe import AuditLog, read_audit
from stockade.policies import Effect, Policy, PolicyError
from stockade.sandbox import VirtualFS

RAW_TOOLS = ("view_text_file", "write_text_file", "insert_text_file")
HOST_RULE = "host-files"
DENY_REASON = (
    'raw host file access is off ([host_files] mode = "deny"); set the mode to "warn" '
    'or "allow" in the policy to permit it'
)
# the environment variable that used to govern these tools; it must have no say any more
OLD_SWITCH = "STOCKADE_DANGEROUS_TEXT_IO"
THREE_LINES = "alpha\nbeta\ngamma\n"


def host_policy(mode: str | None = None, **extra: Any) -> Policy:
    """A policy that allows host paths (and protects none), with ``[host_files] mode`` set to
    ``mode`` (no table at all for None). The default preset refuses every path outside
    /workspace and /userinput, so tests use this unless they test the default on purpose."""
    data: dict[str, Any] = {"default": "allow", "dangerous_paths": {"replace": []}, **extra}
    if mode is not None:
        data["host_files"] = {"mode": mode}
    return Policy.from_dict(data)


# the raw tools run quietly: the rules allow their paths and the table adds nothing
ALLOWED = host_policy("allow")
# everything but protected paths (as the permissive preset), and the table adds nothing
PERMISSIVE = Policy.from_dict(
    {"default": "allow", "dangerous_paths": {"effect": "deny"}, "host_files": {"mode": "allow"}}
)

# -- helpers ---------------------------------------------------------------------------------


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., Engine]]:
    """A factory of engines over a toolkit holding the raw tools; closed afterwards."""
    made: list[Engine] = []

    def factory(policy: Policy | None = ALLOWED, **options: Any) -> Engine:
        toolkit = Toolkit()
        add_raw_text_tools(toolkit)
        engine = Engine(toolkit, policy=policy, **options)
        made.append(engine)
        return engine

    yield factory
    for engine in made:
        await engine.aclose()


@pytest.fixture
def engine(make: Callable[..., Engine]) -> Engine:
    return make()


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text(THREE_LINES)
    return path


def text_of(path: Path) -> str:
    """A host file's content (a plain function: tests read files between awaits)."""
    return path.read_text(encoding="utf-8")


def arguments_for(tool: str, path: Path | str, content: str = "pwned\n") -> dict[str, Any]:
    """Valid arguments for a call of ``tool`` on ``path``."""
    arguments: dict[str, Any] = {"file_path": str(path)}
    if tool == "view_text_file":
        arguments["start_line"] = 1
    else:
        arguments["content"] = content
    if tool == "insert_text_file":
        arguments["line_number"] = 1
    return arguments


async def call(engine: Engine, name: str, **arguments: Any) -> ToolResult:
    return await engine.call(ToolCall(name=name, arguments=arguments))


def raw_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == "stockade.engine" and r.levelno == logging.WARNING
    ]


def warned_reason(tool: str) -> str:
    return f"{tool} reaches host files outside the sandbox"


# -- registration ----------------------------------------------------------------------------


def test_a_fresh_toolkit_has_no_raw_tools() -> None:
    toolkit = Toolkit()
    assert not {t.name for t in toolkit.tools(active_only=False)} & set(RAW_TOOLS)
    for name in RAW_TOOLS:
        assert toolkit.resolve(name) is None


def test_add_file_tools_does_not_add_raw_tools() -> None:
    toolkit = Toolkit()
    add_file_tools(toolkit)
    names = {t.name for t in toolkit.tools(active_only=False)}
    assert names == {f.__name__ for f in FILE_TOOLS}
    assert not names & set(RAW_TOOLS)


async def test_calling_an_unregistered_raw_tool_is_an_unknown_tool(notes: Path) -> None:
    toolkit = Toolkit()
    add_file_tools(toolkit)
    async with Engine(toolkit, policy=ALLOWED) as engine:
        result = await call(engine, "view_text_file", file_path=str(notes))
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "UnknownToolError"
    assert THREE_LINES not in result.text


def test_add_raw_text_tools_registers_the_three_tools() -> None:
    toolkit = Toolkit()
    registered = add_raw_text_tools(toolkit)
    assert [t.name for t in registered] == list(RAW_TOOLS)
    assert sorted(t.name for t in toolkit.tools()) == sorted(RAW_TOOLS)
    expected = {
        "view_text_file": (True, {"file_path": "read"}),
        "write_text_file": (False, {"file_path": "write"}),
        "insert_text_file": (False, {"file_path": "write"}),
    }
    for registered_tool in registered:
        read_only, paths = expected[registered_tool.name]
        assert registered_tool.spec.read_only is read_only
        assert dict(registered_tool.spec.paths) == paths
        assert registered_tool.spec.path_space == "host"  # judged as host paths, not logical
        # no permission hook of their own: the policy is the only say
        assert registered_tool.permission_check is None
        assert "file_path" in registered_tool.parameters["required"]


# -- the [host_files] table ------------------------------------------------------------------

RUNS = [
    (None, Effect.WARN, True),
    ("warn", Effect.WARN, True),
    ("allow", Effect.ALLOW, False),
]


@pytest.mark.parametrize(
    ("mode", "effect", "warned"), RUNS, ids=["no-table-means-warn", "warn", "allow"]
)
@pytest.mark.parametrize("tool", RAW_TOOLS)
async def test_table_lets_the_call_run(
    make: Callable[..., Engine],
    notes: Path,
    caplog: pytest.LogCaptureFixture,
    tool: str,
    mode: str | None,
    effect: Effect,
    warned: bool,
) -> None:
    engine = make(policy=host_policy(mode))
    with caplog.at_level(logging.WARNING, logger="stockade.engine"):
        result = await call(engine, tool, **arguments_for(tool, notes, "NEW\n"))
    assert result.status == "ok", result.text
    if tool == "view_text_file":
        assert result.text == THREE_LINES
    else:
        assert "NEW\n" in text_of(notes)
    assert result.metadata["dangerous_io"] is True
    assert result.decision is not None
    assert result.decision.effect is effect
    assert result.decision.shadow is False
    records = raw_warnings(caplog)
    if warned:
        assert result.decision.rule == HOST_RULE
        assert result.decision.reason == warned_reason(tool)
        assert len(records) == 1
        assert tool in records[0].getMessage()
        assert warned_reason(tool) in records[0].getMessage()
        assert result.metadata["warnings"] == [warned_reason(tool)]
    else:
        assert result.decision.rule is None  # the rules decided alone: the default allows
        assert records == []
        assert "warnings" not in result.metadata


async def test_warn_logs_once_per_call(
    make: Callable[..., Engine], notes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make(policy=host_policy("warn"))
    with caplog.at_level(logging.WARNING, logger="stockade.engine"):
        results = [
            await call(engine, "view_text_file", file_path=str(notes)),
            await call(engine, "view_text_file", file_path=str(notes)),
            await call(engine, "write_text_file", file_path=str(notes), content="x\n"),
        ]
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    records = raw_warnings(caplog)
    assert len(records) == 3  # one a call: not once per engine, nor twice a call
    for result, record in zip(results, records, strict=True):
        assert result.call_id in record.getMessage()
        assert warned_reason(result.tool) in record.getMessage()
        assert result.metadata["warnings"] == [warned_reason(result.tool)]


@pytest.mark.parametrize("tool", RAW_TOOLS)
async def test_deny_refuses_and_says_how_to_permit_it(
    make: Callable[..., Engine],
    tmp_path: Path,
    notes: Path,
    caplog: pytest.LogCaptureFixture,
    tool: str,
) -> None:
    engine = make(policy=host_policy("deny"))  # the rules allow every host path; the table not
    with caplog.at_level(logging.WARNING, logger="stockade.engine"):
        result = await call(engine, tool, **arguments_for(tool, notes))
    assert result.status == "denied", result.text
    assert result.decision is not None
    assert result.decision.effect is Effect.DENY
    assert result.decision.rule == HOST_RULE
    assert result.decision.reason == DENY_REASON
    assert result.error is not None
    assert result.error.type == "PermissionDeniedError"
    assert DENY_REASON in result.error.message
    assert result.attempts == 0
    assert result.metadata["dangerous_io"] is True  # denied calls are marked too
    assert THREE_LINES not in result.text
    assert text_of(notes) == THREE_LINES  # nothing written
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]
    assert raw_warnings(caplog) == []


async def test_deny_holds_for_paths_judged_the_long_way(
    make: Callable[..., Engine], tmp_path: Path, notes: Path
) -> None:
    # a path that is not canonical as spelled is judged through the general route
    engine = make(policy=host_policy("deny"))
    spelled = f"{tmp_path}/elsewhere/../notes.txt"
    result = await call(engine, "write_text_file", file_path=spelled, content="pwned\n")
    assert result.status == "denied", result.text
    assert result.decision is not None
    assert result.decision.rule == HOST_RULE
    assert text_of(notes) == THREE_LINES


@pytest.mark.parametrize(
    "mode",
    ["yes", "", "alow", " Deny ", "DENY", "Allow", "off", True, 1, None],
    ids=["yes", "empty", "misspelt-allow", "padded-deny", "upper-deny", "capital-allow", "off",
         "true", "one", "null"],
)  # fmt: skip
def test_an_unknown_mode_is_refused_when_the_policy_is_built(mode: object) -> None:
    data = {"default": "allow", "host_files": {"mode": mode}}
    with pytest.raises(PolicyError) as raised:
        Policy.from_dict(data)
    assert [p.key for p in raised.value.problems] == ["host_files.mode"]
    assert "host_files.mode" in str(raised.value)


def test_an_unknown_key_in_the_table_is_refused() -> None:
    with pytest.raises(PolicyError) as raised:
        Policy.from_dict({"host_files": {"mdoe": "allow"}})
    assert [p.key for p in raised.value.problems] == ["host_files.mdoe"]


def test_a_policy_file_with_an_unknown_mode_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('version = 1\n\n[host_files]\nmode = "yes"\n', encoding="utf-8")
    with pytest.raises(PolicyError) as raised:
        Policy.load(path)
    [problem] = raised.value.problems
    assert (problem.line, problem.key) == (4, "host_files.mode")
    assert f"{path}:4: host_files.mode" in str(raised.value)


@pytest.mark.parametrize("mode", ["deny", "warn", "allow"])
async def test_a_policy_file_sets_the_mode(
    make: Callable[..., Engine], tmp_path: Path, notes: Path, mode: str
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        'version = 1\ndefault = "allow"\n\n[dangerous_paths]\nreplace = []\n\n'
        f'[host_files]\nmode = "{mode}"\n',
        encoding="utf-8",
    )
    policy = Policy.load(path)
    assert policy.spec.host_files.mode == mode
    result = await call(make(policy=policy), "view_text_file", file_path=str(notes))
    assert result.status == ("denied" if mode == "deny" else "ok"), result.text


@pytest.mark.parametrize(
    ("switch", "mode", "status", "effect"),
    [
        ("deny", "allow", "ok", Effect.ALLOW),
        ("deny", None, "ok", Effect.WARN),
        ("allow", None, "ok", Effect.WARN),
        ("allow", "deny", "denied", Effect.DENY),
        ("garbage", "allow", "ok", Effect.ALLOW),
    ],
    ids=["deny-vs-allow", "deny-vs-no-table", "allow-vs-no-table", "allow-vs-deny", "garbage"],
)
async def test_the_old_environment_variable_has_no_say(
    make: Callable[..., Engine],
    notes: Path,
    monkeypatch: pytest.MonkeyPatch,
    switch: str,
    mode: str | None,
    status: str,
    effect: Effect,
) -> None:
    monkeypatch.setenv(OLD_SWITCH, switch)
    engine = make(policy=host_policy(mode))
    result = await call(engine, "write_text_file", file_path=str(notes), content="new\n")
    assert result.status == status, result.text
    assert result.decision is not None
    assert result.decision.effect is effect
    assert text_of(notes) == ("new\n" if status == "ok" else THREE_LINES)


@pytest.mark.parametrize(
    ("mode", "effect", "reason"),
    [
        (None, Effect.WARN, warned_reason("write_text_file")),
        ("warn", Effect.WARN, warned_reason("write_text_file")),
        ("deny", Effect.DENY, DENY_REASON),
    ],
    ids=["no-table", "warn", "deny"],
)
async def test_preview_shows_the_table_decision(
    make: Callable[..., Engine], notes: Path, mode: str | None, effect: Effect, reason: str
) -> None:
    # what `stockade policy explain` shows: the decision, without running the call
    engine = make(policy=host_policy(mode))
    request, decision = engine.preview(
        ToolCall(name="write_text_file", arguments={"file_path": str(notes), "content": "x"})
    )
    assert request.host_paths is True
    assert request.paths == ((str(notes), "write"),)
    assert decision.effect is effect
    assert decision.rule == HOST_RULE
    assert decision.reason == reason
    assert text_of(notes) == THREE_LINES  # previewed, not run


async def test_preview_with_allow_leaves_the_rules_alone(
    make: Callable[..., Engine], notes: Path
) -> None:
    engine = make(policy=host_policy("allow"))
    request, decision = engine.preview(
        ToolCall(name="view_text_file", arguments={"file_path": str(notes)})
    )
    assert request.host_paths is True
    assert (decision.effect, decision.rule) == (Effect.ALLOW, None)


@pytest.mark.parametrize(
    ("mode", "effect", "status", "reason"),
    [
        ("warn", "warn", "ok", warned_reason("view_text_file")),
        ("deny", "deny", "denied", DENY_REASON),
    ],
)
async def test_the_audit_intent_names_the_host_files_rule(
    make: Callable[..., Engine],
    tmp_path: Path,
    notes: Path,
    mode: str,
    effect: str,
    status: str,
    reason: str,
) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    engine = make(policy=host_policy(mode), audit=log)
    result = await call(engine, "view_text_file", file_path=str(notes))
    assert result.status == status, result.text
    log.close()
    intent, outcome = list(read_audit(log.path, call_id=result.call_id))
    assert intent["kind"] == "intent"
    assert intent["tool"] == "view_text_file"
    assert intent["effect"] == effect
    assert intent["rule"] == HOST_RULE
    assert intent["reason"] == reason
    assert intent["paths"] == [[str(notes), "read"]]
    assert outcome["kind"] == "outcome"
    assert outcome["status"] == status
    assert outcome["dangerous_io"] is True
    if mode == "warn":
        assert outcome["warnings"] == [reason]


async def test_the_audit_intent_has_no_host_files_rule_when_allowed(
    make: Callable[..., Engine], tmp_path: Path, notes: Path
) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    engine = make(policy=host_policy("allow"), audit=log)
    result = await call(engine, "view_text_file", file_path=str(notes))
    assert result.status == "ok", result.text
    log.close()
    [intent] = read_audit(log.path, kind="intent")
    assert intent["effect"] == "allow"
    assert "rule" not in intent


@pytest.mark.parametrize("tool", RAW_TOOLS)
async def test_shadow_mode_turns_deny_into_a_warning(
    make: Callable[..., Engine], notes: Path, caplog: pytest.LogCaptureFixture, tool: str
) -> None:
    engine = make(policy=host_policy("deny", shadow=True))
    with caplog.at_level(logging.WARNING, logger="stockade.engine"):
        result = await call(engine, tool, **arguments_for(tool, notes, "NEW\n"))
    assert result.status == "ok", result.text  # a trial rollout blocks nothing
    assert result.decision is not None
    assert result.decision.effect is Effect.WARN
    assert result.decision.shadow is True
    assert result.decision.rule == HOST_RULE
    shadowed = f"shadow mode: would be denied ({DENY_REASON})"
    assert result.decision.reason == shadowed
    assert result.metadata["warnings"] == [shadowed]
    assert result.metadata["dangerous_io"] is True
    records = raw_warnings(caplog)
    assert len(records) == 1
    assert "would be denied" in records[0].getMessage()
    if tool != "view_text_file":
        assert "NEW\n" in text_of(notes)


async def test_shadow_mode_preview_shows_what_would_be_denied(
    make: Callable[..., Engine], notes: Path
) -> None:
    engine = make(policy=host_policy("deny", shadow=True))
    _, decision = engine.preview(
        ToolCall(name="view_text_file", arguments={"file_path": str(notes)})
    )
    assert (decision.effect, decision.rule, decision.shadow) == (Effect.WARN, HOST_RULE, True)
    assert decision.reason.startswith("shadow mode: would be denied")


@pytest.mark.parametrize("tool", RAW_TOOLS)
async def test_every_raw_result_is_marked_dangerous(engine: Engine, notes: Path, tool: str) -> None:
    result = await call(engine, tool, **arguments_for(tool, notes, "x\n"))
    assert result.status == "ok", result.text
    assert result.metadata["dangerous_io"] is True


async def test_the_table_does_not_govern_the_sandboxed_file_tools(
    fs: VirtualFS, workspace: Path
) -> None:
    # the file tools reach files through the sandbox's mounts, not host paths: mode = "deny"
    # refuses the raw tools only
    toolkit = Toolkit()
    add_file_tools(toolkit)
    add_raw_text_tools(toolkit)
    policy = host_policy("deny")
    (workspace / "notes.txt").write_text(THREE_LINES)
    async with Engine(toolkit, fs=fs, policy=policy) as engine:
        sandboxed = await call(engine, "read_text_file", path="/workspace/notes.txt")
        raw = await call(engine, "view_text_file", file_path=str(workspace / "notes.txt"))
        request, _ = engine.preview(
            ToolCall(name="read_text_file", arguments={"path": "/workspace/notes.txt"})
        )
    assert sandboxed.status == "ok", sandboxed.text
    assert THREE_LINES in sandboxed.text
    assert "dangerous_io" not in sandboxed.metadata
    assert request.host_paths is False
    assert raw.status == "denied", raw.text
    assert raw.decision is not None
    assert raw.decision.rule == HOST_RULE


# -- the rules still judge the host paths; the strictest word wins ---------------------------


@pytest.mark.parametrize("tool", RAW_TOOLS)
async def test_default_policy_refuses_host_paths_even_when_allowed(
    make: Callable[..., Engine], notes: Path, tool: str
) -> None:
    # the default preset (no table: warn), and the same preset with the table allowing: its
    # rules still say no to host paths outside /workspace and /userinput
    preset = resources.files("stockade.policies.presets").joinpath("default.toml")
    allowing = Policy.from_dict(
        tomllib.loads(preset.read_text("utf-8") + '\n[host_files]\nmode = "allow"\n')
    )
    assert Policy.preset("default").spec.host_files.mode == "warn"
    assert allowing.spec.host_files.mode == "allow"
    for policy in (None, allowing):
        result = await call(make(policy=policy), tool, **arguments_for(tool, notes))
        assert result.status == "denied", result.text
        assert result.decision is not None
        assert result.decision.rule == "outside-namespaces"
        assert result.decision.target == str(notes)
        assert result.metadata["dangerous_io"] is True
        assert THREE_LINES not in result.text
        assert text_of(notes) == THREE_LINES


@pytest.mark.parametrize(
    ("mode", "rule", "status", "effect", "decided_by"),
    [
        ("allow", "deny", "denied", Effect.DENY, "my-notes"),
        ("warn", "deny", "denied", Effect.DENY, "my-notes"),
        ("deny", "allow", "denied", Effect.DENY, HOST_RULE),
        ("warn", "allow", "ok", Effect.WARN, HOST_RULE),
        ("allow", "allow", "ok", Effect.ALLOW, "my-notes"),
        ("allow", "ask", "denied", Effect.DENY, "my-notes"),  # nobody to answer the ask
        ("warn", "ask", "denied", Effect.DENY, "my-notes"),
    ],
)
async def test_the_strictest_of_rules_and_table_wins(
    make: Callable[..., Engine],
    tmp_path: Path,
    notes: Path,
    mode: str,
    rule: str,
    status: str,
    effect: Effect,
    decided_by: str,
) -> None:
    # the default allows: the call itself (a part without a path) never decides
    policy = host_policy(
        mode,
        rules=[{"id": "my-notes", "effect": rule, "paths": [f"{tmp_path}/**"]}],
    )
    result = await call(make(policy=policy), "write_text_file", file_path=str(notes), content="x")
    assert result.status == status, result.text
    assert result.decision is not None
    assert (result.decision.effect, result.decision.rule) == (effect, decided_by)
    assert text_of(notes) == ("x" if status == "ok" else THREE_LINES)


async def test_protected_host_paths_stay_protected(
    make: Callable[..., Engine], tmp_path: Path
) -> None:
    engine = make(policy=PERMISSIVE)
    key = tmp_path / ".ssh" / "id_rsa"
    key.parent.mkdir()
    key.write_text("PRIVATE KEY\n")
    result = await call(engine, "view_text_file", file_path=str(key))
    assert result.status == "denied", result.text
    assert result.decision is not None
    assert result.decision.rule == "dangerous-path"
    assert "PRIVATE KEY" not in result.text


async def test_links_cannot_launder_protected_host_paths(
    make: Callable[..., Engine], tmp_path: Path
) -> None:
    # the raw tools open() host paths, which follows links: the policy must judge where the
    # link leads, as the file tools do, or any protected file is one symlink away
    engine = make(policy=PERMISSIVE)
    key = tmp_path / ".ssh" / "id_rsa"
    key.parent.mkdir()
    key.write_text("PRIVATE KEY\n")
    os.symlink(key, tmp_path / "harmless.txt")
    result = await call(engine, "view_text_file", file_path=str(tmp_path / "harmless.txt"))
    assert result.status == "denied", result.text
    assert "PRIVATE KEY" not in result.text


@pytest.mark.parametrize("path", ["notes.txt", "./notes.txt", "~/notes.txt", ""])
@pytest.mark.parametrize("tool", RAW_TOOLS)
async def test_relative_paths_are_a_validation_error(engine: Engine, tool: str, path: str) -> None:
    result = await call(engine, tool, **arguments_for(tool, path, "x"))
    assert result.status == "error", result.text
    assert result.error is not None
    assert result.error.type == "ArgumentError"
    assert "not absolute" in result.error.message
    assert result.decision is None  # refused before the policy was even asked


# -- what the tools do -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (None, None, THREE_LINES),
        (2, None, "beta\ngamma\n"),
        (None, 2, "alpha\nbeta\n"),
        (2, 2, "beta\n"),
        (1, 99, THREE_LINES),
    ],
    ids=["whole", "start-only", "end-only", "one-line", "end-past-the-end"],
)
async def test_view_text_file_line_ranges(
    engine: Engine, notes: Path, start: int | None, end: int | None, expected: str
) -> None:
    arguments: dict[str, Any] = {"file_path": str(notes)}
    if start is not None:
        arguments["start_line"] = start
    if end is not None:
        arguments["end_line"] = end
    result = await call(engine, "view_text_file", **arguments)
    assert result.status == "ok", result.text
    assert result.text == expected
    assert result.metadata["lines"] == 3


async def test_view_text_file_end_before_start_is_an_error(engine: Engine, notes: Path) -> None:
    result = await call(engine, "view_text_file", file_path=str(notes), start_line=3, end_line=2)
    assert result.status == "error", result.text
    assert result.error is not None
    assert result.error.type == "ValueError"
    assert "end_line 2 is before start_line 3" in result.error.message


async def test_view_text_file_missing_file_is_an_error(engine: Engine, tmp_path: Path) -> None:
    result = await call(engine, "view_text_file", file_path=str(tmp_path / "missing.txt"))
    assert result.status == "error", result.text
    assert result.error is not None
    assert result.error.type == "FileNotFoundError"
    assert result.metadata["dangerous_io"] is True


@pytest.mark.parametrize(
    "content", ["plain\n", "héllo ✓\nno newline at the end"], ids=["ascii", "multi-byte"]
)
async def test_write_text_file_writes_content_and_reports_bytes(
    engine: Engine, tmp_path: Path, notes: Path, content: str
) -> None:
    for target in (tmp_path / "new.txt", notes):  # created, then replaced
        result = await call(engine, "write_text_file", file_path=str(target), content=content)
        assert result.status == "ok", result.text
        size = len(content.encode("utf-8"))
        assert result.metadata["bytes"] == size
        assert result.text == f"wrote {size} bytes to {target}"
        assert text_of(target) == content


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (1, "NEW\nalpha\nbeta\ngamma\n"),
        (2, "alpha\nNEW\nbeta\ngamma\n"),
        (4, "alpha\nbeta\ngamma\nNEW\n"),
    ],
    ids=["start", "middle", "end-len-plus-one"],
)
async def test_insert_text_file_positions(
    engine: Engine, notes: Path, line: int, expected: str
) -> None:
    result = await call(
        engine, "insert_text_file", file_path=str(notes), content="NEW", line_number=line
    )
    assert result.status == "ok", result.text
    assert result.text == f"inserted at line {line} of {notes}"
    assert text_of(notes) == expected


async def test_insert_text_file_completes_an_unterminated_last_line(
    engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "open.txt"
    path.write_text("a\nb")
    result = await call(
        engine, "insert_text_file", file_path=str(path), content="c\n", line_number=3
    )
    assert result.status == "ok", result.text
    assert text_of(path) == "a\nb\nc\n"


@pytest.mark.parametrize("line", [5, 50], ids=["len-plus-two", "far"])
async def test_insert_text_file_past_the_end_is_an_error(
    engine: Engine, notes: Path, line: int
) -> None:
    result = await call(
        engine, "insert_text_file", file_path=str(notes), content="NEW", line_number=line
    )
    assert result.status == "error", result.text
    assert result.error is not None
    assert result.error.type == "ValueError"
    assert f"line {line} is past the end: the file has 3 lines, so use 1 to 4" in (
        result.error.message
    )
    assert text_of(notes) == THREE_LINES


async def test_insert_text_file_line_zero_is_a_validation_error(
    engine: Engine, notes: Path
) -> None:
    result = await call(
        engine, "insert_text_file", file_path=str(notes), content="x", line_number=0
    )
    assert result.status == "error", result.text
    assert result.error is not None
    assert result.error.type == "ArgumentError"
    assert "line_number" in result.error.message
    assert text_of(notes) == THREE_LINES
