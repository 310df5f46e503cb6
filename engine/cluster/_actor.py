"""The Ray actor hosting one session's `Engine` on a worker node: the built-in tools (files, and
commands boxed by bubblewrap where the node has it), a `VirtualFS` with the workspace at
/workspace, the policy, and the audit log in a state folder on the node when asked.

`SessionActor` is a plain class: `remote_class` makes it a Ray actor class when a session is
opened (Ray loads only then). The driver (`sessions.py`) is its only caller:

    actor = remote_class().options(num_cpus=1, max_restarts=0).remote(spec.model_dump())
    info = await actor.start.remote()              # builds the engine, says where it runs
    result = await actor.call.remote(call)         # a ToolResult, never an exception
    async for ref in actor.stream.options(num_returns="streaming").remote(call): ...

Every call runs as a task of the engine's (`Engine.submit`), so `close` can cancel it and the
engine records it as cancelled; a stream is pumped by a task for the same reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from stockade.engine.builtin import add_file_tools, add_shell_tools
from stockade.engine.cluster._spec import SessionSpec
from stockade.engine.messages import ErrorInfo, ToolCall, ToolChunk, ToolResult
from stockade.engine.observe import AuditLog
from stockade.engine.pipeline import Engine
from stockade.engine.toolkit import Toolkit
from stockade.engine.tools import RegisteredTool, ToolBase
from stockade.engine.tools.attributes import SPEC_ATTRIBUTE
from stockade.errors import ConfigurationError
from stockade.sandbox import Mount, VirtualFS

WORKSPACE = "/workspace"
CONTROL = "control"  # the health pings' own slots (and event loop), never behind calls


def session_toolkit(*, shell: bool = True, tools: Iterable[str] = ()) -> Toolkit:
    """The tools a session offers: the file tools, and the command tools unless ``shell`` is
    false (what ``stockade run`` offers), then ``tools`` (``package.module:name`` each),
    imported here. Raises ConfigurationError naming a tool that cannot be imported."""
    toolkit = Toolkit()
    add_file_tools(toolkit)
    if shell:
        add_shell_tools(toolkit)
    for name in tools:
        module, _, attribute = name.partition(":")
        try:
            found = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(
                f"tool {name!r} cannot be imported on this node ({type(exc).__name__}: {exc}); "
                "install its package on every worker node"
            ) from exc
        toolkit.add(_declared_tool(name, found))
    return toolkit


def _declared_tool(name: str, found: Any) -> Any:
    """``found`` if it was declared a tool: a function marked ``@tool``, a `ToolBase` (a
    subclass is built with no arguments) or a registered tool. Anything else a module holds
    (``os:system``, ``builtins:eval``) would run as a tool unboxed on the node, so a name
    that merely resolves is refused."""
    if isinstance(found, type) and issubclass(found, ToolBase):
        try:
            return found()
        except Exception as exc:
            raise ConfigurationError(
                f"tool {name!r}: its ToolBase class could not be built with no arguments "
                f"({type(exc).__name__}: {exc})"
            ) from exc
    target = getattr(found, "__func__", found)
    if isinstance(found, (ToolBase, RegisteredTool)) or (
        not isinstance(found, type) and hasattr(target, SPEC_ATTRIBUTE)
    ):
        return found
    raise ConfigurationError(
        f"tool {name!r} is not a tool: that {type(found).__name__} was never declared one. "
        "Mark the function with @tool (or make it a ToolBase) in its module"
    )


def cancelled_result(call: ToolCall, why: str) -> ToolResult:
    """A call ended before its outcome was known because the session was closed."""
    return ToolResult(
        call_id=call.id,
        tool=call.name,
        status="cancelled",
        error=ErrorInfo("SessionClosedError", why),
    )


class SessionActor:
    """One session on a worker node. Built empty; `start` opens the engine (so a bad workspace
    or policy is an exception of ours the driver can show, not an actor that failed to be
    born)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = SessionSpec.model_validate(spec)
        self.engine: Engine | None = None
        self.fs: VirtualFS | None = None
        self.audit: AuditLog | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self._closing = False

    async def start(self) -> dict[str, str]:
        """Open the file system, the policy, the audit log and the engine (in a thread: it
        reads the node's disk and maybe a policy store); say where this runs. Raises
        ConfigurationError naming what is wrong (the workspace, the state folder)."""
        import ray  # present: this runs inside a Ray worker

        context = ray.get_runtime_context()
        await asyncio.to_thread(self._open, context.get_node_id())
        return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address()}  # type: ignore[no-untyped-call]

    def _open(self, node_id: str) -> None:
        spec = self.spec
        workspace = Path(spec.workspace)
        if not workspace.is_dir():
            raise ConfigurationError(
                f"workspace {spec.workspace} does not exist or is not a folder on node "
                f"{node_id}; create it there first"
            )
        policy = spec.load_policy()
        with contextlib.ExitStack() as opened:
            self.fs = VirtualFS([Mount(WORKSPACE, workspace.resolve())])
            opened.callback(self.fs.close)
            if spec.state is not None:
                state = Path(spec.state).resolve()
                if state.is_relative_to(workspace.resolve()):
                    raise ConfigurationError(
                        f"state folder {spec.state} lies inside the workspace, where the agent "
                        "could rewrite its audit log; choose a folder outside it"
                    )
                state.mkdir(mode=0o700, parents=True, exist_ok=True)
                self.audit = AuditLog(state / "audit.jsonl")
                opened.callback(self.audit.close)
            self.engine = Engine(
                session_toolkit(shell=spec.shell, tools=spec.tools),
                policy=policy,
                fs=self.fs,
                audit=self.audit,
                default_timeout=spec.default_timeout,
            )
            opened.pop_all()

    async def ping(self) -> bool:
        """The driver's health check (in the `CONTROL` group: the process lives)."""
        return True

    async def call(self, call: ToolCall) -> ToolResult:
        """Run one call; its result, a cancelled one when `close` stopped it."""
        engine = self._engine()
        if self._closing:
            return cancelled_result(call, "the session is closing; the call was not run")
        earlier = engine.calls.result(call.id)  # an id used before: never this call's result
        task = engine.submit(call)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:  # the driver cancelled this call
            task.cancel()
            await asyncio.wait({task})
        if task.cancelled():
            recorded = engine.calls.result(call.id)
            if recorded is None or recorded is earlier:
                return cancelled_result(call, "the session was closed while it ran")
            return recorded
        return task.result()

    async def stream(self, call: ToolCall) -> AsyncIterator[ToolChunk]:
        """Run one call, yielding its chunks as they come; the last one carries the result."""
        engine = self._engine()
        if self._closing:
            result = cancelled_result(call, "the session is closing; the call was not run")
            yield ToolChunk(call.id, call.name, [], True, result)
            return
        queue: asyncio.Queue[ToolChunk | None] = asyncio.Queue()
        earlier = engine.calls.result(call.id)  # an id used before: never this call's result

        async def pump() -> None:
            try:
                async with contextlib.aclosing(engine.stream(call)) as chunks:
                    async for chunk in chunks:
                        queue.put_nowait(chunk)
            finally:  # cancelled by `close`: the engine recorded the call as cancelled
                queue.put_nowait(None)

        task = asyncio.get_running_loop().create_task(pump())
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        try:
            while (chunk := await queue.get()) is not None:
                yield chunk
                if chunk.is_last:
                    return
            recorded = engine.calls.result(call.id)
            if recorded is None or recorded is earlier:
                recorded = cancelled_result(call, "the session was closed while it ran")
            yield ToolChunk(call.id, call.name, [], True, recorded)
        finally:  # the driver stopped reading: stop the tool (recorded as cancelled)
            if not task.done():
                task.cancel()
                await asyncio.wait({task})

    async def close(self) -> int:
        """Cancel the calls in flight (each recorded as cancelled), then close the engine, the
        file system and the audit log. Returns how many calls were cancelled."""
        self._closing = True
        engine = self.engine
        if engine is None:
            return 0
        cancelled = len(engine.pending_calls())
        for task in list(self._pumps):
            task.cancel()
        if self._pumps:
            await asyncio.wait(set(self._pumps))
        await engine.aclose()
        if self.fs is not None:
            self.fs.close()
        if self.audit is not None:
            self.audit.close()
        return cancelled

    def _engine(self) -> Engine:
        if self.engine is None:
            raise ConfigurationError("the session was not started; call start() first")
        return self.engine


def remote_class() -> Any:
    """`SessionActor` as a Ray actor class: async (its calls share one event loop, as in an
    `Engine`), never restarted and its calls never retried, so that no call is silently run
    twice. Health pings run in a concurrency group of their own (`CONTROL`: its own event loop
    thread, in Ray), so a session full of calls, or a tool holding the loop, still answers
    them: a ping says the process lives. Everything else shares the engine's loop."""
    import ray

    remote: Any = ray.remote  # its typed overloads leave out concurrency_groups
    return remote(max_restarts=0, max_task_retries=0, concurrency_groups={CONTROL: 1})(SessionActor)


__all__ = [
    "CONTROL",
    "WORKSPACE",
    "SessionActor",
    "cancelled_result",
    "remote_class",
    "session_toolkit",
]
