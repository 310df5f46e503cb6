"""Egress benchmark: what the filtered network costs a download, against the network fully open,
in one run.

    python benchmarks/bench_egress.py            # about 40 seconds (needs root and bubblewrap)
    python benchmarks/bench_egress.py --quick    # a smoke run
    python benchmarks/bench_egress.py --json

A test host is made in a network namespace of its own (the tests' `net_hosts`, on a veth pair:
no outside address is used), serving a 10 MB file over HTTP. Each round runs, in a box, ``curl``
fetching it three ways, timed one after another (curl's own ``time_total`` and
``time_starttransfer``, so the figures are the download's, not the box's start-up):

1. the network fully open (``network=True``), by address: the baseline;
2. filtered, through the HTTP proxy the box's ``http_proxy`` names;
3. filtered, with curl told to ignore proxies (``--noproxy '*'``): the DNS stub's address and
   the captured port.

Figures: the median download time of each filtered way over the open one (target <= 1.3x), the
added time to first byte (median of the paired differences, ms), and what the filtered network
adds to a whole run of ``true`` (the box's first program opening and handing over its sockets).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import options

from stockade.sandbox import Mount, VirtualFS, isolation_available, run_process
from stockade.sandbox.egress import Egress, Verdict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

NAME = "bench.test"
TARGET = 1.3


def _timed(fs: VirtualFS, command: str, network: bool | Egress) -> tuple[float, float]:
    """(time to first byte, total) in ms, as curl measured them in the box."""
    result = run_process(command, fs=fs, timeout=60, network=network)
    if result.exit_code != 0:
        raise RuntimeError(f"{command!r} failed: {result.stderr or result.stdout}")
    first, total = (float(x) * 1000 for x in result.stdout.split())
    return first, total


def _row(measure: str, value: float | None, unit: str, **more: Any) -> dict[str, Any]:
    """A row with the fields every benchmark's rows have (run_all reads them)."""
    shown = {"measure": measure, "value": None if value is None else round(value, 3),
             "unit": unit, "baseline": None, "baseline_value": None, "ratio": None,
             "target": "-", "meets_target": None, "note": None}  # fmt: skip
    shown.update(more)
    return shown


def run(quick: bool) -> list[dict[str, Any]]:
    if os.geteuid() != 0 or not isolation_available():
        why = "not measured: needs root (network namespaces) and bubblewrap"
        return [_row("10 MB download through the egress proxy", None, "ms", note=why)]
    from net_hosts import TestNet  # type: ignore[import-not-found]  # the tests' test hosts

    rounds = 4 if quick else 20
    rows: list[dict[str, Any]] = []
    with TestNet() as net, tempfile.TemporaryDirectory() as tmp:
        host = net.add(NAME)
        egress = Egress(
            judge=lambda h, p: Verdict(h == NAME, "the benchmark's host"),
            hosts={NAME: host.address},
            reach_private=[f"{host.address}/32"],
        )
        fs = VirtualFS([Mount("/workspace", tmp)])
        curl = "curl -sS -o /dev/null -w '%{time_starttransfer} %{time_total}' "
        base = "open network, by address"
        ways: dict[str, tuple[str, bool | Egress]] = {
            base: (f"{curl}http://{host.address}/big.bin", True),
            "filtered, HTTP proxy": (f"{curl}http://{NAME}/big.bin", egress),
            "filtered, proxy ignored": (f"{curl}--noproxy '*' http://{NAME}/big.bin", egress),
        }
        for command, network in ways.values():  # warm up: page cache, the first box
            _timed(fs, command, network)
        firsts: dict[str, list[float]] = {name: [] for name in ways}
        totals: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(rounds):
            for name, (command, network) in ways.items():
                first, total = _timed(fs, command, network)
                firsts[name].append(first)
                totals[name].append(total)
        base_total = statistics.median(totals[base])
        rows.append(_row(f"10 MB download: {base}", base_total, "ms"))
        for name in list(ways)[1:]:
            total = statistics.median(totals[name])
            rows.append(
                _row(f"10 MB download: {name}", total, "ms", baseline=base,
                     baseline_value=round(base_total, 3), ratio=round(total / base_total, 3),
                     target=f"<= {TARGET}x", meets_target=total / base_total <= TARGET)
            )  # fmt: skip
            added = options.paired_difference(firsts, name, base)
            rows.append(_row(f"time to first byte added: {name}", added, "ms"))
        runs = options.alternating_samples(
            {
                "no network": lambda: run_process("true", fs=fs, timeout=10),
                "filtered": lambda: run_process("true", fs=fs, timeout=10, network=egress),
            },
            rounds * 2,
            warm_up=2,
        )
        added = options.paired_difference(runs, "filtered", "no network")
        rows.append(_row("a run of `true`: added by the filtered network", added, "ms"))
        fs.close()
    return rows


def table(rows: list[dict[str, Any]]) -> None:
    print(
        "{:58} {:>10} {:>4} {:>7}  {:9} {}".format("measure", "value", "", "ratio", "target", "met")
    )
    for r in rows:
        value = "" if r["value"] is None else f"{r['value']:.2f}"
        ratio = f"{r['ratio']:.3f}" if r.get("ratio") is not None else ""
        met = {True: "yes", False: "NO", None: ""}[r["meets_target"]]
        print(f"{r['measure']:58} {value:>10} {r['unit']:>4} {ratio:>7}  {r['target']:9} {met}")


if __name__ == "__main__":
    sys.exit(options.main(__doc__, "egress", run, table, "a test host on a veth pair"))
