"""Putting a question to an approver, bounded in time and off the event loop's back.

An approver may be a person at a prompt, a chat message waiting for a reply, a web hook: it can
take long, or never answer. So every question has a time limit (the engine's
``approval_timeout``); when it passes, the ask is refused, saying so, and the call goes on to
its result. An async approver is awaited on the loop and cancelled at the limit. A sync
approver runs in a thread of its own (a daemon: one blocked for ever cannot hold the process at
exit), so that it never stalls the other calls on the loop; at the limit it is left to finish
(a thread cannot be stopped) and its answer, when it comes, is dropped.

An approver that fails refuses (with a warning saying how); one that raises
`PermissionDeniedError` refuses, saying why. The caller's cancellation propagates as always,
while a ``CancelledError`` the approver raised of its own accord is a failure like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from stockade.engine.errors import PermissionDeniedError
from stockade.engine.messages import ToolCall, printable
from stockade.engine.pipeline._state import Approve, Approver
from stockade.policies import Decision
from stockade.policies.suggestions import Suggestion

log = logging.getLogger("stockade.engine")


class Answer(NamedTuple):
    """An approver's answer: whether it approved, why (empty: nothing said), and a warning
    for the call when the approver failed."""

    approved: bool
    verdict: str = ""
    warning: str | None = None
    scope: str | None = None  # how far an approval reaches: "call", "session" or "always"
    rule: Suggestion | None = None  # the suggestion a lasting approval keeps (None: the first)


async def put(
    approver: Approver, call: ToolCall, question: Decision, timeout_s: float | None
) -> Answer:
    """Ask ``approver`` about ``call``; at most ``timeout_s`` seconds (None: no limit)."""
    task = asyncio.current_task()
    cancelling = task.cancelling() if task is not None else 0
    synchronous = not _is_async(approver)
    limit = asyncio.timeout(timeout_s)
    try:
        async with limit:
            answer: object = (
                await _in_thread(approver, call, question)
                if synchronous
                else approver(call, question)
            )
            if inspect.isawaitable(answer):
                answer = await answer
    except PermissionDeniedError as exc:  # a refusal that says why
        return Answer(False, printable(exc))
    except asyncio.CancelledError:
        if task is None or task.cancelling() > cancelling:
            raise  # the caller's own cancellation
        return _failed(asyncio.CancelledError())
    except TimeoutError as exc:
        if not limit.expired():
            return _failed(exc)  # the approver's own TimeoutError
        return _unanswered(call, timeout_s, synchronous)
    except Exception as exc:
        return _failed(exc)
    if isinstance(answer, Approve):
        scope = "call" if answer.scope == "once" else answer.scope
        return Answer(True, scope=scope, rule=answer.rule)
    if answer in _SCOPES:
        return Answer(True, scope="call" if answer == "once" else str(answer))
    return Answer(answer is True)


# what an approver may answer instead of True, to approve a host for longer than the call
_SCOPES = frozenset({"call", "once", "session", "always"})


def _failed(exc: BaseException) -> Answer:
    return Answer(
        False,
        warning=f"the approver failed ({type(exc).__name__}: {printable(exc)}); treated as a "
        "refusal",
    )


def _unanswered(call: ToolCall, timeout_s: float | None, synchronous: bool) -> Answer:
    verdict = (
        f"the approver did not answer within {timeout_s:g}s, so the call is refused; answer "
        "sooner, or give the engine a longer approval_timeout"
    )
    log.warning("call %s (%s): %s", call.id, call.name, verdict)
    warning = (
        "the approver's thread was still running at the approval timeout; a thread cannot be "
        "stopped, so it runs until the approver returns, and its answer is ignored"
        if synchronous
        else None
    )
    return Answer(False, verdict, warning)


def _is_async(approver: Callable[..., Any]) -> bool:
    """Whether ``approver`` is a coroutine function (or an object whose ``__call__`` is)."""
    if inspect.iscoroutinefunction(approver):
        return True
    method = getattr(type(approver), "__call__", None)  # noqa: B004 - the method, not callability
    return inspect.iscoroutinefunction(method)


def _in_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
    """``fn(*args)`` in a daemon thread of its own, with the caller's context variables."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def work() -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = context.run(fn, *args)
        except StopIteration as exc:  # an asyncio future refuses to carry StopIteration
            error = RuntimeError(f"the approver raised StopIteration ({printable(exc)})")
        except BaseException as exc:
            error = exc
        # a loop closed while the approver thought refuses the answer: nobody waits for it
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, future, value, error)

    threading.Thread(target=work, name=f"stockade-approver:{args[0].id}", daemon=True).start()
    return future


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return  # the question timed out, or the call was cancelled, meanwhile
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
