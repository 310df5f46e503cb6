"""Stockade's engine: tools, the toolkit, call formats, and the call pipeline.

Quick tour::

    from stockade.engine import Engine, Toolkit, ToolCall, tool

    @tool(read_only=True)
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

    toolkit = Toolkit()
    toolkit.add(add)
    result = await Engine(toolkit).call(ToolCall(name="add", arguments={"a": 1, "b": 2}))
"""

from stockade.engine.audit import AuditError, AuditLog, AuditReport, read_audit, verify_audit
from stockade.engine.callcontext import CallContext
from stockade.engine.calls import ErrorInfo, ToolCall, ToolChunk, ToolResult, new_call_id
from stockade.engine.content import ImageBlock, TextBlock, ToolOutput
from stockade.engine.context import Emitter, FromContext, ToolContext
from stockade.engine.engine import Engine
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
from stockade.engine.registry import ToolRegistry
from stockade.engine.retry import RetryPolicy
from stockade.engine.skills import Skill
from stockade.engine.tool import Mode, RegisteredTool, ToolBase, ToolSpec, tool
from stockade.engine.toolkit import BASIC, ToolGroup, Toolkit
from stockade.errors import StockadeError

__version__ = "0.1.0"

__all__ = [
    "BASIC",
    "ArgumentError",
    "AuditError",
    "AuditLog",
    "AuditReport",
    "CallContext",
    "CallError",
    "ContextMissingError",
    "DuplicateToolError",
    "Emitter",
    "Engine",
    "ErrorInfo",
    "FormatError",
    "FromContext",
    "GroupError",
    "ImageBlock",
    "Mode",
    "OutputError",
    "PermissionDeniedError",
    "RegisteredTool",
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
    "new_call_id",
    "read_audit",
    "tool",
    "verify_audit",
]
