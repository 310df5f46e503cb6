"""An MCP server for the tests reached over HTTP, written with the SDK: a remote server that
wants a bearer token.

    REMOTE_TOKEN=secret python tests/mcp_servers/remote_server.py sse|streamable-http

It listens on a free loopback port, prints that port on its first line of stdout, then serves
the older HTTP+SSE transport (``/sse``) or streamable HTTP (``/mcp``). Every HTTP request must
carry ``Authorization: Bearer $REMOTE_TOKEN``; any other is answered 401 before it reaches the
MCP app. Tools: ``add`` (a number, with structured content), ``forecast`` (a pydantic model:
structured content), ``report`` (text, a resource link and structured content in one result),
``refuse`` (``isError`` with a message of its own), ``leaky`` (``isError`` whose message repeats
the ``Authorization`` header it was sent, as a careless server's might).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

import mcp_types as types
import uvicorn
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

app = MCPServer("remote", log_level="WARNING")


class Forecast(BaseModel):
    city: str
    high_c: int
    sky: str


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def forecast(city: str) -> Forecast:
    """Tomorrow's weather in a city."""
    return Forecast(city=city, high_c=21, sky="clear")


@app.tool()
def report(topic: str) -> types.CallToolResult:
    """A report on a topic: a summary, a link to the full text, and its page count."""
    return types.CallToolResult(
        content=[
            types.TextContent(type="text", text=f"summary of {topic}"),
            types.ResourceLink(
                type="resource_link", uri=f"file:///reports/{topic}.pdf", name=f"{topic}.pdf"
            ),
        ],
        structured_content={"topic": topic, "pages": 3},
    )


@app.tool()
def refuse(reason: str) -> str:
    """Always refuses, saying why."""
    raise ToolError(f"refused: {reason}")


@app.tool()
def leaky(ctx: Context) -> str:
    """Fails, repeating the credentials it was sent."""
    sent = (ctx.headers or {}).get("authorization", "(no header)")
    raise ToolError(f"cannot serve a caller presenting {sent}")


class BearerOnly:
    """Answer 401 to every HTTP request without the right bearer token."""

    def __init__(self, inner: ASGIApp, token: str) -> None:
        self.inner = inner
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != (
            self.expected
        ):
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"text/plain")],
                }
            )
            await send({"type": "http.response.body", "body": b"a bearer token is required"})
            return
        await self.inner(scope, receive, send)


def main() -> None:
    transport = sys.argv[1]
    web = app.sse_app() if transport == "sse" else app.streamable_http_app()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn serves
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(
        BearerOnly(web, os.environ["REMOTE_TOKEN"]), log_level="warning", lifespan="on"
    )
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
