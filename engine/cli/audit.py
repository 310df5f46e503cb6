"""``stockade audit``: show, verify and follow the audit log.

stockade audit verify                      # exit 0 intact, 1 not (the first bad record named)
stockade audit show --tool write_file --status denied --since 1h
stockade audit tail -n 20 --follow         # waits for a log not yet written; Ctrl-C: exit 130
ssh host cat audit.jsonl | stockade audit show - --kind outcome
stockade audit verify --store postgresql://auditor:PASSWORD@db/stockade    # every writer's chain
stockade audit show --store URL --host web1 --writer web1-4242-20260512T101530123456

Without a LOG, the commands read the log that ``demo``, ``run`` and ``serve`` keep for the
workspace given as ``--workspace`` (the current folder by default): ``audit.jsonl`` in its
default state folder, outside it (see ``common``). Where that log has never been written but
``.stockade/audit.jsonl`` exists in the current folder (where an `AuditLog()` of a program writes
by default), they read that one instead. A log counts as there when its seal is, so a deleted
log is reported as deleted rather than looked for elsewhere.

A filter value outside its set (``--effect nope``) is a usage error (exit 2) naming the values
it takes, and a file that is not an audit log (a line that is no record) an error naming the
line (exit 1): neither reads as a log with nothing in it.

With ``--store URL`` (or ``STOCKADE_AUDIT_STORE`` in the environment, when no LOG is named),
``verify`` and ``show`` read the audit store in PostgreSQL instead (see ``audit_store``).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from stockade.engine.cli.audit_store import chosen_store, store_records, verify_command
from stockade.engine.cli.common import (
    INTERRUPTED,
    STDIN,
    STDIN_FILE,
    default_state,
    fail,
    usage,
)
from stockade.engine.messages import Status
from stockade.engine.observe import AuditError, read_audit, verify_audit
from stockade.engine.observe.audit_log import DEFAULT_PATH, rotated_files, seal_path
from stockade.engine.observe.audit_read import AuditFilter
from stockade.policies import Effect

if TYPE_CHECKING:  # rich loads only when a command prints with it, not at start-up
    from rich.text import Text

audit_app = typer.Typer(
    name="audit",
    help="Show, verify and follow the audit log (by default, that of the workspace in the "
    "current folder, kept in the user's state folder).",
    no_args_is_help=True,
)

LogPath = Annotated[
    Path | None,
    typer.Argument(
        metavar="LOG",
        help="The audit log (its rotated files are read too), or - for stdin. Default: the log "
        "of the commands run on --workspace, else ./.stockade/audit.jsonl.",
        show_default=False,
    ),
]
WorkspaceOption = Annotated[
    Path,
    typer.Option(
        "--workspace",
        metavar="DIR",
        help="Without LOG: read the log kept for this workspace.",
        file_okay=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="Read the audit store in PostgreSQL at URL (postgresql://user:password@host/db; "
        "the password is never printed) instead of a file. Default: $STOCKADE_AUDIT_STORE "
        "when no LOG is named.",
        show_default=False,
    ),
]
WriterOption = Annotated[
    str | None,
    typer.Option("--writer", metavar="ID", help="With --store: one writer's records."),
]
HostOption = Annotated[
    str | None,
    typer.Option("--host", metavar="HOST", help="With --store: the writers of one host."),
]
_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# the kinds Stockade writes; a program may record others (`AuditLog.record`), which --kind
# takes when the log holds them
KINDS = ("intent", "outcome", "recovered", "audit_unwritable")
EFFECTS = tuple(effect.value for effect in Effect)
STATUSES: tuple[str, ...] = get_args(Status)
_POLL_S = 0.5  # how often --follow looks for new records


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
    """The log a command reads: ``path`` when given (standard input for ``-``), else the one
    kept for ``workspace`` (see the module docstring)."""
    if path is not None:
        return STDIN_FILE if path == STDIN else path
    kept = default_state(workspace) / "audit.jsonl"
    if not _present(kept) and _present(DEFAULT_PATH):
        return DEFAULT_PATH
    return kept


def _present(log: Path) -> bool:
    return log.exists() or seal_path(log).exists() or bool(rotated_files(log))


def _locate(path: Path | None, workspace: Path, *, waiting: bool = False) -> Path:
    """The log to read; without LOG, say on stderr where it was looked for when there is none
    (stdout stays the report), unless ``waiting`` for it. A --workspace that does not exist,
    and has no log kept, is a usage error."""
    from rich.console import Console

    log = find_log(path, workspace)
    if path is not None or _present(log):
        return log
    if not workspace.is_dir():
        usage(
            f"--workspace {workspace} does not exist or is not a folder, and no audit log is "
            "kept for it: give the workspace's folder, or name the LOG"
        )
    if not waiting:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"no audit log is kept for the workspace {workspace.resolve()} (looked for {log}, "
            f"and ./{DEFAULT_PATH}); name the LOG, or give --workspace",
            style="dim",
            markup=False,
        )
    return log


def _choose(option: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
    """``value`` of a filter that takes one of ``allowed`` (any case); a usage error naming the
    option and the values otherwise."""
    if value is None:
        return None
    if value.lower() not in allowed:
        usage(f"{option} {value!r}: give one of {', '.join(allowed)}")
    return value.lower()


@audit_app.command()
def verify(
    path: LogPath = None,
    workspace: WorkspaceOption = Path("."),
    seal: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="The log's seal, when it is not beside the log (LOG.seal)."
        ),
    ] = None,
    as_json: AsJson = False,
    store: StoreOption = None,
    writer: WriterOption = None,
    host: HostOption = None,
) -> None:
    """Check every record's hash, the chain between them, and that the log reaches its seal
    (nothing cut off its end, and it was not deleted). Exit 0 when intact, 1 when not. With
    --store: every writer's chain in the store, and its head (one line per writer)."""
    from rich.console import Console

    url = chosen_store(store, path is not None)
    if url is not None:
        raise typer.Exit(verify_command(url, writer=writer, host=host, as_json=as_json))
    if writer is not None or host is not None:
        usage("--writer and --host read an audit store: give --store URL")
    log = _locate(path, workspace)
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
        console.print(str(report), style=style, markup=False)  # paths may hold [brackets]
        console.print(f"log: {log}; seal: {report.seal or 'none'}", style="dim", markup=False)
    raise typer.Exit(0 if report.ok else 1)


@audit_app.command()
def show(
    path: LogPath = None,
    workspace: WorkspaceOption = Path("."),
    tool: Annotated[
        str | None, typer.Option(metavar="GLOB", help="Tool name (a glob: 'run_*').")
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option(metavar="KIND", help=f"{', '.join(KINDS)}, or a program's own kind."),
    ] = None,
    effect: Annotated[
        str | None, typer.Option(metavar="EFFECT", help=f"{', '.join(EFFECTS)}.")
    ] = None,
    status: Annotated[
        str | None, typer.Option(metavar="STATUS", help=f"{', '.join(STATUSES)}.")
    ] = None,
    path_glob: Annotated[
        str | None,
        typer.Option("--path", metavar="GLOB", help="A path the call touched (a glob)."),
    ] = None,
    call_id: Annotated[
        str | None, typer.Option("--call", metavar="ID", help="One call's records.")
    ] = None,
    since: Annotated[
        str | None, typer.Option(metavar="TIME", help="From: 2h (ago), an ISO time, ...")
    ] = None,
    until: Annotated[
        str | None, typer.Option(metavar="TIME", help="Up to: same forms as --since.")
    ] = None,
    limit: Annotated[
        int, typer.Option("-n", "--limit", metavar="N", min=1, help="At most this many.")
    ] = 200,
    as_json: AsJson = False,
    store: StoreOption = None,
    writer: WriterOption = None,
    host: HostOption = None,
) -> None:
    """The records that pass every filter given, oldest first (the last --limit of them).
    With --store: of every writer in the store, by time."""
    effect = _choose("--effect", effect, EFFECTS)
    status = _choose("--status", status, STATUSES)
    wanted = AuditFilter(tool, kind, effect, status, path_glob, call_id, moment(since),
                         moment(until))  # fmt: skip
    url = chosen_store(store, path is not None)
    if url is not None:
        found = store_records(url, wanted, writer=writer, host=host, limit=limit)
        _print(found, as_json, writers=True)
        return
    if writer is not None or host is not None:
        usage("--writer and --host read an audit store: give --store URL")
    log = _locate(path, workspace)
    if kind is None or kind in KINDS:
        found = _read(log, wanted, limit=limit)
    else:  # a program's own kind, if the log holds it: read once (stdin cannot be read twice)
        everything = _read(log, AuditFilter(), limit=None)
        held = sorted({str(r["kind"]) for r in everything} - set(KINDS))
        if kind not in held:
            also = f" (or one this log holds: {', '.join(held)})" if held else ""
            usage(f"--kind {kind!r}: give one of {', '.join(KINDS)}{also}")
        found = [r for r in everything if wanted.keeps(r)][-limit:]
    _print(found, as_json)


@audit_app.command()
def tail(
    path: LogPath = None,
    workspace: WorkspaceOption = Path("."),
    lines: Annotated[
        int, typer.Option("-n", "--lines", metavar="N", min=1, help="How many to show.")
    ] = 10,
    follow: Annotated[
        bool,
        typer.Option(
            "-f",
            "--follow",
            help="Keep printing records as they are written (waiting for a log not yet "
            "created); Ctrl-C to stop.",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """The last records; with --follow, new ones as they come (Ctrl-C to stop: exit 130)."""
    if follow and path == STDIN:
        usage("--follow cannot follow standard input (-): name the LOG file")
    log = _locate(path, workspace, waiting=follow)
    try:
        if follow and not _written(log):
            _wait_for(log)
        shown = _read(log, AuditFilter(), limit=lines)
        _print(shown, as_json)
        if follow:
            _follow(log, _seq(shown[-1]) if shown else 0, as_json)
    except KeyboardInterrupt:
        raise typer.Exit(INTERRUPTED) from None


def _written(log: Path) -> bool:
    return log.exists() or bool(rotated_files(log))


def _wait_for(log: Path) -> None:
    """Wait until ``log`` is created, having said so once on stderr."""
    from rich.console import Console

    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"waiting for {log} to be created (Ctrl-C to stop)", style="dim", markup=False
    )
    while not _written(log):
        time.sleep(_POLL_S)


def _follow(log: Path, seen: int, as_json: bool) -> None:
    """Print the records numbered after ``seen`` as they are written, until Ctrl-C."""
    while True:
        time.sleep(_POLL_S)
        if not _written(log):
            continue  # being rotated, or deleted: the next look tells
        fresh = [r for r in _read(log, AuditFilter(), limit=None) if r["seq"] > seen]
        if fresh:
            _print(fresh, as_json, header=False)
            seen = fresh[-1]["seq"]


def _read(path: Path, wanted: AuditFilter, *, limit: int | None) -> list[dict[str, Any]]:
    """The records ``wanted`` keeps (the last ``limit`` of them); exit 1 saying why when the
    log cannot be read, or a line of it is no audit record."""
    try:
        records = read_audit(path, strict=True)
        return list(deque((r for r in records if wanted.keeps(r)), maxlen=limit))
    except AuditError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot read the audit log {path}: {exc.strerror or exc}")


def _print(
    records: list[dict[str, Any]], as_json: bool, *, header: bool = True, writers: bool = False
) -> None:
    from rich.console import Console
    from rich.table import Table

    if as_json:
        for record in records:
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
        return
    table = Table(show_header=header, pad_edge=False)
    for column in ("writer",) * writers + (
        "seq", "time", "kind", "tool", "call", "decision / status", "detail"
    ):  # fmt: skip
        table.add_column(column, overflow="fold")
    for record in records:
        table.add_row(*_cells(record, writers))
    Console().print(table)


def _cells(record: dict[str, Any], writers: bool = False) -> list[Text]:
    """A record's cells, as text: a path or command may hold [brackets], which is no markup."""
    from rich.text import Text

    first = [str(record.get("writer", ""))] * writers
    return [Text(cell) for cell in first + _cell_texts(record)]


def _cell_texts(record: dict[str, Any]) -> list[str]:
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


_SHOWN = {"seq", "prev", "hash", "time", "kind", "writer"}


def _seq(record: dict[str, Any]) -> int:
    seq = record.get("seq")
    return seq if isinstance(seq, int) else 0
