"""A tool's fault, whatever it raised, described as the error of its call.

The engine promises that a tool's failure never raises out of `Engine.call`, so the run step
catches `BaseException`, not only `Exception`: a tool raising ``KeyboardInterrupt`` or
``SystemExit`` stops that call, never the engine and the calls beside it (the price: a Ctrl-C
that the interpreter happens to deliver while a tool's own code runs on the event loop becomes
that call's error; under ``asyncio.run`` Ctrl-C cancels the main task instead, and that
cancellation propagates). ``GeneratorExit``, exception groups and custom `BaseException`
subclasses are errors like any other. A ``CancelledError`` is the caller's cancellation only
when the call's task was really cancelled (`asyncio.Task.cancelling`); one the tool raised of
its own accord is its error. And what an asyncio future cannot carry (``StopIteration``,
``GeneratorExit``) is wrapped on its way out of a worker thread and unwrapped here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from stockade.engine.messages import ErrorInfo, escaped, printable
from stockade.errors import StockadeError

T = TypeVar("T")


class Carried(StockadeError):
    """Carries out of a worker thread what a sync tool raised that an asyncio future cannot
    deliver: ``StopIteration`` (a future refuses it, leaving the call waiting until its
    timeout) and ``GeneratorExit`` (the awaiting task would throw it into its coroutine, which
    closes every await of the chain, the engine's own included, instead of raising there)."""

    def __init__(self, raised: StopIteration | GeneratorExit) -> None:
        super().__init__(f"the tool raised {type(raised).__name__}")
        self.raised = raised


def in_worker(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, in a worker thread, with what a future cannot carry `Carried` out."""
    try:
        return fn(*args)
    except (StopIteration, GeneratorExit) as exc:
        raise Carried(exc) from exc


def unwrapped(error: BaseException) -> BaseException:
    """What the tool itself raised."""
    return error.raised if isinstance(error, Carried) else error


def fault_info(error: BaseException) -> ErrorInfo:
    """The error of a call whose tool raised ``error`` (never the caller's cancellation: that
    propagates and never becomes a result)."""
    error = unwrapped(error)
    kind = escaped(type(error).__name__)
    if isinstance(error, asyncio.CancelledError):
        return ErrorInfo(
            kind,
            "the tool raised CancelledError itself; nobody cancelled the call, so it is the "
            "tool's error",
        )
    if not isinstance(error, KeyboardInterrupt | SystemExit | StopIteration):
        return ErrorInfo.of(error)
    said = printable(error)
    detail = f" ({said})" if said else ""
    if isinstance(error, StopIteration):
        return ErrorInfo(kind, f"the tool raised StopIteration{detail}; raise an error instead")
    return ErrorInfo(
        kind,
        f"the tool raised {kind}{detail}; a tool cannot stop the engine, so only this call failed",
    )
