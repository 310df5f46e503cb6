"""`Engine.refuse`: a call its caller refused (a framework's own approval said no) is recorded as
every call is, and never runs, whatever the policy says of it now."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from stockade.engine import AuditLog, Engine, ToolCall, Toolkit, read_audit, tool
from stockade.engine.observe.tracing import memory_provider
from stockade.policies import Policy

RAN: list[str] = []


@tool(name="touch")
def touch(name: str) -> str:
    """Record that it ran."""
    RAN.append(name)
    return name


@pytest.mark.parametrize("durability", ["batch", "fsync"])
async def test_a_refused_call_is_recorded_everywhere_and_never_runs(
    tmp_path: Path, durability: str
) -> None:
    toolkit = Toolkit()
    toolkit.add(touch)
    provider, spans = memory_provider()
    heard: list[str] = []
    with AuditLog(tmp_path / "audit.jsonl", durability=durability) as audit:  # type: ignore[arg-type]
        engine = Engine(
            toolkit, policy=Policy.preset("default"), audit=audit, tracer_provider=provider
        )
        engine.calls.add_listener(lambda result: heard.append(result.call_id))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an fsync wait dropped must not warn "never awaited"
            result = engine.refuse(
                ToolCall(name="touch", arguments={"name": "a"}, id="c1"), "no, said Ann"
            )
        audit.flush()
        records = list(read_audit(audit.path, call_id="c1"))
    assert RAN == []
    assert result.status == "denied"
    assert result.decision is not None
    assert result.decision.reason.endswith("no, said Ann")
    assert result.metadata["approval"] == "refused"
    assert [r["kind"] for r in records] == ["intent", "outcome"]
    assert records[0]["effect"] == "allow"  # what the policy said; the caller said no
    assert (records[1]["status"], records[1]["approval"]) == ("denied", "refused")
    assert engine.calls.result("c1") == result
    assert heard == ["c1"]
    [span] = spans.get_finished_spans()
    assert (span.attributes or {})["stockade.status"] == "denied"


async def test_refusing_a_call_the_engine_cannot_judge_records_its_outcome_alone(
    tmp_path: Path,
) -> None:
    with AuditLog(tmp_path / "audit.jsonl") as audit:
        engine = Engine(Toolkit(), audit=audit)
        result = engine.refuse(ToolCall(name="nothing_here", arguments={}, id="c9"), "refused")
        audit.flush()
        records = list(read_audit(audit.path, call_id="c9"))
    assert result.status == "denied"
    assert [r["kind"] for r in records] == ["outcome"]
