"""What the audit store's tests share: an engine with a few tools, real calls, SQL run on the
store behind Stockade's back (tampering), and writer processes."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg2
from test_audit import boom, echo, poke
from test_audit import make_engine as engine_with

from stockade.engine import Engine, ToolCall, ToolResult
from stockade.engine.observe import AuditLog


def make_engine(audit: AuditLog) -> Engine:
    """An engine with the audit log tests' echo, boom and poke tools and their policy."""
    return engine_with(audit, echo, boom, poke)


async def call(engine: Engine, name: str, **arguments: Any) -> ToolResult:
    return await engine.call(ToolCall(name=name, arguments=arguments, subject="alice"))


def sql(url: str, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    """Run ``statement`` on the store directly (as an intruder, or to count); its rows."""
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(statement, args)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def kinds(url: str, writer: str | None = None) -> Counter[str]:
    """How many records of each kind the store holds (of ``writer``, or all)."""
    rows = sql(url, "SELECT kind, count(*) FROM stockade_audit "
                    "WHERE %s IS NULL OR writer = %s GROUP BY kind", writer, writer)  # fmt: skip
    return Counter(dict(rows))


# A writer process: an Engine with an AuditStore on the given folder and host, making calls.
# argv: url folder host calls when_down; prints its writer id, then "done" once closed.
WRITER = r"""
import asyncio, sys, time
sys.path.insert(0, sys.argv[6])
from audit_store_support import make_engine, call
from stockade.engine.observe import AuditStore

url, folder, host, calls, when_down = sys.argv[1:6]
store = AuditStore(url, folder=folder, host=host, when_down=when_down, down_after_s=0.5,
                   ship_every_s=0.05, max_delay_s=0.05, close_timeout_s=60)
print(store.writer, flush=True)
engine = make_engine(store)

async def main():
    statuses = []
    for n in range(int(calls)):
        result = await call(engine, "echo", text=f"call {n}")
        statuses.append(result.status)
        if n % 20 == 0:
            await asyncio.sleep(0.01)
    return statuses

statuses = asyncio.run(main())
print("statuses", ",".join(sorted(set(statuses))), statuses.count("ok"), flush=True)
store.close()
print("done", flush=True)
"""


def start_writer(
    url: str, folder: Path, host: str, calls: int, when_down: str = "spool"
) -> subprocess.Popen[str]:
    """A writer process (see `WRITER`); its first line of output is its writer id."""
    here = str(Path(__file__).resolve().parent)
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, url, str(folder), host, str(calls), when_down, here],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
