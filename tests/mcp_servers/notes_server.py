"""A small MCP server for the tests, written with the SDK: what an external server offers.

    python tests/mcp_servers/notes_server.py [--garbage] [--exit-after N]

Tools: ``add`` (claims read-only), ``save_note`` (writes a file in NOTES_DIR), ``fail``
(answers isError), ``hang`` (never answers), ``crash`` (the process exits mid-call), and
``odd.name/with spaces`` (a name that needs replacing). ``--garbage`` writes non-protocol
lines to stdout before serving; ``--exit-after N`` exits after N tool calls.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server import MCPServer
from mcp_types import ToolAnnotations

app = MCPServer("notes")
_calls = {"n": 0}
_EXIT_AFTER = int(sys.argv[sys.argv.index("--exit-after") + 1]) if "--exit-after" in sys.argv else 0


def _count() -> None:
    _calls["n"] += 1
    if _EXIT_AFTER and _calls["n"] > _EXIT_AFTER:
        os._exit(3)


@app.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def add(a: int, b: int) -> int:
    """Add two integers."""
    _count()
    return a + b


@app.tool(annotations=ToolAnnotations(destructive_hint=False))
def save_note(name: str, text: str) -> str:
    """Save a note as a file."""
    _count()
    path = Path(os.environ["NOTES_DIR"]) / name
    path.write_text(text)
    return f"saved {len(text)} characters"


@app.tool()
def fail(reason: str) -> str:
    """Always fails."""
    _count()
    raise ValueError(f"cannot do it: {reason}")


@app.tool()
def hang() -> str:
    """Never answers."""
    _count()
    time.sleep(3600)
    return "late"


@app.tool()
def crash() -> str:
    """The server dies mid-call."""
    _count()
    os._exit(1)


@app.tool(name="odd.name/with spaces")
def odd() -> str:
    """A tool whose name has characters a model API refuses."""
    return "odd"


if __name__ == "__main__":
    if "--garbage" in sys.argv:
        print("this is not JSON-RPC", flush=True)
        print('{"neither": is this', flush=True)
    app.run()
