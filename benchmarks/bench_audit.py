"""Audit durability benchmark: what putting every record on disk before the call goes on costs
when many calls run at once, against the batched log, in one run.

    python benchmarks/bench_audit.py            # about 20 seconds
    python benchmarks/bench_audit.py --quick    # a smoke run (numbers are rough)
    python benchmarks/bench_audit.py --json

1,000 concurrent ``Engine.call``s (one ``asyncio.gather``) of a trivial async tool, each leaving
an intent and an outcome record, with an `AuditLog` in a temporary folder (on the disk the
state folder would be on): ``durability="fsync"`` (every record written and fsynced before
its call goes on; records that arrive while one fsync runs share the next) against
``durability="batch"`` (the default: records written together every 0.2 s or 512 records).
The figure is the wall time from the first call to the last result, the median over
alternating rounds, each round on a new log (target: fsync at most 2x batch). After each round
the log is closed and verified, and must hold exactly two records per call.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from time import perf_counter
from typing import Any

import options

from stockade.engine import Engine, ToolCall, Toolkit, tool
from stockade.engine.observe import AuditLog, read_audit, verify_audit

CALLS = 1000
MEASURE = "1,000 concurrent calls, audit durability fsync"
BASELINE = "the same with durability batch"


@tool(read_only=True)
async def noop(x: int) -> int:
    """Return x.

    Args:
        x: Any integer.
    """
    return x


async def one_round(toolkit: Toolkit, folder: Path, durability: str, number: int) -> float:
    """Milliseconds for `CALLS` concurrent calls on a new log; checks the log afterwards."""
    path = folder / f"{durability}-{number}.jsonl"
    log = AuditLog(path, durability=durability)  # type: ignore[arg-type]
    engine = Engine(toolkit, audit=log)
    calls = [ToolCall(name="noop", arguments={"x": n}) for n in range(CALLS)]
    started = perf_counter()
    results = await asyncio.gather(*(engine.call(c) for c in calls))
    elapsed = (perf_counter() - started) * 1000
    await engine.aclose()
    log.close()
    if any(r.status != "ok" for r in results):
        raise RuntimeError(f"a call failed with the {durability} log")
    report = verify_audit(path)
    kept = sum(1 for _ in read_audit(path))
    if not report.ok or kept != 2 * CALLS:
        raise RuntimeError(f"the {durability} log holds {kept} records: {report}")
    return elapsed


async def measure(quick: bool) -> list[dict[str, Any]]:
    rounds = 2 if quick else 9
    toolkit = Toolkit()
    toolkit.add(noop)
    samples: dict[str, list[float]] = {"fsync": [], "batch": []}
    with tempfile.TemporaryDirectory() as tmp:
        await one_round(toolkit, Path(tmp), "batch", -1)  # warm up
        for number in range(rounds):
            for durability in ("batch", "fsync"):
                took = await one_round(toolkit, Path(tmp), durability, number)
                samples[durability].append(took)
    fsync, batch = (statistics.median(samples[d]) for d in ("fsync", "batch"))
    ratio = fsync / batch
    return [
        {
            "measure": MEASURE,
            "value": round(fsync, 2),
            "unit": "ms",
            "baseline": BASELINE,
            "baseline_value": round(batch, 2),
            "ratio": round(ratio, 3),
            "target": "<= 2x",
            "meets_target": ratio <= 2,
            "note": f"median of {rounds} alternating rounds; every log verified, "
            f"{2 * CALLS} records each",
        }
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    return asyncio.run(measure(quick))


def table(rows: list[dict[str, Any]]) -> None:
    print(f"{'measure':48} {'ms':>8} {'baseline ms':>12} {'ratio':>7}  {'target':7} met")
    for r in rows:
        met = "yes" if r["meets_target"] else "NO"
        print(
            f"{r['measure']:48} {r['value']:>8.2f} {r['baseline_value']:>12.2f} "
            f"{r['ratio']:>6.2f}x  {r['target']:7} {met}"
        )
        print(f"      baseline: {r['baseline']}; {r['note']}")


if __name__ == "__main__":
    sys.exit(options.main(__doc__, "audit durability", run, table))
