"""The toolkit as the rooms below it see it: `ToolCatalog`, what the shipped tools, the MCP
client and the formats ask of a toolkit, and `ToolGroup`, what its groups are.

They need a toolkit (to register into, to switch groups, to look tools up), and the toolkit
needs them (it offers the meta tool, the finish function, skills and MCP servers). So they
depend on this protocol, which `stockade.engine.toolkit.Toolkit` satisfies (mypy checks each
use), and never on the toolkit itself: the imports run one way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from stockade.engine.tools.compiled import RegisteredTool

BASIC = "basic"
"""The group that is always active; tools registered without a group go there."""


@dataclass(frozen=True, slots=True)
class ToolGroup:
    """A named bundle of tools switched on and off together."""

    name: str
    description: str = ""
    active: bool = False
    notes: str = ""


class ToolCatalog(Protocol):
    """What code below the toolkit may ask of one (see `Toolkit` for each method)."""

    def add(
        self,
        fn_or_tool: Any,
        *,
        group: str = BASIC,
        presets: Mapping[str, Any] | None = None,
    ) -> RegisteredTool: ...

    def remove(self, name: str) -> RegisteredTool: ...

    def __contains__(self, name: object) -> bool: ...

    def resolve(self, name: str) -> RegisteredTool | None: ...

    def tools(self, *, active_only: bool = True) -> list[RegisteredTool]: ...

    @property
    def groups(self) -> list[ToolGroup]: ...

    def group(self, name: str) -> ToolGroup: ...

    def set_active(self, states: Mapping[str, bool], *, reset: bool = False) -> list[str]: ...

    def notes(self) -> str: ...

    def skills_prompt(self) -> str: ...


__all__ = ["BASIC", "ToolCatalog", "ToolGroup"]
