"""Serve a toolkit's tools over MCP, every call through the engine.

    service = McpService(engine)                 # the engine's toolkit, policy, VFS, audit, traces
    await service.serve_stdio()                  # or: await service.serve_http(port=8765)
    await service.serve_http(8765, token=secret, stop=event)   # bearer token; stops when set

Clients see the toolkit's *active* tools with their JSON schemas and MCP annotations derived
from the tool attributes (`annotations_of`). A call is an `Engine.call` like any other: policy,
sandbox, timeout, audit record and span. A denial comes back as a tool error whose text names
the rule and the reason. An ``ask`` decision is put to the person through MCP elicitation when
the client supports it (asked mid-call on handshake-era connections; as an
``InputRequiredResult`` that the client answers by calling again on 2026-07-28 connections),
and is denied otherwise. The form offers a choice (`approval_schema`): no, yes once, or yes for
the session or always (appended to the policy file) by one of the approvals the engine suggests
for the call; a client that answers the older yes/no form (a boolean ``approve``) still gets a
yes for the call. A call that runs with a warning (a warn decision) says so in its result, in a
text block of its own, so the client sees it too. When a call changes which tools are active
(the ``reset_tools`` meta tool), handshake-era clients are told that the tool list changed.

A client that goes away mid-call cancels the call: the engine records it as cancelled and kills
the command's processes. Over stdio the SDK ends the session when stdin closes, which cancels
what is in flight. Over streamable HTTP the SDK cancels a 2026-07-28 request itself when its
connection closes (it watches for the ASGI ``http.disconnect`` while the handler runs), but not
a handshake-era one: that is handled in its session, which outlives the connection that carried
it (the client may come back with the session id; an unused session is dropped only after its
idle timeout), so the SDK closes the request's response stream and lets the handler run on,
answering into nothing. `DisconnectCancels` does for handshake-era requests what the SDK does
for 2026-07-28 ones, as a server middleware (the SDK's hook around every handler), with the
request the SDK hands it. The server keeps no event store, so a closed stream cannot be resumed
and nobody is left to take the answer.

Over HTTP, `BearerToken` can require ``Authorization: Bearer <token>`` of every request (401
with ``WWW-Authenticate: Bearer`` otherwise; compared in constant time), in front of the SDK's
own loopback Host and Origin checks. Stopping (``stop`` set) cancels the requests being
answered, ending their streams cleanly (a call among them is cancelled and recorded so), then
lets uvicorn close its connections and the SDK its sessions: nothing is cut off mid-response,
so nothing logs a traceback. uvicorn's own signal handling is left out: the caller decides what
a signal means.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import REQUEST_CANCELLED
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS, is_version_at_least
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stockade.engine.errors import CallError, PermissionDeniedError
from stockade.engine.formats.mcp import hints
from stockade.engine.mcp.served import (
    APPROVAL_KEY,
    answer_of,
    approval_schema,
    describe,
    fingerprint,
    offer_digest,
    plain_json,
    result_json,
    tool_entry,
)
from stockade.engine.messages import ToolCall, ToolResult
from stockade.engine.pipeline import Approve
from stockade.engine.pipeline.engine import Engine
from stockade.engine.tools import RegisteredTool
from stockade.policies import Decision, Effect
from stockade.policies.suggestions import Suggestion
from stockade.version import __version__

log = logging.getLogger("stockade.mcp")
STOP_GRACE_S = 2.0  # for connections to close once stopped, before uvicorn cuts them


def annotations_of(tool: RegisteredTool, *, network: bool) -> types.ToolAnnotations:
    """MCP hints from a tool's attributes (decided in `stockade.engine.formats.mcp`)."""
    return types.ToolAnnotations.model_validate(hints(tool, network=network))


@dataclass(slots=True)
class _Asking:
    """How the call in progress can ask its person: the request's context, and on 2026-07-28
    connections the answer the client already sent."""

    ctx: ServerRequestContext[Any]
    answer: types.ElicitResult | None
    offer: str = ""  # what the answer's question offered (`offer_digest`), on 2026-07-28


class McpService:
    """An MCP server (the SDK's low-level `Server`) in front of an `Engine`. ``ask`` decisions
    of the calls it serves go to the MCP client that made them (the engine's own approver,
    if any, is left as it is for its other callers), and one not answered within
    ``elicit_timeout_s`` is refused."""

    def __init__(
        self, engine: Engine, *, name: str = "stockade", elicit_timeout_s: float = 300.0
    ) -> None:
        self.engine = engine
        self.elicit_timeout_s = elicit_timeout_s  # a person may take a while, not for ever
        self.server: Server[Any] = Server(
            name,
            version=__version__,
            instructions=(
                "Tools run in Stockade's sandbox: paths are under /workspace; a denied call "
                "says which rule refused it and why."
            ),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.server.middleware.append(DisconnectCancels())

    # -- serving -----------------------------------------------------------------------------

    async def serve_stdio(self) -> None:
        """Serve one client over stdin and stdout until it disconnects."""
        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.initialization_options())

    async def serve_http(
        self,
        port: int,
        host: str = "127.0.0.1",
        *,
        token: str | None = None,
        sock: socket.socket | None = None,
        stop: asyncio.Event | None = None,
        ready: Callable[[], None] | None = None,
    ) -> None:
        """Serve streamable HTTP at ``http://host:port/mcp`` until ``stop`` is set, or until
        cancelled (loopback by default: the SDK then also refuses other Host and Origin
        headers). With ``token``, every request must carry ``Authorization: Bearer <token>``.
        ``sock`` is a socket already bound (`bind_loopback`), else one is bound here (OSError
        when it cannot be: the port is in use, say). ``ready`` is called once it accepts
        connections."""
        sock = sock if sock is not None else bind_loopback(port, host)
        requests = _Requests(self.server.streamable_http_app(host=host))
        app: ASGIApp = requests if token is None else BearerToken(requests, token)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=int(STOP_GRACE_S),
        )
        server = _Uvicorn(config, ready)

        async def stop_when_asked(event: asyncio.Event) -> None:
            await event.wait()
            requests.stop()  # their streams end; uvicorn's shutdown then finds them closed
            server.should_exit = True

        watcher = asyncio.create_task(stop_when_asked(stop)) if stop is not None else None
        try:
            await server.serve(sockets=[sock])
        finally:
            if watcher is not None:
                watcher.cancel()
            sock.close()

    def initialization_options(self) -> Any:
        """What the server announces: tools, whose list may change."""
        return self.server.create_initialization_options(NotificationOptions(tools_changed=True))

    # -- handlers ----------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        network = self.engine.policy.network_mode != "none"
        return types.ListToolsResult(
            tools=[
                types.Tool.model_validate(tool_entry(tool, network=network))
                for tool in self.engine.toolkit.tools()
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        call = ToolCall(name=params.name, arguments=params.arguments or {}, subject="mcp")
        answer = (params.input_responses or {}).get(APPROVAL_KEY)
        about, _, offer = (params.request_state or "").partition(".")
        if about != fingerprint(call):
            answer = None  # an answer about some other call: ask about this one
        if _modern(ctx) and answer is None and _can_elicit(ctx):
            question = await self._question(call)
            if question is not None:  # ask first; the client calls again with the answer
                text, suggestions = question
                schema = approval_schema(suggestions, self.engine.policy.file)
                return types.InputRequiredResult(
                    input_requests={APPROVAL_KEY: _elicit_request(text, schema)},
                    request_state=f"{fingerprint(call)}.{offer_digest(suggestions)}",
                )
        revision = self.engine.toolkit.revision
        asking = _Asking(ctx, answer if isinstance(answer, types.ElicitResult) else None, offer)
        result = await self.engine.call(call, approver=functools.partial(self._approve, asking))
        if self.engine.toolkit.revision != revision and not _modern(ctx):
            try:
                await ctx.session.send_tool_list_changed()
            except Exception as exc:  # the client went away: the call's result still stands
                log.warning("could not tell the client its tool list changed: %s", exc)
        return to_mcp_result(result)

    async def _question(self, call: ToolCall) -> tuple[str, tuple[Suggestion, ...]] | None:
        """The approval question for ``call`` and the approvals it offers, when the policy
        would ask about it (and no lasting approval covers it), else None."""
        tool = self.engine.toolkit.resolve(call.name)
        if tool is not None and tool.spec.command is not None:
            await self.engine.isolation()  # probed off the event loop, not inside preview
        try:
            _, decision = self.engine.preview(call)
        except CallError:
            return None  # the call itself will say what is wrong
        if decision.effect is not Effect.ASK:
            return None
        # the same suggestions the engine puts to the approver when the call comes back
        return describe(call, decision), decision.suggestions

    async def _approve(self, asking: _Asking, call: ToolCall, decision: Decision) -> Approve | bool:
        """The approver of one served call: its client answers."""
        if asking.answer is not None:  # 2026-07-28: answered before the call came back
            answer = answer_of(asking.answer.action, asking.answer.content, decision.suggestions)
            lasting = isinstance(answer, Approve) and answer.scope != "once"
            if lasting and asking.offer != offer_digest(decision.suggestions):
                raise PermissionDeniedError(
                    "not approved: the approvals offered changed since the question was "
                    "put (another answer came in between); call again to be asked anew"
                )
            return answer
        if not _can_elicit(asking.ctx):
            raise PermissionDeniedError(
                "not asked: this MCP client does not support elicitation, so nobody could "
                "approve it; use a client that does, or a policy that allows the call"
            )
        if _modern(asking.ctx):  # the answer should have come with the call; it did not
            raise PermissionDeniedError("not approved: the client sent no answer")
        titled = is_version_at_least(asking.ctx.protocol_version, "2025-11-25")
        schema = approval_schema(decision.suggestions, self.engine.policy.file, titled=titled)
        try:
            reply = await asyncio.wait_for(
                asking.ctx.session.elicit_form(
                    describe(call, decision), schema, asking.ctx.request_id
                ),
                self.elicit_timeout_s,
            )
        except TimeoutError:
            raise PermissionDeniedError(
                f"not approved: no answer within {self.elicit_timeout_s:g} s"
            ) from None
        except Exception as exc:
            raise PermissionDeniedError(
                f"not approved: asking the client failed ({type(exc).__name__}: {exc})"
            ) from None
        return answer_of(reply.action, reply.content, decision.suggestions)


def bind_loopback(port: int, host: str = "127.0.0.1") -> socket.socket:
    """A TCP socket bound to ``host:port``, to hand to `McpService.serve_http`; raises OSError
    (``errno.EADDRINUSE`` when the port is in use) so that a caller can say so before it
    starts anything else."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        # as uvicorn does: a server restarted at once is not refused for its old connections
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


class BearerToken:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer <token>`` is answered
    401 with ``WWW-Authenticate: Bearer`` (RFC 6750) and goes no further. The token is
    compared in constant time and never logged or echoed. Lifespan events pass through; a
    websocket (which the server does not offer) is closed unless it carries the token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("BearerToken: the token is empty; give the secret clients must send")
        self.app = app
        self._token = token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or self._admits(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await self._refuse(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008})

    def _admits(self, scope: Scope) -> bool:
        given = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
        scheme, _, credentials = given.strip().partition(b" ")
        # compare_digest even for a wrong scheme: the time taken says nothing about the token
        matches = hmac.compare_digest(credentials.strip(), self._token)
        return matches and scheme.lower() == b"bearer"

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        sent = any(k == b"authorization" for k, _ in scope.get("headers", ()))
        challenge = 'Bearer realm="stockade"' + (', error="invalid_token"' * sent)
        response = JSONResponse(
            {
                "error": "invalid_token" if sent else "unauthorized",
                "error_description": (
                    "this server requires the header Authorization: Bearer <token>, with the "
                    "token `stockade serve` was given"
                    + (" (the one sent does not match)" if sent else "")
                ),
            },
            status_code=401,
            headers={"WWW-Authenticate": challenge},
        )
        await response(scope, receive, send)


class _Requests:
    """ASGI middleware that holds the HTTP requests being answered, to end them all when the
    server stops: each is cancelled (a call it carries is cancelled and recorded), and a
    response it had begun is ended with an empty last chunk, as a complete response, so that
    uvicorn neither logs it as an error nor waits for a stream that would never end. A request
    that comes after is answered 503."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._running: set[anyio.CancelScope] = set()
        self._stopping = False

    def stop(self) -> None:
        self._stopping = True
        for scope in list(self._running):
            scope.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._stopping:
            await JSONResponse({"error": "the server is stopping"}, 503)(scope, receive, send)
            return
        state = {"started": False, "done": False}

        async def tracked(message: Message) -> None:
            state["started"] |= message["type"] == "http.response.start"
            state["done"] |= message["type"] == "http.response.body" and not message.get(
                "more_body", False
            )
            await send(message)

        with self._holding() as cancel:
            await self.app(scope, receive, tracked)
        if not cancel.cancelled_caught or state["done"]:
            return
        with contextlib.suppress(OSError):  # the client may be gone already
            if state["started"]:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await JSONResponse({"error": "the server is stopping"}, 503)(scope, receive, send)

    @contextlib.contextmanager
    def _holding(self) -> Iterator[anyio.CancelScope]:
        with anyio.CancelScope() as cancel:
            self._running.add(cancel)
            try:
                yield cancel
            finally:
                self._running.discard(cancel)


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, minus its signal handlers (the caller's own decide what SIGINT and
    SIGTERM mean, and set ``stop``), telling ``ready`` once it accepts connections."""

    def __init__(self, config: uvicorn.Config, ready: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._ready = ready

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._ready is not None:
            self._ready()


class DisconnectCancels:
    """Server middleware: a handshake-era request that came over HTTP is cancelled when the
    connection that carried it closes (the module's docstring says why the SDK leaves this to
    us). Notifications (answered with a 202 before they are handled, so their connection may
    be gone already), requests that came another way, and 2026-07-28 ones (the SDK watches
    those itself) pass through untouched."""

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> HandlerResult:
        request = ctx.request
        if ctx.request_id is None or _modern(ctx) or not isinstance(request, Request):
            return await call_next(ctx)
        answered: list[HandlerResult] = []
        failed: list[Exception] = []
        async with anyio.create_task_group() as group:
            group.start_soon(_cancel_on_disconnect, request.receive, group.cancel_scope)
            try:
                answered.append(await call_next(ctx))
            except Exception as exc:  # re-raised bare below: out of the group it would come
                failed.append(exc)  # wrapped in an ExceptionGroup, which the SDK cannot answer
            group.cancel_scope.cancel()  # answered: stop watching
        if failed:
            raise failed[0]
        if not answered:  # the connection closed first and the handler was cancelled
            raise MCPError(
                code=REQUEST_CANCELLED,
                message=f"{ctx.method} cancelled: the client's connection closed before the answer",
            )
        return answered[0]


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    # the request's body was read before it was dispatched, so what comes next is the
    # disconnect (also sent once the response is complete, by which time nothing is watching);
    # uvicorn gives it to every receiver, so the response stream's own watch sees it too
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def to_mcp_result(result: ToolResult) -> types.CallToolResult:
    """An engine result as the SDK's model (`result_json` says what it holds)."""
    return types.CallToolResult.model_validate(plain_json(result_json(result)))


def _modern(ctx: ServerRequestContext[Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _can_elicit(ctx: ServerRequestContext[Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


def _elicit_request(question: str, schema: dict[str, Any]) -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=question, requested_schema=schema)
    )
