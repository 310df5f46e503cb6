"""Engine hot-path benchmark: the cost Stockade adds to a tool call, measured against baselines
taken in the same run.

    python benchmarks/bench_engine.py            # full run, about 20 seconds
    python benchmarks/bench_engine.py --quick    # a smoke run (numbers are rough)
    python benchmarks/bench_engine.py --json     # machine-readable

Figures (medians over rounds; each round times many back-to-back calls):

1. a direct ``await`` of a trivial async function (the baseline);
2. ``Engine.call`` of that function as a tool, one tool registered   (target <= 8 µs);
3. the same with 1,000 tools registered                             (target <= 1.1x of 2);
4. ``Engine.call`` of a trivial sync tool, run off the event loop,
   against a bare ``asyncio.to_thread`` of the same function        (target <= 1.2x);
5. registering 200 tools with docstrings                            (target <= 50 ms);
6. ``call_many`` of 100 concurrency-safe tools sleeping 10 ms each  (target <= 15 ms wall).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

import options

from stockade.engine import Engine, ToolCall, Toolkit, tool


async def noop(x: int) -> int:
    """Return x.

    Args:
        x: Any integer.
    """
    return x


def noop_sync(x: int) -> int:
    """Return x (sync).

    Args:
        x: Any integer.
    """
    return x


@tool(read_only=True)
async def nap(n: int) -> int:
    """Sleep 10 ms.

    Args:
        n: Echoed back.
    """
    await asyncio.sleep(0.01)
    return n


async def per_call_us(fn: Callable[[], Awaitable[Any]], rounds: int, per_round: int) -> float:
    """Median over rounds of the mean time per call, in microseconds."""
    medians, _ = await interleaved([fn], rounds, per_round)
    return medians[0]


async def interleaved(
    fns: list[Callable[[], Awaitable[Any]]], rounds: int, per_round: int
) -> tuple[list[float], list[float]]:
    """Time several callables round by round, alternating them, so that machine noise (other
    processes, CPU frequency, thread wake-ups) hits all of them alike. Returns each one's
    median µs per call, and the median per-round ratio of each to the first."""
    for fn in fns:
        for _ in range(per_round):
            await fn()  # warm-up: lazy schema build, caches, thread pool
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for index, fn in enumerate(fns):
            gc.collect()
            gc.disable()
            started = perf_counter()
            for _ in range(per_round):
                await fn()
            samples[index].append((perf_counter() - started) / per_round * 1e6)
            gc.enable()
            await asyncio.sleep(0)  # let the loop run its timers between rounds, as real loops do
    medians = [statistics.median(s) for s in samples]
    ratios = [statistics.median(x / b for x, b in zip(s, samples[0], strict=True)) for s in samples]
    return medians, ratios


def make_tools(count: int) -> list[Callable[..., Any]]:
    """``count`` distinct functions with Google docstrings and three typed parameters."""
    tools = []
    for n in range(count):
        namespace: dict[str, Any] = {}
        exec(  # distinct function objects, as a real codebase has
            f"def tool_{n}(query: str, limit: int = 10, verbose: bool = False) -> str:\n"
            f'    """Tool number {n}: look something up.\n\n'
            f"    Args:\n"
            f"        query: What to look for.\n"
            f"        limit: At most this many results.\n"
            f"        verbose: Include details.\n"
            f'    """\n'
            f"    return query\n",
            namespace,
        )
        tools.append(namespace[f"tool_{n}"])
    return tools


async def run(quick: bool) -> list[dict[str, Any]]:
    rounds, per_round = (5, 500) if quick else (25, 4000)
    rows: list[dict[str, Any]] = []

    def row(name: str, value: float, unit: str, target: str, ratio: float | None, ok: bool) -> None:
        rows.append(
            {"measure": name, "value": round(value, 3), "unit": unit, "target": target,
             "ratio": None if ratio is None else round(ratio, 3), "meets_target": ok}
        )  # fmt: skip

    direct = await per_call_us(lambda: noop(1), rounds, per_round)
    row("direct await of the function", direct, "µs/call", "baseline", 1.0, True)

    small = Toolkit()
    small.add(noop)
    engine = Engine(small)
    call = ToolCall(name="noop", arguments={"x": 1})
    one_tool = await per_call_us(lambda: engine.call(call), rounds, per_round)
    row("Engine.call, 1 tool", one_tool, "µs/call", "<= 8 µs", one_tool / direct, one_tool <= 8)

    big = Toolkit()
    for fn in make_tools(999):
        big.add(fn)
    big.add(noop)
    big_engine = Engine(big)
    many = await per_call_us(lambda: big_engine.call(call), rounds, per_round)
    ratio = many / one_tool
    row("Engine.call, 1,000 tools", many, "µs/call", "<= 1.1x 1 tool", ratio, ratio <= 1.1)

    thread_rounds, thread_per_round = (6, 200) if quick else (40, 500)
    sync_kit = Toolkit()
    sync_kit.add(noop_sync)
    sync_engine = Engine(sync_kit)
    sync_call = ToolCall(name="noop_sync", arguments={"x": 1})
    (bare, in_thread), (_, ratio) = await interleaved(
        [lambda: asyncio.to_thread(noop_sync, 1), lambda: sync_engine.call(sync_call)],
        thread_rounds,
        thread_per_round,
    )
    row("asyncio.to_thread, bare", bare, "µs/call", "baseline", 1.0, True)
    row(
        "Engine.call, sync tool off the loop",
        in_thread,
        "µs/call",
        "<= 1.2x to_thread",
        ratio,
        ratio <= 1.2,
    )
    await sync_engine.aclose()

    functions = [make_tools(200) for _ in range(3 if quick else 7)]
    timings = []
    for batch in functions:
        kit = Toolkit()
        started = perf_counter()
        for fn in batch:
            kit.add(fn)
        timings.append((perf_counter() - started) * 1000)
    register = statistics.median(timings)
    row("register 200 docstring tools", register, "ms", "<= 50 ms", None, register <= 50)

    nap_kit = Toolkit()
    nap_kit.add(nap)
    nap_engine = Engine(nap_kit)
    batch_calls = [ToolCall(name="nap", arguments={"n": n}) for n in range(100)]
    await nap_engine.call_many(batch_calls)  # warm-up
    walls = []
    for _ in range(3 if quick else 9):
        started = perf_counter()
        results = await nap_engine.call_many(batch_calls)
        walls.append((perf_counter() - started) * 1000)
        assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    wall = statistics.median(walls)
    row("call_many, 100 x 10 ms read-only", wall, "ms wall", "<= 15 ms", wall / 10, wall <= 15)
    return rows


def table(rows: list[dict[str, Any]]) -> None:
    print(f"{'measure':40} {'value':>10} {'unit':10} {'ratio':>7}  {'target':20} met")
    for r in rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        met = "yes" if r["meets_target"] else "NO"
        value = f"{r['value']:>10.2f}"
        print(f"{r['measure']:40} {value} {r['unit']:10} {ratio:>7}  {r['target']:20} {met}")


if __name__ == "__main__":
    sys.exit(options.main(__doc__, "engine", lambda quick: asyncio.run(run(quick)), table))
