"""Start-up benchmark: what importing the library and running ``stockade version`` cost a fresh
interpreter, and, with ``--other``, the same for another install measured in the same run.

    python benchmarks/bench_import.py                       # about 30 seconds
    python benchmarks/bench_import.py --quick               # a smoke run
    python benchmarks/bench_import.py --json
    python benchmarks/bench_import.py --other OLD/.venv/bin/python --other-module engine

Each figure is the median wall time (ms) of a new process, over rounds that alternate every way
measured, so machine noise hits all alike:

1. ``python -c pass``: the interpreter starting (the baseline);
2. ``python -c "from stockade.engine import Engine"``: the library (the pipeline, the policies
   and the sandbox; no CLI, MCP or tracing SDK; ``import stockade.engine`` alone loads nothing
   until a name is used);
3. ``stockade version``: the console script, through the CLI framework;
4. with ``--other PYTHON``: 2 and 3 for that interpreter's install (``--other-module`` names
   the module its library imports as; its ``stockade`` script is found beside the
   interpreter), for a before and after in one run.
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from time import perf_counter
from typing import Any

Way = tuple[str, list[str]]
Rows = list[dict[str, Any]]


def ways(python: str, module: str, label: str) -> list[Way]:
    """The commands measured for one install."""
    script = str(Path(python).parent / "stockade")
    return [
        (f"from {module} import Engine{label}", [python, "-c", f"from {module} import Engine"]),
        (f"stockade version{label}", [script, "version"]),
    ]


# run from a folder of its own: ``python -c`` puts the working folder first on sys.path, and
# a checkout's folders there would be imported instead of the install being measured
NEUTRAL = tempfile.mkdtemp(prefix="stockade-bench-import-")
atexit.register(shutil.rmtree, NEUTRAL, ignore_errors=True)  # empty, but not left behind


def timed(argv: list[str]) -> float:
    """Milliseconds from start to exit of ``argv``, which must succeed."""
    started = perf_counter()
    subprocess.run(
        argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=NEUTRAL
    )
    return (perf_counter() - started) * 1000


def measure(all_ways: list[Way], rounds: int) -> dict[str, float]:
    """The median milliseconds of each way, in alternating rounds (after one warm-up each, so
    every file is in the page cache)."""
    for _, argv in all_ways:
        timed(argv)
    samples: dict[str, list[float]] = {name: [] for name, _ in all_ways}
    for number in range(rounds):
        for name, argv in all_ways:
            samples[name].append(timed(argv))
        print(f"round {number + 1}/{rounds}", file=sys.stderr, end="\r")
    print(file=sys.stderr)
    return {name: statistics.median(values) for name, values in samples.items()}


def run(quick: bool, other: str | None = None, other_module: str = "stockade.engine") -> Rows:
    """Every way's median, with what it costs over the interpreter's start."""
    baseline: Way = ("python -c pass", [sys.executable, "-c", "pass"])
    all_ways = [baseline, *ways(sys.executable, "stockade.engine", "")]
    if other:
        all_ways += ways(other, other_module, f" ({other})")
    medians = measure(all_ways, 3 if quick else 15)
    base = medians[baseline[0]]
    return [
        {"measure": name, "ms": round(ms, 1), "over_start_ms": round(ms - base, 1)}
        for name, ms in medians.items()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="few rounds: a smoke run")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    parser.add_argument("--other", metavar="PYTHON", help="another install's interpreter")
    parser.add_argument("--other-module", default="stockade.engine", help="its library module")
    args = parser.parse_args()
    rows = run(args.quick, args.other, args.other_module)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    quick = ", quick" if args.quick else ""
    print(f"Stockade start-up benchmark (Python {sys.version.split()[0]}{quick})")
    width = max(len(str(row["measure"])) for row in rows)
    print(f"{'measure':<{width}}  {'ms':>8}  {'over start':>10}")
    for row in rows:
        print(f"{row['measure']:<{width}}  {row['ms']:>8.1f}  {row['over_start_ms']:>10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
