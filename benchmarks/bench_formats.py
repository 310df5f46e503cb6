"""XML tool-call reader benchmark: how its time grows with the length of the model's text.

    python benchmarks/bench_formats.py            # a few seconds
    python benchmarks/bench_formats.py --quick    # a smoke run (smaller inputs, fewer rounds)
    python benchmarks/bench_formats.py --json

`xml.parse_tool_calls` reads untrusted text (prompt injection can shape it), so its time must
grow in step with the text's length. Two inputs, each at 1x, 2x and 4x a size:

1. well-formed calls (about 300 KB, 600 KB, 1.2 MB): a line of prose and a call of two
   parameters, written without CDATA as models often do, over and over;
2. an adversarial run of openings, ``"<tool_call>" * N`` (N = 25,000, 50,000, 100,000):
   calls that never close, which a reader searching again for a close tag from every opening
   reads n² characters for.

Each figure is the median ms over alternating rounds (the three sizes of an input timed one
after another in each round, so the machine's noise hits them alike). The baseline of each
size is the 1x figure of the same input measured in the same run; linear time is a ratio of
about 2 at 2x and 4 at 4x (targets: <= 2.5x and <= 5x). Every run is checked: the well-formed
text gives every call, the openings a `FormatError` (none of them has a name).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import options

from stockade.engine import FormatError
from stockade.engine.formats import xml

Rows = list[dict[str, Any]]

CALL = (
    "I will look that up.\n<tool_call>\n  <name>web_search</name>\n  <params>\n"
    "    <query>python asyncio &amp; structured concurrency</query>\n"
    "    <max_results>10</max_results>\n  </params>\n</tool_call>\n"
)
OPENING = "<tool_call>"
TARGETS = {1: ("-", None), 2: ("<= 2.5x", 2.5), 4: ("<= 5x", 5.0)}


def well_formed(size: int) -> tuple[str, Callable[[], object]]:
    """Calls filling about ``size`` characters, and a run that checks every one is read."""
    count = size // len(CALL)
    text = CALL * count

    def run() -> object:
        calls = xml.parse_tool_calls(text)
        if len(calls) != count or calls[-1].arguments != {
            "query": "python asyncio & structured concurrency",
            "max_results": 10,
        }:
            raise RuntimeError(f"read {len(calls)} calls of {count}, or read them wrong")
        return calls

    return text, run


def openings(count: int) -> tuple[str, Callable[[], object]]:
    """``count`` unclosed openings, and a run that checks they are refused."""
    text = OPENING * count

    def run() -> object:
        try:
            xml.parse_tool_calls(text)
        except FormatError as exc:
            return exc
        raise RuntimeError("calls without a name were read")

    return text, run


def size_of(text: str) -> str:
    size = len(text.encode())
    return f"{size / 1e6:.2f} MB" if size >= 1e6 else f"{size / 1e3:.0f} KB"


def growth(
    title: str,
    make: Callable[[int], tuple[str, Callable[[], object]]],
    unit_size: int,
    rounds: int,
) -> Rows:
    """The rows of one input at 1x, 2x and 4x ``unit_size``."""
    made = {factor: make(unit_size * factor) for factor in TARGETS}
    names = {factor: f"{title}, {factor}x ({size_of(text)})" for factor, (text, _) in made.items()}
    medians = options.alternating(
        {names[factor]: run for factor, (_, run) in made.items()}, rounds, warm_up=1
    )
    base = medians[names[1]]
    rows = []
    for factor, (text, _) in made.items():
        target, most = TARGETS[factor]
        value = medians[names[factor]]
        ratio = value / base
        rows.append(
            {
                "measure": names[factor],
                "value": round(value, 3),
                "unit": "ms",
                "baseline": names[1],
                "baseline_value": round(base, 3),
                "ratio": round(ratio, 4),
                "target": target,
                "meets_target": None if most is None else ratio <= most,
                "note": f"{len(text):,} characters; "
                + ("the baseline" if factor == 1 else f"linear time is a ratio of {factor}"),
            }
        )
    return rows


def run(quick: bool) -> Rows:
    rounds = 3 if quick else 15
    scale = 4 if quick else 1  # the quick run reads a quarter of the text
    return [
        *growth("well-formed calls", well_formed, 300_000 // scale, rounds),
        *growth('"<tool_call>" * N', openings, 25_000 // scale, rounds),
    ]


def table(rows: Rows) -> None:
    print(f"{'measure':46} {'ms':>9} {'ratio':>7}  {'target':8} met")
    for r in rows:
        met = "" if r["meets_target"] is None else "yes" if r["meets_target"] else "NO"
        print(f"{r['measure']:46} {r['value']:>9.2f} {r['ratio']:>6.2f}x  {r['target']:8} {met}")


if __name__ == "__main__":
    sys.exit(options.main(__doc__, "formats", run, table))
