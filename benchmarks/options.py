"""The command line every benchmark script shares: ``--quick`` for a smoke run, ``--json`` for
rows a program can read instead of a table; the script supplies what to measure and how to show
it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

Rows = list[dict[str, Any]]


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
