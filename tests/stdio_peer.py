"""The client's end of an in-process stdio MCP server, for tests that speak to it line by line.

peer = Peer(StdioService(engine))
await peer.start()
await peer.initialize({"elicitation": {}})
result = await peer.result(1, "read_text_file", path="notes.txt")
await peer.close()
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from stockade.engine.mcp.stdio import StdioService


class Peer:
    """The client's end of the two pipes, and the server task."""

    def __init__(self, service: StdioService) -> None:
        self.service = service
        in_read, self._in = os.pipe()
        self._out, out_write = os.pipe()
        self.stdin = os.fdopen(in_read, "rb", buffering=0)
        self.stdout = os.fdopen(out_write, "wb", buffering=0)
        self.task = asyncio.create_task(service.serve(self.stdin, self.stdout))
        self.reader = asyncio.StreamReader(limit=1 << 26)
        self.reading: asyncio.ReadTransport | None = None  # pause it to stop reading answers

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.reading, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(self.reader), os.fdopen(self._out, "rb")
        )

    def send(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        os.write(self._in, data + b"\n")

    async def receive(self) -> dict[str, Any]:
        async with asyncio.timeout(20):
            line = await self.reader.readline()
        assert line, "the server closed its output"
        message = json.loads(line)
        assert isinstance(message, dict)
        return message

    async def request(self, ident: Any, method: str, params: dict[str, Any] | None = None) -> Any:
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}})
        return await self.receive()

    def call(self, ident: int, name: str, **arguments: Any) -> None:
        params = {"name": name, "arguments": arguments}
        self.send({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params})

    async def result(self, ident: int, name: str, **arguments: Any) -> dict[str, Any]:
        self.call(ident, name, **arguments)
        answer = await self.receive()
        assert answer["id"] == ident
        result = answer["result"]
        assert isinstance(result, dict)
        return result

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = await self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": capabilities or {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert isinstance(answer, dict)
        assert "result" in answer
        return answer

    async def alive(self) -> None:
        """The server still answers (the next message it sends is the ping's answer)."""
        assert await self.request("ping-1", "ping") == {
            "jsonrpc": "2.0",
            "id": "ping-1",
            "result": {},
        }

    async def close(self) -> None:
        os.close(self._in)
        await asyncio.wait_for(self.task, 20)
        assert self.task.exception() is None
