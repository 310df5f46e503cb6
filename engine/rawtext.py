"""The raw text tools of AgentScope (seed 001): host files by host path, outside the sandbox.

``view_text_file``, ``write_text_file`` and ``insert_text_file`` call ``open()`` on host paths.
They exist for the rare program that must reach a file outside every mount; they are not
registered by default, and the environment variable ``STOCKADE_DANGEROUS_TEXT_IO`` governs
them at every call:

* ``deny``  — refused, with a result that says so and how to allow it;
* ``warn``  — the default: logged as a WARNING, and run;
* ``allow`` — run.

Any other value refuses (a misspelt switch must not open the door). Every result is marked
``metadata["dangerous_io"] = True``, and the paths still go to the policy (as host paths), so
the default preset refuses them unless a policy allows them. Prefer the file tools.
"""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from stockade.engine.content import ToolOutput
from stockade.engine.context import ToolContext
from stockade.engine.tool import RegisteredTool, ToolBase
from stockade.engine.toolkit import BASIC, Toolkit
from stockade.policies import Decision, Effect

ENV = "STOCKADE_DANGEROUS_TEXT_IO"
MODES = ("deny", "warn", "allow")


class _HostFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file_path: str = Field(description="Absolute host path of the file.")

    @field_validator("file_path")
    @classmethod
    def _absolute(cls, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"{path!r} is not absolute; raw text tools take absolute host paths")
        return path


class _ViewArgs(_HostFileArgs):
    start_line: int | None = Field(default=None, ge=1, description="First line (1-based).")
    end_line: int | None = Field(default=None, ge=1, description="Last line (inclusive).")


class _WriteArgs(_HostFileArgs):
    content: str = Field(description="The complete new content.")


class _InsertArgs(_HostFileArgs):
    content: str = Field(description="Text to insert.")
    line_number: int = Field(ge=1, description="Insert before this line (1-based).")


class _RawTextTool(ToolBase):
    """Shared gate: the environment switch decides, at every call."""

    path_space = "host"

    def check_permissions(self, args: dict[str, Any], ctx: ToolContext) -> Decision:
        mode = os.environ.get(ENV, "warn").strip().lower()
        rule = f"{ENV}={mode or '(empty)'}"
        if mode == "allow":
            return Decision(Effect.ALLOW, rule, "raw host file access is allowed")
        if mode == "warn":  # the engine logs every warned call as a WARNING when it runs
            return Decision(
                Effect.WARN, rule, f"{self.name} reaches host files outside the sandbox"
            )
        if mode == "deny":
            reason = f"raw host file access is off; set {ENV}=warn or allow to permit it"
        else:
            reason = f"{ENV} is {mode!r}, not one of {', '.join(MODES)}; refused to be safe"
        return Decision(Effect.DENY, rule, reason)


class ViewTextFile(_RawTextTool):
    """Read a host text file by absolute path (outside the sandbox)."""

    name = "view_text_file"
    args_model = _ViewArgs
    read_only = True
    paths = MappingProxyType({"file_path": "read"})

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        with open(args["file_path"], encoding="utf-8") as handle:
            lines = handle.readlines()
        first = (args["start_line"] or 1) - 1
        last = args["end_line"] or len(lines)
        if args["end_line"] is not None and last < first + 1:
            raise ValueError(f"end_line {last} is before start_line {first + 1}")
        return ToolOutput("".join(lines[first:last]), {"dangerous_io": True, "lines": len(lines)})


class WriteTextFile(_RawTextTool):
    """Write a host text file by absolute path (outside the sandbox)."""

    name = "write_text_file"
    args_model = _WriteArgs
    paths = MappingProxyType({"file_path": "write"})

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        with open(args["file_path"], "w", encoding="utf-8") as handle:
            handle.write(args["content"])
        size = len(args["content"].encode("utf-8"))
        return ToolOutput(
            f"wrote {size} bytes to {args['file_path']}", {"dangerous_io": True, "bytes": size}
        )


class InsertTextFile(_RawTextTool):
    """Insert text into a host text file by absolute path (outside the sandbox)."""

    name = "insert_text_file"
    args_model = _InsertArgs
    paths = MappingProxyType({"file_path": "write"})

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        with open(args["file_path"], encoding="utf-8") as handle:
            lines = handle.readlines()
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        position = args["line_number"] - 1
        if position > len(lines):
            raise ValueError(
                f"line {args['line_number']} is past the end: the file has {len(lines)} lines, "
                f"so use 1 to {len(lines) + 1}"
            )
        content = args["content"]
        lines.insert(position, content if content.endswith("\n") else content + "\n")
        with open(args["file_path"], "w", encoding="utf-8") as handle:
            handle.writelines(lines)
        return ToolOutput(
            f"inserted at line {position + 1} of {args['file_path']}", {"dangerous_io": True}
        )


def add_raw_text_tools(toolkit: Toolkit, *, group: str = BASIC) -> list[RegisteredTool]:
    """Register the three raw text tools (deliberately not done by default)."""
    return [toolkit.add(t(), group=group) for t in (ViewTextFile, WriteTextFile, InsertTextFile)]
