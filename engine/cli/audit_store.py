"""``stockade audit verify --store URL`` and ``stockade audit show --store URL``: the audit
store in PostgreSQL, every writer's chain, as the commands read a file log.

    stockade audit verify --store postgresql://auditor:PASSWORD@db/stockade   # exit 1: a bad writer
    STOCKADE_AUDIT_STORE=postgresql://... stockade audit show --host web1 --status denied

The URL is never printed with its password (``***`` in its place, in every message).
"""

from __future__ import annotations

import json
import sys
from collections import deque
from typing import Any

from stockade.engine.cli.common import fail, usage
from stockade.engine.observe import AuditError, read_store, verify_store
from stockade.engine.observe.audit_read import AuditFilter
from stockade.engine.observe.audit_store import check_url, store_url
from stockade.errors import ConfigurationError


def chosen_store(url: str | None, log_given: bool) -> str | None:
    """The store a command reads: ``--store``, else ``STOCKADE_AUDIT_STORE`` unless a LOG is
    named (a LOG and ``--store`` together are a usage error); None: the file log."""
    if url is not None and log_given:
        usage("give either a LOG or --store, not both")
    found = url if log_given else store_url(url)
    if found is None:
        return None
    try:
        return check_url(found)
    except ConfigurationError as exc:
        usage(f"--store: {exc}")


def verify_command(url: str, *, writer: str | None, host: str | None, as_json: bool) -> int:
    """Print the verdict on every writer of the store; the exit code (0 intact, 1 not)."""
    from rich.console import Console

    report = verify_store(url, writer=writer, host=host)
    if as_json:
        payload = {
            "ok": report.ok,
            "store": report.url,
            "records": report.records,
            "problem": report.problem,
            "writers": [
                {
                    "writer": w.writer,
                    "host": w.host,
                    "pid": w.pid,
                    "ok": w.ok,
                    "records": w.records,
                    "head": w.head,
                    "closed": w.closed,
                    "problem": w.problem,
                    "bad_record": w.bad_record,
                    "note": w.note,
                }
                for w in report.writers
            ],
        }
        sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    else:
        console = Console(highlight=False, soft_wrap=True)
        first, *rest = str(report).split("\n")
        console.print(first, style="green" if report.ok else "bold red", markup=False)
        for line, one in zip(rest, report.writers, strict=True):
            console.print(line, style=None if one.ok else "red", markup=False)
        if not report.writers and not report.problem:
            console.print("no writer has shipped records to it yet", style="dim")
        console.print(f"store: {report.url}", style="dim", markup=False)
    return 0 if report.ok else 1


def store_records(
    url: str, wanted: AuditFilter, *, writer: str | None, host: str | None, limit: int
) -> list[dict[str, Any]]:
    """The last ``limit`` records the filters keep, by time; exit 1 saying why when the store
    cannot be read."""
    try:
        return list(deque(read_store(url, wanted, writer=writer, host=host), maxlen=limit))
    except AuditError as exc:
        fail(str(exc))
