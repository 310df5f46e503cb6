"""Sessions on a Ray cluster, driver side: `ClusterSessions` opens each session as one Ray actor
on one worker node (placed by Ray by its cores, memory and custom resources, or pinned to a
node), lists them, drains and closes them, and watches their health so that a node's death
ends its calls within seconds, as results.

    sessions = ClusterSessions()                   # the Ray this process joined (ray.init)
    async with sessions:                           # closes every session at the end
        session = await sessions.open(SessionSpec(workspace="/srv/w1", cores=1, memory_mb=512))
        result = await session.call(ToolCall(name="list_directory", arguments={"path": "."}))
        print(await sessions.list())               # id, node, state, in flight, done
        await sessions.drain(session.id)           # no new calls; those in flight finish
        await sessions.close(session.id)           # in-flight calls cancelled, actor killed

Ray is imported only here, when sessions are used: ``pip install 'stockade[ray]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from types import TracebackType
from typing import Any

from stockade.engine.cluster._actor import remote_class
from stockade.engine.cluster._outcomes import said
from stockade.engine.cluster._session import ClusterSession
from stockade.engine.cluster._spec import SessionInfo, SessionSpec
from stockade.errors import ConfigurationError, StockadeError

log = logging.getLogger("stockade.cluster")


class UnknownSessionError(StockadeError, LookupError):
    """No session with that id was opened here."""


def joined_ray(address: str | None) -> Any:
    """The ``ray`` module, joined to a cluster: the one this process already joined, else the
    one at ``address``. Raises ConfigurationError when Ray is missing or no cluster is given."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigurationError("cluster sessions need Ray: pip install 'stockade[ray]'") from exc
    if ray.is_initialized():
        return ray
    if address is None:
        raise ConfigurationError(
            "no Ray cluster: call ray.init(address=...) first, or give "
            "ClusterSessions(address='ray://...' or 'auto' or 'HOST:PORT')"
        )
    ray.init(address=address, logging_level=logging.WARNING)
    return ray


OPEN_ATTEMPTS = 3  # nodes tried for a session whose node dies before it opens


class _NodeLost(StockadeError):
    """(Within `ClusterSessions.open`.) The node a session was placed on died before it opened."""


class ClusterSessions:
    """Every session this driver opened on the cluster.

    Every ``health_interval`` seconds each open session gets a ping (one at a time, never
    cancelled: Ray fails it when the actor is lost, and the session is lost at once then). A
    ping unanswered for ``health_timeout`` seconds makes each later check ask Ray whether the
    node is alive (dead: the session is lost), and after ``health_misses`` such checks the
    session is lost anyway (its actor killed). ``close_grace`` seconds are given to the node to
    cancel a closing session's calls.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        health_interval: float = 1.0,
        health_timeout: float = 3.0,
        health_misses: int = 3,
        close_grace: float = 5.0,
    ) -> None:
        for name, value in (
            ("health_interval", health_interval),
            ("health_timeout", health_timeout),
            ("close_grace", close_grace),
        ):
            if value <= 0:
                raise ConfigurationError(f"{name} must be positive, got {value}")
        if health_misses < 1:
            raise ConfigurationError(f"health_misses must be at least 1, got {health_misses}")
        self._ray = joined_ray(address)
        self._actor_class = remote_class()
        self.health_interval = health_interval
        self.health_timeout = health_timeout
        self.health_misses = health_misses
        self.close_grace = close_grace
        self._sessions: dict[str, ClusterSession] = {}
        self._monitor: asyncio.Task[None] | None = None
        self._nodes_query: asyncio.Future[Any] | None = None  # at most one asks Ray at a time

    # -- opening -----------------------------------------------------------------------------

    async def open(self, spec: SessionSpec) -> ClusterSession:
        """Start a session's actor where Ray places it and open its engine there. Raises
        `PolicyError` for a bad preset or TOML policy (before anything starts), and
        ConfigurationError when the session cannot be placed within ``spec.open_timeout``
        seconds or cannot open on its node (a missing workspace, a state folder inside it)."""
        if spec.policy_kind != "store":
            # a bad policy is said here, not after placing an actor; in a thread, so that a
            # long policy never stalls the other sessions' results and health checks
            await asyncio.to_thread(spec.load_policy)
        deadline = time.monotonic() + spec.open_timeout
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            try:
                actor, where = await self._start(spec, deadline)
                break
            except _NodeLost as lost:
                # its node died before the session opened (Ray may place an actor on a node it
                # has not yet found dead): nothing of the agent's ran, so place it again
                if attempt == OPEN_ATTEMPTS or time.monotonic() >= deadline:
                    raise ConfigurationError(
                        f"the session could not open on its node ({_asked(spec)}): {lost}; "
                        f"tried {attempt} nodes"
                    ) from None
                log.warning("a node died while opening a session (%s); placing it again", lost)
        sid = f"s-{os.urandom(4).hex()}"
        session = ClusterSession(sid, spec, actor, where["node_id"], where["node_ip"])
        self._sessions[sid] = session
        self._watch_health()
        log.info("session %s opened on node %s (%s)", sid, session.node_id, session.node_ip)
        return session

    async def _start(self, spec: SessionSpec, deadline: float) -> tuple[Any, dict[str, str]]:
        """Place one actor for ``spec`` and open its engine; the actor and where it runs.
        Raises `_NodeLost` when its node died before it opened."""
        ray = self._ray
        actor = self._actor_class.options(**self._placement(spec)).remote(spec.model_dump())
        try:
            left = max(deadline - time.monotonic(), 0.1)
            where: dict[str, str] = await asyncio.wait_for(actor.start.remote(), left)
        except asyncio.CancelledError:  # the caller gave up: the actor must not keep its node
            ray.kill(actor, no_restart=True)
            raise
        except TimeoutError:
            ray.kill(actor, no_restart=True)
            raise ConfigurationError(
                f"no node took the session within {spec.open_timeout:g} s: none offers "
                f"{_asked(spec)}. Ask for less, add nodes, or raise open_timeout"
            ) from None
        except ray.exceptions.ActorDiedError as exc:
            ray.kill(actor, no_restart=True)
            raise _NodeLost(said(exc)) from exc
        except Exception as exc:
            ray.kill(actor, no_restart=True)
            cause = getattr(exc, "cause", None) or exc
            raise ConfigurationError(
                f"the session could not open on its node ({_asked(spec)}): {said(cause)}"
            ) from exc
        return actor, where

    def _placement(self, spec: SessionSpec) -> dict[str, Any]:
        """Ray's options for the session's actor: what it reserves and where it may go."""
        options: dict[str, Any] = {"num_cpus": spec.cores, "max_concurrency": 1000}
        if spec.memory_mb:
            options["memory"] = spec.memory_mb * 1024 * 1024
        if spec.resources:
            options["resources"] = dict(spec.resources)
        if spec.node_id is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                spec.node_id, soft=False
            )
        return options

    # -- reading -----------------------------------------------------------------------------

    def get(self, sid: str) -> ClusterSession:
        """The session with id ``sid``; raises UnknownSessionError naming the known ones."""
        try:
            return self._sessions[sid]
        except KeyError:
            known = ", ".join(self._sessions) or "none"
            raise UnknownSessionError(
                f"no session {sid!r} was opened here (sessions: {known})"
            ) from None

    async def list(self) -> list[SessionInfo]:
        """Every session opened here, oldest first: id, node id and IP, state, calls in flight
        and calls done."""
        return [session.info() for session in self._sessions.values()]

    # -- draining and closing ----------------------------------------------------------------

    async def drain(self, sid: str) -> SessionInfo:
        """Stop ``sid`` taking new calls (each gets an error result saying it drains) and wait
        for its calls in flight. The actor stays until `close`."""
        session = self.get(sid)
        await session.drained()
        return session.info()

    async def close(self, sid: str) -> SessionInfo:
        """Close ``sid``: its calls in flight are cancelled on the node (recorded there as
        cancelled, and so are their results here), then its actor is killed."""
        session = self.get(sid)
        await session.close(self.close_grace)
        return session.info()

    async def aclose(self) -> None:
        """Stop the health checks and close every session still open or draining."""
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await monitor
        live = [s for s in self._sessions.values() if s.state in ("open", "draining")]
        await asyncio.gather(*(s.close(self.close_grace) for s in live))

    async def __aenter__(self) -> ClusterSessions:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- health ------------------------------------------------------------------------------

    def _watch_health(self) -> None:
        loop = asyncio.get_running_loop()
        monitor = self._monitor
        if monitor is not None and not monitor.done() and monitor.get_loop() is loop:
            return
        self._monitor = loop.create_task(self._health(), name="stockade:cluster-health")

    async def _health(self) -> None:
        """Ping the live sessions every ``health_interval`` seconds (a pause, not a rate: a
        slow round never piles up on the next)."""
        while True:
            await asyncio.sleep(self.health_interval)
            live = [s for s in self._sessions.values() if s.state in ("open", "draining")]
            if live:
                checks = (
                    s.check(self.health_timeout, self.health_misses, self._node_alive) for s in live
                )
                await asyncio.gather(*checks, return_exceptions=True)

    async def _node_alive(self, node_id: str) -> bool:
        """Whether Ray's control store counts the node alive (True when it cannot say). One
        question in flight at a time, shared: a control store that never answers holds one
        thread, not one more per check."""
        query = self._nodes_query
        if query is None or query.done():
            query = asyncio.ensure_future(asyncio.to_thread(self._ray.nodes))
            query.add_done_callback(_retrieved)
            self._nodes_query = query
        try:
            nodes = await asyncio.wait_for(asyncio.shield(query), 2.0)
        except Exception as exc:
            log.info("cluster: could not ask Ray for its nodes (%s)", said(exc))
            return True
        return any(n.get("NodeID") == node_id and n.get("Alive") for n in nodes)


def _retrieved(query: asyncio.Future[Any]) -> None:
    """Take a shared query's error, so that one nobody waited for is not reported unseen."""
    if not query.cancelled():
        query.exception()


def _asked(spec: SessionSpec) -> str:
    """What a session asks of a node, in words."""
    parts = [f"{spec.cores:g} cores", f"{spec.memory_mb} MB"]
    parts += [f"{amount:g} {name}" for name, amount in spec.resources.items()]
    if spec.node_id is not None:
        parts.append(f"on node {spec.node_id}")
    return ", ".join(parts)


__all__ = ["ClusterSessions", "UnknownSessionError", "joined_ray"]
