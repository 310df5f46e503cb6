"""The benchmark suite in one command: Stockade's headline figures and its peers side by side,
from one run, in one table.

    python benchmarks/run_all.py            # about a minute and a half
    python benchmarks/run_all.py --quick    # a smoke run (numbers are rough), about 25 seconds
    python benchmarks/run_all.py --json     # the rows, machine-readable

    pip install -e '.[bench]'               # adds the peers: AgentScope, toolwarden, tollgate

It runs the measurements of the other scripts in this folder one after another in this process
(bench_engine, bench_observability, bench_audit, bench_policy, bench_formats, bench_vfs,
bench_process, bench_layers, bench_egress, bench_import, bench_peers), saying on stderr which
part is being measured, and prints one row per figure: its value, the baseline it is compared with
(measured in the same run, by the same script), the ratio of the two, and the target where
there is one. How each figure is taken is in the docstring of its script. A call measured by
two parts (``Engine.call`` is) differs between them by noise and by what it alternates with:
compare figures within a part.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import Callable
from time import perf_counter
from typing import Any

import bench_audit
import bench_egress
import bench_engine
import bench_formats
import bench_import
import bench_layers
import bench_observability
import bench_peers
import bench_policy
import bench_process
import bench_vfs
import options

from stockade.sandbox import isolation_available, openat2_available

Rows = list[dict[str, Any]]


def row(
    part: str,
    measure: str,
    value: float | None,
    unit: str,
    baseline: str | None = None,
    baseline_value: float | None = None,
    ratio: float | None = None,
    target: str = "-",
    meets_target: bool | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """One row of the table; ``ratio`` defaults to value / baseline_value."""
    if ratio is None and value is not None and baseline_value:
        ratio = value / baseline_value
    if target == "-":
        meets_target = None  # nothing to meet: the column stays empty
    return {
        "part": part,
        "measure": measure,
        "value": None if value is None else round(value, 3),
        "unit": unit,
        "baseline": baseline,
        "baseline_value": None if baseline_value is None else round(baseline_value, 3),
        "ratio": None if ratio is None else round(ratio, 4),
        "target": target,
        "meets_target": meets_target,
        "note": note,
    }


# -- each script's rows, as rows of the one table ----------------------------------------------


def startup(quick: bool) -> Rows:
    found = {r["measure"]: r for r in bench_import.run(quick)}
    start = found["python -c pass"]["ms"]
    return [
        row("start-up", measure, found[measure]["ms"], "ms", "python -c pass", start,
            note=f"{found[measure]['over_start_ms']:.1f} ms over the interpreter's start")
        for measure in ("from stockade.engine import Engine", "stockade version")
    ]  # fmt: skip


def peers(quick: bool) -> Rows:
    found = bench_peers.run(quick)
    direct = next(r for r in found if r["measure"] == "direct await")
    rows = []
    for r in found:
        if r is direct:
            continue  # the baseline: shown in every row
        peer = r["library"] != "stockade" and r["version"] is not None
        note = f"{r['library']} {r['version']}: {r['includes']}" if peer else r["includes"]
        rows.append(row("peers", r["measure"], r["us"], "µs", "direct await", direct["us"],
                        note=note))  # fmt: skip
    return rows


def engine(quick: bool) -> Rows:
    found = {r["measure"]: r for r in asyncio.run(bench_engine.run(quick))}
    baselines = {
        "Engine.call, 1 tool": "direct await of the function",
        "Engine.call, 1,000 tools": "Engine.call, 1 tool",
        "Engine.call, sync tool off the loop": "asyncio.to_thread, bare",
    }
    rows = []
    for measure, r in found.items():
        if measure in baselines.values() and measure not in baselines:
            continue  # a baseline: shown in its figure's row
        base = baselines.get(measure)
        base_value = found[base]["value"] if base else None
        if measure.startswith("call_many"):
            # the figure is a wall time against the 10 ms each of the calls sleeps
            base, base_value = "one call's sleep (nominal)", 10.0
        unit = r["unit"].split("/")[0].split()[0]  # "µs/call" and "ms wall": the column is short
        rows.append(
            row("engine", measure, r["value"], unit, base, base_value, r["ratio"], r["target"],
                r["meets_target"])
        )  # fmt: skip
    return rows


def observability(quick: bool) -> Rows:
    found = bench_observability.run(quick)
    base = found[0]
    verified = f"; audit log verified after the run: {base['audit_verified']}"
    return [
        row("audit/span", f"Engine.call {r['measure']}", r["us"], "µs",
            "Engine.call, no audit, no span", base["us"], target=r["target"],
            meets_target=r["meets_target"],
            note=f"{r['extra_us']:.2f} µs more" + (verified if "audit" in r["measure"] else ""))
        for r in found[1:]
    ]  # fmt: skip


def policy(quick: bool) -> Rows:
    found = bench_policy.run(quick)
    sizes = {r["rules"]: r for r in found[:-1]}
    summary = found[-1]
    small, large = sizes[10], sizes[10_000]
    return [
        row("policy", "decision, 10,000 rules (compiled, uncached)", large["compiled_us"], "µs",
            "casbin enforce, same rules", large["casbin_us"], target="<= 5 µs",
            meets_target=summary["targets"]["compiled_at_10000_le_5us"],
            note=f"mean {large['compiled_mean_us']:.2f} µs; with the decision cache "
            f"{large['cached_us']:.2f} µs; 10,000 rules load in {large['load_ms']:.0f} ms; "
            f"casbin sampled on {large['casbin_sampled']} requests"),
        row("policy", "decision, 10,000 rules against 10 rules", large["compiled_us"], "µs",
            "same decision, 10 rules", small["compiled_us"], summary["growth_10_to_10000"],
            target="<= 2x", meets_target=summary["targets"]["growth_le_2x"]),
    ]  # fmt: skip


def vfs(quick: bool) -> Rows:
    found = {r["measure"]: r for r in bench_vfs.run(quick)}
    baselines = {
        "read 4 KiB": "open(path, 'rb').read()",
        "write 4 KiB, atomic": "the same temp file + rename with plain os calls",
        "write 4 KiB, atomic + fsync": "the same with both fsyncs, plain os calls",
        "list 10,000 entries": "os.scandir",
    }
    return [
        row("vfs", f"VirtualFS {measure}", found[measure]["stockade_us"], "µs", base,
            found[measure]["baseline_us"], found[measure]["ratio"], found[measure]["target"],
            found[measure]["meets_target"])
        for measure, base in baselines.items()
    ]  # fmt: skip


def process(quick: bool) -> Rows:
    found = {r["measure"]: r for r in bench_process.run(quick)}
    plain = found["true: subprocess.run"]["ms"]
    rows = []
    for name in ("run_process, no isolation", "run_process, bubblewrap"):
        r = found.get(f"true: {name}")
        if r is None:
            rows.append(
                row("process", f"start to exit of true: {name}", None, "ms",
                    "subprocess.run(['true'])", plain,
                    note="bubblewrap is not available here: commands run with limits only")
            )  # fmt: skip
            continue
        rows.append(
            row("process", f"start to exit of true: {name}", r["ms"], "ms",
                "subprocess.run(['true'])", plain, target=r["target"],
                meets_target=r["meets_target"], note=f"{r['extra_ms']:.2f} ms more")
        )  # fmt: skip
    for name, r in found.items():
        if name.startswith("hung, a tree"):
            isolation = name.rsplit("(", 1)[1].rstrip(")")
            rows.append(
                row("process", f"hung tree of 3: gone after deadline ({isolation})", r["ms"],
                    "ms", target=r["target"], meets_target=r["meets_target"],
                    note=f"processes left alive afterwards: {r['leftovers']}")
            )  # fmt: skip
    return rows


def layers(quick: bool) -> Rows:
    # where bubblewrap or the layers are missing, a figure's value is None and its note says why
    return [
        row("layers", r["measure"], r["value"], r["unit"], r["baseline"], r["baseline_value"],
            r["ratio"], r["target"], r["meets_target"], r["note"])
        for r in bench_layers.run(quick)
    ]  # fmt: skip


def standard(part: str, found: Rows) -> Rows:
    """Rows of a script that already gives the table's fields (value, unit, baseline ...)."""
    return [
        row(part, r["measure"], r["value"], r["unit"], r["baseline"], r["baseline_value"],
            r["ratio"], r["target"], r["meets_target"], r["note"])
        for r in found
    ]  # fmt: skip


def audit(quick: bool) -> Rows:
    return standard("audit", bench_audit.run(quick))


def formats(quick: bool) -> Rows:
    return standard("formats", bench_formats.run(quick))


def egress(quick: bool) -> Rows:
    return standard("egress", bench_egress.run(quick))


# Stockade's µs-scale figures go first, on a small heap. The peers go last: importing them
# (AgentScope brings openai, anthropic, mcp ...) multiplies the objects every full garbage
# collection walks, which would weigh on the figures measured after it; within their own part
# all ways share that heap alike. The table shows the parts in this order.
PARTS: list[tuple[str, Callable[[bool], Rows]]] = [
    ("engine call overhead (bench_engine)", engine),
    ("audit and span overhead (bench_observability)", observability),
    ("audit durability under 1,000 concurrent calls (bench_audit)", audit),
    ("policy decisions at 10 and 10,000 rules (bench_policy)", policy),
    ("the XML tool-call reader as its input doubles (bench_formats)", formats),
    ("VFS reads, writes and listing (bench_vfs)", vfs),
    ("process start and kill, with and without bubblewrap (bench_process)", process),
    ("commands on copy-on-write layers and their read masks (bench_layers)", layers),
    ("a 10 MB download through the egress proxy vs the open network (bench_egress)", egress),
    ("library import and the command's start (bench_import)", startup),
    ("the same call through Stockade and its peers (bench_peers)", peers),
]


def measure(quick: bool) -> Rows:
    rows: Rows = []
    started = perf_counter()
    for number, (label, part) in enumerate(PARTS, 1):
        print(f"[{number}/{len(PARTS)}] {label} ...", end="", file=sys.stderr, flush=True)
        began = perf_counter()
        rows.extend(part(quick))
        print(f" {perf_counter() - began:.1f} s", file=sys.stderr, flush=True)
    print(f"all measured in {perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return rows


def number(value: float) -> str:
    """A figure with as many decimals as it needs to be read: 0.083, 5.53, 6023.5."""
    if value >= 1000:
        return f"{value:.1f}"
    if value >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def table(rows: Rows) -> None:
    # the baseline goes last, where its name can be as long as it needs
    print(f"  {'measure':48} {'value':>9} {'':3} {'ratio':>8}  {'target':17} met  baseline")
    part = None
    for r in rows:
        if r["part"] != part:
            part = r["part"]
            print(f"{part}:")
        measured = r["value"] is not None
        value = number(r["value"]) if measured else ""
        unit = r["unit"] if measured else ""
        met = {None: "", True: "yes", False: "NO"}[r["meets_target"] if measured else None]
        baseline = ""
        if measured and r["baseline"] is not None:
            base_value = r["baseline_value"]
            amount = "" if base_value is None else f"{number(base_value)} {r['unit']} "
            baseline = f"vs {amount}{r['baseline']}"
        ratio = bench_peers.ratio_text(r["ratio"] if measured else None)
        print(
            f"  {r['measure']:48} {value:>9} {unit:3} {ratio:>8}  {r['target']:17} {met:3}  "
            f"{baseline}".rstrip()
        )
        for line in textwrap.wrap(r["note"] or "", 100):
            print(f"{'':6}{line}")


def notes() -> list[str]:
    """What the title should say about this machine."""
    peers = [name for name in bench_peers.PINNED if bench_peers.installed(name)]
    return [
        "bubblewrap" if isolation_available() else "NO bubblewrap: limits only",
        *bench_layers.notes(),
        "openat2" if openat2_available() else "descriptor walk",
        f"peers: {', '.join(peers)}" if peers else "peers not installed",
    ]


if __name__ == "__main__":
    sys.exit(options.main(__doc__, "suite", measure, table, *notes()))
