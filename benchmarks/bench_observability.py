"""Observability benchmark: what the audit log and a span add to an allowed call.

    python benchmarks/bench_observability.py            # about 15 seconds
    python benchmarks/bench_observability.py --quick    # a smoke run
    python benchmarks/bench_observability.py --json

Median µs per ``Engine.call`` of a trivial async tool (the default policy preset), in
alternating rounds of back-to-back calls, four ways in one run:

1. no audit, no tracing (the baseline);
2. with a batched `AuditLog` (two records per call, hash-chained, written to a temporary file)
   (target: at most 3 µs more than 1);
3. with an OpenTelemetry span per call (in-memory exporter);
4. with both (target: at most 40 µs per call in all).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from time import perf_counter
from typing import Any

import options

from stockade.engine import Engine, ToolCall, Toolkit, tool
from stockade.engine.observe import AuditLog, verify_audit
from stockade.engine.observe.tracing import memory_provider


@tool(read_only=True)
async def noop(x: int) -> int:
    """Return x.

    Args:
        x: Any integer.
    """
    return x


async def interleaved(
    fns: list[Callable[[], Awaitable[Any]]],
    rounds: int,
    per_round: int,
    between: Callable[[], None],
) -> list[float]:
    """Each callable's median µs per call over rounds, the callables alternating round by round
    so that machine noise hits all alike; ``between`` runs before each round, untimed."""
    for fn in fns:
        for _ in range(per_round):
            await fn()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for index, fn in enumerate(fns):
            between()
            gc.collect()
            started = perf_counter()
            for _ in range(per_round):
                await fn()
            samples[index].append((perf_counter() - started) / per_round * 1e6)
    return [statistics.median(s) for s in samples]


async def measure(quick: bool) -> list[dict[str, Any]]:
    rounds, per_round = (3, 500) if quick else (15, 4000)
    toolkit = Toolkit()
    toolkit.add(noop)
    call = ToolCall(name="noop", arguments={"x": 1})
    with tempfile.TemporaryDirectory() as tmp:
        audit = AuditLog(Path(tmp) / "audit.jsonl")
        both_audit = AuditLog(Path(tmp) / "both.jsonl")
        traced, spans = memory_provider()
        both_traced, both_spans = memory_provider()
        engines = {
            "Engine.call": Engine(toolkit),
            "with audit (batched)": Engine(toolkit, audit=audit),
            "with a span (in-memory exporter)": Engine(toolkit, tracer_provider=traced),
            "with audit and a span": Engine(toolkit, audit=both_audit, tracer_provider=both_traced),
        }

        def one(engine: Engine) -> Callable[[], Awaitable[Any]]:
            async def run() -> None:
                await engine.call(call)

            return run

        def forget_spans() -> None:
            # the in-memory exporter keeps every span: empty it between rounds, untimed
            spans.clear()
            both_spans.clear()

        figures = await interleaved(
            [one(e) for e in engines.values()], rounds, per_round, forget_spans
        )
        audit.close()
        both_audit.close()
        intact = verify_audit(Path(tmp) / "audit.jsonl").ok
        for engine in engines.values():
            await engine.aclose()
    base = figures[0]
    targets = {
        "with audit (batched)": ("<= 3 µs extra", lambda us: us - base <= 3),
        "with audit and a span": ("<= 40 µs", lambda us: us <= 40),
    }
    rows = []
    for name, us in zip(engines, figures, strict=True):
        target, check = targets.get(name, ("-", lambda _: True))
        rows.append(
            {"measure": name, "us": round(us, 2), "extra_us": round(us - base, 2),
             "target": target, "meets_target": check(us), "audit_verified": intact}
        )  # fmt: skip
    return rows


def run(quick: bool) -> list[dict[str, Any]]:
    return asyncio.run(measure(quick))


def table(rows: list[dict[str, Any]]) -> None:
    print("{:36} {:>9} {:>10}  {:15} {}".format("measure", "µs", "extra µs", "target", "met"))
    for r in rows:
        met = "yes" if r["meets_target"] else "NO"
        print(f"{r['measure']:36} {r['us']:>9.2f} {r['extra_us']:>10.2f}  {r['target']:15} {met}")
    print(f"audit log verified after the run: {rows[0]['audit_verified']}")


if __name__ == "__main__":
    sys.exit(options.main(__doc__, "observability", run, table))
