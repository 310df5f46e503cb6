"""The raw text tools (seed 001): host files by host path, behind STOCKADE_DANGEROUS_TEXT_IO.

They are never registered by default; when registered, the environment switch decides at every
call (deny | warn | allow, default warn, anything else refuses), and the policy still judges the
host paths. Everything runs through a real `Engine` on real files in tmp_path.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult
from stockade.engine.filetools import add_file_tools
from stockade.engine.rawtext import ENV, add_raw_text_tools
from stockade.policies import Effect, Policy

RAW_TOOLS = ("view_text_file", "write_text_file", "insert_text_file")
# The default preset refuses every path outside /workspace and /userinput, so these tests use a
# policy that allows host paths (and protects none) unless they test the default on purpose.
HOST_POLICY = Policy.from_dict({"default": "allow", "dangerous_paths": {"replace": []}})
THREE_LINES = "alpha\nbeta\ngamma\n"

# -- helpers ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _switch_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with the switch unset (whatever the developer's shell says)."""
    monkeypatch.delenv(ENV, raising=False)


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., Engine]]:
    """A factory of engines over a toolkit holding the raw tools; closed afterwards."""
    made: list[Engine] = []

    def factory(policy: Policy | None = HOST_POLICY) -> Engine:
        toolkit = Toolkit()
        add_raw_text_tools(toolkit)
        engine = Engine(toolkit, policy=policy)
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


async def call(engine: Engine, name: str, **arguments: Any) -> ToolResult:
    return await engine.call(ToolCall(name=name, arguments=arguments))


def raw_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == "stockade.engine" and r.levelno == logging.WARNING
    ]


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
    assert len(names) == 10
    assert not names & set(RAW_TOOLS)


async def test_calling_an_unregistered_raw_tool_is_an_unknown_tool(
    tmp_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "allow")
    toolkit = Toolkit()
    add_file_tools(toolkit)
    async with Engine(toolkit, policy=HOST_POLICY) as engine:
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
        assert registered_tool.permission_check is not None  # the switch is checked every call
        assert "file_path" in registered_tool.parameters["required"]


# -- the environment switch ------------------------------------------------------------------

SWITCH = [
    (None, Effect.WARN, True),
    ("warn", Effect.WARN, True),
    ("WARN", Effect.WARN, True),
    ("allow", Effect.ALLOW, False),
    (" ALLOW ", Effect.ALLOW, False),
]


@pytest.mark.parametrize(
    ("value", "effect", "warned"),
    SWITCH,
    ids=["unset-means-warn", "warn", "upper-case-warn", "allow", "padded-upper-case-allow"],
)
async def test_switch_lets_the_call_run(
    engine: Engine,
    notes: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    value: str | None,
    effect: Effect,
    warned: bool,
) -> None:
    if value is not None:
        monkeypatch.setenv(ENV, value)
    with caplog.at_level(logging.WARNING, logger="stockade.engine"):
        result = await call(engine, "view_text_file", file_path=str(notes))
    assert result.status == "ok", result.text
    assert result.text == THREE_LINES
    assert result.metadata["dangerous_io"] is True
    assert result.decision is not None
    assert result.decision.effect is effect
    records = raw_warnings(caplog)
    if warned:
        assert len(records) == 1
        assert "view_text_file" in records[0].getMessage()
        assert "outside the sandbox" in records[0].getMessage()
        assert result.decision.rule == f"{ENV}=warn"
        assert result.metadata["warnings"] == [
            "view_text_file reaches host files outside the sandbox"
        ]
    else:
        assert records == []
        assert "warnings" not in result.metadata


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("deny", f"set {ENV}=warn or allow to permit it"),
        (" Deny ", f"set {ENV}=warn or allow to permit it"),
        ("yes", f"{ENV} is 'yes', not one of deny, warn, allow"),
        ("", f"{ENV} is '', not one of deny, warn, allow"),
        ("alow", f"{ENV} is 'alow', not one of deny, warn, allow"),
        ("1", "not one of deny, warn, allow"),
    ],
    ids=["deny", "padded-deny", "yes", "empty", "misspelt-allow", "one"],
)
@pytest.mark.parametrize("tool", RAW_TOOLS)
async def test_switch_refuses(
    engine: Engine,
    tmp_path: Path,
    notes: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    value: str,
    fragment: str,
    tool: str,
) -> None:
    monkeypatch.setenv(ENV, value)
    arguments: dict[str, Any] = {"file_path": str(notes)}
    if tool == "view_text_file":
        arguments["start_line"] = 1
    else:
        arguments["content"] = "pwned\n"
    if tool == "insert_text_file":
        arguments["line_number"] = 1
    with caplog.at_level(logging.WARNING, logger="stockade.engine"):
        result = await call(engine, tool, **arguments)
    assert result.status == "denied", result.text
    assert result.decision is not None
    assert result.decision.effect is Effect.DENY
    assert result.decision.rule is not None
    assert result.decision.rule.startswith(f"{ENV}=")
    assert result.error is not None
    assert result.error.type == "PermissionDeniedError"
    assert fragment in result.error.message
    assert result.attempts == 0
    assert THREE_LINES not in result.text
    assert text_of(notes) == THREE_LINES  # nothing written
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]
    assert raw_warnings(caplog) == []


async def test_switch_is_read_at_every_call(
    engine: Engine, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "allow")
    first = await call(engine, "view_text_file", file_path=str(notes))
    monkeypatch.setenv(ENV, "deny")
    second = await call(engine, "view_text_file", file_path=str(notes))
    monkeypatch.delenv(ENV)
    third = await call(engine, "view_text_file", file_path=str(notes))
    assert [first.status, second.status, third.status] == ["ok", "denied", "ok"]
    assert third.decision is not None
    assert third.decision.effect is Effect.WARN


@pytest.mark.parametrize("tool", RAW_TOOLS)
async def test_every_raw_result_is_marked_dangerous(
    engine: Engine, notes: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    monkeypatch.setenv(ENV, "allow")
    arguments: dict[str, Any] = {"file_path": str(notes)}
    if tool != "view_text_file":
        arguments["content"] = "x\n"
    if tool == "insert_text_file":
        arguments["line_number"] = 1
    result = await call(engine, tool, **arguments)
    assert result.status == "ok", result.text
    assert result.metadata["dangerous_io"] is True


# -- the policy still judges the host paths --------------------------------------------------


@pytest.mark.parametrize("tool", RAW_TOOLS)
async def test_default_policy_refuses_host_paths_even_when_allowed(
    make: Callable[..., Engine],
    tmp_path: Path,
    notes: Path,
    monkeypatch: pytest.MonkeyPatch,
    tool: str,
) -> None:
    monkeypatch.setenv(ENV, "allow")  # the switch says yes; the default policy still says no
    engine = make(policy=None)
    arguments: dict[str, Any] = {"file_path": str(notes)}
    if tool != "view_text_file":
        arguments["content"] = "pwned\n"
    if tool == "insert_text_file":
        arguments["line_number"] = 1
    result = await call(engine, tool, **arguments)
    assert result.status == "denied", result.text
    assert result.decision is not None
    assert result.decision.rule == "outside-namespaces"
    assert result.decision.target == str(notes)
    assert THREE_LINES not in result.text
    assert text_of(notes) == THREE_LINES


async def test_protected_host_paths_stay_protected(
    make: Callable[..., Engine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "allow")
    engine = make(policy=Policy.preset("permissive"))  # everything but protected paths
    key = tmp_path / ".ssh" / "id_rsa"
    key.parent.mkdir()
    key.write_text("PRIVATE KEY\n")
    result = await call(engine, "view_text_file", file_path=str(key))
    assert result.status == "denied", result.text
    assert result.decision is not None
    assert result.decision.rule == "dangerous-path"
    assert "PRIVATE KEY" not in result.text


async def test_links_cannot_launder_protected_host_paths(
    make: Callable[..., Engine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the raw tools open() host paths, which follows links: the policy must judge where the
    # link leads, as the file tools do, or any protected file is one symlink away
    monkeypatch.setenv(ENV, "allow")
    engine = make(policy=Policy.preset("permissive"))
    key = tmp_path / ".ssh" / "id_rsa"
    key.parent.mkdir()
    key.write_text("PRIVATE KEY\n")
    os.symlink(key, tmp_path / "harmless.txt")
    result = await call(engine, "view_text_file", file_path=str(tmp_path / "harmless.txt"))
    assert result.status == "denied", result.text
    assert "PRIVATE KEY" not in result.text


@pytest.mark.parametrize("path", ["notes.txt", "./notes.txt", "~/notes.txt", ""])
@pytest.mark.parametrize("tool", RAW_TOOLS)
async def test_relative_paths_are_a_validation_error(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, tool: str, path: str
) -> None:
    monkeypatch.setenv(ENV, "allow")
    arguments: dict[str, Any] = {"file_path": path}
    if tool != "view_text_file":
        arguments["content"] = "x"
    if tool == "insert_text_file":
        arguments["line_number"] = 1
    result = await call(engine, tool, **arguments)
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
    engine: Engine,
    notes: Path,
    monkeypatch: pytest.MonkeyPatch,
    start: int | None,
    end: int | None,
    expected: str,
) -> None:
    monkeypatch.setenv(ENV, "allow")
    arguments: dict[str, Any] = {"file_path": str(notes)}
    if start is not None:
        arguments["start_line"] = start
    if end is not None:
        arguments["end_line"] = end
    result = await call(engine, "view_text_file", **arguments)
    assert result.status == "ok", result.text
    assert result.text == expected
    assert result.metadata["lines"] == 3


async def test_view_text_file_missing_file_is_an_error(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "allow")
    result = await call(engine, "view_text_file", file_path=str(tmp_path / "missing.txt"))
    assert result.status == "error", result.text
    assert result.error is not None
    assert result.error.type == "FileNotFoundError"


@pytest.mark.parametrize(
    "content", ["plain\n", "héllo ✓\nno newline at the end"], ids=["ascii", "multi-byte"]
)
async def test_write_text_file_writes_content_and_reports_bytes(
    engine: Engine, tmp_path: Path, notes: Path, monkeypatch: pytest.MonkeyPatch, content: str
) -> None:
    monkeypatch.setenv(ENV, "allow")
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
    engine: Engine, notes: Path, monkeypatch: pytest.MonkeyPatch, line: int, expected: str
) -> None:
    monkeypatch.setenv(ENV, "allow")
    result = await call(
        engine, "insert_text_file", file_path=str(notes), content="NEW", line_number=line
    )
    assert result.status == "ok", result.text
    assert result.text == f"inserted at line {line} of {notes}"
    assert text_of(notes) == expected


async def test_insert_text_file_completes_an_unterminated_last_line(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "allow")
    path = tmp_path / "open.txt"
    path.write_text("a\nb")
    result = await call(
        engine, "insert_text_file", file_path=str(path), content="c\n", line_number=3
    )
    assert result.status == "ok", result.text
    assert text_of(path) == "a\nb\nc\n"


@pytest.mark.parametrize("line", [5, 50], ids=["len-plus-two", "far"])
async def test_insert_text_file_past_the_end_is_an_error(
    engine: Engine, notes: Path, monkeypatch: pytest.MonkeyPatch, line: int
) -> None:
    monkeypatch.setenv(ENV, "allow")
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
    engine: Engine, notes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "allow")
    result = await call(
        engine, "insert_text_file", file_path=str(notes), content="x", line_number=0
    )
    assert result.status == "error", result.text
    assert result.error is not None
    assert result.error.type == "ArgumentError"
    assert "line_number" in result.error.message
    assert text_of(notes) == THREE_LINES
