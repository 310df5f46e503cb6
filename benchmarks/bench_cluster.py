"""Calls through cluster sessions (engines as Ray actors) beside the same calls on a local
`Engine`, in one run, on a real local Ray cluster (``ray.cluster_utils.Cluster``: a head with no
cores, worker nodes of one core each).

    python benchmarks/bench_cluster.py            # a few minutes (three clusters are started)
    python benchmarks/bench_cluster.py --quick    # a smoke run, about a minute
    python benchmarks/bench_cluster.py --json

Measures:

- latency: one call at a time (``read_text_file`` of a 1 KiB file), alternating a local engine
  and a session on a one-node cluster call by call; the median and p95 of each, and what the
  session adds (paired difference, call by call);
- throughput: 8 sessions, each sent its calls all at once (``read_text_file``, and a small
  ``run_shell`` command under the ``permissive`` preset, boxed by bubblewrap where present),
  on clusters of 1, 2 and 4 worker nodes (the sessions spread over the nodes), beside 8 local
  engines in this process.

The worker nodes of a local cluster share this machine's cores: adding nodes here adds
processes, not cores, so the throughput cannot grow past what the machine's cores give. Where
each node has cores of its own, the sessions' engines run in parallel and throughput grows with
the nodes until the driver (one process sending every call and receiving every result) is the
bound.
"""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import sys
import tempfile
from pathlib import Path
from time import perf_counter
from typing import Any

import options

from stockade import (
    Engine,
    Mount,
    Policy,
    ToolCall,
    Toolkit,
    VirtualFS,
    add_file_tools,
    add_shell_tools,
)

SESSIONS = 8
STORE_BYTES = 80 * 1024 * 1024


def read_call() -> ToolCall:
    return ToolCall(name="read_text_file", arguments={"path": "page.txt"})


def shell_call() -> ToolCall:
    return ToolCall(name="run_shell", arguments={"command": "echo hi"})


def start_cluster(workers: int) -> Any:
    """A head with no cores and ``workers`` one-core worker nodes; this process its driver."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "object_store_memory": STORE_BYTES,
        },
    )
    for _ in range(workers):
        cluster.add_node(num_cpus=1, object_store_memory=STORE_BYTES)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
    return cluster


def stop_cluster(cluster: Any) -> None:
    import ray

    ray.shutdown()
    cluster.shutdown()


def local_engine(folder: Path, policy: str) -> Engine:
    toolkit = Toolkit()
    add_file_tools(toolkit)
    add_shell_tools(toolkit)
    fs = VirtualFS([Mount("/workspace", folder)])
    return Engine(toolkit, policy=Policy.preset(policy), fs=fs)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def latency(folder: Path, rounds: int) -> dict[str, Any]:
    """One call at a time, local and session alternating; milliseconds."""
    from stockade.engine.cluster import ClusterSessions, SessionSpec

    engine = local_engine(folder, "default")
    async with ClusterSessions() as sessions:
        session = await sessions.open(SessionSpec(workspace=str(folder), cores=0.5))
        local: list[float] = []
        remote: list[float] = []
        for _ in range(max(5, rounds // 10)):  # warm both
            await engine.call(read_call())
            await session.call(read_call())
        for _ in range(rounds):
            started = perf_counter()
            assert (await engine.call(read_call())).ok
            local.append((perf_counter() - started) * 1000)
            started = perf_counter()
            assert (await session.call(read_call())).ok
            remote.append((perf_counter() - started) * 1000)
    await engine.aclose()
    added = [r - loc for r, loc in zip(remote, local, strict=True)]
    return {
        "measure": "latency, one call at a time (read_text_file)",
        "local_median_ms": statistics.median(local),
        "local_p95_ms": percentile(local, 0.95),
        "session_median_ms": statistics.median(remote),
        "session_p95_ms": percentile(remote, 0.95),
        "added_median_ms": statistics.median(added),
        "added_p95_ms": percentile(added, 0.95),
        "calls": rounds,
    }


async def throughput_sessions(
    folder: Path, nodes: list[str], calls: int, make: Any, policy: str
) -> float:
    """Calls per second: ``SESSIONS`` sessions spread over ``nodes``, each sent ``calls``
    calls at once."""
    from stockade.engine.cluster import ClusterSessions, SessionSpec

    async with ClusterSessions() as sessions:
        opened = [
            await sessions.open(
                SessionSpec(
                    workspace=str(folder),
                    policy=policy,
                    cores=0.1,
                    memory_mb=64,
                    node_id=nodes[i % len(nodes)],
                )
            )
            for i in range(SESSIONS)
        ]
        await asyncio.gather(*(s.call(make()) for s in opened))  # warm each engine
        started = perf_counter()
        results = await asyncio.gather(*(s.call(make()) for s in opened for _ in range(calls)))
        took = perf_counter() - started
    bad = [r for r in results if not r.ok]
    assert not bad, bad[0].text
    return len(results) / took


async def throughput_local(folder: Path, calls: int, make: Any, policy: str) -> float:
    engines = [local_engine(folder, policy) for _ in range(SESSIONS)]
    await asyncio.gather(*(e.call(make()) for e in engines))
    started = perf_counter()
    results = await asyncio.gather(*(e.call(make()) for e in engines for _ in range(calls)))
    took = perf_counter() - started
    for engine in engines:
        await engine.aclose()
    bad = [r for r in results if not r.ok]
    assert not bad, bad[0].text
    return len(results) / took


def run(quick: bool) -> options.Rows:
    import ray

    rounds = 40 if quick else 400
    reads = 10 if quick else 100  # per session
    shells = 2 if quick else 16
    node_counts = (1, 2) if quick else (1, 2, 4)
    rows: options.Rows = []
    with tempfile.TemporaryDirectory() as place:
        folder = Path(place)
        (folder / "page.txt").write_text("x" * 1023 + "\n")
        for workers in node_counts:
            started = perf_counter()
            cluster = start_cluster(workers)
            startup = perf_counter() - started
            try:
                if workers == 1:
                    rows.append(asyncio.run(latency(folder, rounds)))
                listed: Any = ray.nodes  # untyped in Ray
                nodes = [n["NodeID"] for n in listed() if n["Alive"] and n["Resources"].get("CPU")]
                for label, make, calls, policy in (
                    ("read_text_file", read_call, reads, "default"),
                    ("run_shell echo", shell_call, shells, "permissive"),
                ):
                    rate = asyncio.run(throughput_sessions(folder, nodes, calls, make, policy))
                    rows.append(
                        {
                            "measure": f"throughput, {SESSIONS} sessions x {calls} {label}",
                            "nodes": workers,
                            "calls_per_s": rate,
                            "cluster_start_s": startup,
                        }
                    )
            finally:
                stop_cluster(cluster)
        for label, make, calls, policy in (
            ("read_text_file", read_call, reads, "default"),
            ("run_shell echo", shell_call, shells, "permissive"),
        ):
            rate = asyncio.run(throughput_local(folder, calls, make, policy))
            rows.append(
                {
                    "measure": f"throughput, {SESSIONS} local engines x {calls} {label}",
                    "nodes": 0,
                    "calls_per_s": rate,
                    "cluster_start_s": None,
                }
            )
    return rows


def table(rows: options.Rows) -> None:
    for row in rows:
        if "added_median_ms" in row:
            print(f"{row['measure']} ({row['calls']} calls), ms:")
            print("  {:10} {:>8} {:>8}".format("", "median", "p95"))
            for way in ("local", "session", "added"):
                print(f"  {way:10} {row[f'{way}_median_ms']:>8.2f} {row[f'{way}_p95_ms']:>8.2f}")
    print("{:52} {:>6} {:>10} {:>9}".format("throughput", "nodes", "calls/s", "start s"))
    for row in rows:
        if "calls_per_s" in row:
            start = "" if row["cluster_start_s"] is None else f"{row['cluster_start_s']:.1f}"
            nodes = "local" if row["nodes"] == 0 else str(row["nodes"])
            print(f"{row['measure']:52} {nodes:>6} {row['calls_per_s']:>10.0f} {start:>9}")


def main() -> int:
    cores = os.cpu_count() or 1
    return options.main(__doc__, "cluster", run, table, f"{cores} cores on this machine")


if __name__ == "__main__":
    sys.exit(main())
