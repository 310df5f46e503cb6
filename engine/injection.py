"""What a running tool can receive besides its model-given arguments.

Three kinds of value are injected by parameter type and never appear in a schema:
an `Emitter` for progress chunks, the `ToolContext` of the call, and objects the caller
registered by type at call, agent (engine) or toolkit level — the call level wins, then agent,
then toolkit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from stockade.engine.content import Block, to_content
from stockade.engine.errors import ContextError

if TYPE_CHECKING:
    from stockade.engine.messages import ToolCall

T = TypeVar("T")


class _FromContextMarker:
    """Marker for ``Annotated[SomeType, FromContext]``: inject this parameter from the context."""

    def __repr__(self) -> str:
        return "FromContext"


FromContext: Final = _FromContextMarker()
"""Use as ``Annotated[Db, FromContext]`` to force injection of a type pydantic could describe
(a dataclass, say). Plain classes pydantic cannot describe are injected without it."""


ContextLike = Mapping[type, object] | Iterable[object] | None


class ContextLevel:
    """Objects registered by type at one level of the chain."""

    __slots__ = ("_by_type",)

    def __init__(self, objects: ContextLike = None) -> None:
        self._by_type: dict[type, object] = {}
        if objects is None:
            return
        if isinstance(objects, Mapping):
            for key, value in objects.items():
                if not isinstance(key, type):
                    raise ContextError(f"context keys must be types, got {key!r}")
                if not isinstance(value, key):
                    raise ContextError(
                        f"context value for {key.__name__} is a {type(value).__name__}, "
                        f"not an instance of {key.__name__}"
                    )
                self._by_type[key] = value
        else:
            for value in objects:
                self._by_type[type(value)] = value

    def put(self, value: object, as_type: type | None = None) -> None:
        """Register ``value`` under its own type (or ``as_type``)."""
        self._by_type[as_type or type(value)] = value

    def lookup(self, wanted: type) -> tuple[bool, object]:
        """Exact type first, then any registered instance of a subclass."""
        if wanted in self._by_type:
            return True, self._by_type[wanted]
        for value in self._by_type.values():
            if isinstance(value, wanted):
                return True, value
        return False, None

    def __bool__(self) -> bool:
        return bool(self._by_type)

    def types(self) -> list[type]:
        """The registered types, for error messages."""
        return list(self._by_type)


class Emitter:
    """Sends progress chunks from a running tool to whoever streams the call.

    Under `Engine.call` nobody is listening and `emit` does nothing; under `Engine.stream` each
    emitted value arrives as a chunk before the final one. Safe to call from the worker thread a
    sync tool runs in.
    """

    __slots__ = ("_loop", "_loop_thread", "_sink")

    def __init__(self, sink: Callable[[list[Block]], None] | None = None) -> None:
        self._sink = sink
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        if sink is not None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()

    @property
    def active(self) -> bool:
        """True when someone receives the chunks (the call is being streamed)."""
        return self._sink is not None

    def emit(self, value: Any) -> None:
        """Send one progress chunk: a string, blocks, or anything a tool may return."""
        if self._sink is None:
            return
        blocks = to_content(value)
        if threading.get_ident() == self._loop_thread:
            self._sink(blocks)
        else:
            cast(asyncio.AbstractEventLoop, self._loop).call_soon_threadsafe(self._sink, blocks)


SILENT_EMITTER: Final = Emitter()


@dataclass(slots=True)
class ToolContext:
    """Everything about the current call a tool or permission hook may look at."""

    call: ToolCall
    tool_name: str
    emitter: Emitter = SILENT_EMITTER
    levels: tuple[ContextLevel, ...] = field(default_factory=tuple)

    def get(self, wanted: type[T], default: T | None = None) -> T | None:
        """The context object of type ``wanted`` from the nearest level, or ``default``."""
        for level in self.levels:
            found, value = level.lookup(wanted)
            if found:
                return cast(T, value)
        return default

    def require(self, wanted: type[T]) -> T:
        """Like `get`, but raises `ContextMissingError` naming the type when absent."""
        from stockade.engine.errors import ContextMissingError

        for level in self.levels:
            found, value = level.lookup(wanted)
            if found:
                return cast(T, value)
        raise ContextMissingError(
            f"tool {self.tool_name!r} needs a context object of type {wanted.__name__}, and none "
            "was given at call, engine or toolkit level; pass one with "
            "engine.call(..., context=[obj]), Engine(..., context=[obj]) or Toolkit(context=[obj])"
        )
