"""Peers benchmark: the same trivial allowed tool call through Stockade and through its peers,
as ratios against a direct call of the function, all measured in one run.

    python benchmarks/bench_peers.py            # about 15 seconds
    python benchmarks/bench_peers.py --quick    # a smoke run
    python benchmarks/bench_peers.py --json

    pip install -e '.[bench]'                   # the peers, at the pinned versions

The tool is ``async def noop(x: int) -> int: return x`` everywhere, called with ``x=1`` and
allowed by each library's own policy. Each way is timed in alternating rounds of back-to-back
calls, so machine noise hits all of them alike; the figure is the median µs per call, and the
ratio is against awaiting the function directly. While timing, the objects already alive (the
peers' imports among them) are frozen out of garbage collection, so that collections walk only
what the calls make, for every way alike. A peer that is not installed gets a row saying
so instead of a figure. Each row's note says what the call includes, since the peers do more or
less than Stockade per call: read the notes before the ratios.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import importlib.util
import json
import sys
import tempfile
import textwrap
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import options
from bench_observability import interleaved

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult
from stockade.engine.observe import AuditLog
from stockade.engine.observe.tracing import memory_provider

NOT_INSTALLED = "not installed (pip install -e '.[bench]')"
# the versions of pyproject's "bench" extra, which the notes below were written against
PINNED = {"agentscope": "2.0.11", "toolwarden": "0.1.0", "tollgate": "1.4.0"}


async def noop(x: int) -> int:
    """Return x.

    Args:
        x: Any integer.
    """
    return x


Call = Callable[[], Awaitable[Any]]


@dataclass
class Way:
    """One way to make the call: ``call`` makes it once (timed); ``value`` gets the tool's
    value out of what it returns (untimed: checked to be 1 before timing, so that no way is
    timed on a denial or an error path); ``between`` runs between rounds, untimed."""

    name: str
    library: str
    includes: str
    call: Call | None = None
    value: Callable[[Any], Any] = field(default=lambda returned: returned)
    between: Callable[[], None] = field(default=lambda: None)
    status: str = "ok"


def installed(module: str) -> str | None:
    """The installed version of ``module``'s distribution, or None when it is missing."""
    if importlib.util.find_spec(module) is None:
        return None
    return importlib.metadata.version(module)


def version_of(library: str) -> str | None:
    """What the table shows as a way's version: Python's for the direct call."""
    if library == "python":
        return sys.version.split()[0]
    try:
        return importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        return None


# -- Stockade ----------------------------------------------------------------------------------


def stockade_ways(tmp: Path, stack: AsyncExitStack) -> list[Way]:
    """Stockade bare, with the audit log, and with the audit log and a span (closed by
    ``stack``)."""
    toolkit = Toolkit()
    toolkit.add(noop)
    call = ToolCall(name="noop", arguments={"x": 1})
    audit = AuditLog(tmp / "stockade-audit.jsonl")
    both_audit = AuditLog(tmp / "stockade-both.jsonl")
    traced, spans = memory_provider()
    plain = Engine(toolkit)  # no policy given: the default preset
    audited = Engine(toolkit, audit=audit)
    both = Engine(toolkit, audit=both_audit, tracer_provider=traced)
    for log in (audit, both_audit):
        stack.callback(log.close)  # runs last: the engines are closed first
    for engine in (plain, audited, both):
        stack.push_async_callback(engine.aclose)

    def via(engine: Engine) -> Call:
        async def run() -> ToolResult:
            return await engine.call(call)

        return run

    def value(result: ToolResult) -> Any:
        return int(result.text) if result.ok else result.text

    checks = (
        "name lookup, argument validation against the schema, policy decision (default "
        "preset), timeout and retry policy, ToolResult, call history"
    )
    return [
        Way("Stockade Engine.call", "stockade", checks + "; no audit, no span", via(plain),
            value),
        Way("Stockade + audit", "stockade",
            "as above + 2 hash-chained audit records per call (intent, outcome), batched to a "
            "file", via(audited), value),
        # the in-memory exporter keeps every span: emptied between rounds, untimed
        Way("Stockade + audit + span", "stockade",
            "as above + 1 OpenTelemetry span per call (in-memory exporter)", via(both), value,
            between=spans.clear),
    ]  # fmt: skip


# -- AgentScope --------------------------------------------------------------------------------


def agentscope_ways() -> list[Way]:
    """``Toolkit.call_tool`` on its own, and with what AgentScope's agent does before it."""
    from agentscope._utils._common import _json_loads_with_repair
    from agentscope.message import ToolCallBlock
    from agentscope.permission import (
        PermissionBehavior,
        PermissionContext,
        PermissionEngine,
        PermissionRule,
    )
    from agentscope.state import AgentState
    from agentscope.tool import FunctionTool
    from agentscope.tool import Toolkit as AgentScopeToolkit
    from jsonschema import validate

    # FunctionTool is typed as wanting a tool that returns a ToolChunk, but it converts any
    # other return value itself (_convert_func_result_to_chunk): the same noop as everywhere
    toolkit = AgentScopeToolkit(tools=[FunctionTool(cast(Any, noop))])
    state = AgentState()
    # the model's call, as AgentScope receives it: arguments are a JSON string
    block = ToolCallBlock(id="call-1", name="noop", input='{"x": 1}')
    permissions = PermissionEngine(PermissionContext())
    permissions.add_rule(
        PermissionRule(
            tool_name="noop", rule_content=None, behavior=PermissionBehavior.ALLOW, source="bench"
        )
    )

    async def call_tool() -> Any:
        response: Any = None
        async for response in toolkit.call_tool(block, state):  # noqa: B007 - the last is the result
            pass
        return response

    def value(response: Any) -> Any:
        return json.loads(response.content[0].text) if response.content else response

    async def as_agent() -> Any:
        # what the agent (ReActAgent._execute_tool_call) does before call_tool: look the tool
        # up, parse and repair the arguments, validate them, ask the permission engine
        tool = await toolkit.check_tool_available(block.name, state.tool_context.activated_groups)
        arguments = _json_loads_with_repair(block.input, tool.input_schema)
        validate(arguments, tool.input_schema)
        decision = await permissions.check_permission(tool, arguments)
        if decision.behavior != PermissionBehavior.ALLOW:
            return decision
        return await call_tool()

    return [
        Way(
            "AgentScope Toolkit.call_tool",
            "agentscope",
            "rebuilds the available-tool table, parses the JSON argument string and runs "
            "json_repair on it with the schema (a jsonschema check, types repaired where it "
            "can; arguments it cannot fix still reach the tool), wraps the result in pydantic "
            "ToolChunk/ToolResponse; no rejection of bad arguments, no permission check (the "
            "agent does both before call_tool), no audit, no timeout",
            call_tool,
            value,
        ),
        Way(
            "AgentScope, as its agent calls",
            "agentscope",
            "the agent's steps before call_tool: tool lookup, parse + repair, "
            "jsonschema.validate (which checks the schema against its metaschema every call: "
            "most of the time), PermissionEngine (default mode, 1 allow rule); then call_tool "
            "as above; no audit, no timeout, not the agent's events or context writes",
            as_agent,
            value,
        ),
    ]


# -- toolwarden --------------------------------------------------------------------------------


def toolwarden_ways(tmp: Path, stack: AsyncExitStack) -> list[Way]:
    """A guard from ``Gate.wrap``, without and with an audit sink."""
    import toolwarden

    def allow_noop(facts: toolwarden.Facts) -> toolwarden.Verdict:
        return toolwarden.Allow()

    # the decorator, applied by hand: mypy sees the peer as untyped when it is not installed
    allow = toolwarden.policy("allow-noop", tools=["noop"])(allow_noop)

    principal = {"agent": "bench"}
    bare = toolwarden.Gate([allow], [], tools=["noop"])
    guard = bare.wrap({"noop": noop}, principal=principal)["noop"]
    # toolwarden logs through an on_decision sink the host writes: this one appends the
    # library's own audit line (canonical JSON with its sha256) to a buffered file
    log = stack.enter_context((tmp / "toolwarden-audit.jsonl").open("a", encoding="utf-8"))

    def sink(call: toolwarden.ToolCall, decision: toolwarden.Decision) -> None:
        log.write(decision.record_line(ts=datetime.now(UTC).isoformat()) + "\n")

    audited = toolwarden.Gate([allow], [], tools=["noop"], on_decision=sink)
    audited_guard = audited.wrap({"noop": noop}, principal=principal)["noop"]
    decides = (
        "binds the arguments to the signature (no type validation), runs 1 policy function, "
        "mints a uuid4 decision id, then awaits the tool inline"
    )
    return [
        Way("toolwarden Gate.wrap guard", "toolwarden", decides + "; no audit, no timeout",
            lambda: guard(x=1)),
        Way("toolwarden + audit line", "toolwarden",
            "as above + its audit line per decision (record_line: canonical JSON body, "
            "sha256, then loaded and dumped again; not chained), written by our on_decision "
            "sink to a buffered file", lambda: audited_guard(x=1)),
    ]  # fmt: skip


# -- tollgate ----------------------------------------------------------------------------------

POLICY = """\
version: "1"
rules:
  - id: allow-noop
    tool: noop
    decision: ALLOW
"""

MANIFEST = """\
version: "1"
tools:
  noop:
    effect: read
    resource_type: number
    params_schema:
      type: object
      required: [x]
      properties:
        x: {type: integer}
"""


def tollgate_ways(tmp: Path, stack: AsyncExitStack) -> list[Way]:
    """``ControlTower.execute_async`` with a sink that drops events, and with its JSONL sink."""
    import tollgate

    (tmp / "policy.yaml").write_text(POLICY)
    (tmp / "manifest.yaml").write_text(MANIFEST)
    registry = tollgate.ToolRegistry(tmp / "manifest.yaml")
    policy = tollgate.YamlPolicyEvaluator(tmp / "policy.yaml")
    agent = tollgate.AgentContext(agent_id="bench", version="1", owner="bench")
    intent = tollgate.Intent(action="call", reason="benchmark")
    arguments = {"x": 1}

    class Drop:
        """An audit sink that keeps nothing: the tower requires one."""

        def emit(self, event: tollgate.AuditEvent) -> None:
            pass

    jsonl = stack.enter_context(tollgate.JsonlAuditSink(tmp / "tollgate-audit.jsonl"))

    def via(tower: tollgate.ControlTower) -> Call:
        async def run() -> Any:
            # per call, as its adapters do: trusted metadata from the registry, then a request
            effect, resource_type, version = registry.resolve_tool("noop")
            request = tollgate.ToolRequest(
                tool="noop",
                action="call",
                resource_type=resource_type,
                effect=effect,
                params=arguments,
                manifest_version=version,
            )
            return await tower.execute_async(agent, intent, request, lambda: noop(**arguments))

        return run

    quiet = tollgate.ControlTower(policy, tollgate.AutoApprover(), Drop(), registry=registry)
    logged = tollgate.ControlTower(policy, tollgate.AutoApprover(), jsonl, registry=registry)
    decides = (
        "registry lookup, sha256 of the canonical request, uuid4, YAML-rule policy, its own "
        "schema check of the parameters, then awaits the tool inline"
    )
    return [
        Way("tollgate ControlTower", "tollgate",
            decides + "; audit event built but dropped (a sink is required), no timeout",
            via(quiet)),
        Way("tollgate + JSONL audit", "tollgate",
            "as above + its JsonlAuditSink: 1 record per call (dataclasses.asdict, most of "
            "the cost, then json.dumps; not chained), line-buffered: 1 write() per call",
            via(logged)),
    ]  # fmt: skip


# -- the run -----------------------------------------------------------------------------------


def peer_ways(
    module: str, label: str, make: Callable[[], list[Way]], names: list[str]
) -> list[Way]:
    """The peer's ways, or one row per way saying why it cannot run (not installed, or its
    API does not work as this script expects)."""
    if installed(module) is None:
        return [Way(name, module, NOT_INSTALLED, status="not installed") for name in names]
    try:
        return make()
    except Exception as exc:  # another version's API: report it in the table, not a crash
        why = f"{label} {installed(module)} did not set up: {type(exc).__name__}: {exc}"
        return [Way(name, module, why, status="error") for name in names]


async def measure(quick: bool) -> list[dict[str, Any]]:
    rounds, per_round = (3, 150) if quick else (15, 1000)
    async with AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        ways = [
            Way("direct await", "python", "the function itself: no lookup, no checks",
                lambda: noop(1)),
            *stockade_ways(tmp, stack),
            *peer_ways("agentscope", "AgentScope", agentscope_ways,
                       ["AgentScope Toolkit.call_tool", "AgentScope, as its agent calls"]),
            *peer_ways("toolwarden", "toolwarden", lambda: toolwarden_ways(tmp, stack),
                       ["toolwarden Gate.wrap guard", "toolwarden + audit line"]),
            *peer_ways("tollgate", "tollgate", lambda: tollgate_ways(tmp, stack),
                       ["tollgate ControlTower", "tollgate + JSONL audit"]),
        ]  # fmt: skip
        for way in ways:
            if way.call is None:
                continue
            try:
                value = way.value(await way.call())
            except Exception as exc:
                value = f"{type(exc).__name__}: {exc}"
            if value != 1:  # never time a denial or an error path
                way.status = "error"
                way.includes = f"the call did not return 1: {value!r}"[:300]
                way.call = None
        timed = [way for way in ways if way.call is not None]

        def between() -> None:
            for way in timed:
                way.between()

        # AgentScope's import alone brings ~100,000 objects (openai, anthropic, mcp ...) that
        # every full collection would walk, before each round and during it: frozen, the
        # collections walk what the calls make, for all the ways alike
        gc.freeze()
        try:
            figures = await interleaved(
                [way.call for way in timed if way.call is not None], rounds, per_round, between
            )
        finally:
            gc.unfreeze()
    us = {way.name: figure for way, figure in zip(timed, figures, strict=True)}
    direct = us["direct await"]
    rows = []
    for way in ways:
        figure = us.get(way.name)
        version = version_of(way.library)
        pinned = PINNED.get(way.library)
        if pinned and version and version != pinned:
            way.includes = f"[{version} installed, not the pinned {pinned}] {way.includes}"
        rows.append(
            {"measure": way.name, "library": way.library, "version": version,
             "pinned": pinned, "status": way.status,
             "us": None if figure is None else round(figure, 3),
             "ratio": None if figure is None else round(figure / direct, 2),
             "includes": way.includes}
        )  # fmt: skip
    return rows


def run(quick: bool) -> list[dict[str, Any]]:
    return asyncio.run(measure(quick))


def ratio_text(ratio: float | None) -> str:
    """A ratio as read at a glance: 0.004x, 1.16x, 12.5x, 874x."""
    if ratio is None:
        return ""
    if ratio >= 100:
        return f"{ratio:.0f}x"
    if ratio >= 10:
        return f"{ratio:.1f}x"
    if ratio >= 0.1:
        return f"{ratio:.2f}x"
    return f"{ratio:.2g}x"


def table(rows: list[dict[str, Any]]) -> None:
    print("{:32} {:>10} {:>10} {:>9}  {}".format("way", "version", "µs/call", "vs direct", "note"))
    for r in rows:
        figure = "" if r["us"] is None else f"{r['us']:.2f}"
        lines = textwrap.wrap(r["includes"], 70) or [""]
        print(
            f"{r['measure']:32} {r['version'] or '-':>10} {figure:>10} "
            f"{ratio_text(r['ratio']):>9}  {lines[0]}"
        )
        for line in lines[1:]:
            print(f"{'':66}{line}")


if __name__ == "__main__":
    sys.exit(options.main(__doc__, "peers", run, table, "same trivial allowed call"))
