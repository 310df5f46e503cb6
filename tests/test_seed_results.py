"""What an agent and its program are told of calls: the tool state for the system prompt, and the
``dangerous_io`` marker on every call of the raw host-file tools.

3. ``engine.prompt_state()``: the active groups' notes and every call still without a result
   (an external tool's call waiting for `Engine.complete`, a call submitted to run in the
   background), each with its id, tool, short arguments and since when; "" when there is
   nothing to say. ``engine.pending_calls()`` gives the same as data.
4. A call of a raw text tool is marked ``dangerous_io`` however it ends: a call the policy
   denies (by a rule or by the ``[host_files]`` mode), one an approver refuses, and one stopped
   at its arguments carry it in the result and in the audit records, so filtering by the
   marker finds the blocked attempts as well as the allowed ones.

Everything runs through a real `Engine`, real tools and a real audit log in tmp_path.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import until

from stockade.engine import (
    AuditLog,
    Engine,
    PermissionDeniedError,
    ToolCall,
    Toolkit,
    ToolResult,
    read_audit,
    tool,
)
from stockade.engine.builtin.host_files import add_raw_text_tools
from stockade.policies import Policy

# -- 3. the tool state for the system prompt ---------------------------------------------------


@tool(external=True)
def ask_person(question: str, api_key: str) -> str:
    """Ask a person; they answer later, outside the engine."""
    raise AssertionError("an external tool's body never runs")


def agent_toolkit() -> Toolkit:
    toolkit = Toolkit()
    toolkit.add(ask_person, presets={"api_key": "SECRET-KEY"})
    toolkit.create_group(
        "db", "Database tools.", active=True, notes="Queries are read-only; use LIMIT."
    )
    toolkit.create_group("mail", "Mail tools.", notes="Never send without asking.")
    return toolkit


async def test_an_engine_with_nothing_to_say_gives_an_empty_state() -> None:
    """Empty-safe: a program may append the state to its prompt unconditionally."""
    toolkit = Toolkit()
    toolkit.add(ask_person)
    async with Engine(toolkit) as engine:
        assert engine.prompt_state() == ""
        assert engine.pending_calls() == []


async def test_the_prompt_shows_a_pending_external_call_until_it_is_completed() -> None:
    """ "show the tool state in the system prompt, including the pending asynchronous calls":
    the active groups and their notes, and the waiting call by id, tool and arguments, since
    when it waits and for how long. A preset (an API key) is never shown. Once completed, the
    call is gone from the state."""
    async with Engine(agent_toolkit()) as engine:
        call = ToolCall(name="ask_person", arguments={"question": "Ship on Friday?"}, id="c-1")
        pending = await engine.call(call)
        assert pending.status == "pending"

        [waiting] = engine.pending_calls()
        assert (waiting.call_id, waiting.tool, waiting.state) == ("c-1", "ask_person", "external")
        assert waiting.arguments == '{"question":"Ship on Friday?"}'
        assert waiting.since is not None

        state = engine.prompt_state(now=waiting.since + 42)
        assert "Active tool groups: basic, db." in state
        assert "Inactive (their tools cannot be called now): mail." in state
        assert "## db\nQueries are read-only; use LIMIT." in state
        assert "Never send without asking." not in state  # an inactive group's notes
        assert "## Pending tool calls" in state
        line = next(x for x in state.splitlines() if x.startswith("- c-1"))
        assert line.startswith('- c-1: ask_person {"question":"Ship on Friday?"} (carried out')
        assert line.endswith(", 42 s)")
        assert " since 20" in line
        assert " UTC" in line
        assert "SECRET-KEY" not in state

        engine.complete("c-1", "yes")
        assert engine.pending_calls() == []
        assert "Pending" not in engine.prompt_state()
        assert "## db" in engine.prompt_state()


async def test_a_call_submitted_to_the_background_is_pending_while_it_runs() -> None:
    """An asynchronous call ("submitted to the task queue; the agent goes on without waiting")
    shows as running in the background, with since when, until its result arrives."""
    release = asyncio.Event()

    async def crawl(site: str) -> str:
        """Crawl a site (slow)."""
        await release.wait()
        return f"crawled {site}"

    toolkit = Toolkit()
    toolkit.add(crawl)
    async with Engine(toolkit) as engine:
        task = engine.submit(ToolCall(name="crawl", arguments={"site": "example.org"}, id="bg"))
        await until(lambda: engine.pending_calls() != [])
        [running] = engine.pending_calls()
        assert (running.call_id, running.state) == ("bg", "submitted")
        assert running.since is not None
        state = engine.prompt_state()
        assert '- bg: crawl {"site":"example.org"} (running in the background since' in state

        release.set()
        assert (await task).text == "crawled example.org"
        assert engine.pending_calls() == []
        assert engine.prompt_state() == ""


async def test_long_arguments_are_cut_and_ages_read_in_larger_units() -> None:
    async with Engine(agent_toolkit()) as engine:
        await engine.call(ToolCall(name="ask_person", arguments={"question": "x" * 500}, id="c"))
        [waiting] = engine.pending_calls()
        assert len(waiting.arguments) == 160
        assert waiting.arguments.endswith("...")
        assert waiting.since is not None
        assert engine.prompt_state(now=waiting.since + 600).endswith(", 10 min)")
        assert engine.prompt_state(now=waiting.since + 5 * 3600).endswith(", 5.0 h)")


@tool(external=True)
def hand_over(**details: Any) -> None:
    """Hand the details to a person."""


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(details=st.dictionaries(st.text(min_size=1), JSON, max_size=5))
def test_any_arguments_show_as_one_short_line_of_text(details: dict[str, Any]) -> None:
    """Whatever a model sent (any JSON: nested, multi-line text, integers past 64 bits), a
    pending call shows as one line of at most 160 characters that can be sent as UTF-8."""

    async def pending_state() -> str:
        toolkit = Toolkit()
        toolkit.add(hand_over, include_var_keyword=True)
        async with Engine(toolkit) as engine:
            result = await engine.call(ToolCall(name="hand_over", arguments=details, id="h"))
            assert result.status == "pending", result.text
            [waiting] = engine.pending_calls()
            assert len(waiting.arguments) <= 160
            return engine.prompt_state()

    state = asyncio.run(pending_state())
    [line] = [x for x in state.splitlines() if x.startswith("- h: hand_over ")]
    line.encode("utf-8")


# -- 4. the dangerous_io marker on refused raw text I/O ----------------------------------------


def host_policy(mode: str, **extra: Any) -> Policy:
    """Host paths allowed by the rules; ``[host_files] mode`` as given."""
    return Policy.from_dict(
        {"default": "allow", "dangerous_paths": {"replace": []}, "host_files": {"mode": mode}}
        | extra
    )


def marked(log: Path) -> list[dict[str, Any]]:
    """The audit records that carry the marker."""
    return [r for r in read_audit(log) if r.get("dangerous_io") is True]


async def run_audited(
    tmp_path: Path, policy: Policy, arguments: dict[str, Any], **options: Any
) -> tuple[ToolResult, Path]:
    toolkit = Toolkit()
    add_raw_text_tools(toolkit)
    log_path = tmp_path / "audit.jsonl"
    with AuditLog(log_path) as log:
        async with Engine(toolkit, policy=policy, audit=log, **options) as engine:
            result = await engine.call(
                ToolCall(name="view_text_file", arguments=arguments, id="attempt")
            )
    return result, log_path


def refuse(call: ToolCall, decision: object) -> bool:
    raise PermissionDeniedError("not today")


@pytest.mark.parametrize(
    ("policy", "options", "rule"),
    [
        (host_policy("deny"), {}, "host-files"),
        (Policy.preset("default"), {}, "outside-namespaces"),
        (
            host_policy("allow", rules=[{"id": "ask-host", "tools": ["view_*"], "effect": "ask"}]),
            {"approver": refuse},
            "ask-host",
        ),
    ],
    ids=["host-files-mode-deny", "policy-rule-deny", "approver-refuses"],
)
async def test_a_refused_raw_text_call_is_marked_in_its_result_and_audit_records(
    tmp_path: Path, policy: Policy, options: dict[str, Any], rule: str
) -> None:
    """ "allow: permitted (ToolResponse.metadata is still marked dangerous_io)", and so is
    every refusal: the denied call's result says ``dangerous_io``, and filtering the audit
    log by the marker finds both the intent and the outcome of the blocked attempt."""
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret\n")
    result, log = await run_audited(tmp_path, policy, {"file_path": str(secret)}, **options)

    assert result.status == "denied"
    assert result.decision is not None
    assert result.decision.rule == rule
    assert result.metadata["dangerous_io"] is True
    assert result.notes is not None
    assert result.notes.dangerous_io
    found = marked(log)
    assert [(r["kind"], r["call_id"]) for r in found] == [
        ("intent", "attempt"),
        ("outcome", "attempt"),
    ]
    assert found[1]["status"] == "denied"


async def test_a_raw_text_call_stopped_at_its_arguments_is_marked_too(tmp_path: Path) -> None:
    """An attempt refused before any decision (a relative path, which the raw tools never
    take) is an attempt at host files all the same: marked in the result and the record."""
    result, log = await run_audited(tmp_path, host_policy("allow"), {"file_path": "etc/passwd"})
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ArgumentError"
    assert result.metadata == {"dangerous_io": True}
    [record] = marked(log)
    assert (record["kind"], record["status"], record["call_id"]) == ("outcome", "error", "attempt")


async def test_an_allowed_raw_text_call_is_marked_as_before(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    result, log = await run_audited(tmp_path, host_policy("allow"), {"file_path": str(notes)})
    assert result.status == "ok"
    assert result.text == "hello\n"
    assert result.metadata["dangerous_io"] is True
    assert [r["kind"] for r in marked(log)] == ["intent", "outcome"]


async def test_calls_of_other_tools_carry_no_marker(tmp_path: Path) -> None:
    """The marker means host files: a denied or failed call of an ordinary tool has none."""

    def shout(text: str) -> str:
        return text.upper()

    toolkit = Toolkit()
    toolkit.add(shout)
    with AuditLog(tmp_path / "audit.jsonl") as log:
        async with Engine(
            toolkit, policy=Policy.from_dict({"default": "deny"}), audit=log
        ) as engine:
            denied = await engine.call(ToolCall(name="shout", arguments={"text": "hi"}))
            bad = await engine.call(ToolCall(name="shout", arguments={"text": 3}))
    assert (denied.status, bad.status) == ("denied", "error")
    assert "dangerous_io" not in denied.metadata
    assert "dangerous_io" not in bad.metadata
    assert marked(tmp_path / "audit.jsonl") == []
