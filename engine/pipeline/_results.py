"""Step 7, result: the `ToolResult` for each way a call can end, built in one place.

The engine decides *which* outcome a call has; this module turns it into a result: success
(content from the return value, capped, post-processed), a failure before or during the run, a
timeout, a cancellation, and the engine's own bug. Every result carries the decision, the
attempts, the duration and the engine's notes; what the tool said of itself stays in its own
metadata.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from time import perf_counter
from typing import Any

from stockade.engine.content import Block, TextBlock, ToolOutput, to_content
from stockade.engine.errors import OutputError, ToolTimeoutError
from stockade.engine.messages import (
    ErrorInfo,
    ToolCall,
    ToolResult,
    escaped,
    merged_metadata,
    printable,
)
from stockade.engine.pipeline import _metadata
from stockade.engine.pipeline._faults import fault_info
from stockade.engine.pipeline._state import Admitted, RunFailed
from stockade.engine.tools import RegisteredTool

log = logging.getLogger("stockade.engine")


def success(
    admitted: Admitted, started: float, value: Any, attempts: int, max_chars: int
) -> ToolResult:
    """Content from the return value, the size cap, then the postprocess hook."""
    tool_metadata: dict[str, Any] | None = None
    try:
        if isinstance(value, ToolOutput):
            _metadata.checked(value)
            tool_metadata = value.metadata
            if value.file is not None:
                admitted.note().file = value.file
            if value.process is not None:
                admitted.note().process = value.process
            value = value.content
        content = to_content(value)
    except OutputError as exc:
        return run_failure(admitted, started, RunFailed(exc, attempts, "error"))
    except BaseException as exc:  # the tool's value itself failed (a hostile __iter__, say)
        failed = OutputError(
            f"the tool's return value could not be read as content: "
            f"{type(exc).__name__}: {printable(exc)}"
        )
        return run_failure(admitted, started, RunFailed(failed, attempts, "error"))
    if max_chars and (len(content) != 1 or len(getattr(content[0], "text", "")) > max_chars):
        content = capped(content, max_chars, admitted)
    notes = admitted.notes
    result = ToolResult(
        call_id=admitted.call.id,
        tool=admitted.tool.name,
        status="ok",
        content=content,
        decision=admitted.decision,
        attempts=attempts,
        duration_s=perf_counter() - started,
        metadata=_metadata.shown(merged_metadata(tool_metadata or {}, notes))
        if tool_metadata or notes
        else {},
        notes=notes,
        tool_metadata={} if tool_metadata is None else tool_metadata,
    )
    if admitted.tool.postprocess is None:
        return result
    return postprocessed(admitted, result)


def produced(
    admitted: Admitted, started: float, producer: asyncio.Task[tuple[Any, int]], max_chars: int
) -> ToolResult:
    """The result of a streamed call, from the task that ran its attempts."""
    error = producer.exception()
    if isinstance(error, RunFailed):
        return run_failure(admitted, started, error)
    if error is not None:
        return run_failure(admitted, started, RunFailed(error, 1, "error"))
    value, attempts = producer.result()
    return success(admitted, started, value, attempts, max_chars)


def capped(content: list[Block], limit: int, admitted: Admitted) -> list[Block]:
    """At most ``limit`` characters of text, with a note saying what was cut."""
    total = 0
    for index, block in enumerate(content):
        if isinstance(block, TextBlock):
            total += len(block.text)
            if total > limit:
                keep = len(block.text) - (total - limit)
                full = sum(len(b.text) for b in content if isinstance(b, TextBlock))
                admitted.note().truncated = (full, limit)
                note = f"\n[output truncated: {full} characters, the first {limit} shown]"
                return [*content[:index], TextBlock(block.text[:keep] + note)]
    return content


def postprocessed(admitted: Admitted, result: ToolResult) -> ToolResult:
    """The tool's postprocess hook applied to a copy of ``result``; a hook that fails turns the
    result into an error. The hook may change what the caller reads (the content, and metadata
    of the tool's own); the status, the error and every fact of the engine's (the call, the
    decision, the attempts, the notes) stay the run's, so the audit log and the trace record
    what happened rather than what a hook says."""
    tool = admitted.tool
    hook = tool.postprocess
    if hook is None:
        return result
    shown = replace(
        result,
        content=list(result.content),
        metadata=dict(result.metadata),
        notes=result.notes.copy() if result.notes is not None else None,
        tool_metadata=dict(result.tool_metadata),
    )
    try:
        replaced = hook(admitted.call, shown)
    except BaseException as exc:  # the tool's own code: any fault of it is the call's error
        result.status = "error"
        result.error = ErrorInfo(
            escaped(type(exc).__name__),
            f"the postprocess hook of {tool.name!r} failed: {printable(exc)}",
        )
        return result
    if replaced is None:
        replaced = shown
    if not isinstance(replaced, ToolResult):
        result.status = "error"
        result.error = ErrorInfo(
            OutputError.__name__,
            f"the postprocess hook of {tool.name!r} returned {type(replaced).__name__}, "
            "not a ToolResult or None",
        )
        return result
    if (replaced.status, replaced.error) != (result.status, result.error):
        admitted.warn(
            f"the postprocess hook of {tool.name!r} gave the status {replaced.status!r}; the "
            f"run's, {result.status!r}, stands"
        )
    result.content = replaced.content
    result.metadata = _metadata.shown(merged_metadata(replaced.metadata, admitted.notes))
    result.notes = admitted.notes
    return result


def failure(
    call: ToolCall, tool: RegisteredTool | None, error: BaseException, started: float
) -> ToolResult:
    """A call stopped before it was admitted (unknown tool, bad arguments)."""
    return ToolResult(
        call_id=call.id,
        tool=tool.name if tool else call.name,
        status="error",
        error=ErrorInfo.of(error),
        duration_s=perf_counter() - started,
    )


def _ended(admitted: Admitted, started: float, **fields: Any) -> ToolResult:
    """A result of an admitted call that did not succeed, with the engine's notes."""
    notes = admitted.notes
    return ToolResult(
        call_id=admitted.call.id,
        tool=admitted.tool.name,
        decision=admitted.decision,
        duration_s=perf_counter() - started,
        metadata=notes.as_metadata() if notes is not None else {},
        notes=notes,
        **fields,
    )


def denied(admitted: Admitted, started: float, error: ErrorInfo) -> ToolResult:
    """The decision was deny: nothing ran."""
    return _ended(admitted, started, status="denied", error=error)


def run_failure(admitted: Admitted, started: float, failed: RunFailed) -> ToolResult:
    """A run that raised, or timed out, on its last attempt."""
    result = _ended(
        admitted,
        started,
        status=failed.status,
        error=fault_info(failed.error),
        attempts=failed.attempts,
    )
    if admitted.tool.postprocess is None:
        return result
    return postprocessed(admitted, result)


def timed_out(
    admitted: Admitted,
    started: float,
    attempts: int,
    limit_s: float,
    *,
    waited: str | None = None,
) -> ToolResult:
    """The timeout ran out: while the tool ran, or before it could start (``waited`` says
    what it waited for)."""
    message = (
        f"waited {limit_s:g}s for a free slot ({waited}) and gave up; the tool did not run"
        if waited
        else f"tool {admitted.tool.name!r} did not finish within {limit_s:g}s"
    )
    return _ended(
        admitted,
        started,
        status="timeout",
        error=ErrorInfo(ToolTimeoutError.__name__, message),
        attempts=attempts,
    )


def pending(admitted: Admitted, started: float) -> ToolResult:
    """An external tool's call, admitted and handed to whoever runs it outside the engine."""
    admitted.note().external = True
    return _ended(
        admitted,
        started,
        status="pending",
        content=[
            TextBlock(
                f"{admitted.tool.name} is carried out outside the engine; its result will follow "
                f"(call {admitted.call.id})"
            )
        ],
    )


def cancelled(call: ToolCall, admitted: Admitted | None, started: float) -> ToolResult:
    """The caller cancelled the call (or closed its stream) before it finished."""
    error = ErrorInfo("CancelledError", "the call was cancelled before it finished")
    if admitted is not None:
        return _ended(admitted, started, status="cancelled", error=error)
    return ToolResult(
        call_id=call.id,
        tool=call.name,
        status="cancelled",
        error=error,
        duration_s=perf_counter() - started,
    )


def internal_error(
    call: ToolCall, admitted: Admitted | None, exc: Exception, started: float
) -> ToolResult:
    """A bug in Stockade itself: the caller still gets a result, and the log the traceback."""
    log.exception("internal error while running call %s (%s)", call.id, call.name)
    result = failure(call, admitted.tool if admitted else None, exc, started)
    result.error = ErrorInfo(
        type(exc).__name__, f"internal error in Stockade ({printable(exc)}); please report it"
    )
    return result
