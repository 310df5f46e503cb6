"""Registering tools: the `Toolkit` an agent is given (its tools, their groups, the schemas the
model is shown, the meta tool, the finish function, skills and MCP servers' tools), and the
`ToolRegistry` that hands each agent a toolkit drawn from one shared library."""

from stockade.engine.toolkit.registry import ToolRegistry
from stockade.engine.toolkit.toolkit import META_TOOL, Toolkit
from stockade.engine.tools.catalog import BASIC, ToolGroup

__all__ = ["BASIC", "META_TOOL", "ToolGroup", "ToolRegistry", "Toolkit"]
