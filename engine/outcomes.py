"""How a call ends: the `ToolResult` for each outcome, built in one place.

The engine decides *which* outcome a call has; this module turns it into a result: success
(content from the return value, capped, post-processed), a failure before or during the run, a
timeout, a cancellation, and the engine's own bug. Every result carries the decision, the
attempts, the duration and the metadata gathered along the way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from stockade.engine.calls import ErrorInfo, Status, ToolCall, ToolResult
from stockade.engine.content import Block, TextBlock, ToolOutput, to_content
from stockade.engine.context import ToolContext
from stockade.engine.errors import OutputError, ToolTimeoutError
from stockade.engine.tool import RegisteredTool
from stockade.policies import Decision, Request

log = logging.getLogger("stockade.engine")


@dataclass(slots=True)
class Admitted:
    """A call that passed resolve, validate, classify and decide, and what was learned."""

    call: ToolCall
    tool: RegisteredTool
    kwargs: dict[str, Any]
    ctx: ToolContext | None
    decision: Decision
    request: Request
    metadata: dict[str, Any]


class RunFailed(Exception):
    """A run that ended in failure after ``attempts`` attempts."""

    def __init__(self, error: BaseException, attempts: int, status: Status) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts
        self.status = status


def success(
    admitted: Admitted, started: float, value: Any, attempts: int, max_chars: int
) -> ToolResult:
    """Step 7: content from the return value, the size cap, then the postprocess hook."""
    metadata = admitted.metadata
    try:
        if isinstance(value, ToolOutput):
            metadata.update(value.metadata)
            value = value.content
        content = to_content(value)
    except OutputError as exc:
        return run_failure(admitted, started, RunFailed(exc, attempts, "error"))
    if max_chars and (len(content) != 1 or len(getattr(content[0], "text", "")) > max_chars):
        content = capped(content, max_chars, metadata)
    result = ToolResult(
        call_id=admitted.call.id,
        tool=admitted.tool.name,
        status="ok",
        content=content,
        decision=admitted.decision,
        attempts=attempts,
        duration_s=perf_counter() - started,
        metadata=metadata,
    )
    if admitted.tool.postprocess is None:
        return result
    return postprocessed(admitted.call, admitted.tool, result)


def capped(content: list[Block], limit: int, metadata: dict[str, Any]) -> list[Block]:
    """At most ``limit`` characters of text, with a note saying what was cut."""
    total = 0
    for index, block in enumerate(content):
        if isinstance(block, TextBlock):
            total += len(block.text)
            if total > limit:
                keep = len(block.text) - (total - limit)
                full = sum(len(b.text) for b in content if isinstance(b, TextBlock))
                metadata["truncated"] = {"chars": full, "kept": limit}
                note = f"\n[output truncated: {full} characters, the first {limit} shown]"
                return [*content[:index], TextBlock(block.text[:keep] + note)]
    return content


def postprocessed(call: ToolCall, tool: RegisteredTool, result: ToolResult) -> ToolResult:
    """The tool's postprocess hook applied; a hook that fails turns the result into an error."""
    hook = tool.postprocess
    if hook is None:
        return result
    try:
        replaced = hook(call, result)
    except Exception as exc:
        result.status = "error"
        result.error = ErrorInfo(
            type(exc).__name__, f"the postprocess hook of {tool.name!r} failed: {exc}"
        )
        return result
    if replaced is None:
        return result
    if not isinstance(replaced, ToolResult):
        result.status = "error"
        result.error = ErrorInfo(
            OutputError.__name__,
            f"the postprocess hook of {tool.name!r} returned {type(replaced).__name__}, "
            "not a ToolResult or None",
        )
        return result
    return replaced


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


def run_failure(admitted: Admitted, started: float, failed: RunFailed) -> ToolResult:
    """A run that raised, or timed out, on its last attempt."""
    result = ToolResult(
        call_id=admitted.call.id,
        tool=admitted.tool.name,
        status=failed.status,
        error=ErrorInfo.of(failed.error),
        decision=admitted.decision,
        attempts=failed.attempts,
        duration_s=perf_counter() - started,
        metadata=admitted.metadata,
    )
    if admitted.tool.postprocess is None:
        return result
    return postprocessed(admitted.call, admitted.tool, result)


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
    return ToolResult(
        call_id=admitted.call.id,
        tool=admitted.tool.name,
        status="timeout",
        error=ErrorInfo(ToolTimeoutError.__name__, message),
        decision=admitted.decision,
        attempts=attempts,
        duration_s=perf_counter() - started,
        metadata=admitted.metadata,
    )


def pending(admitted: Admitted, started: float) -> ToolResult:
    """An external tool's call, admitted and handed to whoever runs it outside the engine."""
    return ToolResult(
        call_id=admitted.call.id,
        tool=admitted.tool.name,
        status="pending",
        content=[
            TextBlock(
                f"{admitted.tool.name} is carried out outside the engine; its result will follow "
                f"(call {admitted.call.id})"
            )
        ],
        decision=admitted.decision,
        duration_s=perf_counter() - started,
        metadata={**admitted.metadata, "external": True},
    )


def cancelled(call: ToolCall, admitted: Admitted | None, started: float) -> ToolResult:
    """The caller cancelled the call (or closed its stream) before it finished."""
    return ToolResult(
        call_id=call.id,
        tool=admitted.tool.name if admitted else call.name,
        status="cancelled",
        error=ErrorInfo("CancelledError", "the call was cancelled before it finished"),
        decision=admitted.decision if admitted else None,
        duration_s=perf_counter() - started,
        metadata=admitted.metadata if admitted else {},
    )


def internal_error(
    call: ToolCall, admitted: Admitted | None, exc: Exception, started: float
) -> ToolResult:
    """A bug in Stockade itself: the caller still gets a result, and the log the traceback."""
    log.exception("internal error while running call %s (%s)", call.id, call.name)
    result = failure(call, admitted.tool if admitted else None, exc, started)
    result.error = ErrorInfo(
        type(exc).__name__, f"internal error in Stockade ({exc}); please report it"
    )
    return result
