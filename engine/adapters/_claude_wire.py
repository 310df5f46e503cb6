"""The JSON Claude Code writes on a PreToolUse hook's stdin, and the reply it reads from stdout:
pydantic models, so that input of the wrong shape is refused naming its field.

    hook = parse_hook_input(b'{"hook_event_name": "PreToolUse", ...}')   # FormatError if not
    shape = SHAPES[hook.tool_name].model_validate(hook.tool_input)        # CommandInput ...

The tool inputs list only the fields Stockade judges (a path, a command, a URL); the others
(``content``, ``old_string``, ``description`` ...) are kept and never judged.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from stockade.engine.errors import FormatError

# -- what Claude Code sends --------------------------------------------------------------------


class HookInput(BaseModel):
    """The JSON object Claude Code writes on a PreToolUse hook's stdin. Fields Claude Code
    adds in later versions are kept and not judged."""

    model_config = ConfigDict(extra="allow", frozen=True)

    hook_event_name: str
    tool_name: str = Field(min_length=1)
    tool_input: dict[str, Any]
    cwd: str
    session_id: str | None = None
    transcript_path: str | None = None
    tool_use_id: str | None = None
    permission_mode: str | None = None

    @field_validator("hook_event_name")
    @classmethod
    def _pre_tool_use(cls, value: str) -> str:
        if value != "PreToolUse":
            raise ValueError(
                f"this hook decides PreToolUse events, not {value!r}: register "
                "`stockade hook claude-code` under PreToolUse in .claude/settings.json"
            )
        return value

    @field_validator("cwd")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\x00" in value:
            raise ValueError(f"must be an absolute path, got {value[:200]!r}")
        return value


class ToolInput(BaseModel):
    """A tool's ``tool_input``: the fields judged; the others are kept, never judged."""

    model_config = ConfigDict(extra="allow")


def _path_field(value: str | None) -> str | None:
    if value is not None and (not value or "\x00" in value):
        raise ValueError("must be a non-empty path without NUL bytes")
    return value


class CommandInput(ToolInput):
    """``Bash``."""

    command: str = Field(min_length=1)


class FileInput(ToolInput):
    """``Read``, ``Write``, ``Edit``, ``MultiEdit``."""

    file_path: str
    _check = field_validator("file_path")(_path_field)


class NotebookInput(ToolInput):
    """``NotebookRead``, ``NotebookEdit``."""

    notebook_path: str
    _check = field_validator("notebook_path")(_path_field)


class FolderInput(ToolInput):
    """``LS``, and ``Grep`` and ``Glob`` (``path`` left out: the cwd)."""

    path: str | None = None
    _check = field_validator("path")(_path_field)


class GlobInput(FolderInput):
    """``Glob``."""

    pattern: str = Field(min_length=1)


class GrepInput(FolderInput):
    """``Grep``: ``glob`` chooses the files searched (and may reach hidden ones)."""

    glob: str | None = None


class FetchInput(ToolInput):
    """``WebFetch``."""

    url: str = Field(min_length=1)


def parse_hook_input(data: str | bytes) -> HookInput:
    """Claude Code's hook input; raises FormatError saying what is wrong (the field, for a
    JSON object of the wrong shape)."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, deep nesting
        raise FormatError(
            f"the hook input is not JSON ({str(exc)[:200]}); Claude Code writes one JSON object "
            "on the hook's stdin"
        ) from None
    if not isinstance(value, dict):
        raise FormatError(f"the hook input is a JSON {type(value).__name__}, not an object")
    try:
        return HookInput.model_validate(value)
    except ValidationError as exc:
        raise FormatError(f"the hook input's {field_errors(exc)}") from None


def field_errors(exc: ValidationError, under: str = "") -> str:
    problems = []
    for error in exc.errors()[:5]:
        where = ".".join(str(part) for part in (*([under] if under else []), *error["loc"]))
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{where or 'object'}: {message}")
    return "; ".join(problems)


# -- what Claude Code reads back ---------------------------------------------------------------


class PreToolUseDecision(BaseModel):
    """``hookSpecificOutput`` of a PreToolUse hook's reply."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    hook_event_name: Literal["PreToolUse"] = Field("PreToolUse", alias="hookEventName")
    permission_decision: Literal["allow", "deny", "ask"] = Field(alias="permissionDecision")
    permission_decision_reason: str = Field(alias="permissionDecisionReason")


class HookOutput(BaseModel):
    """The JSON object a PreToolUse hook prints on stdout (exit code 0)."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    hook_specific_output: PreToolUseDecision = Field(alias="hookSpecificOutput")


SHAPES: dict[str, type[ToolInput]] = {
    "Bash": CommandInput,
    "Read": FileInput,
    "Write": FileInput,
    "Edit": FileInput,
    "MultiEdit": FileInput,
    "NotebookRead": NotebookInput,
    "NotebookEdit": NotebookInput,
    "Glob": GlobInput,
    "Grep": GrepInput,
    "LS": FolderInput,
    "WebFetch": FetchInput,
}


__all__ = [
    "SHAPES",
    "CommandInput",
    "FetchInput",
    "FileInput",
    "FolderInput",
    "GlobInput",
    "GrepInput",
    "HookInput",
    "HookOutput",
    "NotebookInput",
    "PreToolUseDecision",
    "ToolInput",
    "field_errors",
    "parse_hook_input",
]
