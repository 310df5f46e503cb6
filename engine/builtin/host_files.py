"""The raw text tools: host files by host path, outside the sandbox.

``view_text_file``, ``write_text_file`` and ``insert_text_file`` call ``open()`` on host paths.
They exist for the rare program that must reach a file outside every mount; they are not
registered by default. The policy governs them like every tool, and has a table for them: its
``[host_files] mode`` (``deny``, ``warn`` — the default — or ``allow``) applies to every call
of a tool on host paths, on top of the rules, which still judge the paths (as host paths: the
default preset refuses them unless a policy allows them). Every call is marked
``dangerous_io``, however it ends: its result (``result.metadata["dangerous_io"]``, and
``result.notes.dangerous_io``) and its audit records (intent and outcome), the refused ones too
(denied by a rule or by the ``[host_files]`` mode, refused by an approver, or stopped at its
arguments), so a search for the marker finds every attempt at host files. Prefer the file tools.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from stockade.engine.content import ToolOutput
from stockade.engine.injection import ToolContext
from stockade.engine.tools import RegisteredTool, ToolBase
from stockade.engine.tools.catalog import BASIC, ToolCatalog


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
    """A tool on host paths: the policy's ``[host_files]`` table and rules judge its calls."""

    path_space = "host"


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
        return ToolOutput("".join(lines[first:last]), {"lines": len(lines)})


class WriteTextFile(_RawTextTool):
    """Write a host text file by absolute path (outside the sandbox)."""

    name = "write_text_file"
    args_model = _WriteArgs
    paths = MappingProxyType({"file_path": "write"})

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        with open(args["file_path"], "w", encoding="utf-8") as handle:
            handle.write(args["content"])
        size = len(args["content"].encode("utf-8"))
        return ToolOutput(f"wrote {size} bytes to {args['file_path']}", {"bytes": size})


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
        return ToolOutput(f"inserted at line {position + 1} of {args['file_path']}")


def add_raw_text_tools(toolkit: ToolCatalog, *, group: str = BASIC) -> list[RegisteredTool]:
    """Register the three raw text tools (deliberately not done by default)."""
    return [toolkit.add(t(), group=group) for t in (ViewTextFile, WriteTextFile, InsertTextFile)]
