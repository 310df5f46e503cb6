"""One library of tools, many agents: per-agent toolkits drawn from a shared registry.

Tools are compiled once, when they enter the library; each agent's `Toolkit` holds the same
compiled tools, so a hundred agents cost one schema build per tool, and an agent can only ever
call what its toolkit was given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from stockade.engine.errors import DuplicateToolError, UnknownToolError
from stockade.engine.injection import ContextLike
from stockade.engine.toolkit.toolkit import Toolkit
from stockade.engine.tools import RegisteredTool, ToolBase, compile_any


class ToolRegistry:
    """The library of every tool, and the toolkit of each agent."""

    def __init__(self) -> None:
        self._library: dict[str, RegisteredTool] = {}
        self._toolkits: dict[str, Toolkit] = {}

    def register(
        self,
        fn_or_tool: Callable[..., Any] | ToolBase,
        *,
        name: str | None = None,
        description: str | None = None,
        presets: Mapping[str, Any] | None = None,
    ) -> RegisteredTool:
        """Add a tool to the library (compiled now, shared by every toolkit that takes it)."""
        compiled = compile_any(fn_or_tool, name=name, description=description, presets=presets)
        if compiled.name in self._library:
            raise DuplicateToolError(f"the registry already holds a tool named {compiled.name!r}")
        self._library[compiled.name] = compiled
        return compiled

    @property
    def library(self) -> list[RegisteredTool]:
        """Every tool in the library."""
        return list(self._library.values())

    def create_toolkit(
        self, agent: str, tools: Iterable[str] | None = None, *, context: ContextLike = None
    ) -> Toolkit:
        """A new toolkit for ``agent`` holding the named tools (all of them if ``tools`` is
        None). Unknown names are an error naming them, not a silently smaller toolkit."""
        if agent in self._toolkits:
            raise DuplicateToolError(f"agent {agent!r} already has a toolkit; use toolkit_for()")
        names = list(self._library) if tools is None else list(tools)
        missing = [n for n in names if n not in self._library]
        if missing:
            raise UnknownToolError(
                f"the registry has no tool named {', '.join(map(repr, missing))}; it holds "
                f"{', '.join(self._library) or '(none)'}"
            )
        toolkit = Toolkit(context=context)
        for tool_name in names:
            toolkit.add(self._library[tool_name])
        self._toolkits[agent] = toolkit
        return toolkit

    def toolkit_for(self, agent: str) -> Toolkit | None:
        """The toolkit made for ``agent``, if any."""
        return self._toolkits.get(agent)

    @property
    def agents(self) -> list[str]:
        """Agents that have a toolkit."""
        return list(self._toolkits)
