"""Tool definitions in the shape each model API expects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stockade.engine.formats.mcp import mcp_tool
from stockade.engine.tools import RegisteredTool


def openai_tool(tool: RegisteredTool) -> dict[str, Any]:
    """OpenAI Chat Completions ``tools`` entry."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def anthropic_tool(tool: RegisteredTool) -> dict[str, Any]:
    """Anthropic Messages ``tools`` entry."""
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


RENDERERS: dict[str, Callable[[RegisteredTool], dict[str, Any]]] = {
    "openai": openai_tool,
    "anthropic": anthropic_tool,
    "mcp": mcp_tool,
}
