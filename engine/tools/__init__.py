"""Describing a tool: what it declares (`ToolSpec`, `@tool`), the class form (`ToolBase`), its
arguments' schema (from a signature, a pydantic model or a JSON Schema), and the compiled form
the engine runs (`RegisteredTool`).

This room imports only the shared vocabulary of ``stockade.engine`` and the policy's types.
"""

from stockade.engine.tools.attributes import ToolSpec, attribute_names, tool
from stockade.engine.tools.base import ToolBase
from stockade.engine.tools.compiled import (
    Mode,
    Postprocess,
    RegisteredTool,
    check_name,
    compile_any,
    compile_function,
    compile_tool_base,
)
from stockade.engine.tools.retry import RetryPolicy

__all__ = [
    "Mode",
    "Postprocess",
    "RegisteredTool",
    "RetryPolicy",
    "ToolBase",
    "ToolSpec",
    "attribute_names",
    "check_name",
    "compile_any",
    "compile_function",
    "compile_tool_base",
    "tool",
]
