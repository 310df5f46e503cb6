"""What the framework adapters' tests share: an engine on a real workspace with the file tools,
the ``default`` preset and a real audit log, and the audit records of one call."""

from __future__ import annotations

import importlib
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from stockade import (
    AuditLog,
    Decision,
    Effect,
    Engine,
    Policy,
    ToolBase,
    Toolkit,
    add_file_tools,
    read_audit,
    tool,
)
from stockade.engine import ToolContext
from stockade.engine.observe.tracing import memory_provider
from stockade.engine.pipeline import Approver
from stockade.sandbox import Mount, VirtualFS

SECRET = "API_KEY=kept\n"


@tool(read_only=True, paths={"path": "read"})
def word_count(path: str, fs: VirtualFS) -> int:
    """Count the words in a text file (relative paths are under /workspace)."""
    return len(fs.read_text(path).split())


class SecondLook(ToolBase):
    """A tool whose own check has no objection the first time it looks at a call and asks every
    time after: a call judged fine ahead (when a framework decides whether to stop for
    approval) that the engine asks about when it is made (a file changed meanwhile ...)."""

    name = "touch"
    description = "Touch something."
    read_only = True
    input_schema: dict[str, Any] = {"type": "object", "properties": {}}  # noqa: RUF012

    def __init__(self) -> None:
        self.looks = 0
        self.runs = 0

    def check_permissions(self, args: dict[str, Any], ctx: ToolContext) -> Decision | None:
        self.looks += 1
        if self.looks == 1:
            return None
        return Decision(Effect.ASK, "touch.second-look", "asks on a second look")

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.runs += 1
        return "touched"


class Workspace:
    """A host folder at /workspace, holding a ``.env`` whose content must survive refusals."""

    def __init__(self, root: Path, audit: AuditLog, spans: InMemorySpanExporter) -> None:
        self.root = root
        self.audit = audit
        self.spans = spans  # the engine's finished spans
        (root / ".env").write_text(SECRET)

    def span(self, call_id: str) -> dict[str, Any]:
        """The attributes of the one span of call ``call_id``."""
        (found,) = [
            dict(s.attributes or {})
            for s in self.spans.get_finished_spans()
            if (s.attributes or {}).get("gen_ai.tool.call.id") == call_id
        ]
        return found

    def text(self, name: str) -> str | None:
        path = self.root / name
        return path.read_text() if path.exists() else None

    def records(self, call_id: str) -> list[dict[str, Any]]:
        """The audit records of one call, intent first (what is waiting is written first)."""
        self.audit.flush()
        return list(read_audit(self.audit.path, call_id=call_id))

    def outcome(self, call_id: str) -> dict[str, Any]:
        (found,) = [r for r in self.records(call_id) if r["kind"] == "outcome"]
        return found


@asynccontextmanager
async def engine_on(
    tmp_path: Path, *, approver: Approver | None = None, toolkit: Toolkit | None = None
) -> AsyncIterator[tuple[Engine, Workspace]]:
    """An engine with the file tools and ``word_count`` on a fresh workspace, the ``default``
    preset (it asks before ``.env`` and ``.git/``), an audit log and spans kept in memory."""
    root = tmp_path / "ws"
    root.mkdir()
    if toolkit is None:
        toolkit = Toolkit()
        toolkit.add(word_count)
        add_file_tools(toolkit)
    with (
        VirtualFS([Mount("/workspace", root)]) as fs,
        AuditLog(tmp_path / "audit.jsonl") as audit,
    ):
        provider, spans = memory_provider()
        place = Workspace(root, audit, spans)
        engine = Engine(
            toolkit,
            policy=Policy.preset("default"),
            fs=fs,
            audit=audit,
            approver=approver,
            tracer_provider=provider,
        )
        async with engine:
            yield engine, place


def import_without(
    monkeypatch: pytest.MonkeyPatch, adapter: str, framework: str
) -> Callable[[], object]:
    """A function importing ``stockade.engine.adapters.<adapter>`` afresh as if the package
    ``framework`` were not installed."""
    for loaded in [framework, *(n for n in sys.modules if n.startswith(framework + "."))]:
        monkeypatch.setitem(sys.modules, loaded, None)  # None: importing it fails
    name = f"stockade.engine.adapters.{adapter}"
    monkeypatch.delitem(sys.modules, name, raising=False)
    return lambda: importlib.import_module(name)
