"""How fast a policy pushed to the PostgreSQL policy store reaches the engines following it.

    python benchmarks/bench_policy_store.py            # 100 pushes, about half a minute
    python benchmarks/bench_policy_store.py --quick    # 10 pushes
    python benchmarks/bench_policy_store.py --json

Starts a throwaway PostgreSQL on loopback (the tests' server: PostgreSQL's binaries must be
installed, ``apt-get install postgresql``), publishes a first policy, opens three followers
(`Policy.from_store`, each with its own watcher, as three engines would) and pushes two
policies in turn. For each push it times, from the moment the push begins until each follower
holds the new policy (read whole from the store, built, swapped in): the median and the
slowest over all pushes and followers. The baseline, measured in the same run, is the floor of
any propagation: one push (a transaction replacing the lines, then the NOTIFY) and one reload
(a read of the lines and building the policy from them), timed alone.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import options

from stockade.policies import Policy
from stockade.policies.store import PolicyStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

FOLLOWERS = 3


def run(quick: bool) -> options.Rows:
    from postgres_server import PostgresServer  # type: ignore[import-not-found]  # the tests' server

    pushes = 10 if quick else 100
    policies = [Policy.preset("default"), Policy.preset("strict")]
    with PostgresServer.start(Path(tempfile.mkdtemp(prefix="bench-pg-"))) as server:
        store = PolicyStore(server.url)
        store.push(policies[0], note="benchmark")
        followers = [Policy.from_store(server.url) for _ in range(FOLLOWERS)]
        feeds = [f.feed for f in followers]
        assert all(feed is not None and feed.listening.wait(30) for feed in feeds)
        floors: dict[str, list[float]] = {"push": [], "reload": []}
        took: list[float] = []
        for n in range(pushes):
            started = time.perf_counter()
            version = store.push(policies[(n + 1) % 2], note=f"push {n}")
            floors["push"].append((time.perf_counter() - started) * 1000)
            waiting = set(range(FOLLOWERS))
            while waiting:
                for index in list(waiting):
                    if feeds[index].version == version:  # type: ignore[union-attr]
                        took.append((time.perf_counter() - started) * 1000)
                        waiting.discard(index)
                if time.perf_counter() - started > 10:
                    raise SystemExit(f"push {n} did not reach every follower in 10 s")
                time.sleep(0.0005)
            begun = time.perf_counter()
            feeds[0].refresh()  # type: ignore[union-attr]
            floors["reload"].append((time.perf_counter() - begun) * 1000)
        for feed in feeds:
            feed.close()  # type: ignore[union-attr]
        store.close()
    rows: list[dict[str, Any]] = [
        {
            "measure": f"push, then {FOLLOWERS} followers hold it",
            "median_ms": statistics.median(took),
            "max_ms": max(took),
            "n": len(took),
        },
        {
            "measure": "baseline: the push alone",
            "median_ms": statistics.median(floors["push"]),
            "max_ms": max(floors["push"]),
            "n": pushes,
        },
        {
            "measure": "baseline: one reload (read + build)",
            "median_ms": statistics.median(floors["reload"]),
            "max_ms": max(floors["reload"]),
            "n": pushes,
        },
    ]
    return rows


def table(rows: options.Rows) -> None:
    base = rows[1]["median_ms"] + rows[2]["median_ms"]
    print(f"{'measure':<40} {'median ms':>10} {'max ms':>10} {'n':>5}")
    for row in rows:
        print(
            f"{row['measure']:<40} {row['median_ms']:>10.1f} {row['max_ms']:>10.1f} {row['n']:>5}"
        )
    print(
        f"propagation median is {rows[0]['median_ms'] / base:.2f}x push + reload; "
        f"the slowest of all {rows[0]['n']} took {rows[0]['max_ms']:.0f} ms (target: 1000)"
    )


if __name__ == "__main__":
    sys.exit(options.main(__doc__, "policy store", run, table, f"{FOLLOWERS} followers"))
