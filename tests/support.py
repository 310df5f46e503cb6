"""Helpers shared by the engine tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from engine import Engine, ToolCall, ToolChunk


async def until(predicate: Callable[[], object], limit: float = 5.0) -> None:
    """Wait (polling) until ``predicate()`` is true; fail the test after ``limit`` seconds."""
    async with asyncio.timeout(limit):
        while not predicate():  # noqa: ASYNC110 - the conditions polled have no event to wait on
            await asyncio.sleep(0.002)


async def collect(engine: Engine, call: ToolCall) -> list[ToolChunk]:
    """Every chunk of a streamed call, closing the stream properly."""
    chunks: list[ToolChunk] = []
    async with contextlib.aclosing(engine.stream(call)) as stream:
        async for chunk in stream:
            chunks.append(chunk)
    return chunks
