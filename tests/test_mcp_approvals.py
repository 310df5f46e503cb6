"""Answering an ask over MCP, as a client of the SDK's own meets it, in both protocol eras (the
handshake's mid-call elicitation and 2026-07-28's ``InputRequiredResult``): the form offers no,
once, and each suggested approval for the session or always; an older yes/no answer still works;
and a call that runs with a warning says so in its result.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp_types._v2025_11_25 import PrimitiveSchemaDefinition
from pydantic import TypeAdapter

from stockade.engine import Engine, Toolkit
from stockade.engine.builtin import add_file_tools
from stockade.engine.mcp.served import CHOICE, approval_schema
from stockade.engine.mcp.server import McpService, to_mcp_result
from stockade.engine.messages import ToolResult
from stockade.policies import Decision, Effect, Policy
from stockade.policies.policy_file import ApprovalSpec
from stockade.policies.suggestions import Suggestion
from stockade.sandbox import Mount, VirtualFS

MODES = ["legacy", "auto"]  # auto settles on 2026-07-28 with an in-process server
POLICY = """\
version = 1
default = "allow"

[[rules]]
id = "ask-src"
effect = "ask"
tools = ["write_file"]
actions = ["write"]
paths = ["src/**"]

[[rules]]
id = "careful-docs"
effect = "warn"
reason = "docs are reviewed by hand"
tools = ["write_file"]
actions = ["write"]
paths = ["docs/**"]
"""
Answer = Callable[[types.ElicitRequestFormParams], types.ElicitResult]


class Asked:
    """The elicitation callback: records each form and answers it with ``answer``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.forms: list[types.ElicitRequestFormParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.forms.append(params)
        return self.answer(params)

    def choices(self, form: int = 0) -> dict[str, str]:
        """The choices of a form, value to title."""
        field = self.forms[form].requested_schema["properties"][CHOICE]
        return {option["const"]: option["title"] for option in field["oneOf"]}


def choose(content: dict[str, Any]) -> Answer:
    return lambda params: types.ElicitResult(action="accept", content=content)


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "stockade.toml"
    path.write_text(POLICY, encoding="utf-8")
    return path


@pytest.fixture
async def service(tmp_path: Path, policy_file: Path) -> AsyncIterator[McpService]:
    (tmp_path / "ws").mkdir()
    toolkit = Toolkit()
    add_file_tools(toolkit)
    with VirtualFS([Mount("/workspace", tmp_path / "ws")]) as fs:
        async with Engine(toolkit, policy=Policy.load(policy_file), fs=fs) as engine:
            yield McpService(engine)


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def _write(client: Client, path: str, content: str = "x") -> types.CallToolResult:
    return await client.call_tool("write_file", {"path": path, "content": content})


@pytest.mark.parametrize("mode", MODES)
async def test_session_1_approves_and_the_same_call_is_not_asked_again(
    service: McpService, tmp_path: Path, mode: str
) -> None:
    asked = Asked(choose({CHOICE: "session:1"}))
    async with Client(service.server, mode=mode, elicitation_callback=asked) as client:
        first = await _write(client, "src/a.py", "one")
        again = await _write(client, "src/a.py", "two")
        other = await _write(client, "src/b.py")  # the narrowest approval: src/a.py alone
    assert not first.is_error, _text(first)
    assert not again.is_error, _text(again)
    assert (tmp_path / "ws" / "src" / "a.py").read_text() == "two"
    assert len(asked.forms) == 2  # the first call and src/b.py; never the repeat
    assert asked.choices() == {
        "no": "No: refuse this call",
        "once": "Yes, this call only",
        "session:1": "Yes, for this session: writing `src/a.py`",
        "always:1": "Yes, always (added to stockade.toml): writing `src/a.py`",
        "session:2": "Yes, for this session: writing `src/**`",
        "always:2": "Yes, always (added to stockade.toml): writing `src/**`",
    }
    assert not other.is_error
    assert "[[approvals]]" not in (tmp_path / "stockade.toml").read_text()


@pytest.mark.parametrize("mode", MODES)
async def test_always_2_is_written_to_the_policy_file(
    service: McpService, policy_file: Path, mode: str
) -> None:
    asked = Asked(choose({CHOICE: "always:2"}))
    async with Client(service.server, mode=mode, elicitation_callback=asked) as client:
        first = await _write(client, "src/a.py")
        deeper = await _write(client, "src/deep/b.py")
    assert not first.is_error
    assert not deeper.is_error
    assert len(asked.forms) == 1
    kept = Policy.load(policy_file).spec.approvals  # the file still loads, approval and all
    assert [spec.paths for spec in kept] == [["src/**"]]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "answer",
    [
        choose({CHOICE: "no"}),
        choose({CHOICE: "no", "approve": True}),  # the choice made wins over the old field
        choose({}),
        lambda params: types.ElicitResult(action="decline"),
    ],
    ids=["no", "no-over-approve", "nothing", "declined"],
)
async def test_no_refuses(service: McpService, tmp_path: Path, mode: str, answer: Answer) -> None:
    asked = Asked(answer)
    async with Client(service.server, mode=mode, elicitation_callback=asked) as client:
        refused = await _write(client, "src/a.py")
    assert refused.is_error
    assert "refused by the approver" in _text(refused)
    assert not (tmp_path / "ws" / "src" / "a.py").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_an_older_yes_no_answer_still_approves_the_call_once(
    service: McpService, tmp_path: Path, mode: str
) -> None:
    asked = Asked(choose({"approve": True}))
    async with Client(service.server, mode=mode, elicitation_callback=asked) as client:
        first = await _write(client, "src/a.py", "one")
        again = await _write(client, "src/a.py", "two")
    assert not first.is_error
    assert not again.is_error
    assert len(asked.forms) == 2  # a yes for the call only: asked again
    assert (tmp_path / "ws" / "src" / "a.py").read_text() == "two"


@pytest.mark.parametrize("mode", MODES)
async def test_a_choice_that_was_not_offered_refuses_saying_so(
    service: McpService, mode: str
) -> None:
    asked = Asked(choose({CHOICE: "always:9"}))
    async with Client(service.server, mode=mode, elicitation_callback=asked) as client:
        refused = await _write(client, "src/a.py")
    assert refused.is_error
    assert "'always:9' is none of those offered" in _text(refused)


@pytest.mark.parametrize("mode", MODES)
async def test_a_protected_path_offers_only_no_and_once(service: McpService, mode: str) -> None:
    asked = Asked(choose({CHOICE: "once"}))
    async with Client(service.server, mode=mode, elicitation_callback=asked) as client:
        written = await _write(client, ".env", "KEY=1")
    assert not written.is_error
    assert list(asked.choices()) == ["no", "once"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_warn_decision_reaches_the_client_in_the_result(
    service: McpService, mode: str
) -> None:
    async with Client(service.server, mode=mode) as client:
        warned = await _write(client, "docs/guide.md")
        plain = await _write(client, "notes.txt")
    assert not warned.is_error
    assert "warning (rule careful-docs): docs are reviewed by hand" in _text(warned)
    assert _text(warned).count("docs are reviewed by hand") == 1  # said once
    assert "warning" not in _text(plain)


def test_other_warnings_are_shown_too() -> None:
    decision = Decision(Effect.ALLOW, "workspace-files", "allowed")
    result = ToolResult(
        call_id="c1",
        tool="write_file",
        status="ok",
        decision=decision,
        metadata={"warnings": ["kept for now"]},
    )
    assert [c.text for c in to_mcp_result(result).content] == ["ok", "warning: kept for now"]


PRIMITIVE = TypeAdapter[Any](PrimitiveSchemaDefinition)


@pytest.mark.parametrize("titled", [True, False])
def test_the_form_is_one_the_mcp_schema_accepts(titled: bool) -> None:
    spec = ApprovalSpec(id="-", subjects=["mcp"], tools=["t"], actions=["call"])
    schema = approval_schema([Suggestion("tool", "calling t", (spec,))], None, titled=titled)
    for field in schema["properties"].values():
        PRIMITIVE.validate_python(field)  # raises for a field no client has to accept
    choice = schema["properties"][CHOICE]
    values = [o["const"] for o in choice["oneOf"]] if titled else choice["enum"]
    assert values == ["no", "once", "session:1", "always:1"]
    if not titled:  # the 2025-06-18 spelling names each value too
        assert choice["enumNames"][3] == (
            "Yes, always (no policy file: kept while the server runs): calling t"
        )
