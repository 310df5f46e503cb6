"""A tiny MCP server for the tests whose tool fails on purpose, with a message of its own.

    python tests/mcp_servers/refusing_server.py

Tool: ``refuse(reason)`` raises the SDK's ``ToolError``, so the client gets ``isError`` with
the text ``Error executing tool refuse: refused: <reason>`` (an unexpected exception, like
notes_server.py's ``fail``, reaches the client only as ``Error executing tool fail``).
"""

from __future__ import annotations

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("refusing")


@app.tool()
def refuse(reason: str) -> str:
    """Always refuses, saying why."""
    raise ToolError(f"refused: {reason}")


if __name__ == "__main__":
    app.run()
