"""``stockade serve`` over stdio: MCP's handshake era on newline-delimited JSON-RPC, by hand.

    service = StdioService(engine)
    await service.serve()            # stdin and stdout, until stdin closes

Why not the SDK's server here: an MCP host spawns its stdio server for every session and calls
it for every file it reads, and the SDK's server costs about 300 ms of start-up (loading its
pydantic models) and about half a millisecond per call (validating its models both ways). What
Stockade needs over stdio is small and fixed: ``initialize``, ``ping``, ``tools/list``,
``tools/call``, cancellation, ``elicitation/create`` to put an ``ask`` to the person, and the
tool-list-changed notification. The results, tool entries, approval form and what its answers
mean are the SDK server's own (`stockade.engine.mcp.served`); only the wire is written here.
The 2026-07-28 per-request era and streamable HTTP stay with the SDK (`McpService`): a client
that probes with ``server/discover`` is told the method is unknown and falls back to the
handshake, as the SDK's client does with any handshake-era server.

Calls run concurrently, each its own task: a ``notifications/cancelled`` naming one cancels it
(the engine records it as cancelled and kills its processes) and no answer is sent for it, as
the protocol says. At most `MAX_RUNNING` calls run at once (one more is answered with error
-32000, saying so), and while more than `MAX_UNREAD` bytes of answers wait for a client that
does not read them, no more of its requests are read: what the server holds stays bounded.
When stdin closes, the calls still running are cancelled the same way. A
line that is not JSON, or not a JSON-RPC message, gets the JSON-RPC error saying so; nothing a
client sends stops the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

import orjson

from stockade.engine.errors import PermissionDeniedError
from stockade.engine.mcp.served import (
    answer_of,
    approval_schema,
    describe,
    result_json,
    tool_entry,
)
from stockade.engine.messages import ToolCall, printable
from stockade.engine.pipeline import Approve
from stockade.engine.pipeline.engine import Engine
from stockade.errors import StockadeError
from stockade.policies import Decision
from stockade.version import __version__

log = logging.getLogger("stockade.mcp")

# the handshake-era revisions, oldest first; a client asking for another gets the newest
VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
TITLED_FROM = "2025-11-25"  # the revision that spells form choices as oneOf const/title
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
SERVER_BUSY = -32000  # JSON-RPC leaves -32000 to -32099 to servers
MAX_LINE = 64 << 20  # one message; an engine call refuses arguments far smaller anyway
# answers waiting for a client that does not read them: past this, no more requests are read
# until it catches up (with the calls running bounded too, what the server holds is bounded)
MAX_UNREAD = 16 << 20
MAX_RUNNING = 256  # calls at once; one more is answered with an error saying so
INSTRUCTIONS = (
    "Tools run in Stockade's sandbox: paths are under /workspace; a denied call says which "
    "rule refused it and why."
)

Id = str | int


class ClientError(StockadeError):
    """The client answered one of the server's requests with an error (it never leaves this
    module: the call it was asked for is refused, saying so)."""


class StdioService:
    """An MCP server on a byte stream pair, in front of an `Engine`. ``ask`` decisions of the
    calls it serves go to the client (the engine's own approver, if any, is left for its other
    callers), and one not answered within ``elicit_timeout_s`` is refused."""

    def __init__(
        self,
        engine: Engine,
        *,
        name: str = "stockade",
        elicit_timeout_s: float = 300.0,
        max_running: int = MAX_RUNNING,
    ) -> None:
        self.engine = engine
        self.max_running = max_running
        self.name = name
        self.elicit_timeout_s = elicit_timeout_s  # a person may take a while, not for ever
        self.version = VERSIONS[-1]
        self.client_capabilities: dict[str, Any] = {}
        self._calls: dict[Id, asyncio.Task[None]] = {}
        self._waiting: dict[int, asyncio.Future[Any]] = {}  # our requests to the client
        self._next_id = 0
        self._write: Callable[[bytes], None] = _no_writer

    async def serve(self, stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None) -> None:
        """Serve one client on ``stdin`` and ``stdout`` (the process's by default) until
        ``stdin`` ends; the calls still running then are cancelled and recorded."""
        reader, self._write, writable, close = await _open(
            stdin or sys.stdin.buffer, stdout or sys.stdout.buffer
        )
        try:
            while True:
                await writable.wait()  # the client reads what it was sent, or nothing more is read
                try:
                    line = await reader.readline()
                except ValueError:  # a line past MAX_LINE: the reader dropped it
                    self._error(None, INVALID_REQUEST, f"a message is over {MAX_LINE} bytes")
                    continue
                if not line:
                    break
                if line.strip():
                    self._receive(line)
        finally:
            await self._stop()
            close()

    async def _stop(self) -> None:
        for task in self._calls.values():
            task.cancel()
        if self._calls:
            await asyncio.gather(*self._calls.values(), return_exceptions=True)
        for waiting in self._waiting.values():
            waiting.cancel()

    # -- messages in ---------------------------------------------------------------------------

    def _receive(self, line: bytes) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self._error(None, PARSE_ERROR, f"not JSON: {exc}")
            return
        if not isinstance(message, dict):
            self._error(None, INVALID_REQUEST, "a message is one JSON object (no batches)")
            return
        method, ident = message.get("method"), message.get("id")
        if not _is_id(ident) and ident is not None:
            self._error(None, INVALID_REQUEST, "an id is a string or an integer")
        elif isinstance(method, str) and ident is not None:
            self._request(ident, method, message.get("params"))
        elif isinstance(method, str):
            self._notification(method, message.get("params"))
        elif ident is not None and ("result" in message or "error" in message):
            self._response(ident, message)
        else:
            self._error(ident, INVALID_REQUEST, "neither a request, a notification nor a reply")

    def _request(self, ident: Id, method: str, params: Any) -> None:
        if params is not None and not isinstance(params, dict):
            self._error(ident, INVALID_PARAMS, f"the params of {method} must be an object")
        elif method == "tools/call":
            self._start_call(ident, params or {})
        elif method == "tools/list":
            network = self.engine.policy.network_mode != "none"
            tools = [tool_entry(tool, network=network) for tool in self.engine.toolkit.tools()]
            self._result(ident, {"tools": tools})
        elif method == "initialize":
            self._result(ident, self._initialize(params or {}))
        elif method == "ping":
            self._result(ident, {})
        else:
            self._error(ident, METHOD_NOT_FOUND, f"{method} is not served here")

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        self.version = asked if asked in VERSIONS else VERSIONS[-1]
        capabilities = params.get("capabilities")
        self.client_capabilities = capabilities if isinstance(capabilities, dict) else {}
        return {
            "protocolVersion": self.version,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": self.name, "version": __version__},
            "instructions": INSTRUCTIONS,
        }

    def _notification(self, method: str, params: Any) -> None:
        if method == "notifications/cancelled" and isinstance(params, dict):
            target = params.get("requestId")
            # a list or an object is no id (and no key: looking it up would raise)
            task = self._calls.get(target) if _is_id(target) else None  # type: ignore[arg-type]
            if task is not None:
                task.cancel()
        # notifications/initialized and the others need nothing done

    def _response(self, ident: Id, message: dict[str, Any]) -> None:
        waiting = self._waiting.get(ident) if isinstance(ident, int) else None
        if waiting is None or waiting.done():
            return  # an answer to nothing we asked, or asked too late: dropped
        error = message.get("error")
        if error is not None:
            said = error.get("message") if isinstance(error, dict) else error
            waiting.set_exception(ClientError(str(said)[:500]))
        else:
            waiting.set_result(message.get("result"))

    # -- calls ---------------------------------------------------------------------------------

    def _start_call(self, ident: Id, params: dict[str, Any]) -> None:
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str):
            self._error(ident, INVALID_PARAMS, "tools/call needs the tool's name as a string")
            return
        if arguments is not None and not isinstance(arguments, dict):
            self._error(ident, INVALID_PARAMS, "the arguments of tools/call must be an object")
            return
        if ident in self._calls:
            self._error(ident, INVALID_REQUEST, f"a call with id {ident!r} is still running")
            return
        if len(self._calls) >= self.max_running:
            self._error(
                ident,
                SERVER_BUSY,
                f"{len(self._calls)} calls are running, the most this server runs at once; "
                "send this one again when one of them has been answered",
            )
            return
        task = asyncio.create_task(
            self._call(ident, ToolCall(name=name, arguments=arguments or {}, subject="mcp"))
        )
        self._calls[ident] = task
        task.add_done_callback(lambda _: self._calls.pop(ident, None))

    async def _call(self, ident: Id, call: ToolCall) -> None:
        revision = self.engine.toolkit.revision
        result = await self.engine.call(call, approver=self._approve)  # never raises for a tool
        self._result(ident, result_json(result))
        if self.engine.toolkit.revision != revision:
            self._send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})

    async def _approve(self, call: ToolCall, decision: Decision) -> Approve | bool:
        """The approver of one served call: its client answers, through elicitation."""
        elicitation = self.client_capabilities.get("elicitation")
        if not isinstance(elicitation, dict) or (elicitation and "form" not in elicitation):
            raise PermissionDeniedError(
                "not asked: this MCP client does not support elicitation, so nobody could "
                "approve it; use a client that does, or a policy that allows the call"
            )
        titled = self.version >= TITLED_FROM
        schema = approval_schema(decision.suggestions, self.engine.policy.file, titled=titled)
        params: dict[str, Any] = {"message": describe(call, decision), "requestedSchema": schema}
        if titled:
            params["mode"] = "form"
        try:
            reply = await asyncio.wait_for(
                self._ask("elicitation/create", params), self.elicit_timeout_s
            )
        except TimeoutError:
            raise PermissionDeniedError(
                f"not approved: no answer within {self.elicit_timeout_s:g} s"
            ) from None
        except ClientError as exc:
            raise PermissionDeniedError(f"not approved: asking the client failed ({exc})") from None
        if not isinstance(reply, dict):
            raise PermissionDeniedError("not approved: the client's answer is not an object")
        content = reply.get("content")
        return answer_of(
            str(reply.get("action")),
            content if isinstance(content, dict) else None,
            decision.suggestions,
        )

    async def _ask(self, method: str, params: dict[str, Any]) -> Any:
        """Send the client a request and wait for its answer; a request given up on (the call
        cancelled, the time limit reached) is cancelled at the client too."""
        self._next_id += 1
        ident = self._next_id
        waiting: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[ident] = waiting
        self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        try:
            return await waiting
        finally:
            del self._waiting[ident]
            if not waiting.done() or waiting.cancelled():
                self._send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": ident, "reason": "no longer waited for"},
                    }
                )

    # -- messages out --------------------------------------------------------------------------

    def _result(self, ident: Id, result: dict[str, Any]) -> None:
        self._send({"jsonrpc": "2.0", "id": ident, "result": result})

    def _error(self, ident: Id | None, code: int, message: str) -> None:
        self._send({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}})

    def _send(self, message: dict[str, Any]) -> None:
        try:
            data = orjson.dumps(message, default=str, option=orjson.OPT_NON_STR_KEYS)
        except (TypeError, orjson.JSONEncodeError):  # a lone surrogate, a number past 64 bits
            data = _slow_json(message)
        try:
            self._write(data + b"\n")
        except OSError as exc:  # the client went away: its stdin closing ends the server
            log.warning("could not write to the client: %s", exc)


def _slow_json(message: dict[str, Any]) -> bytes:
    """``message`` by the standard library, which escapes a lone surrogate and writes any
    integer; what even it cannot write becomes an error answer (`_fallback`)."""
    try:
        return json.dumps(message, default=str, ensure_ascii=True).encode()
    except (TypeError, ValueError) as exc:
        log.warning("a message could not be written as JSON: %s", printable(exc))
        return orjson.dumps(_fallback(message, exc))


def _fallback(message: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """What is sent instead of a message JSON cannot carry: an error for a request's answer."""
    said = f"the result could not be sent as JSON ({printable(exc)})"
    if "id" in message and "method" not in message:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32603, "message": said}}
    return {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "error", "data": said},
    }


def _is_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _no_writer(data: bytes) -> None:
    raise OSError("not serving")


class _Flow(asyncio.Protocol):
    """The writing end's flow control: ``writable`` is clear while more than `MAX_UNREAD` bytes
    wait for the client to read them."""

    def __init__(self) -> None:
        self.writable = asyncio.Event()
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.writable.set()  # nobody to wait for: writes fail, and stdin's end ends the server


async def _open(
    stdin: IO[bytes], stdout: IO[bytes]
) -> tuple[asyncio.StreamReader, Callable[[bytes], None], asyncio.Event, Callable[[], None]]:
    """A reader of ``stdin``, a writer to ``stdout``, whether the client has read enough of
    what was written for the server to read on, and how to let both go. Pipes (what an MCP
    host gives) are read and written by the event loop; files and other streams, by a thread
    and by blocking writes."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    closers: list[Callable[[], None]] = []
    if _watchable(stdin):
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), stdin
        )
        closers.append(transport.close)
    else:
        threading.Thread(target=_feed, args=(loop, reader, stdin), daemon=True).start()
    out = stdout.fileno()
    flow = _Flow()
    if _watchable(stdout):
        writer_transport, _ = await loop.connect_write_pipe(lambda: flow, stdout)
        writer_transport.set_write_buffer_limits(high=MAX_UNREAD)
        closers.append(writer_transport.close)
        write: Callable[[bytes], None] = writer_transport.write
    else:  # blocking writes: nothing piles up

        def write(data: bytes) -> None:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]

    def close() -> None:
        for closer in closers:
            with contextlib.suppress(Exception):
                closer()

    return reader, write, flow.writable, close


def _watchable(stream: IO[bytes]) -> bool:
    """Whether the event loop can watch ``stream``: a pipe, a socket or a terminal. Other
    character devices (``/dev/null``) pass asyncio's own check but are refused by epoll later,
    in a callback, where the failure cannot be caught; files are refused outright."""
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(fd))


def _feed(loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader, stdin: IO[bytes]) -> None:
    """Read a stream the event loop cannot watch, line by line, into ``reader``."""
    try:
        for line in iter(stdin.readline, b""):
            loop.call_soon_threadsafe(reader.feed_data, line)
    except (OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(reader.feed_eof)


__all__ = ["ClientError", "StdioService"]
