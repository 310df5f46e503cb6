"""Awaiting an fsync audit log's writes from an event loop.

An fsync log writes the records that arrived together in one write and one fsync, and hands
every record of it the same ticket (a `concurrent.futures.Future`, done in the writer's
thread). A thousand calls waiting on one write must not mean a thousand wake-ups of their loop
from that thread: `DiskWaits` hands each write over to each loop once, and the calls wait on
the loop's own future of it, each through a shield (a cancelled call stops waiting; the write,
and the others' wait, go on).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from concurrent.futures import Future


class DiskWaits:
    """The loop-side futures of the writes that calls are waiting on (one per write and loop,
    gone once the write is done)."""

    def __init__(self) -> None:
        self._shared: dict[tuple[int, Future[None]], asyncio.Future[None]] = {}

    def wait(self, ticket: Future[None]) -> Awaitable[None]:
        """What to await, in the running loop, for the write ``ticket`` stands for; raises what
        the write raised (AuditError: it could not be written)."""
        loop = asyncio.get_running_loop()
        key = (id(loop), ticket)
        shared = self._shared.get(key)
        if shared is None:
            shared = self._shared[key] = loop.create_future()
            ticket.add_done_callback(self._hand_over(loop, key, shared))
        return asyncio.shield(shared)

    def _hand_over(
        self,
        loop: asyncio.AbstractEventLoop,
        key: tuple[int, Future[None]],
        shared: asyncio.Future[None],
    ) -> Callable[[Future[None]], None]:
        def settle(done: Future[None]) -> None:  # in the loop
            self._shared.pop(key, None)
            if shared.done():
                return
            error = done.exception()
            if error is None:
                shared.set_result(None)
            else:
                shared.set_exception(error)

        def hand_over(done: Future[None]) -> None:  # in the writer's thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(settle, done)

        return hand_over
