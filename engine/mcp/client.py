"""Tools of external MCP servers, registered in a toolkit and called through the engine.

    server = await toolkit.add_mcp_server("files", command=["python", "files_server.py"])
    server = await toolkit.add_mcp_server("search", url="http://127.0.0.1:9000/mcp",
                                          enable=["query"], presets={"query": {"limit": 10}})
    server = await toolkit.add_mcp_server("docs", url="https://docs.example/sse", transport="sse",
                                          headers={"Authorization": f"Bearer {token}"})
    ...
    await server.close()

Each tool becomes ``mcp__{server}__{tool}`` (characters outside ``[A-Za-z0-9_-]`` replaced by
``_``), with the server's JSON schema, so the policy, timeouts, audit and traces apply to it
like any other tool. The server is another party: its annotations are *hints*, kept on the tool
(``origin="mcp:{server}"``, ``read_only_hint``) but believed by the policy only for servers it
names in ``[mcp] trusted_servers``; otherwise every tool of the server is treated as one that
changes things. A result with ``isError`` is an error result. A server that exits is started
again on the next call (at most ``max_restarts`` times, then its tools are removed); one that
does not answer within ``timeout_s`` gives a timeout error and is restarted, so nothing waits
on it for ever.

A ``url`` speaks streamable HTTP unless ``transport="sse"``. ``headers`` go with every HTTP
request; their values show as ``***`` in errors and logs. ``postprocess`` is every tool's hook
(as in ``Toolkit.add``). With ``raw_results``, ``result.tool_metadata["mcp_result"]`` is the
server's `CallToolResult` itself (``result.metadata`` shows it as JSON data).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from stockade.engine.content import ImageBlock, TextBlock, ToolOutput
from stockade.engine.errors import ToolDefinitionError, ToolTimeoutError
from stockade.engine.injection import ToolContext
from stockade.engine.tools import Postprocess, RegisteredTool, ToolBase, compile_tool_base
from stockade.engine.tools.catalog import BASIC, ToolCatalog
from stockade.errors import ConfigurationError, StockadeError

log = logging.getLogger("stockade.mcp")

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64  # what the model APIs accept
RAW_KEY = "mcp_result"  # where ``raw_results`` puts the server's `CallToolResult`
Transport = Literal["stdio", "streamable-http", "sse"]


class McpServerError(StockadeError):
    """An MCP server could not be started, answered wrongly, or went away."""


class McpToolError(StockadeError):
    """An MCP server's tool reported an error (``isError``); the message is its text."""


def tool_name(server: str, tool: str) -> str:
    """``mcp__{server}__{tool}`` with unsafe characters replaced; a name past 64 characters is
    cut and given a hash of the whole, so two long names stay apart."""
    name = f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"
    if len(name) > _MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[: _MAX_NAME - 9]}_{digest}"
    return name


@dataclass(frozen=True, slots=True)
class HttpTarget:
    """A remote server: URL, transport, and headers (out of the repr: values are secrets)."""

    url: str
    transport: str = "streamable-http"  # or "sse"
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)


Target = StdioServerParameters | HttpTarget


class McpConnection:
    """A live session with one MCP server, owned by a task of its own (the SDK's client must
    be entered and left in one task), restarted when it dies or hangs.

    Each start is a *generation*. A call that finds its generation dead or hung retires it:
    the old session is closed in the background (so the caller gets its error at once) and
    the next call starts a new one. Calls failing together on one generation retire it once,
    so a single hang never counts as several restarts."""

    def __init__(self, name: str, target: Target, *, timeout_s: float, max_restarts: int) -> None:
        self.name = name
        self.target = target
        self.timeout_s = timeout_s
        self.max_restarts = max_restarts
        self.restarts = 0
        self.generation = 0
        self.gone = False  # restarted too often: given up on
        self.on_gone: Callable[[], None] | None = None  # told once, when given up on
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()  # one start, restart or close at a time
        self._retired = -1  # the last generation retired
        self._closing: asyncio.Task[None] | None = None
        self._why = ""
        self._refused = ""  # the last HTTP error status the server answered with
        values = target.headers.values() if isinstance(target, HttpTarget) else ()
        # each value, and its last word alone (the token of "Bearer abc"); not the very short
        words = {w for v in values for w in (v, *v.split()[-1:])}
        self._secrets = sorted((w for w in words if len(w) >= 4), key=len, reverse=True)

    def hidden(self, text: str) -> str:
        """``text`` with every header value replaced by ``***``."""
        while any(secret in text for secret in self._secrets):  # "***" may complete another
            for secret in self._secrets:
                text = text.replace(secret, "***")
        return text

    def _cause(self, exc: BaseException) -> str:
        """What went wrong, without secrets, with the HTTP status a refusal had."""
        said = _cause(exc)
        if self._refused:
            said = f"the server answered HTTP {self._refused} ({said.splitlines()[0]})"
        return self.hidden(said)

    async def _heard(self, response: httpx2.Response) -> None:
        """Keep the status of a refused request (the SDK's errors may not say): a POST's, or the
        SSE transport's GET (streamable HTTP's GET stream is optional: a refusal is normal)."""
        sse = isinstance(self.target, HttpTarget) and self.target.transport == "sse"
        if response.status_code >= 400 and (response.request.method == "POST" or sse):
            self._refused = f"{response.status_code} {response.reason_phrase}".strip()

    def _http_client(
        self, headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None
    ) -> httpx2.AsyncClient:
        http = create_mcp_http_client(headers, timeout, auth)
        http.event_hooks["response"].append(self._heard)
        return http

    def _server(self) -> StdioServerParameters | AbstractAsyncContextManager[Any]:
        """What `Client` connects through, new for each start (a transport is entered once)."""
        target = self.target
        if isinstance(target, StdioServerParameters):
            return target
        if target.transport == "sse":
            # a day between events (not 5 min): the call's timeout catches a hung server
            factory = self._http_client
            return sse_client(target.url, dict(target.headers), self.timeout_s, 86400.0, factory)
        return _streamable(target.url, self._http_client(dict(target.headers)))

    async def start(self) -> list[types.Tool]:
        """Start the server and list its tools; raises `McpServerError` saying why not."""
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._owner = asyncio.create_task(self._own(ready, self._stop), name=f"mcp:{self.name}")
        self.generation += 1
        self._refused = ""
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self.timeout_s)
            self._client = client
            listed = await asyncio.wait_for(_list_all(client), self.timeout_s)
        except Exception as exc:
            await self.close()
            if isinstance(exc, McpServerError):
                raise
            if isinstance(exc, TimeoutError):
                raise McpServerError(
                    f"MCP server {self.name!r} did not start and list its tools within "
                    f"{self.timeout_s:g} s; check its command (or URL) works on its own"
                ) from None
            raise McpServerError(
                f"MCP server {self.name!r} could not be started: {self._cause(exc)}"
            ) from exc
        return listed

    async def _own(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            async with Client(self._server(), read_timeout_seconds=None) as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                what = (
                    "URL, transport, headers" if isinstance(self.target, HttpTarget) else "command"
                )
                said = f"MCP server {self.name!r} could not be started: {self._cause(exc)}"
                ready.set_exception(McpServerError(f"{said}; check its {what}"))
            if isinstance(exc, asyncio.CancelledError):
                raise
            log.warning("MCP server %r stopped: %s", self.name, self._cause(exc))

    @property
    def alive(self) -> bool:
        return self._client is not None and self._owner is not None and not self._owner.done()

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Call ``tool``, starting the server again first if it had died or hung. One that does
        not answer in time ends the call with `ToolTimeoutError`; one that dies during the call
        ends it with `McpServerError` (the call is not repeated: it may have had effects)."""
        client, generation = await self._ready()
        self._refused = ""
        try:
            return await asyncio.wait_for(client.call_tool(tool, dict(arguments)), self.timeout_s)
        except TimeoutError:
            self._retire(generation, "it did not answer in time")
            raise ToolTimeoutError(
                f"MCP server {self.name!r} did not answer {tool!r} within {self.timeout_s:g} s; "
                "it is restarted for the next call"
            ) from None
        except (McpServerError, asyncio.CancelledError):
            raise
        except Exception as exc:
            closed = isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED
            if self.alive and not closed:  # the server answered with a protocol error
                raise McpServerError(
                    f"MCP server {self.name!r} failed on {tool!r}: {self._cause(exc)}"
                ) from exc
            self._retire(generation, "it had stopped")
            raise McpServerError(
                f"MCP server {self.name!r} went away during {tool!r} ({self._cause(exc)}); it is "
                "started again for the next call (not this one: it may have had effects)"
            ) from exc

    def _retire(self, generation: int, why: str) -> None:
        """Close ``generation`` in the background, once, if it is still the current one."""
        if generation != self.generation or self._retired == generation:
            return
        self._retired, self._why = generation, why
        self._closing = asyncio.create_task(self._close_now(), name=f"mcp-close:{self.name}")

    async def _ready(self) -> tuple[Client, int]:
        async with self._lock:
            if self._closing is not None:
                await self._closing
                self._closing = None
            if self.gone:
                raise McpServerError(
                    f"MCP server {self.name!r} was removed after {self.restarts} restart(s); "
                    "add it again once it works"
                )
            if not self.alive:
                await self._restart(self._why or "it had stopped")
            assert self._client is not None
            return self._client, self.generation

    async def _restart(self, why: str) -> None:
        """Start the server again (lock held), or give up on it past ``max_restarts``."""
        await self._close_now()
        if self.restarts >= self.max_restarts:
            self.gone = True
            if self.on_gone is not None:
                self.on_gone()
            raise McpServerError(
                f"MCP server {self.name!r} stopped working ({why}) and was restarted "
                f"{self.restarts} time(s) already; it is removed, with its tools"
            )
        self.restarts += 1
        self._why = ""
        log.warning("restarting MCP server %r: %s", self.name, why)
        await self.start()

    async def close(self) -> None:
        """Stop the session and the server process (killed if it does not leave)."""
        if self._closing is not None:
            with contextlib.suppress(BaseException):
                await self._closing
            self._closing = None
        await self._close_now()

    async def _close_now(self) -> None:
        owner, self._owner = self._owner, None
        self._client = None
        if self._stop is not None:
            self._stop.set()
        if owner is not None and not owner.done():
            try:
                # the SDK waits 2 s for the process to leave before it kills it
                await asyncio.wait_for(asyncio.shield(owner), 5.0)
            except (TimeoutError, Exception):
                owner.cancel()
                with contextlib.suppress(BaseException):
                    await owner


class McpTool(ToolBase):
    """One tool of an MCP server, as a Stockade tool."""

    def __init__(
        self, connection: McpConnection, remote: types.Tool, name: str, *, raw: bool = False
    ) -> None:
        self.connection = connection
        self.raw = raw
        self.remote_name = remote.name
        self.name = name
        self.description = (remote.description or remote.title or remote.name).strip()
        self.input_schema = remote.input_schema or {"type": "object"}
        hints = remote.annotations or types.ToolAnnotations()
        self.origin = f"mcp:{connection.name}"
        self.read_only_hint = hints.read_only_hint is True
        self.open_world = hints.open_world_hint is not False  # the spec's default is true
        # the engine's own timeout only backs up the connection's, which is clearer: it must
        # leave room for closing a hung server (at most 5 s) and starting it again
        self.timeout = 2 * connection.timeout_s + 10.0
        self.retry = False  # a remote call may have had effects before it failed

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        result = await self.connection.call(self.remote_name, args)
        blocks = _blocks(result)
        if result.is_error:
            text = "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
            raise McpToolError(self.connection.hidden(text or f"{self.remote_name} failed"))
        content: Any = blocks
        if not blocks and result.structured_content is not None:
            content = result.structured_content
        return ToolOutput(content, metadata={RAW_KEY: result}) if self.raw else content


class McpServer:
    """What `add_mcp_server` registered: the connection and the tools' names."""

    def __init__(self, toolkit: ToolCatalog, connection: McpConnection, tools: list[str]) -> None:
        self.toolkit = toolkit
        self.connection = connection
        self.name = connection.name
        self.tools = tools

    async def close(self, *, remove_tools: bool = True) -> None:
        """Stop the server; its tools are unregistered unless told otherwise."""
        await self.connection.close()
        if remove_tools:
            self.remove_tools()

    def remove_tools(self) -> None:
        """Unregister the server's tools (those still registered)."""
        for name in self.tools:
            if name in self.toolkit:
                self.toolkit.remove(name)


async def add_mcp_server(
    toolkit: ToolCatalog,
    name: str,
    *,
    command: Sequence[str] | None = None,
    url: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    enable: Sequence[str] | None = None,
    disable: Sequence[str] = (),
    presets: Mapping[str, Mapping[str, Any]] | None = None,
    group: str | None = None,
    timeout_s: float = 30.0,
    max_restarts: int = 3,
    transport: Transport | None = None,
    headers: Mapping[str, str] | None = None,
    postprocess: Postprocess | None = None,
    raw_results: bool = False,
) -> McpServer:
    """Start (or connect to) an MCP server and register its tools; see the module docstring.
    Raises `McpServerError` when it cannot be reached, and `ToolDefinitionError` for lists or
    presets naming tools it does not have."""
    if (command is None) == (url is None):
        raise ConfigurationError(f"MCP server {name!r}: give command=[...] or url=..., exactly one")
    if not name or _UNSAFE.search(name):
        raise ConfigurationError(f"MCP server name {name!r}: use letters, digits, '_' and '-' only")
    if not timeout_s > 0:
        raise ConfigurationError(f"MCP server {name!r}: timeout_s must be positive")
    kind = transport or ("stdio" if url is None else "streamable-http")
    if kind not in ("stdio", "streamable-http", "sse") or (kind == "stdio") != (url is None):
        raise ConfigurationError(
            f"MCP server {name!r}: transport {transport!r} does not fit; a command speaks "
            "'stdio', a url 'streamable-http' (the default) or 'sse'"
        )
    for key, value in (headers or {}).items():  # checked here: httpx's errors may show it
        if not isinstance(value, str) or not value.isprintable() or not value.isascii():
            raise ConfigurationError(
                f"MCP server {name!r}: the value of header {key!r} must be printable ASCII "
                "text (it is not shown here: it may be a secret)"
            )
    target: Target
    if url is not None:
        target = HttpTarget(url, kind, dict(headers or {}))
    elif isinstance(command, str) or not command:
        raise ConfigurationError(f"MCP server {name!r}: command is a list: ['program', 'arg', ...]")
    elif headers is not None:
        raise ConfigurationError(f"MCP server {name!r}: headers= are for a url=..., not a command")
    else:
        target = StdioServerParameters(
            command=command[0], args=list(command[1:]), env=dict(env) if env else None, cwd=cwd
        )
    connection = McpConnection(name, target, timeout_s=timeout_s, max_restarts=max_restarts)
    remote = await connection.start()
    try:
        chosen = _choose(name, remote, enable, disable, presets or {})
        hooks = (postprocess, raw_results)
        registered = _register(toolkit, connection, chosen, presets or {}, group or BASIC, *hooks)
    except BaseException:
        await connection.close()
        raise
    server = McpServer(toolkit, connection, [t.name for t in registered])
    connection.on_gone = server.remove_tools
    return server


@contextlib.asynccontextmanager
async def _streamable(url: str, http: httpx2.AsyncClient) -> AsyncIterator[Any]:
    """Streamable HTTP through ``http`` (whose headers it sends), closing it afterwards."""
    async with http, streamable_http_client(url, http_client=http) as streams:
        yield streams


def _choose(
    server: str,
    remote: list[types.Tool],
    enable: Sequence[str] | None,
    disable: Sequence[str],
    presets: Mapping[str, Mapping[str, Any]],
) -> list[types.Tool]:
    offered = {t.name for t in remote}
    for label, names in (("enable", enable or ()), ("disable", disable), ("presets", presets)):
        unknown = sorted(set(names) - offered)
        if unknown:
            raise ToolDefinitionError(
                f"MCP server {server!r} has no tool(s) {', '.join(unknown)} (named in {label}); "
                f"it offers: {', '.join(sorted(offered)) or 'nothing'}"
            )
    return [
        t for t in remote if (enable is None or t.name in enable) and t.name not in set(disable)
    ]


def _register(
    toolkit: ToolCatalog,
    connection: McpConnection,
    chosen: list[types.Tool],
    presets: Mapping[str, Mapping[str, Any]],
    group: str,
    postprocess: Postprocess | None,
    raw: bool,
) -> list[RegisteredTool]:
    """Register every chosen tool, or none: a clash with a tool already in the toolkit (or any
    other error) takes back the ones registered before it."""
    registered: list[RegisteredTool] = []
    taken: set[str] = set()
    try:
        for remote in chosen:
            name = tool_name(connection.name, remote.name)
            if name in taken:  # two remote names that differ only in replaced characters
                name = tool_name(connection.name, f"{remote.name}_{len(taken)}")
            taken.add(name)
            preset = presets.get(remote.name)
            try:
                tool = McpTool(connection, remote, name, raw=raw)
                compiled = compile_tool_base(tool, presets=preset, postprocess=postprocess)
                registered.append(toolkit.add(compiled, group=group))
            except ToolDefinitionError as exc:
                if preset:  # the user's preset, not the server, may be what is wrong
                    raise
                # an untrusted server's broken schema: that tool is left out, not the server
                log.warning(
                    "MCP server %r: tool %r left out: %s", connection.name, remote.name, exc
                )
    except BaseException:
        for done in registered:
            toolkit.remove(done.name)
        raise
    return registered


async def _list_all(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # a paginator that never ends cannot hang the start
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise McpServerError("the server's tool list did not end after 100 pages")


def _blocks(result: types.CallToolResult) -> list[TextBlock | ImageBlock]:
    blocks: list[TextBlock | ImageBlock] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            blocks.append(TextBlock(item.text))
        elif isinstance(item, types.ImageContent):
            blocks.append(ImageBlock(item.data, item.mime_type))
        else:  # audio, resources, links: described, not passed on
            blocks.append(TextBlock(f"[{item.type} content left out]"))
    return blocks


def _cause(exc: BaseException) -> str:
    """The first real error inside exception groups (anyio wraps the SDK's)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
