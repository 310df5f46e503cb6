"""``stockade audit``: show, verify and follow the audit log.

stockade audit verify                      # exit 0 intact, 1 not (the first bad record named)
stockade audit show --tool write_file --status denied --since 1h
stockade audit tail -n 20 --follow

Without a LOG, the commands read the log that ``demo``, ``run`` and ``serve`` keep for the
workspace given as ``--workspace`` (the current folder by default): ``audit.jsonl`` in its
default state folder, outside it (see ``common``). Where that log has never been written but
``.stockade/audit.jsonl`` exists in the current folder (where an `AuditLog()` of a program writes
by default), they read that one instead. A log counts as there when its seal is, so a deleted
log is reported as deleted rather than looked for elsewhere.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from stockade.engine.cli.common import default_state
from stockade.engine.observe import AuditError, read_audit, verify_audit
from stockade.engine.observe.audit_log import DEFAULT_PATH, rotated_files, seal_path

audit_app = typer.Typer(
    name="audit",
    help="Show, verify and follow the audit log (by default, that of the workspace in the "
    "current folder, kept in the user's state folder).",
    no_args_is_help=True,
)

LogPath = Annotated[
    Path | None,
    typer.Argument(
        help="The audit log (its rotated files are read too). Default: the log of the "
        "commands run on --workspace, else ./.stockade/audit.jsonl.",
        show_default=False,
    ),
]
WorkspaceOption = Annotated[
    Path,
    typer.Option(
        "--workspace", help="Without LOG: read the log kept for this workspace.", file_okay=False
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def moment(text: str | None) -> float | None:
    """A time given on the command line: ``90s``/``15m``/``2h``/``7d`` ago, an ISO date or
    datetime, or seconds since the epoch. Raises typer.BadParameter naming what was wrong."""
    if text is None:
        return None
    found = _AGO.match(text.strip())
    if found:
        return time.time() - float(found.group(1)) * _UNITS[found.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not a time: use 30m, 2h or 7d ago, an ISO date like 2026-11-24T09:00, "
            "or seconds since the epoch"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.astimezone()  # a time without a zone is local time
    return parsed.timestamp()


def find_log(path: Path | None, workspace: Path) -> Path:
    """The log a command reads: ``path`` when given, else the one kept for ``workspace`` (see
    the module docstring)."""
    if path is not None:
        return path
    kept = default_state(workspace) / "audit.jsonl"
    if not _present(kept) and _present(DEFAULT_PATH):
        return DEFAULT_PATH
    return kept


def _present(log: Path) -> bool:
    return log.exists() or seal_path(log).exists() or bool(rotated_files(log))


def _say_where(log: Path, workspace: Path) -> None:
    """When no LOG was named and none is kept for the workspace, say where it was looked for
    (on stderr: stdout stays the report)."""
    from rich.console import Console

    if not _present(log):
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[dim]no audit log is kept for the workspace {workspace.resolve()} (looked for "
            f"{log}, and ./{DEFAULT_PATH}); name the LOG, or give --workspace[/]"
        )


@audit_app.command()
def verify(
    path: LogPath = None,
    workspace: WorkspaceOption = Path("."),
    seal: Annotated[
        Path | None,
        typer.Option(help="The log's seal, when it is not beside the log (LOG.seal)."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Check every record's hash, the chain between them, and that the log reaches its seal
    (nothing cut off its end, and it was not deleted). Exit 0 when intact, 1 when not."""
    from rich.console import Console

    log = find_log(path, workspace)
    if path is None:
        _say_where(log, workspace)
    report = verify_audit(log, seal=seal)
    if as_json:
        payload = {
            "ok": report.ok,
            "log": str(log),
            "records": report.records,
            "files": list(report.files),
            "problem": report.problem,
            "bad_record": report.bad_record,
            "bad_file": report.bad_file,
            "partial_tail": report.partial_tail,
            "seal": report.seal,
            "sealed": report.sealed,
        }
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        style = "green" if report.ok else "bold red"
        console = Console(highlight=False, soft_wrap=True)
        console.print(f"[{style}]{report}[/]")
        console.print(f"[dim]log: {log}; seal: {report.seal or 'none'}[/]")
    raise typer.Exit(0 if report.ok else 1)


@audit_app.command()
def show(
    path: LogPath = None,
    workspace: WorkspaceOption = Path("."),
    tool: Annotated[str | None, typer.Option(help="Tool name (a glob: 'run_*').")] = None,
    kind: Annotated[str | None, typer.Option(help="intent or outcome.")] = None,
    effect: Annotated[str | None, typer.Option(help="allow, warn, ask or deny.")] = None,
    status: Annotated[str | None, typer.Option(help="ok, error, denied, timeout ...")] = None,
    path_glob: Annotated[
        str | None, typer.Option("--path", help="A path the call touched (a glob).")
    ] = None,
    call_id: Annotated[str | None, typer.Option("--call", help="One call's records.")] = None,
    since: Annotated[str | None, typer.Option(help="From: 2h (ago), an ISO time, ...")] = None,
    until: Annotated[str | None, typer.Option(help="Up to: same forms as --since.")] = None,
    limit: Annotated[int, typer.Option("-n", "--limit", min=1, help="At most this many.")] = 200,
    as_json: AsJson = False,
) -> None:
    """The records that pass every filter given, oldest first (the last --limit of them)."""
    log = find_log(path, workspace)
    if path is None:
        _say_where(log, workspace)
    found = _read(
        log,
        tool=tool,
        kind=kind,
        effect=effect,
        status=status,
        path_glob=path_glob,
        call_id=call_id,
        since=moment(since),
        until=moment(until),
        limit=limit,
    )
    _print(found, as_json)


@audit_app.command()
def tail(
    path: LogPath = None,
    workspace: WorkspaceOption = Path("."),
    lines: Annotated[int, typer.Option("-n", "--lines", min=1, help="How many to show.")] = 10,
    follow: Annotated[
        bool, typer.Option("-f", "--follow", help="Keep printing records as they are written.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """The last records; with --follow, new ones as they come (Ctrl-C to stop)."""
    if path is None:
        path = find_log(path, workspace)
        _say_where(path, workspace)
    shown = _read(path, limit=lines)
    _print(shown, as_json)
    if not follow:
        return
    seen = _seq(shown[-1]) if shown else 0
    try:
        while True:
            time.sleep(0.5)
            fresh = [
                r for r in read_audit(path) if isinstance(r.get("seq"), int) and r["seq"] > seen
            ]
            if fresh:
                _print(fresh, as_json, header=False)
                seen = fresh[-1]["seq"]
    except KeyboardInterrupt:
        return


def _read(path: Path, *, limit: int, **filters: Any) -> list[dict[str, Any]]:
    from rich.console import Console

    try:
        return list(deque(read_audit(path, **filters), maxlen=limit))
    except AuditError as exc:
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(1) from None


def _print(records: list[dict[str, Any]], as_json: bool, *, header: bool = True) -> None:
    from rich.console import Console
    from rich.table import Table

    if as_json:
        for record in records:
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        return
    table = Table(show_header=header, pad_edge=False)
    for column in ("seq", "time", "kind", "tool", "call", "decision / status", "detail"):
        table.add_column(column, overflow="fold")
    for record in records:
        table.add_row(*_cells(record))
    Console().print(table)


def _cells(record: dict[str, Any]) -> list[str]:
    moment_ = record.get("time")
    when = (
        datetime.fromtimestamp(moment_, UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")
        if isinstance(moment_, int | float)
        else "?"
    )
    kind = str(record.get("kind", "?"))
    if kind == "intent":
        verdict = str(record.get("effect"))
        if record.get("rule"):
            verdict += f" · {record['rule']}"
        paths = ", ".join(f"{access} {path}" for path, access in record.get("paths") or ())
        detail = " ; ".join(x for x in (paths, record.get("command") or "") if x)
    elif kind == "outcome":
        verdict = str(record.get("status"))
        extras = [f"{record.get('duration_s', 0) * 1000:.0f} ms"]
        if record.get("error"):
            extras.append(str(record["error"]))
        if record.get("bytes") is not None:
            extras.append(f"{record['bytes']} bytes")
        if record.get("sha256_after"):
            extras.append(f"sha256 {str(record['sha256_after'])[:12]}")
        detail = ", ".join(extras)
    else:
        verdict, detail = "", json.dumps({k: v for k, v in record.items() if k not in _SHOWN})
    call = str(record.get("call_id", ""))
    return [
        str(record.get("seq", "?")),
        when,
        kind,
        str(record.get("tool", "")),
        call,
        verdict,
        detail,
    ]


_SHOWN = {"seq", "prev", "hash", "time", "kind"}


def _seq(record: dict[str, Any]) -> int:
    seq = record.get("seq")
    return seq if isinstance(seq, int) else 0
