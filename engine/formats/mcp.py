"""MCP tool definitions: a tool's ``tools/list`` entry and its behaviour hints, decided by one
function (`hints`) for every place that shows them (``Toolkit.schemas("mcp")`` and
``stockade serve``)."""

from __future__ import annotations

from typing import Any

from stockade.engine.tools import RegisteredTool


def hints(tool: RegisteredTool, *, network: bool | None) -> dict[str, Any]:
    """MCP hints from a tool's attributes.

    ``readOnlyHint``: the tool is marked read-only. ``destructiveHint``: it is marked
    destructive, runs a command, or writes or deletes a path (it may replace what was there).
    ``idempotentHint``: marked idempotent, or read-only. ``openWorldHint``: marked open-world,
    or runs commands that may reach the network: ``network`` is whether the policy lets them
    (None: not known, so they may).
    """
    spec = tool.spec
    changes = spec.command is not None or any(a != "read" for a in spec.paths.values())
    reaches_network = spec.command is not None and network is not False
    return {
        "title": tool.name.replace("_", " "),
        "readOnlyHint": spec.read_only,
        "destructiveHint": not spec.read_only and (spec.destructive or changes),
        "idempotentHint": spec.idempotent or spec.read_only,
        "openWorldHint": spec.open_world or reaches_network,
    }


def mcp_tool(tool: RegisteredTool, *, network: bool | None = None) -> dict[str, Any]:
    """The MCP ``tools/list`` entry of ``tool``."""
    return {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.parameters,
        "annotations": hints(tool, network=network),
    }


__all__ = ["hints", "mcp_tool"]
