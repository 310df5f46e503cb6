"""Policy decision benchmark: the compiled path against casbin's own ``enforce``, and the engine's
hot path with the default preset, measured in one run.

    python benchmarks/bench_policy.py            # about a minute (casbin at 10,000 rules is slow)
    python benchmarks/bench_policy.py --quick    # a smoke run
    python benchmarks/bench_policy.py --json

Rule sets of 10, 1,000 and 10,000 rules are generated like real ones (seeded): rules name one of
500 tools (some by glob), most apply to every subject, most are about paths in one of 1,000
project folders, a few about commands. The requests are 2,000 distinct calls with zero to two
paths. Figures are the median (and mean) µs of single decisions, each timed on its own,
*without* the decision cache (a cached decision is reported separately): every path is matched
anew each time. What the compiled path does keep, as real agents make it useful, is the best
rule without a path condition per (tool, action, subject), warmed by a first pass. casbin is
sampled at the larger sizes.
"""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import sys
from time import perf_counter
from typing import Any

import options

from stockade.engine import Engine, ToolCall, Toolkit
from stockade.policies import Policy, Request
from stockade.policies.request import Access

TOOLS = [f"tool_{n}" for n in range(500)]
SUBJECTS = [f"agent_{n}" for n in range(100)]
ROLES = {f"team_{n}": SUBJECTS[n * 10 : n * 10 + 10] for n in range(10)}


def make_rules(count: int, rng: random.Random) -> list[dict[str, Any]]:
    rules = []
    for index in range(count):
        rule: dict[str, Any] = {
            "id": f"rule-{index}",
            "effect": rng.choices(["allow", "warn", "ask", "deny"], [6, 1, 2, 2])[0],
            "reason": "generated",
        }
        roll = rng.random()
        rule["tools"] = (
            [rng.choice(TOOLS)]
            if roll < 0.8
            else [rng.choice(["tool_1*", "tool_2?", "*_9"])]
            if roll < 0.95
            else ["*"]
        )
        if rng.random() < 0.4:
            rule["subjects"] = [rng.choice([*SUBJECTS, *ROLES])]
        if rng.random() < 0.5:
            rule["actions"] = rng.sample(["read", "write", "delete"], rng.randint(1, 2))
        target = rng.random()
        project = f"/workspace/proj{rng.randrange(1000)}"
        if target < 0.6:
            rule["paths"] = [
                rng.choice([f"{project}/**", f"{project}/src/*.py", f"{project}/docs/**/*.md"])
            ]
        elif target < 0.7:
            rule["commands"] = [rng.choice(["git *", "make *", "pytest*"])]
            rule["actions"] = ["execute"]
        rules.append(rule)
    return rules


ACCESS_CHOICES: list[Access] = ["read", "write", "delete"]


def make_requests(count: int, rng: random.Random) -> list[Request]:
    requests = []
    for _ in range(count):
        paths: list[tuple[str, Access]] = [
            (
                f"/workspace/proj{rng.randrange(1000)}/{rng.choice(['src', 'docs', 'data'])}/"
                f"{rng.choice(['a.py', 'b.md', 'c.csv'])}",
                rng.choice(ACCESS_CHOICES),
            )
            for _ in range(rng.choice([0, 1, 1, 2]))
        ]
        requests.append(
            Request(
                rng.choice(SUBJECTS), rng.choice(TOOLS), "call", paths, None, rng.random() < 0.5
            )
        )
    return requests


def per_decision_us(decide: Any, requests: list[Request], rounds: int) -> tuple[float, float]:
    """Median and mean µs of single decisions, each timed on its own (the timer's own cost,
    about 0.1 µs, is included)."""
    for request in requests:
        decide(request)  # warm-up: builds the per-(tool, action) buckets
    samples = []
    clock = perf_counter
    for _ in range(rounds):
        gc.disable()
        for request in requests:
            started = clock()
            decide(request)
            samples.append(clock() - started)
        gc.enable()
    return statistics.median(samples) * 1e6, statistics.fmean(samples) * 1e6


def casbin_us(policy: Policy, requests: list[Request]) -> float:
    casbin = policy.casbin()
    policy.decide_with_casbin(requests[0])
    samples = []
    for request in requests:
        started = perf_counter()
        policy.decide_with(casbin.first_match, request)
        samples.append((perf_counter() - started) * 1e6)
    return statistics.median(samples)


async def engine_call_us(rounds: int, per_round: int) -> tuple[float, float]:
    async def noop(x: int) -> int:
        return x

    toolkit = Toolkit()
    toolkit.add(noop)
    engine = Engine(toolkit)  # no policy given: the default preset
    call = ToolCall(name="noop", arguments={"x": 1})
    samples = []
    for _ in range(per_round):
        await engine.call(call)
    for _ in range(rounds):
        gc.disable()
        started = perf_counter()
        for _ in range(per_round):
            await engine.call(call)
        samples.append((perf_counter() - started) / per_round * 1e6)
        gc.enable()
        await asyncio.sleep(0)
    direct = []
    for _ in range(rounds):
        started = perf_counter()
        for _ in range(per_round):
            await noop(1)
        direct.append((perf_counter() - started) / per_round * 1e6)
    return statistics.median(samples), statistics.median(direct)


def run(quick: bool) -> list[dict[str, Any]]:
    rng = random.Random(2026)
    requests = make_requests(300 if quick else 2000, rng)
    rounds = 3 if quick else 9
    casbin_samples = {10: 200, 1000: 40, 10_000: 8} if not quick else {10: 20, 1000: 5, 10_000: 2}
    rows: list[dict[str, Any]] = []
    compiled: dict[int, float] = {}
    for size in (10, 1000, 10_000):
        started = perf_counter()
        policy = Policy.from_dict({"roles": ROLES, "rules": make_rules(size, rng)})
        build_ms = (perf_counter() - started) * 1000
        compiled[size], mean = per_decision_us(policy.decide_uncached, requests, rounds)
        cached, _ = per_decision_us(policy.decide, requests, rounds)
        reference = casbin_us(policy, requests[: casbin_samples[size]])
        rows.append(
            {
                "rules": size,
                "compiled_us": round(compiled[size], 2),
                "compiled_mean_us": round(mean, 2),
                "cached_us": round(cached, 2),
                "casbin_us": round(reference, 1),
                "casbin_sampled": casbin_samples[size],
                "speedup": round(reference / compiled[size], 1),
                "load_ms": round(build_ms, 1),
            }
        )
    growth = compiled[10_000] / compiled[10]
    call_us, direct_us = asyncio.run(engine_call_us(5 if quick else 25, 500 if quick else 4000))
    rows.append(
        {
            "summary": True,
            "growth_10_to_10000": round(growth, 2),
            "engine_call_default_preset_us": round(call_us, 2),
            "direct_call_us": round(direct_us, 3),
            "targets": {
                "compiled_at_10000_le_5us": compiled[10_000] <= 5,
                "growth_le_2x": growth <= 2,
                "engine_call_le_10us": call_us <= 10,
            },
        }
    )
    return rows


def table(rows: list[dict[str, Any]]) -> None:
    header = ("rules", "compiled µs", "(mean)", "cached µs", "casbin µs", "speed-up", "load ms")
    print("{:>7} {:>12} {:>8} {:>10} {:>12} {:>9} {:>8}".format(*header))
    for row in rows[:-1]:
        print(
            f"{row['rules']:>7} {row['compiled_us']:>12.2f} {row['compiled_mean_us']:>8.2f} "
            f"{row['cached_us']:>10.2f} {row['casbin_us']:>12.1f} {row['speedup']:>8.0f}x "
            f"{row['load_ms']:>8.1f}"
        )
    summary = rows[-1]
    targets = summary["targets"]
    print(
        f"growth 10 -> 10,000 rules: {summary['growth_10_to_10000']:.2f}x (target <= 2x: "
        f"{'met' if targets['growth_le_2x'] else 'NOT met'}); compiled at 10,000 rules <= 5 µs: "
        f"{'met' if targets['compiled_at_10000_le_5us'] else 'NOT met'}"
    )
    print(
        f"Engine.call with the default preset: {summary['engine_call_default_preset_us']:.2f} µs "
        f"(direct call {summary['direct_call_us']:.3f} µs; target <= 10 µs: "
        f"{'met' if targets['engine_call_le_10us'] else 'NOT met'})"
    )


if __name__ == "__main__":
    sys.exit(options.main(__doc__, "policy", run, table))
