"""Audit and trace: every call leaves hash-chained audit records and an OpenTelemetry span.

An engine with an `AuditLog` (in a temporary folder) and an in-memory tracer provider makes
three file calls, one of them denied. Then it reads the log back with a filter, verifies the
hash chain, prints each span's name and attributes, and finally edits one record to show that
`verify_audit` notices.

Run: python examples/audit_and_trace.py
"""

import asyncio
import tempfile
from pathlib import Path

from stockade import (
    AuditLog,
    Engine,
    Mount,
    ToolCall,
    Toolkit,
    VirtualFS,
    add_file_tools,
    read_audit,
    verify_audit,
)
from stockade.engine.observe.tracing import memory_provider

CALLS = [
    ToolCall(name="write_file", arguments={"path": "plan.md", "content": "1. audit\n"}),
    ToolCall(name="read_text_file", arguments={"path": "plan.md"}),
    ToolCall(name="write_file", arguments={"path": ".git/hooks/pre-commit", "content": "evil"}),
]


async def main() -> None:
    toolkit = Toolkit()
    add_file_tools(toolkit)
    provider, spans = memory_provider()
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "workspace").mkdir()
        log_path = Path(folder) / "audit.jsonl"  # outside the workspace: agents cannot reach it
        audit = AuditLog(log_path)
        with VirtualFS([Mount("/workspace", Path(folder) / "workspace")]) as fs:
            engine = Engine(toolkit, fs=fs, audit=audit, tracer_provider=provider)
            async with engine:
                with engine.run_span("session", agent="example"):
                    for call in CALLS:
                        print(f"{call.name}: {(await engine.call(call)).status}")
        audit.close()  # writes the records still waiting in the batch

        print("\nwrite_file outcomes in the audit log:")
        for record in read_audit(log_path, tool="write_file", kind="outcome"):
            sha = record.get("sha256_after")
            print(f"  #{record['seq']} {record['status']}, file sha256 after: {sha}")
        print("the denied call, intent then outcome:")
        denied = next(read_audit(log_path, status="denied"))
        for record in read_audit(log_path, call_id=denied["call_id"]):
            fields = {k: record.get(k) for k in ("effect", "rule", "paths", "approval")}
            print(f"  #{record['seq']} {record['kind']}: {fields}")
        print(verify_audit(log_path))

        print("\nspans:")
        for span in spans.get_finished_spans():
            print(f"  {span.name}: {dict(span.attributes or {})}")

        lines = log_path.read_text().splitlines(keepends=True)
        lines[1] = lines[1].replace('"ok"', '"error"')  # rewrite history...
        log_path.write_text("".join(lines))
        print(f"\nafter editing record 2: {verify_audit(log_path)}")


if __name__ == "__main__":
    asyncio.run(main())
