"""Copy-on-write layers benchmark: what running a command on a judged copy-on-write view of the
workspace costs, against baselines measured in the same run.

    python benchmarks/bench_layers.py            # about 30 seconds
    python benchmarks/bench_layers.py --quick    # a smoke run (numbers are rough)
    python benchmarks/bench_layers.py --json

Everything runs in a temporary folder on the same disk:

1. start to exit of ``true`` on copy-on-write layers, as the engine runs a command: a `Staging`
   of the workspace made, `run_process` with it, its changes read back (none), the layers
   removed; against `run_process` in the same bubblewrap box without layers (``staging=None``;
   one `Bubblewrap` probe for both, made beforehand). Alternating rounds; the figure is the
   median over rounds of the difference between the two in the same round (target <= +3 ms),
   so that a busy spell of the machine, which slows both alike, does not count; the medians
   of each and their ratio are shown too. The note says how much
   of it is the run itself, on layers made beforehand. No read masks: their cost is figure 3;
2. a command writing 1,000 files of 4 KiB (a bash loop of builtins: no process per file) into
   a new folder, through the whole engine: ``Engine.call`` of ``run_shell`` under the
   permissive preset, on a `VirtualFS` with the workspace mounted at ``/workspace``, so the
   files are written in the staged layer, each judged by the policy, then applied to the
   workspace (written beside their targets, flushed to disk together, renamed into place);
   against the same command run unboxed (``bash -c``) into a new folder beside the workspace.
   A new folder each repetition; after each run the 1,000 files are counted on the host (a run
   that wrote nothing would not be measured), then removed, untimed. The ratio is the median
   of the repetitions' ratios (target <= 2x);
3. the read masks of a command call (`ReadMasks.masks`, as the engine computes them before
   each run) in a workspace of 10,000 files in 100 folders, holding 50 protected names (25
   ``.env``, 25 ``.ssh/id_rsa``): cold, a new `ReadMasks` (every folder listed, every entry
   judged), and warm, a second call on the same one (every folder's listing and verdicts kept:
   one stat per folder); against a plain ``os.walk`` of the same tree. Medians over
   alternating rounds, all with the tree in the page cache. The warm figure, what every
   command pays before it runs, is held to the target (<= 5 ms); the cold one, paid once per
   engine, lists the whole tree as ``os.walk`` does, so the baseline is its floor. The tree
   is left to age a few seconds first, as a workspace between commands would be: a folder
   changed too recently is listed again. Every protected file is checked to be masked
   (itself or its folder), and the warm call to give the same masks.

Where bubblewrap or the layers are not available, figures 1 and 2 cannot be taken: their rows
say why instead.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from time import perf_counter
from typing import Any

import options

from stockade.engine import Engine, ToolCall, Toolkit, add_shell_tools
from stockade.engine.pipeline._masks import ReadMasks
from stockade.policies import Policy, Request
from stockade.sandbox import Bubblewrap, Mount, VirtualFS, run_process
from stockade.sandbox.layers import Staging, layers_available

Rows = list[dict[str, Any]]

TRUE = "start to exit of true: on copy-on-write layers"
FILES = "1,000 files of 4 KiB: Engine.call, applied"
COLD = "read masks, 10,000 files: cold"
WARM = "read masks, 10,000 files: warm"

FILE_COUNT, FILE_SIZE = 1000, 4096
# bash builtins only: the loop writes the files, no process is started per file
WRITE = (
    "mkdir {folder} && cd {folder} && s=$(printf '%{size}s' '') && "
    "for ((i = 0; i < {count}; i++)); do printf '%s' \"$s\" > f$i; done"
)
# the read masks list a folder again when its listing was made within two seconds of its last
# change (a change in the same clock tick would not show): the tree is left this long first
SETTLE_S = 3.0
PROTECTED = (".env", ".ssh/id_rsa")
POLICY = "permissive"


def row(
    measure: str,
    value: float | None,
    baseline: str,
    baseline_value: float | None,
    target: str,
    meets_target: bool | None,
    *,
    ratio: float | None = None,
    difference: float | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """One figure; ``ratio`` defaults to value / baseline_value, ``difference`` to value -
    baseline_value."""
    if ratio is None and value is not None and baseline_value:
        ratio = value / baseline_value
    if difference is None and value is not None and baseline_value is not None:
        difference = value - baseline_value
    return {
        "measure": measure,
        "value": None if value is None else round(value, 3),
        "unit": "ms",
        "baseline": baseline,
        "baseline_value": None if baseline_value is None else round(baseline_value, 3),
        "ratio": None if ratio is None else round(ratio, 4),
        "difference": None if difference is None else round(difference, 3),
        "target": target,
        "meets_target": meets_target,
        "note": note,
    }


def not_taken(measure: str, baseline: str, target: str, why: str) -> dict[str, Any]:
    return row(measure, None, baseline, None, target, None, note=f"cannot be taken here: {why}")


# -- 1. true on layers ---------------------------------------------------------------------------


def true_on_layers(machine: Bubblewrap, rounds: int) -> dict[str, Any]:
    baseline = "true in the same bubblewrap box, no layers"
    with tempfile.TemporaryDirectory() as tmp, VirtualFS([Mount("/workspace", tmp)]) as fs:
        (Path(tmp) / "notes.txt").write_text("a file for the layers to show\n")

        def plain() -> None:
            done = run_process(
                ["true"], fs=fs, timeout=10, isolation="bubblewrap", bubblewrap=machine
            )
            if done.exit_code != 0 or done.isolation != "bubblewrap":
                raise RuntimeError(f"true in the box failed: {done}")

        def layered() -> None:
            with Staging(fs.mounts) as staging:
                done = run_process(["true"], fs=fs, timeout=10, bubblewrap=machine, staging=staging)
                if done.exit_code != 0 or done.isolation != "bubblewrap+layers":
                    raise RuntimeError(f"true on layers failed: {done}")
                if staging.changes():
                    raise RuntimeError("true changed something on its layers")

        with Staging(fs.mounts) as made:

            def run_only() -> None:
                run_process(["true"], fs=fs, timeout=10, bubblewrap=machine, staging=made)

            samples = options.alternating_samples(
                {"plain": plain, "layered": layered, "run only": run_only}, rounds, warm_up=3
            )
    found = {name: statistics.median(values) for name, values in samples.items()}
    extra = options.paired_difference(samples, "layered", "plain")
    run_extra = options.paired_difference(samples, "run only", "plain")
    note = (
        f"{extra:+.2f} ms against the box without layers; the run itself, on layers made "
        f"beforehand, {run_extra:+.2f} ms; making, reading back and removing them the rest"
    )
    return row(TRUE, found["layered"], baseline, found["plain"], "<= +3 ms", extra <= 3,
               difference=extra, note=note)  # fmt: skip


# -- 2. 1,000 files through the engine -----------------------------------------------------------


def write_command(folder: str) -> str:
    return WRITE.format(folder=folder, size=FILE_SIZE, count=FILE_COUNT)


def landed(root: Path, folder: str, way: str) -> None:
    """Check that the 1,000 files of ``FILE_SIZE`` bytes are in ``root/folder``, then remove
    it (the next repetition writes a new folder)."""
    where = root / folder
    found = 0
    if where.is_dir():
        found = sum(1 for e in os.scandir(where) if e.is_file() and e.stat().st_size == FILE_SIZE)
    if found != FILE_COUNT:
        raise RuntimeError(f"{found} of {FILE_COUNT} files landed {way} in {folder}")
    shutil.rmtree(where)


def unboxed(command: str, cwd: Path) -> None:
    subprocess.run(["bash", "-c", command], cwd=cwd, check=True)


async def repeat(
    engine: Engine, ws: Path, beside: Path, repetitions: int
) -> tuple[list[float], list[float]]:
    """Milliseconds of each repetition: through the engine, and unboxed."""

    async def boxed(command: str) -> None:
        result = await engine.call(ToolCall(name="run_shell", arguments={"command": command}))
        if result.status != "ok":
            raise RuntimeError(f"the engine's run failed: {result.text}")
        used = result.metadata["process"]["isolation"]
        if used != "bubblewrap+layers":
            raise RuntimeError(f"the command ran on {used}, not on copy-on-write layers")

    # warm up: the engine's probes of bubblewrap and the layers, the first run of each way
    await boxed("true")
    unboxed("true", beside)
    ours: list[float] = []
    theirs: list[float] = []
    for n in range(repetitions):
        folder = f"run-{n}"
        started = perf_counter()
        await boxed(write_command(folder))
        ours.append((perf_counter() - started) * 1000)
        started = perf_counter()
        unboxed(write_command(folder), beside)
        theirs.append((perf_counter() - started) * 1000)
        landed(ws, folder, "through the engine")
        landed(beside, folder, "unboxed")
    return ours, theirs


async def through_engine(
    ws: Path, beside: Path, repetitions: int
) -> tuple[list[float], list[float]]:
    toolkit = Toolkit()
    add_shell_tools(toolkit)
    with VirtualFS([Mount("/workspace", ws)]) as fs:
        async with Engine(toolkit, policy=Policy.preset(POLICY), fs=fs) as engine:
            return await repeat(engine, ws, beside, repetitions)


def files_through_engine(repetitions: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        ws, beside = Path(tmp, "ws"), Path(tmp, "unboxed")
        ws.mkdir()
        beside.mkdir()
        ours, theirs = asyncio.run(through_engine(ws, beside, repetitions))
    ratio = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    return row(FILES, statistics.median(ours), "the same command unboxed (bash -c)",
               statistics.median(theirs), "<= 2x", ratio <= 2, ratio=ratio,
               note=f"{POLICY} preset; every file counted on the host after each run")  # fmt: skip


# -- 3. read masks -------------------------------------------------------------------------------


def plant_tree(root: Path) -> list[str]:
    """10,000 files in 10 x 10 folders, every other folder holding one protected file in place
    of an ordinary one (``.env`` and ``.ssh/id_rsa`` in turn); the protected files' logical
    paths."""
    protected: list[str] = []
    data = b"x = 1\n"
    for a in range(10):
        for b in range(10):
            folder = root / f"pkg{a}" / f"mod{b}"
            folder.mkdir(parents=True)
            ordinary = 100
            number = a * 10 + b
            if number % 2 == 0:
                name = PROTECTED[number // 2 % 2]
                path = folder / name
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(b"SECRET=1\n")
                protected.append(f"/workspace/{path.relative_to(root)}")
                ordinary -= 1
            for i in range(ordinary):
                fd = os.open(folder / f"file{i:03d}.py", os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
    return protected


def read_masks(root: Path, protected: list[str], rounds: int) -> list[dict[str, Any]]:
    baseline = "os.walk of the same tree"
    policy = Policy.preset(POLICY)
    # the request the engine makes for a run_shell call on a boxed, staged view
    request = Request("agent", "run_shell", "execute", (), "make test", False, (), True, ("/tmp",))
    with VirtualFS([Mount("/workspace", root)]) as fs:
        warm = ReadMasks(policy)
        masked = warm.masks(request, fs.mounts, fs=fs)
        missed = [p for p in protected if not any(p == m or p.startswith(f"{m}/") for m in masked)]
        if missed or len(masked) != len(protected):
            raise RuntimeError(f"the masks {masked[:5]} ... miss {missed[:5]}")

        def walk() -> None:
            for _ in os.walk(root):
                pass

        found = options.alternating(
            {
                "walk": walk,
                "cold": lambda: ReadMasks(policy).masks(request, fs.mounts, fs=fs),
                "warm": lambda: warm.masks(request, fs.mounts, fs=fs),
            },
            rounds,
            warm_up=2,
        )
        if warm.masks(request, fs.mounts, fs=fs) != masked:
            raise RuntimeError("the masks kept differ from the masks first found")
    note = f"{len(protected)} protected files, all masked ({len(masked)} masks)"
    return [
        row(COLD, found["cold"], baseline, found["walk"], "-", None,
            note="a new ReadMasks, once per engine: every folder listed (as os.walk does) and "
            "every entry judged; no target, the listing alone takes the baseline; " + note),
        row(WARM, found["warm"], baseline, found["walk"], "<= 5 ms", found["warm"] <= 5,
            note="the same ReadMasks again: listings and verdicts kept, one stat per folder"),
    ]  # fmt: skip


# -- the run -------------------------------------------------------------------------------------


def layers_problem(machine: Bubblewrap) -> str | None:
    """Why commands cannot run on layers here, or None."""
    if not machine.available:
        return f"bubblewrap is not available: {machine.problem}"
    return layers_available()


def run(quick: bool) -> Rows:
    rounds = 5 if quick else 60
    repetitions = 2 if quick else 9
    mask_rounds = 3 if quick else 21
    rows: Rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # planted first, so that it ages while figures 1 and 2 are taken
        tree = Path(tmp, "ws")
        protected = plant_tree(tree)
        planted = time.monotonic()
        # its writing-out to disk would otherwise go on during figure 1, slowing what touches
        # the disk (the layers' folders) and not the rest
        os.sync()
        machine = Bubblewrap.probe()
        problem = layers_problem(machine)
        if problem is None:
            rows.append(true_on_layers(machine, rounds))
            rows.append(files_through_engine(repetitions))
        else:
            rows.append(not_taken(TRUE, "true in the same bubblewrap box, no layers",
                                  "<= +3 ms", problem))  # fmt: skip
            rows.append(not_taken(FILES, "the same command unboxed (bash -c)", "<= 2x", problem))
        time.sleep(max(0.0, planted + SETTLE_S - time.monotonic()))
        rows.extend(read_masks(tree, protected, mask_rounds))
    return rows


def table(rows: Rows) -> None:
    header = ("measure", "ms", "baseline ms", "ratio", "+ms", "target", "met")
    print("{:46} {:>9} {:>11} {:>7} {:>7}  {:9} {}".format(*header))
    for r in rows:
        if r["value"] is None:
            print(f"{r['measure']:46} {'':>9} {'':>11} {'':>7} {'':>7}  {r['target']}")
        else:
            met = {True: "yes", False: "NO", None: ""}[r["meets_target"]]
            print(
                f"{r['measure']:46} {r['value']:>9.2f} {r['baseline_value']:>11.2f} "
                f"{r['ratio']:>6.2f}x {r['difference']:>+7.2f}  {r['target']:9} {met}"
            )
            print(f"{'':6}baseline: {r['baseline']}")
        for line in textwrap.wrap(r["note"] or "", 94):
            print(f"{'':6}{line}")


def notes() -> list[str]:
    """What the title should say about this machine."""
    return ["overlay layers" if layers_problem(Bubblewrap.probe()) is None else "NO overlay layers"]


if __name__ == "__main__":
    sys.exit(options.main(__doc__, "copy-on-write layers", run, table, *notes()))
