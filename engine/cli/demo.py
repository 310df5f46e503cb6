"""``stockade demo``: a scripted agent session through the real engine, shown as a live table
(or as JSON), with a summary, the audit log's verdict and where the traces went.

Exit 0 when every call ended as expected and the audit log verifies; 1 when a call did not, or
the log does not verify (an earlier record edited, say), or a part could not be opened; 2 for
a workspace the demo may not use (see `demo_workspace`); 130 on Ctrl-C. The table is
`demo_table`'s, the steps `demo_session`'s.

    stockade demo --workspace dws --state dws-state
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from stockade.engine.cli.common import StateInMountOption, StateOption, fail, usage
from stockade.engine.cli.demo_session import DemoReport, DemoStep, open_session, run_demo
from stockade.engine.cli.demo_table import audit_verdict, demo_table, plural, summary
from stockade.engine.cli.demo_workspace import DemoFolders, check_workspace, demo_folders
from stockade.engine.cli.session import choose_state, mounts_of, state_error
from stockade.engine.observe import verify_audit
from stockade.errors import ConfigurationError, StockadeError

if TYPE_CHECKING:
    from stockade.engine.observe import AuditReport

INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C

WorkspaceOption = Annotated[
    Path | None,
    typer.Option(
        "--workspace",
        help="A new or empty folder to use as /workspace: the demo leaves its project there "
        "(default: a temporary one, removed after).",
        file_okay=False,
    ),
]
ForceOption = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Use a --workspace that holds other files: the demo adds its own beside them, and "
        "still refuses a folder holding a name it writes (it never touches a file it did not "
        "create).",
    ),
]


def demo(
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    workspace: WorkspaceOption = None,
    force: ForceOption = False,
    state: StateOption = None,
    state_in_mount: StateInMountOption = False,
) -> None:
    """Run a scripted agent session through the engine and show what happened to each call."""
    if force and workspace is None:
        usage("--force goes with --workspace (the default temporary workspace is always empty)")
    try:
        chosen = check_workspace(workspace, force=force) if workspace is not None else None
    except ConfigurationError as exc:
        usage(str(exc))
    try:
        # the mounts as the session will have them, for choose_state to judge before any write
        folder = choose_state(state, chosen, mounts_of(chosen), in_mount=state_in_mount)
    except ConfigurationError as exc:
        fail(str(exc))
    try:  # the state folder before the workspace: a demo that cannot keep its log writes nothing
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied", str(folder))
    except OSError as exc:
        fail(str(state_error(folder, exc)))
    report = DemoReport()
    try:
        with demo_folders(chosen) as folders:
            if as_json:
                asyncio.run(_quiet(folders, folder, report))
            else:
                _shown(folders, folder, report)
    except KeyboardInterrupt:
        _interrupted(report)
    except (StockadeError, OSError) as exc:
        fail(_problem(exc))
    audit = verify_audit(report.audit) if report.audit is not None else None
    if as_json:
        sys.stdout.write(json.dumps(_payload(report, audit), indent=2, ensure_ascii=False) + "\n")
    elif audit is not None:
        _closing(report, audit)
    if audit is not None and not audit.ok:
        fail(
            f"the audit log {report.audit} does not verify: {audit.problem}. See it with "
            f"`stockade audit verify {report.audit}` (and keep it as evidence); give another "
            "--state to start a fresh log"
        )
    raise typer.Exit(0 if report.passed else 1)


def _problem(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        return (
            f"cannot use {exc.filename}: {exc.strerror}; choose a folder you can write, or fix "
            "its permissions"
        )
    return str(exc)


async def _quiet(folders: DemoFolders, state: Path, report: DemoReport) -> None:
    await run_demo(open_session(folders, state), folders, report=report)


def _shown(folders: DemoFolders, state: Path, report: DemoReport) -> None:
    """The demo as a live table on stdout, then its closing lines."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False)

    async def run() -> None:
        from rich.live import Live

        session = open_session(folders, state)  # what cannot open says so before the table
        steps: list[DemoStep] = []
        with Live(
            demo_table(steps, console.width),
            console=console,
            refresh_per_second=12,
            transient=False,
        ) as live:

            def show(step: DemoStep) -> None:
                steps.append(step)
                live.update(demo_table(steps, console.width))

            await run_demo(session, folders, show, report)

    asyncio.run(run())
    console.print()
    console.print(summary(report))
    where = (
        "a temporary workspace (removed now)"
        if report.temporary
        else f"{escape(str(report.workspace))} (its files are still there)"
    )
    console.print(
        "[dim]Every call went through the default policy preset; file tools worked in "
        f"{where} through the virtual filesystem, and commands ran in the process sandbox "
        f"({_isolation(report)}). `stockade demo --json` prints every result whole.[/]"
    )


def _closing(report: DemoReport, audit: AuditReport) -> None:
    """Where the audit log and traces went, and whether the log verifies. Paths are printed
    whole on one line (soft wrap), so they can be copied."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    log = escape(str(report.audit))
    console.print(f"Audit log: {log}: {audit_verdict(audit)}.")
    console.print(f"See it with: [bold]stockade audit show {log}[/]")
    console.print(f"Traces: {escape(str(report.traces))}")


def _payload(report: DemoReport, audit: AuditReport | None) -> dict[str, Any]:
    return {
        "passed": report.passed,
        "seconds": round(report.seconds, 3),
        "workspace": None if report.temporary else str(report.workspace),
        "audit": {
            "path": str(report.audit),
            "intact": audit.ok if audit else None,
            "records": audit.records if audit else 0,
            "problem": audit.problem if audit else None,
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


def _interrupted(report: DemoReport) -> NoReturn:
    """Say how far the demo got when Ctrl-C stopped it, and exit 130."""
    from rich.console import Console
    from rich.markup import escape

    log = ""
    if report.audit is not None:
        verdict = audit_verdict(verify_audit(report.audit))
        log = f"; the audit log {escape(str(report.audit))}: {verdict}"
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[bold yellow]interrupted[/]: {plural(len(report.steps), 'step')} of the demo ran{log}"
    )
    raise typer.Exit(INTERRUPTED)


def _isolation(report: DemoReport) -> str:
    """What the engine that ran the demo found (not a probe of its own)."""
    return "bubblewrap" if report.isolated else "NO bubblewrap here: limits only"
