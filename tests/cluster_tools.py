"""Tools of the tests' own for cluster sessions, imported on the worker nodes by name
(``SessionSpec(tools=("cluster_tools:count_slowly",))``): the tests folder is on the workers'
path (see `cluster_support`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from stockade import tool


@tool(read_only=True)
async def count_slowly(n: int, pause_s: float = 0.05) -> AsyncIterator[str]:
    """Yield ``n`` numbered pieces, one every ``pause_s`` seconds."""
    for i in range(n):
        await asyncio.sleep(pause_s)
        yield f"piece {i}\n"


@tool(read_only=True)  # shares the engine: other calls run beside it
async def wait_then_say(seconds: float, text: str) -> str:
    """Sleep ``seconds``, then return ``text``."""
    await asyncio.sleep(seconds)
    return text
