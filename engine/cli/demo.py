"""``stockade demo``: a scripted agent session through the real engine, shown as a live table
(or as JSON), with a summary, the audit log's verdict and where the traces went."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NamedTuple

import typer

from stockade.engine.cli.common import StateInMountOption, StateOption, fail
from stockade.engine.cli.demo_session import DemoReport, DemoStep, run_demo
from stockade.engine.cli.session import choose_state
from stockade.engine.observe import verify_audit
from stockade.errors import ConfigurationError
from stockade.sandbox import Mount

if TYPE_CHECKING:  # rich loads only when a command prints with it, not at start-up
    from rich.table import Table

_STATUS_STYLE = {
    "ok": "green",
    "error": "red",
    "denied": "magenta",
    "timeout": "yellow",
    "cancelled": "dim",
}


# Below this width the eight columns cannot all be read; the narrow layout folds them into four
# that wrap instead.
_WIDE = 110


class _Row(NamedTuple):
    """One finished step, marked up for the table."""

    label: str
    tool: str
    decision: str
    status: str
    tries: str
    took: str
    result: str


def _row(step: DemoStep) -> _Row | None:
    result = step.result
    if result is None:
        return None
    style = _STATUS_STYLE.get(result.status, "")
    status = f"[{style}]{result.status}[/]"
    if not step.as_expected:
        status += f" [bold red](expected {step.expected})[/]"
    decision = "-"
    if result.decision is not None:
        decision = result.decision.effect.value
        if result.decision.rule:
            decision += f" · {result.decision.rule}"
    shown = result.text.replace("\n", " ")
    if step.chunks:
        shown = f"[{step.chunks} chunks] {shown}"
    took = f"{result.duration_s * 1000:.0f} ms"
    return _Row(step.label, result.tool, decision, status, str(result.attempts), took, shown)


def _table(steps: list[DemoStep], width: int) -> Table:
    from rich.table import Table

    table = Table(title="Stockade demo: an untrusted agent's session", title_justify="left")
    narrow = width < _WIDE
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    if narrow:
        table.add_column("what the agent did · tool", ratio=2)
        table.add_column("decision · status · tries · time", ratio=2)
        table.add_column("result", ratio=3, overflow="fold")
    else:
        # The fixed columns take about 96 characters; the two text columns share the rest, so
        # rich never has to squeeze the short columns (which it does by hiding them).
        spare = max(24, width - 96)
        table.add_column(
            "what the agent did", no_wrap=True, overflow="ellipsis", max_width=spare * 2 // 5
        )
        table.add_column("tool", style="cyan", no_wrap=True)
        table.add_column("decision · rule", no_wrap=True, overflow="ellipsis", max_width=30)
        table.add_column("status", no_wrap=True)
        table.add_column("tries", justify="right", no_wrap=True)
        table.add_column("time", justify="right", no_wrap=True)
        table.add_column("result", no_wrap=True, overflow="ellipsis", max_width=spare * 3 // 5)
    for n, step in enumerate(steps, 1):
        row = _row(step)
        if row is None:
            continue
        if narrow:
            table.add_row(
                str(n),
                f"{row.label}\n[cyan]{row.tool}[/]",
                f"{row.decision}\n{row.status} · {row.tries} · {row.took}",
                row.result[:120],
            )
        else:
            table.add_row(str(n), *row[:6], row.result[:200])
    return table


def _summary(report: DemoReport) -> str:
    counts: dict[str, int] = {}
    for step in report.steps:
        if step.result is not None:
            counts[step.result.status] = counts.get(step.result.status, 0) + 1
    parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    verdict = (
        "every call ended as expected"
        if report.passed
        else "SOME CALLS DID NOT END AS EXPECTED (marked above)"
    )
    return f"{len(report.steps)} calls in {report.seconds:.2f}s: {parts}; {verdict}."


def demo(
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            help="Folder to use as /workspace (it is written to); default a fresh temporary one.",
            file_okay=False,
        ),
    ] = None,
    state: StateOption = None,
    state_in_mount: StateInMountOption = False,
) -> None:
    """Run a scripted agent session through the engine and show what happened to each call."""
    from rich.console import Console
    from rich.live import Live

    try:
        if workspace is not None:
            workspace.mkdir(parents=True, exist_ok=True)
        mounts = [Mount("/workspace", workspace)] if workspace is not None else []
        state = choose_state(state, workspace, mounts, in_mount=state_in_mount)
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[bold red]error:[/] cannot create {exc.filename}: {exc.strerror}"
        )
        raise typer.Exit(1) from None
    except ConfigurationError as exc:
        fail(str(exc))
    if as_json:
        report = asyncio.run(run_demo(workspace=workspace, state=state))
        audit = verify_audit(report.audit) if report.audit else None
        payload = {
            "passed": report.passed,
            "seconds": round(report.seconds, 3),
            "audit": {
                "path": str(report.audit),
                "intact": audit.ok if audit else None,
                "records": audit.records if audit else 0,
            },
            "traces": str(report.traces),
            "steps": [
                {
                    "label": s.label,
                    "expected": s.expected,
                    "result": s.result.to_dict() if s.result else None,
                }
                for s in report.steps
            ],
        }
        sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    else:
        console = Console()
        steps: list[DemoStep] = []
        with Live(
            _table(steps, console.width), console=console, refresh_per_second=12, transient=False
        ) as live:

            def show(step: DemoStep) -> None:
                steps.append(step)
                live.update(_table(steps, console.width))

            report = asyncio.run(run_demo(show, workspace, state))
        console.print()
        console.print(_summary(report))
        console.print(
            "[dim]Every call went through the default policy preset; file tools worked in "
            f"{report.workspace} through the virtual filesystem, and commands ran in the process "
            f"sandbox ({_isolation(report)}).[/]"
        )
        if report.audit is not None:
            audit = verify_audit(report.audit)
            console.print(
                f"Audit log: {report.audit} ({audit}); see it with "
                f"[bold]stockade audit show {report.audit}[/]. Traces: {report.traces}.",
                highlight=False,
            )
    raise typer.Exit(0 if report.passed else 1)


def _isolation(report: DemoReport) -> str:
    """What the engine that ran the demo found (not a probe of its own)."""
    return "bubblewrap" if report.isolated else "NO bubblewrap here: limits only"
