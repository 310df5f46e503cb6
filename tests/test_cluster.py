"""Sessions as Ray actors on a real local Ray cluster (`cluster_support.LocalCluster`: a head
without cores and two worker nodes of one core each, started once for the module, about 5 s),
driven through `ClusterSessions`: placement by resources, calls by id, listeners, streams, the
policy enforced on the node, drain, close, and a node killed under a running call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from time import perf_counter

import pytest
from cluster_support import LocalCluster
from hypothesis import given
from hypothesis import strategies as st

from stockade import ConfigurationError, ToolCall, ToolResult
from stockade.engine import ToolChunk
from stockade.engine.cluster import (
    ClusterSessions,
    SessionSpec,
    UnknownSessionError,
)
from stockade.engine.errors import UnknownCallError
from stockade.policies import PRESETS, PolicyError

pytestmark = pytest.mark.slow  # a Ray cluster started for the module (CI runs these all the same)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(workers=2) as started:
        yield started


@pytest.fixture
async def sessions(cluster: LocalCluster) -> AsyncIterator[ClusterSessions]:
    async with ClusterSessions() as opened:
        yield opened


def spec(workspace: Path, **fields: object) -> SessionSpec:
    """A small session (a quarter of a core), unless told otherwise."""
    given: dict[str, object] = {"workspace": str(workspace), "cores": 0.25, "memory_mb": 64}
    given.update(fields)
    return SessionSpec.model_validate(given)


def shell(command: str, call_id: str | None = None) -> ToolCall:
    extra = {"id": call_id} if call_id else {}
    return ToolCall(name="run_shell", arguments={"command": command}, **extra)  # type: ignore[arg-type]


def read(path: str, call_id: str | None = None) -> ToolCall:
    extra = {"id": call_id} if call_id else {}
    return ToolCall(name="read_text_file", arguments={"path": path}, **extra)  # type: ignore[arg-type]


# -- placement ---------------------------------------------------------------------------------


async def test_two_sessions_needing_a_whole_node_each_land_on_different_nodes(
    sessions: ClusterSessions, cluster: LocalCluster, tmp_path: Path
) -> None:
    first = await sessions.open(spec(tmp_path, cores=1))
    second = await sessions.open(spec(tmp_path, cores=1))
    assert {first.node_id, second.node_id} == set(cluster.node_ids())
    rows = {row.id: row for row in await sessions.list()}
    assert rows[first.id].node_id == first.node_id
    assert rows[first.id].state == "open"
    assert rows[second.id].node_ip  # where it runs, by IP too
    # no core is left anywhere: a third whole-core session cannot be placed, and says so
    with pytest.raises(ConfigurationError, match="no node took the session"):
        await sessions.open(spec(tmp_path, cores=1, open_timeout=1.5))


async def test_a_session_pinned_to_a_node_runs_there(
    sessions: ClusterSessions, cluster: LocalCluster, tmp_path: Path
) -> None:
    for node in cluster.node_ids():
        session = await sessions.open(spec(tmp_path, node_id=node))
        assert session.node_id == node


async def test_a_bad_spec_is_refused_at_open_saying_what_is_wrong(
    sessions: ClusterSessions, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="not valid TOML"):
        await sessions.open(spec(tmp_path, policy="[[rules]\nnot toml"))
    with pytest.raises(ConfigurationError, match="neither a preset"):
        await sessions.open(spec(tmp_path, policy="defualt"))
    with pytest.raises(PolicyError):
        await sessions.open(spec(tmp_path, policy='version = 1\ndefault = "maybe"\n'))
    with pytest.raises(ConfigurationError, match="does not exist"):
        await sessions.open(spec(tmp_path / "missing"))
    with pytest.raises(ConfigurationError, match="inside the workspace"):
        await sessions.open(spec(tmp_path, state=str(tmp_path / "state")))
    with pytest.raises(UnknownSessionError, match="no session 's-none'"):
        await sessions.close("s-none")
    assert await sessions.list() == []  # nothing half-opened is left behind


# -- the spec, without a cluster ----------------------------------------------------------------

BUILTIN = ("CPU", "GPU", "memory", "object_store_memory")


@given(
    st.dictionaries(
        st.sampled_from([*BUILTIN, "doomed", "gpu_a100", "zone-1"]),
        st.floats(min_value=-2, max_value=8, allow_nan=False),
        max_size=4,
    )
)
def test_a_spec_takes_custom_resources_of_positive_amounts_and_nothing_ray_reserves_itself(
    resources: dict[str, float],
) -> None:
    fine = all(name not in BUILTIN and amount > 0 for name, amount in resources.items())
    if fine:
        assert SessionSpec(workspace="/w", resources=resources).resources == resources
    else:
        with pytest.raises(ValueError, match=r"resource|cores / memory_mb"):
            SessionSpec(workspace="/w", resources=resources)


@given(st.text(min_size=1, max_size=40))
def test_a_policy_is_a_store_url_a_preset_or_toml_text_never_a_guess(text: str) -> None:
    made = SessionSpec(workspace="/w", policy=text)
    if text.startswith(("postgresql://", "postgres://", "postgresql+psycopg2://")):
        assert made.policy_kind == "store"  # passed through to Policy.from_store, on the node
    elif text in PRESETS:
        assert made.policy_kind == "preset"
    else:
        assert made.policy_kind == "toml"
        # a bad policy is an error of ours saying so (any other exception fails the test)
        with contextlib.suppress(ConfigurationError, PolicyError):
            made.load_policy()


# -- calls -------------------------------------------------------------------------------------


async def test_calls_run_on_the_node_under_the_policy_and_into_its_audit_log(
    sessions: ClusterSessions, tmp_path: Path
) -> None:
    work, state = tmp_path / "work", tmp_path / "state"
    work.mkdir()
    (work / ".env").write_text("KEEP=1")
    session = await sessions.open(spec(work, policy="default", state=str(state)))
    wrote = await session.call(
        ToolCall(name="write_file", arguments={"path": "notes.txt", "content": "from a node"})
    )
    assert wrote.status == "ok", wrote.text
    assert (work / "notes.txt").read_text() == "from a node"
    # the default preset asks before .env; no approver on the node: denied, file untouched
    denied = await session.call(
        ToolCall(name="write_file", arguments={"path": ".env", "content": "KEEP=0"})
    )
    assert denied.status == "denied"
    assert denied.decision is not None
    assert denied.decision.rule == "dangerous-path"
    assert (work / ".env").read_text() == "KEEP=1"
    escaped = await session.call(read("/workspace/../etc/passwd"))
    assert escaped.status == "denied"
    await sessions.close(session.id)  # the audit log is written out on close
    audit = (state / "audit.jsonl").read_text()
    assert wrote.call_id in audit
    assert denied.call_id in audit


async def test_a_toml_policy_text_is_enforced_on_the_node(
    sessions: ClusterSessions, tmp_path: Path
) -> None:
    policy = 'version = 1\ndefault = "allow"\n\n[[rules]]\nid = "no-logs"\neffect = "deny"\n'
    policy += 'actions = ["write"]\npaths = ["/workspace/logs/**"]\nreason = "logs are kept"\n'
    (tmp_path / "logs").mkdir()
    session = await sessions.open(spec(tmp_path, policy=policy))
    denied = await session.call(
        ToolCall(name="write_file", arguments={"path": "logs/a.log", "content": "x"})
    )
    assert denied.status == "denied"
    assert denied.decision is not None
    assert denied.decision.rule == "no-logs"
    assert not (tmp_path / "logs" / "a.log").exists()


async def test_submitted_calls_resolve_by_id_and_reach_the_listeners_as_they_finish(
    sessions: ClusterSessions, tmp_path: Path
) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.txt").write_text(f"text of {name}")
    session = await sessions.open(spec(tmp_path, tools=("cluster_tools:wait_then_say",)))
    heard: list[ToolResult] = []
    session.on_result(heard.append)
    slow = ToolCall(name="wait_then_say", arguments={"seconds": 1.0, "text": "slow"}, id="slow")
    calls = [slow, read("a.txt", "ra"), read("b.txt", "rb"), read("c.txt", "rc")]
    for call in calls:
        session.submit(call)
    assert session.in_flight == ["slow", "ra", "rb", "rc"]  # in flight at once
    results = {cid: await session.result(cid) for cid in ("rc", "slow", "ra", "rb")}
    assert results["slow"].text == "slow"
    for name in ("a", "b", "c"):
        assert results[f"r{name}"].text == f"text of {name}"  # each result is its own call's
    assert [r.call_id for r in heard][-1] == "slow"  # heard as it finished, the slow one last
    assert sorted(r.call_id for r in heard) == ["ra", "rb", "rc", "slow"]  # each heard once
    assert session.in_flight == []
    row = (await sessions.list())[0]
    assert (row.in_flight, row.done) == (0, 4)
    with pytest.raises(UnknownCallError):
        await session.result("never-sent")


async def test_a_stream_delivers_chunks_in_order_as_they_come(
    sessions: ClusterSessions, tmp_path: Path
) -> None:
    session = await sessions.open(spec(tmp_path, tools=("cluster_tools:count_slowly",)))
    call = ToolCall(name="count_slowly", arguments={"n": 5, "pause_s": 0.2})
    arrivals: list[float] = []
    pieces: list[str] = []
    async for chunk in session.stream(call):
        arrivals.append(perf_counter())
        if chunk.is_last:
            assert chunk.result is not None
            assert chunk.result.ok, chunk.result
            break
        pieces.append("".join(getattr(block, "text", "") for block in chunk.content))
    assert pieces == [f"piece {i}\n" for i in range(5)]
    # delivered as made, not all at the end: the first came long before the last
    assert arrivals[-1] - arrivals[0] > 0.5
    assert (await session.result(call.id)).ok


# -- drain, close ------------------------------------------------------------------------------


async def test_drain_refuses_new_calls_and_waits_for_those_in_flight(
    sessions: ClusterSessions, tmp_path: Path
) -> None:
    session = await sessions.open(spec(tmp_path, tools=("cluster_tools:wait_then_say",)))
    running = session.submit(
        ToolCall(name="wait_then_say", arguments={"seconds": 1.0, "text": "finished"})
    )
    draining = asyncio.create_task(sessions.drain(session.id))
    await asyncio.sleep(0.1)
    refused = await session.call(read("x.txt"))
    assert refused.status == "error"
    assert refused.error is not None
    assert "draining" in refused.error.message
    assert "not run" in refused.error.message
    info = await draining
    assert (await running).text == "finished"  # drain waited for it
    assert (info.state, info.in_flight, info.done) == ("draining", 0, 2)


async def test_close_cancels_the_calls_in_flight_and_kills_the_actor(
    sessions: ClusterSessions, tmp_path: Path
) -> None:
    session = await sessions.open(spec(tmp_path, tools=("cluster_tools:wait_then_say",)))
    running = session.submit(
        ToolCall(name="wait_then_say", arguments={"seconds": 60, "text": "never"})
    )
    await asyncio.sleep(0.3)
    started = perf_counter()
    info = await sessions.close(session.id)
    assert perf_counter() - started < 10
    result = await running
    assert result.status == "cancelled"  # recorded as cancelled by the engine on the node
    assert info.state == "closed"
    assert info.in_flight == 0
    later = await session.call(read("x.txt"))
    assert later.status == "error"
    assert "is closed" in later.text


# -- a node that dies --------------------------------------------------------------------------


async def test_a_node_killed_mid_call_ends_its_calls_as_errors_and_leaves_others_working(
    sessions: ClusterSessions, cluster: LocalCluster, tmp_path: Path
) -> None:
    kept_node = cluster.node_ids()[0]
    doomed_node = cluster.add_worker(resources={"doomed": 1})
    survivor = await sessions.open(spec(tmp_path, node_id=kept_node))
    doomed = await sessions.open(
        spec(
            tmp_path,
            resources={"doomed": 1},
            policy="permissive",
            tools=("cluster_tools:count_slowly",),
        )
    )
    assert doomed.node_id == doomed_node.node_id != survivor.node_id
    running = doomed.submit(shell("sleep 20"))  # a command, boxed on the node
    streamed = ToolCall(name="count_slowly", arguments={"n": 100, "pause_s": 0.2})
    chunks_seen: list[ToolChunk] = []
    started = 0.0
    async with contextlib.aclosing(doomed.stream(streamed)) as chunks:
        async for chunk in chunks:
            chunks_seen.append(chunk)
            if len(chunks_seen) == 3:  # both calls are running on the node now
                cluster.remove(doomed_node)
                started = perf_counter()
    result = await asyncio.wait_for(running, 15)
    took = perf_counter() - started
    assert took < 10, took  # within seconds, not the 20 s of the command
    assert result.status == "error"
    assert result.error is not None
    message = result.error.message
    assert result.error.type == "SessionLostError"
    assert doomed.id in message
    assert doomed.node_id in message
    assert "died" in message
    assert "unknown" in message
    assert "NOT re-run" in message
    assert (await sessions.get(doomed.id).result(result.call_id)) is result
    # the stream ended too, its last chunk the same loss, long before its 100 pieces
    last = chunks_seen[-1]
    assert last.is_last
    assert last.result is not None
    assert last.result.status == "error"
    assert "NOT re-run" in last.result.text
    assert len(chunks_seen) < 50
    rows = {row.id: row for row in await sessions.list()}
    assert rows[doomed.id].state == "dead"
    assert rows[doomed.id].in_flight == 0
    quick = perf_counter()
    later = await doomed.call(read("a.txt"))
    assert perf_counter() - quick < 0.5  # refused at once, never sent
    assert later.status == "error"
    assert "not run" in later.text
    (tmp_path / "still.txt").write_text("alive")
    assert (await survivor.call(read("still.txt"))).text == "alive"
    assert rows[survivor.id].state == "open"
    # Ray may still place an actor on the dead node until it finds it dead: sessions opened
    # now open all the same, on a live node (one placed on the dead node is placed again)
    for _ in range(3):
        fresh = await sessions.open(spec(tmp_path))
        assert fresh.node_id != doomed_node.node_id
        assert (await fresh.call(read("still.txt"))).text == "alive"


async def test_a_session_follows_the_policy_store(
    sessions: ClusterSessions, postgres_url: str, tmp_path: Path
) -> None:
    """A session opened with a policy store's URL decides on its node by the newest policy
    pushed to the store, as every engine following it does."""
    from stockade.policies import Policy
    from stockade.policies.store import PolicyStore

    store = PolicyStore(postgres_url)
    store.push(Policy.preset("default"))
    session = await sessions.open(spec(tmp_path, policy=postgres_url))
    write = ToolCall(name="write_file", arguments={"path": "a.txt", "content": "x"})
    assert (await session.call(write)).ok
    await asyncio.sleep(3)  # the node's watcher subscribes about two seconds after the start
    store.push(Policy.preset("read-only"))
    pushed = perf_counter()
    while (await session.call(write)).status != "denied":
        assert perf_counter() - pushed < 5, "the session never took the pushed policy"
        await asyncio.sleep(0.05)
    assert perf_counter() - pushed < 1.5
    store.close()


# -- review: ids reused, opens cancelled, tools by name, outcomes said --------------------------


async def test_a_call_id_reused_after_its_result_resolves_to_the_new_calls_result(
    sessions: ClusterSessions, tmp_path: Path
) -> None:
    session = await sessions.open(spec(tmp_path, tools=("cluster_tools:wait_then_say",)))
    first = ToolCall(name="wait_then_say", arguments={"seconds": 0, "text": "first"}, id="again")
    assert (await session.call(first)).text == "first"
    second = ToolCall(
        name="wait_then_say", arguments={"seconds": 0.5, "text": "second"}, id="again"
    )
    session.submit(second)
    assert session.in_flight == ["again"]
    # the id now names the call in flight: its result, never the earlier call's
    assert (await session.result("again")).text == "second"


async def test_a_cancelled_open_leaves_no_actor_holding_the_node(
    sessions: ClusterSessions, cluster: LocalCluster, tmp_path: Path
) -> None:
    node = cluster.node_ids()[0]
    holder = await sessions.open(spec(tmp_path, cores=1, node_id=node))
    opening = asyncio.create_task(sessions.open(spec(tmp_path, cores=1, node_id=node)))
    await asyncio.sleep(0.5)  # waiting for the node's only core
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    await sessions.close(holder.id)
    # the core is free again: an actor left by the cancelled open would have taken it
    again = await sessions.open(spec(tmp_path, cores=1, node_id=node, open_timeout=4))
    assert again.node_id == node


def test_a_tool_named_in_a_spec_must_be_declared_a_tool() -> None:
    from stockade.engine.cluster._actor import session_toolkit

    # a module's function that was never declared a tool would run unboxed on the node
    for name in (
        "os:system",
        "builtins:eval",
        "subprocess:Popen",
        "collections:OrderedDict",
        "os:environ",
    ):
        with pytest.raises(ConfigurationError, match="not a tool"):
            session_toolkit(shell=False, tools=(name,))
    with pytest.raises(ConfigurationError, match="cannot be imported"):
        session_toolkit(shell=False, tools=("no_such_module_here:x",))
    toolkit = session_toolkit(shell=False, tools=("cluster_tools:wait_then_say",))
    assert toolkit.resolve("wait_then_say") is not None


def test_a_call_without_a_result_for_a_ray_fault_says_its_outcome_is_unknown() -> None:
    from ray.exceptions import ObjectLostError

    from stockade.engine.cluster._outcomes import failed

    call = read("a.txt", "c1")
    result = failed(call, "s-1", ObjectLostError("ab" * 28, "", ""))
    assert result.status == "error"
    assert "unknown" in result.text
    assert "NOT re-run" in result.text
    assert "could not run" not in result.text  # it may well have run


async def test_a_close_cut_short_still_kills_the_actor_and_ends_its_calls(
    sessions: ClusterSessions, cluster: LocalCluster, tmp_path: Path
) -> None:
    node = cluster.node_ids()[0]
    session = await sessions.open(
        spec(tmp_path, cores=1, node_id=node, tools=("cluster_tools:wait_then_say",))
    )
    running = session.submit(
        ToolCall(name="wait_then_say", arguments={"seconds": 60, "text": "never"})
    )
    closing = asyncio.create_task(sessions.close(session.id))
    await asyncio.sleep(0)  # the close is under way: it waits for the node
    closing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await closing
    assert (await asyncio.wait_for(running, 5)).status == "cancelled"
    # the node's core is free: the closed session's actor was killed all the same
    again = await sessions.open(spec(tmp_path, cores=1, node_id=node, open_timeout=4))
    assert again.node_id == node
