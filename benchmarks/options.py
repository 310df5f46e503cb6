"""The command line every benchmark script shares: ``--quick`` for a smoke run, ``--json`` for
rows a program can read instead of a table."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def parse(doc: str | None) -> argparse.Namespace:
    """The options, with the script's docstring as its ``--help``."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="few rounds: a smoke run")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    return parser.parse_args()


def print_json(rows: list[dict[str, Any]]) -> None:
    print(json.dumps(rows, indent=2, ensure_ascii=False))


def title(name: str, quick: bool, *notes: str) -> str:
    """The first line of the table: what ran, on which Python, and how."""
    how = ", ".join([f"Python {sys.version.split()[0]}", *notes, *(["quick"] if quick else [])])
    return f"Stockade {name} benchmark ({how})"
