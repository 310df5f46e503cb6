"""Exceptions Stockade raises, and the error kinds a `ToolResult` can carry.

Two audiences: programmers registering tools get exceptions at registration time
(`ToolDefinitionError`, `DuplicateToolError`, `GroupError`); agents calling tools never get an
exception, they get a `ToolResult` whose `error.type` is one of the call-time class names below
(or the name of whatever the tool itself raised).
"""

from __future__ import annotations

from stockade.errors import StockadeError

# -- registration-time: a programmer mistake, raised immediately -------------------------------


class ToolDefinitionError(StockadeError, TypeError):
    """A function or tool class cannot become a tool (bad type, unknown preset, ...)."""


class DuplicateToolError(StockadeError, ValueError):
    """A tool name is already registered and no conflict strategy says what to do."""


class GroupError(StockadeError, ValueError):
    """A tool-group operation is not possible (unknown group, removing ``basic``, ...)."""


class SkillError(StockadeError, ValueError):
    """A skill folder or its ``SKILL.md`` is missing or malformed."""


class FormatError(StockadeError, ValueError):
    """A model's tool-call message, a transcript or a result's JSON form cannot be understood in
    the given format."""


class ContextError(StockadeError, TypeError):
    """Context objects were given in a form the context chain cannot hold."""


class UnknownCallError(StockadeError, LookupError):
    """No call with the given id was received (or is pending) here."""


class EngineClosedError(StockadeError, RuntimeError):
    """The engine was closed; create a new one to run more calls."""


# -- call-time: reported inside a ToolResult, never raised out of the engine -------------------


class CallError(StockadeError):
    """Base of the errors the engine reports about a call (as opposed to errors a tool raised)."""


class UnknownToolError(CallError, LookupError):
    """The call names a tool that is not registered, or whose group is not active."""


class ArgumentError(CallError, ValueError):
    """The call's arguments are malformed, too large, or fail validation."""


class ContextMissingError(CallError, LookupError):
    """A tool needs a context object of some type and none was provided at any level."""


class ToolTimeoutError(CallError, TimeoutError):
    """The tool did not finish within its timeout."""


class OutputError(CallError, TypeError):
    """The tool returned something that cannot be turned into result content."""


class PermissionDeniedError(CallError, PermissionError):
    """A permission check or approval refused the call."""


class RetryableError(StockadeError):
    """Raise this from a tool to say the failure is transient and the call may safely be retried.

    Unlike other errors it is retried even for tools not marked idempotent or read-only,
    because the tool itself vouches that nothing happened that a retry could repeat.
    """
