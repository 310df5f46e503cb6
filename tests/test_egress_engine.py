"""The policy's ``[network]`` table through the engine: commands reach the hosts it allows,
unlisted ones are refused or asked about (once per call, for the session, or always), and
every connection is in the audit log and the call's span."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from net_hosts import TestHost, TestNet
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from stockade.engine import AuditLog, Engine, ToolCall, Toolkit, tool
from stockade.engine.builtin.shell import add_shell_tools
from stockade.policies import Decision, Policy
from stockade.sandbox import Bubblewrap, Mount, VirtualFS, run_process_async

pytestmark = pytest.mark.skipif(
    not Bubblewrap.probe().available, reason="bubblewrap is needed to box commands"
)


class Hosts:
    def __init__(self, fake_net: TestNet) -> None:
        self.allowed: TestHost = fake_net.host("allowed.test")
        self.other: TestHost = fake_net.host("other.test")

    def policy(self, **network: Any) -> Policy:
        table = {
            "allow": ["allowed.test"],
            "hosts": {"allowed.test": self.allowed.address, "other.test": self.other.address},
            "reach_private": [f"{self.allowed.address}/32", f"{self.other.address}/32"],
            **network,
        }
        return Policy.from_dict({"default": "allow", "network": table})


@pytest.fixture(scope="module")
def hosts(fake_net: TestNet) -> Iterator[Hosts]:
    return Hosts(fake_net)


def _engine(policy: Policy, tmp_path: Path, **kwargs: Any) -> Engine:
    toolkit = Toolkit()
    add_shell_tools(toolkit)
    (tmp_path / "ws").mkdir(exist_ok=True)
    fs = VirtualFS([Mount("/workspace", tmp_path / "ws")])
    return Engine(toolkit, policy=policy, fs=fs, **kwargs)


def _curl(host: str, n: int = 0) -> ToolCall:
    return ToolCall(
        id=f"c{host}{n}",
        name="run_shell",
        arguments={"command": f"curl -sS http://{host}/hello.txt"},
    )


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_allowed_and_refused_connections_are_in_the_audit_log_and_the_span(
    hosts: Hosts, tmp_path: Path
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    audit = AuditLog(tmp_path / "audit.jsonl")
    command = "curl -sS http://allowed.test/hello.txt; curl -sS http://other.test/hello.txt"
    async with _engine(hosts.policy(), tmp_path, audit=audit, tracer_provider=provider) as engine:
        result = await engine.call(
            ToolCall(id="1", name="run_shell", arguments={"command": command})
        )
    audit.close()
    assert "hello from allowed.test" in result.text
    assert "hello from other.test" not in result.text
    assert "refused: other.test:80: rule network.unlisted" in result.text
    (outcome,) = [r for r in _records(tmp_path / "audit.jsonl") if r.get("connections")]
    by_host = {c["host"]: c for c in outcome["connections"]}
    assert by_host["allowed.test"]["allowed"] is True
    assert by_host["allowed.test"]["bytes_received"] > 0
    assert by_host["allowed.test"]["address"] == hosts.allowed.address
    assert by_host["other.test"]["allowed"] is False
    assert "network.unlisted" in by_host["other.test"]["reason"]
    (span,) = [s for s in exporter.get_finished_spans() if s.name.endswith("run_shell")]
    events = {e.name: dict(e.attributes or {}) for e in span.events}
    assert events["connection allowed"]["host"] == "allowed.test"
    assert events["connection refused"]["host"] == "other.test"


async def test_a_denied_host_is_refused_even_when_listed(hosts: Hosts, tmp_path: Path) -> None:
    policy = hosts.policy(allow=["*.test"], deny=["other.test"])
    async with _engine(policy, tmp_path) as engine:
        result = await engine.call(_curl("other.test"))
    assert "hello from" not in result.text
    assert "network.deny" in result.text


class Approver:
    def __init__(self, *answers: bool | str) -> None:
        self.answers = list(answers)
        self.asked: list[Decision] = []

    def __call__(self, call: ToolCall, decision: Decision) -> bool | str:
        self.asked.append(decision)
        return self.answers.pop(0)


async def test_an_ask_for_the_call_holds_for_that_call_only(hosts: Hosts, tmp_path: Path) -> None:
    approver = Approver(True, False)
    policy = hosts.policy(unlisted="ask")
    twice = "curl -sS http://other.test/hello.txt; curl -sS http://other.test/hello.txt"
    async with _engine(policy, tmp_path, approver=approver) as engine:
        first = await engine.call(ToolCall(id="1", name="run_shell", arguments={"command": twice}))
        second = await engine.call(_curl("other.test"))
    assert first.text.count("hello from other.test") == 2
    assert "hello from other.test" not in second.text
    assert len(approver.asked) == 2  # once per call, however many connections
    assert approver.asked[0].rule == "network.unlisted"
    assert "other.test" in (approver.asked[0].target or approver.asked[0].reason)


async def test_an_ask_for_the_session_is_not_asked_again(hosts: Hosts, tmp_path: Path) -> None:
    approver = Approver("session")
    async with _engine(hosts.policy(unlisted="ask"), tmp_path, approver=approver) as engine:
        results = [await engine.call(_curl("other.test", n)) for n in range(2)]
    assert all("hello from other.test" in r.text for r in results)
    assert len(approver.asked) == 1


async def test_an_ask_answered_always_is_kept_for_the_next_engine(
    hosts: Hosts, tmp_path: Path
) -> None:
    kept = tmp_path / "state" / "approved-hosts.json"
    policy = hosts.policy(unlisted="ask")
    approver = Approver("always")
    async with _engine(policy, tmp_path, approver=approver, approved_hosts=kept) as engine:
        await engine.call(_curl("other.test"))
    assert json.loads(kept.read_text()) == {"always": ["other.test:80"]}
    nobody = Approver()
    async with _engine(policy, tmp_path, approver=nobody, approved_hosts=kept) as engine:
        result = await engine.call(_curl("other.test", 1))
    assert "hello from other.test" in result.text
    assert nobody.asked == []


async def test_an_ask_with_nobody_to_answer_is_refused(hosts: Hosts, tmp_path: Path) -> None:
    async with _engine(hosts.policy(unlisted="ask"), tmp_path) as engine:
        result = await engine.call(_curl("other.test"))
    assert "hello from other.test" not in result.text
    assert "nobody can answer" in result.text


async def test_a_command_tool_that_takes_no_egress_gets_no_network(
    hosts: Hosts, tmp_path: Path
) -> None:
    """A tool written before the table existed passes the policy's ``network`` setting: under
    a ``[network]`` table that must not open every host."""

    @tool(command="command")
    async def old_shell(command: str, fs: VirtualFS) -> str:
        policy = hosts.policy()
        result = await run_process_async(command, fs=fs, timeout=30, network=policy.process.network)
        return result.stdout + result.stderr

    toolkit = Toolkit()
    toolkit.add(old_shell)
    (tmp_path / "ws").mkdir()
    fs = VirtualFS([Mount("/workspace", tmp_path / "ws")])
    marks = hosts.other.mark()
    async with Engine(toolkit, policy=hosts.policy(), fs=fs) as engine:
        command = f"curl -sS --max-time 5 http://{hosts.other.address}/hello.txt"
        result = await engine.call(
            ToolCall(id="1", name="old_shell", arguments={"command": command})
        )
    assert "hello from" not in result.text
    await asyncio.sleep(0.1)
    assert hosts.other.received()[marks:] == []
