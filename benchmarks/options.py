"""What every benchmark script shares: the command line (``--quick`` for a smoke run, ``--json``
for rows a program can read instead of a table; the script supplies what to measure and how to
show it), and timing ways against each other in alternating rounds."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from time import perf_counter
from typing import Any

Rows = list[dict[str, Any]]


def alternating(
    ways: dict[str, Callable[[], object]], rounds: int, warm_up: int
) -> dict[str, float]:
    """Median milliseconds of each way, timed one after another round by round, so that the
    machine's noise hits them alike."""
    samples = alternating_samples(ways, rounds, warm_up)
    return {name: statistics.median(values) for name, values in samples.items()}


def alternating_samples(
    ways: dict[str, Callable[[], object]], rounds: int, warm_up: int
) -> dict[str, list[float]]:
    """Milliseconds of each way in each round, the ways timed one after another round by
    round (see `paired_difference`)."""
    for way in ways.values():
        for _ in range(warm_up):
            way()
    samples: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, way in ways.items():
            started = perf_counter()
            way()
            samples[name].append((perf_counter() - started) * 1000)
    return samples


def paired_difference(samples: dict[str, list[float]], way: str, baseline: str) -> float:
    """The median over rounds of ``way`` minus ``baseline`` in the same round: what ``way``
    adds, with the machine's load at that moment taken out (a busy spell slows both ways of a
    round alike, where it would shift the two medians apart by its own length)."""
    return statistics.median(a - b for a, b in zip(samples[way], samples[baseline], strict=True))


def _parse(doc: str | None) -> argparse.Namespace:
    """The options, with the script's docstring as its ``--help``."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="few rounds: a smoke run")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    return parser.parse_args()


def _title(name: str, quick: bool, *notes: str) -> str:
    """The first line of the table: what ran, on which Python, and how."""
    how = ", ".join([f"Python {sys.version.split()[0]}", *notes, *(["quick"] if quick else [])])
    return f"Stockade {name} benchmark ({how})"


def main(
    doc: str | None,
    name: str,
    measure: Callable[[bool], Rows],
    table: Callable[[Rows], None],
    *notes: str,
) -> int:
    """Parse the options, ``measure(quick)``, then print the rows as JSON or ``table(rows)``
    under a title naming the benchmark, the Python and ``notes``."""
    args = _parse(doc)
    rows = measure(args.quick)
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        print(_title(name, args.quick, *notes))
        table(rows)
    return 0
