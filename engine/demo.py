"""`stockade demo`: a short scripted agent session through the real engine.

Every step is a real call through `Engine`: typed validation, hidden presets, a parallel batch
of read-only calls, a retry, a timeout, a stream, calls parsed from an XML-speaking model, a
permission hook that refuses, and the bad input an untrusted agent produces. Each step states
the status it should end with, so the demo doubles as a smoke test (its exit code says whether
every step behaved).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from pydantic import BaseModel, Field

from engine.calls import Status, ToolCall, ToolResult
from engine.context import Emitter, ToolContext
from engine.engine import Engine
from engine.formats import xml
from engine.tool import ToolBase, tool
from engine.toolkit import Toolkit
from policies import Decision, Effect

_FORECASTS = {
    "Paris": "light rain, 14°C",
    "Lagos": "sunny, 31°C",
    "Oslo": "snow, -3°C",
    "Lima": "cloudy, 19°C",
}


@tool(read_only=True)
async def weather(city: str) -> str:
    """Today's forecast for a city.

    Args:
        city: City name, e.g. Paris.
    """
    await asyncio.sleep(0.2)  # a slow upstream service: four of these in parallel take 0.2 s
    if city not in _FORECASTS:
        raise LookupError(f"no forecast for {city!r}; known cities: {', '.join(_FORECASTS)}")
    return _FORECASTS[city]


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First addend.
        b: Second addend.
    """
    return a + b


def search(query: str, limit: int = 3, api_key: str = "") -> list[str]:
    """Search the demo index.

    Args:
        query: Words to look for.
        limit: Most results to return.
    """
    if api_key != "demo-key":
        raise PermissionError("search called without the preset API key")
    return [f"{query} result {n}" for n in range(1, limit + 1)]


class _Flaky:
    """An upstream that drops the first connection, like real networks do."""

    def __init__(self) -> None:
        self.calls = 0

    @tool(idempotent=True)
    async def fetch_status(self, service: str) -> str:
        """Fetch a service's status page.

        Args:
            service: Service name.
        """
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError(f"connection to {service} reset by peer")
        return f"{service}: all systems operational"


@tool(timeout=0.5)
async def build_report() -> str:
    """Build the quarterly report (this one never finishes)."""
    await asyncio.sleep(3600)
    return "unreachable"


@tool(read_only=True)
async def count_down(start: int) -> AsyncIterator[str]:
    """Count down, one number at a time.

    Args:
        start: Where to start.
    """
    for n in range(start, 0, -1):
        await asyncio.sleep(0.02)
        yield f"{n}… "
    yield "lift-off"


async def index_files(count: int, emitter: Emitter) -> str:
    """Index files, reporting progress.

    Args:
        count: How many files.
    """
    for n in range(1, count + 1):
        await asyncio.sleep(0.01)
        emitter.emit(f"indexed {n}/{count}")
    return f"{count} files indexed"


class _DeleteArgs(BaseModel):
    record_id: int = Field(description="Id of the record to delete.")


class DeleteRecord(ToolBase):
    """Delete a customer record. Records below 100 are protected; others need approval."""

    name = "delete_record"
    args_model = _DeleteArgs
    destructive = True

    def check_permissions(self, args: dict[str, Any], ctx: ToolContext) -> Decision:
        if args["record_id"] < 100:
            return Decision(Effect.DENY, "protected-records", "records below 100 are protected")
        return Decision(Effect.ASK, "destructive-needs-approval", "deleting data needs approval")

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return f"record {args['record_id']} deleted"


class _Notes:
    """Notes kept in memory under logical paths (the file tools arrive with the sandbox)."""

    def __init__(self) -> None:
        self.saved: dict[str, str] = {}

    @tool(paths={"path": "write"}, idempotent=True)
    def save_note(self, path: str, text: str) -> str:
        """Save a note.

        Args:
            path: Where, e.g. notes/todo.md (relative to /workspace).
            text: What to write.
        """
        self.saved[path] = text
        return f"saved {len(text)} characters to {path}"


@tool
def divide(a: float, b: float) -> float:
    """Divide a by b.

    Args:
        a: Dividend.
        b: Divisor.
    """
    return a / b


_XML_REPLY = """I'll add those and then check the weather.
<tool_call>
  <name>add</name>
  <params>
    <a><![CDATA[40]]></a>
    <b><![CDATA[2]]></b>
  </params>
</tool_call>
<tool_call>
  <name>weather</name>
  <params><city><![CDATA[Oslo]]></city></params>
</tool_call>"""


@dataclass(slots=True)
class DemoStep:
    """One row of the demo: what the agent tried, and the status it should get."""

    label: str
    expected: Status
    result: ToolResult | None = None
    chunks: int = 0

    @property
    def as_expected(self) -> bool:
        """Whether the engine did what the step expects."""
        return self.result is not None and self.result.status == self.expected


@dataclass(slots=True)
class DemoReport:
    """Everything the demo did."""

    steps: list[DemoStep] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """Whether every step ended as expected."""
        return all(s.as_expected for s in self.steps)


def build_toolkit() -> Toolkit:
    """The demo's tools."""
    toolkit = Toolkit()
    for fn in (weather, add, build_report, count_down, index_files, divide):
        toolkit.add(fn)
    toolkit.add(search, presets={"api_key": "demo-key"})
    toolkit.add_object(_Flaky())
    toolkit.add_object(_Notes())
    toolkit.add(DeleteRecord())
    return toolkit


async def run_demo(on_step: Callable[[DemoStep], None] | None = None) -> DemoReport:
    """Run the scripted session; ``on_step`` hears each step as it completes."""
    report = DemoReport()
    started = perf_counter()

    def done(step: DemoStep) -> None:
        report.steps.append(step)
        if on_step is not None:
            on_step(step)

    def approve(call: ToolCall, decision: Decision) -> bool:
        # the demo's "user" approves deleting records and refuses everything else asked about
        return call.name == "delete_record"

    async with Engine(build_toolkit(), approver=approve) as engine:

        async def one(label: str, expected: Status, name: str, arguments: Any) -> None:
            step = DemoStep(label, expected)
            step.result = await engine.call(ToolCall(name=name, arguments=arguments))
            done(step)

        await one("a typed call", "ok", "add", {"a": 2, "b": 3})
        await one("arguments as a model's JSON text", "ok", "add", '{"a": "7", "b": 8}')
        await one(
            "a preset the model tries to override",
            "ok",
            "search",
            {"query": "stockade", "api_key": "stolen"},
        )

        cities = ("Paris", "Lagos", "Oslo", "Lima")
        batch = [ToolCall(name="weather", arguments={"city": c}) for c in cities]
        batch_started = perf_counter()
        results = await engine.call_many(batch)
        wall = perf_counter() - batch_started
        for city, result in zip(cities, results, strict=True):
            done(DemoStep(f"parallel read-only batch ({city}, {wall:.2f}s wall)", "ok", result))

        await one("a flaky upstream, retried", "ok", "fetch_status", {"service": "billing"})
        await one("a tool that hangs, stopped by its timeout", "timeout", "build_report", {})

        for label, name, arguments in (
            ("a streamed generator", "count_down", {"start": 3}),
            ("progress from an emitter", "index_files", {"count": 4}),
        ):
            step = DemoStep(label, "ok")
            async with contextlib.aclosing(
                engine.stream(ToolCall(name=name, arguments=arguments))
            ) as stream:
                async for chunk in stream:
                    if chunk.is_last:
                        step.result = chunk.result
                    else:
                        step.chunks += 1
            done(step)

        for call in xml.parse_tool_calls(_XML_REPLY, toolkit=engine.toolkit):
            step = DemoStep(f"from an XML-speaking model: {call.name}", "ok")
            step.result = await engine.call(call)
            done(step)

        await one(
            "a note in the workspace", "ok", "save_note", {"path": "notes/todo.md", "text": "x"}
        )
        await one(
            "a note into .env (the user says no)",
            "denied",
            "save_note",
            {"path": ".env", "text": "x"},
        )
        await one(
            "a note spelled to escape the workspace",
            "denied",
            "save_note",
            {"path": "notes/../../etc/passwd", "text": "x"},
        )
        await one("a destructive call the user approves", "ok", "delete_record", {"record_id": 512})
        await one("a protected record", "denied", "delete_record", {"record_id": 7})
        await one("a tool that does not exist", "error", "rm_rf_everything", {})
        await one("arguments of the wrong type", "error", "add", {"a": "two", "b": 3})
        await one("arguments that are not JSON", "error", "add", "{a: 1,")
        await one("an extra argument", "error", "add", {"a": 1, "b": 2, "sudo": True})
        await one("a tool that raises", "error", "divide", {"a": 1, "b": 0})

    report.seconds = perf_counter() - started
    return report
