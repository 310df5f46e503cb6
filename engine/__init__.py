"""Stockade's engine: tools, the toolkit, the call pipeline, what is recorded of calls, and the
tools Stockade ships.

Quick tour::

    from stockade.engine import Engine, ToolCall, Toolkit, tool

    @tool(read_only=True)
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

    toolkit = Toolkit()
    toolkit.add(add)
    result = await Engine(toolkit).call(ToolCall(name="add", arguments={"a": 1, "b": 2}))

The names below are the engine's public surface (a test pins them). The rooms behind them:
``tools`` (describing a tool), ``toolkit`` (registering tools), ``pipeline`` (one call, end to
end), ``observe`` (audit log, tracing), ``builtin`` (the tools Stockade ships), ``formats``
(wire formats), ``mcp`` (server and client) and ``cli`` (the command).

A name below is loaded from its room when first used, so ``import stockade.engine.cli`` (the
command's quick start) or ``stockade.engine.observe.audit_read`` loads that room alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stockade.engine.builtin import add_file_tools, add_raw_text_tools, add_shell_tools
    from stockade.engine.builtin.skills import Skill
    from stockade.engine.content import FileReport, ImageBlock, ProcessReport, TextBlock, ToolOutput
    from stockade.engine.errors import (
        ArgumentError,
        CallError,
        ContextMissingError,
        DuplicateToolError,
        FormatError,
        GroupError,
        OutputError,
        PermissionDeniedError,
        RetryableError,
        SkillError,
        ToolDefinitionError,
        ToolTimeoutError,
        UnknownToolError,
    )
    from stockade.engine.injection import Emitter, FromContext, ToolContext
    from stockade.engine.messages import (
        CallNotes,
        ErrorInfo,
        Retry,
        ToolCall,
        ToolChunk,
        ToolResult,
        new_call_id,
    )
    from stockade.engine.observe import (
        AuditError,
        AuditLog,
        AuditReport,
        CallObserver,
        read_audit,
        verify_audit,
    )
    from stockade.engine.pipeline import Approve, Approver, CallContext, Engine
    from stockade.engine.toolkit import BASIC, ToolGroup, Toolkit, ToolRegistry
    from stockade.engine.tools import Mode, RegisteredTool, RetryPolicy, ToolBase, ToolSpec, tool
    from stockade.errors import StockadeError
    from stockade.version import __version__

# where each name lives (a test holds this to __all__)
_HOMES = {
    "stockade.engine.builtin": (
        "add_file_tools",
        "add_raw_text_tools",
        "add_shell_tools",
    ),
    "stockade.engine.builtin.skills": ("Skill",),
    "stockade.engine.content": (
        "FileReport",
        "ImageBlock",
        "ProcessReport",
        "TextBlock",
        "ToolOutput",
    ),
    "stockade.engine.errors": (
        "ArgumentError",
        "CallError",
        "ContextMissingError",
        "DuplicateToolError",
        "FormatError",
        "GroupError",
        "OutputError",
        "PermissionDeniedError",
        "RetryableError",
        "SkillError",
        "ToolDefinitionError",
        "ToolTimeoutError",
        "UnknownToolError",
    ),
    "stockade.engine.injection": (
        "Emitter",
        "FromContext",
        "ToolContext",
    ),
    "stockade.engine.messages": (
        "CallNotes",
        "ErrorInfo",
        "Retry",
        "ToolCall",
        "ToolChunk",
        "ToolResult",
        "new_call_id",
    ),
    "stockade.engine.observe": (
        "AuditError",
        "AuditLog",
        "AuditReport",
        "CallObserver",
        "read_audit",
        "verify_audit",
    ),
    "stockade.engine.pipeline": (
        "Approve",
        "Approver",
        "CallContext",
        "Engine",
    ),
    "stockade.engine.toolkit": (
        "BASIC",
        "ToolGroup",
        "Toolkit",
        "ToolRegistry",
    ),
    "stockade.engine.tools": (
        "Mode",
        "RegisteredTool",
        "RetryPolicy",
        "ToolBase",
        "ToolSpec",
        "tool",
    ),
    "stockade.errors": ("StockadeError",),
    "stockade.version": ("__version__",),
}
_HOME_OF = {name: home for home, names in _HOMES.items() for name in names}

__all__ = [
    "BASIC",
    "Approve",
    "Approver",
    "ArgumentError",
    "AuditError",
    "AuditLog",
    "AuditReport",
    "CallContext",
    "CallError",
    "CallNotes",
    "CallObserver",
    "ContextMissingError",
    "DuplicateToolError",
    "Emitter",
    "Engine",
    "ErrorInfo",
    "FileReport",
    "FormatError",
    "FromContext",
    "GroupError",
    "ImageBlock",
    "Mode",
    "OutputError",
    "PermissionDeniedError",
    "ProcessReport",
    "RegisteredTool",
    "Retry",
    "RetryPolicy",
    "RetryableError",
    "Skill",
    "SkillError",
    "StockadeError",
    "TextBlock",
    "ToolBase",
    "ToolCall",
    "ToolChunk",
    "ToolContext",
    "ToolDefinitionError",
    "ToolGroup",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolTimeoutError",
    "Toolkit",
    "UnknownToolError",
    "__version__",
    "add_file_tools",
    "add_raw_text_tools",
    "add_shell_tools",
    "new_call_id",
    "read_audit",
    "tool",
    "verify_audit",
]


def __getattr__(name: str) -> object:
    """A public name, loaded from its room on first use."""
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module 'stockade.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next use is an ordinary attribute
    return value
