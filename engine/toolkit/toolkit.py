"""The toolkit: which tools exist, which groups are active, and what the model is shown.

A `Toolkit` holds compiled tools, each in one group. The ``basic`` group is always active; other
groups are switched on and off by the program or, through the ``reset_tools`` meta tool, by the
agent itself. Only tools of active groups are callable and appear in `schemas`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from stockade.engine.builtin.finish import FinishTool
from stockade.engine.builtin.reset_tools import ResetTools
from stockade.engine.builtin.skills import Skill, SkillViewer, load_skills, skills_prompt
from stockade.engine.errors import (
    DuplicateToolError,
    GroupError,
    ToolDefinitionError,
    UnknownToolError,
)
from stockade.engine.formats import schemas as schema_formats
from stockade.engine.injection import ContextLevel, ContextLike
from stockade.engine.toolkit._state import parse_state
from stockade.engine.tools import (
    Postprocess,
    RegisteredTool,
    ToolBase,
    check_name,
    compile_any,
    compile_function,
    compile_tool_base,
)
from stockade.engine.tools.attributes import SPEC_ATTRIBUTE, marked_methods
from stockade.engine.tools.catalog import BASIC, ToolGroup
from stockade.errors import ConfigurationError

if TYPE_CHECKING:
    from stockade.engine.mcp.client import McpServer

META_TOOL = "reset_tools"
Conflict = Literal["raise", "override", "rename", "skip"]
SchemaFormat = Literal["openai", "anthropic", "mcp"]
_CONFLICTS = ("raise", "override", "rename", "skip")


class Toolkit:
    """Registered tools, their groups, and the schemas an agent is shown.

    ``context`` objects are injected by type into tools that ask for them (the lowest level of
    the context chain: call > engine > toolkit). With ``meta_tool=True`` the ``reset_tools``
    tool is offered whenever there is a group besides ``basic``.
    """

    def __init__(
        self,
        *,
        context: ContextLike = None,
        meta_tool: bool = False,
        on_conflict: Conflict = "raise",
    ) -> None:
        if on_conflict not in _CONFLICTS:
            raise ConfigurationError(
                f"on_conflict must be one of {_CONFLICTS}, got {on_conflict!r}"
            )
        self.context = ContextLevel(context)
        self.on_conflict: Conflict = on_conflict
        self._meta_tool = meta_tool
        self._tools: dict[str, RegisteredTool] = {}
        self._group_of: dict[str, str] = {}
        self._groups: dict[str, ToolGroup] = {
            BASIC: ToolGroup(BASIC, "Tools that are always available.", True, "")
        }
        self._active: dict[str, RegisteredTool] = {}
        self._reserved: dict[str, str] = {}  # toolkit-made tool names -> what made them
        if meta_tool:
            # reserved from the start, so creating the first group can never collide
            self._reserved[META_TOOL] = "meta tool"
        self._revision = 0
        self._schema_cache: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self._skills: dict[str, Skill] = {}
        self._finish_name: str | None = None

    # -- registering -------------------------------------------------------------------------

    def add(
        self,
        fn_or_tool: Callable[..., Any] | ToolBase | RegisteredTool,
        *,
        group: str = BASIC,
        presets: Mapping[str, Any] | None = None,
        name: str | None = None,
        description: str | None = None,
        on_conflict: Conflict | None = None,
        postprocess: Postprocess | None = None,
        json_schema: Mapping[str, Any] | None = None,
        include_long_description: bool | None = None,
        include_var_positional: bool | None = None,
        include_var_keyword: bool | None = None,
    ) -> RegisteredTool:
        """Register a function, method, partial, callable object or `ToolBase` instance.

        ``presets`` are hidden arguments: left out of the schema, always passed to the tool, and
        a model's value for them is ignored (the result says so). ``postprocess(call, result)``
        may return a replacement result. ``json_schema`` (the parameters schema, or the OpenAI
        tool shape, which also names and describes the tool) is what the model sees and calls
        are validated against, in place of the function's signature. A description from the
        docstring has its long part unless ``include_long_description=False``; ``*args`` and
        ``**kwargs`` are shown (and passed on) only with ``include_var_positional`` and
        ``include_var_keyword``. Returns the registered tool, whose ``name`` is final (it
        differs from the requested one only under ``on_conflict="rename"``).
        """
        compiled = compile_any(
            fn_or_tool,
            name=name,
            description=description,
            presets=presets,
            postprocess=postprocess,
            json_schema=json_schema,
            include_long_description=include_long_description,
            include_var_positional=include_var_positional,
            include_var_keyword=include_var_keyword,
        )
        return self._insert([compiled], group, on_conflict)[0]

    def add_object(
        self,
        obj: object,
        *,
        group: str = BASIC,
        presets: Mapping[str, Mapping[str, Any]] | None = None,
        on_conflict: Conflict | None = None,
    ) -> list[RegisteredTool]:
        """Register every method of ``obj`` marked with `@tool`; ``presets`` maps tool names to
        their presets. All or nothing: on any error no tool is added."""
        presets = dict(presets or {})
        compiled: list[RegisteredTool] = []
        for attr in marked_methods(type(obj)):
            method = getattr(obj, attr)
            spec = getattr(method, SPEC_ATTRIBUTE)
            tool_name = spec.name or attr
            compiled.append(compile_function(method, presets=presets.pop(tool_name, None)))
        if not compiled:
            raise ToolDefinitionError(
                f"{type(obj).__name__} has no methods marked with @tool; decorate the methods "
                "to expose, or register functions with Toolkit.add"
            )
        if presets:
            raise ToolDefinitionError(
                f"presets given for {', '.join(map(repr, presets))}, which "
                f"{type(obj).__name__} has no tool for; its tools are "
                f"{', '.join(t.name for t in compiled)}"
            )
        return self._insert(compiled, group, on_conflict)

    def remove(self, name: str) -> RegisteredTool:
        """Unregister a tool and return it."""
        if name in self._reserved:
            raise ToolDefinitionError(
                f"{name!r} is managed by the toolkit ({self._reserved[name]}) and cannot be removed"
            )
        tool = self._tools.pop(name, None)
        if tool is None:
            raise UnknownToolError(self._unknown_message(name))
        self._group_of.pop(name)
        self._active.pop(name, None)
        self._changed()
        return tool

    def _insert(
        self, tools: list[RegisteredTool], group: str, on_conflict: Conflict | None
    ) -> list[RegisteredTool]:
        if group not in self._groups:
            raise GroupError(
                f"no tool group named {group!r}; create it first with "
                f"toolkit.create_group({group!r}, description=...) "
                f"(groups: {', '.join(self._groups)})"
            )
        strategy = on_conflict or self.on_conflict
        if strategy not in _CONFLICTS:
            raise ConfigurationError(f"on_conflict must be one of {_CONFLICTS}, got {strategy!r}")
        planned: dict[str, RegisteredTool] = {}
        outcome: list[RegisteredTool] = []
        for tool in tools:
            if tool.name in self._reserved:
                raise DuplicateToolError(
                    f"tool name {tool.name!r} is used by the toolkit "
                    f"({self._reserved[tool.name]}); register your tool under another name"
                )
            taken = tool.name in self._tools or tool.name in planned
            if taken and strategy == "raise":
                raise DuplicateToolError(
                    f"a tool named {tool.name!r} is already registered; pass "
                    "on_conflict='override' to replace it, 'rename' to add this one under a new "
                    "name, or 'skip' to keep the existing one"
                )
            if taken and strategy == "skip":
                outcome.append(planned.get(tool.name) or self._tools[tool.name])
                continue
            if taken and strategy == "rename":
                tool = tool.renamed(self._free_name(tool.name, planned))
            planned[tool.name] = tool
            outcome.append(tool)
        for tool in planned.values():
            self._place(tool, group)
        self._changed()
        return outcome

    def _place(self, tool: RegisteredTool, group: str) -> None:
        old_group = self._group_of.get(tool.name)
        if old_group is not None and old_group != group:
            self._active.pop(tool.name, None)
        self._tools[tool.name] = tool
        self._group_of[tool.name] = group
        if self._groups[group].active:
            self._active[tool.name] = tool

    def _free_name(self, name: str, planned: Mapping[str, RegisteredTool]) -> str:
        for n in range(2, 10_000):
            suffix = f"_{n}"
            candidate = name[: 64 - len(suffix)] + suffix
            if candidate not in self._tools and candidate not in planned:
                return candidate
        raise DuplicateToolError(f"no free name left for {name!r}")

    def _add_internal(self, tool: ToolBase, purpose: str) -> RegisteredTool:
        """Register (or replace) a toolkit-made tool: meta tool, skill viewer, finish function."""
        compiled = compile_tool_base(tool)
        if compiled.name in self._tools and self._reserved.get(compiled.name) != purpose:
            raise DuplicateToolError(
                f"cannot add the {purpose} {compiled.name!r}: a tool of that name is registered"
            )
        self._reserved[compiled.name] = purpose
        self._place(compiled, BASIC)
        self._changed()
        return compiled

    def _drop_internal(self, name: str) -> None:
        if name in self._reserved:
            if name != META_TOOL:
                del self._reserved[name]
            self._tools.pop(name, None)
            self._group_of.pop(name, None)
            self._active.pop(name, None)
            self._changed()

    # -- looking up --------------------------------------------------------------------------

    def resolve(self, name: str) -> RegisteredTool | None:
        """The active tool called ``name``, or None. The engine's lookup; O(1)."""
        return self._active.get(name)

    def get(self, name: str) -> RegisteredTool:
        """A registered tool, active or not; raises UnknownToolError naming the choices."""
        tool = self._tools.get(name)
        if tool is None:
            raise UnknownToolError(self._unknown_message(name))
        return tool

    def group_of(self, name: str) -> str:
        """The group a registered tool belongs to."""
        self.get(name)
        return self._group_of[name]

    def unavailable_reason(self, name: str) -> str:
        """Why ``name`` cannot be called now: unknown, or in an inactive group."""
        if name in self._tools:
            group = self._group_of[name]
            return (
                f"tool {name!r} is in the inactive group {group!r}; activate the group "
                f"(reset_tools, or toolkit.activate({group!r})) before calling it"
            )
        return self._unknown_message(name)

    def _unknown_message(self, name: str) -> str:
        active = sorted(self._active)
        shown = ", ".join(active[:20]) + (" ..." if len(active) > 20 else "")
        return f"no tool named {name!r}; available tools: {shown or '(none)'}"

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def tools(self, *, active_only: bool = True) -> list[RegisteredTool]:
        """Registered tools in registration order (only callable ones unless told otherwise)."""
        if active_only:
            return list(self._active.values())
        return list(self._tools.values())

    @property
    def revision(self) -> int:
        """Increases whenever tools or groups change; lets callers cache derived data."""
        return self._revision

    # -- groups ------------------------------------------------------------------------------

    def create_group(
        self, name: str, description: str = "", active: bool = False, notes: str = ""
    ) -> ToolGroup:
        """Create a tool group (inactive unless ``active``)."""
        check_name(name)
        if name in self._groups:
            raise GroupError(f"a tool group named {name!r} already exists")
        self._groups[name] = ToolGroup(name, description, active, notes)
        self._groups_changed(defined=True)
        return self._groups[name]

    def remove_group(self, name: str) -> list[RegisteredTool]:
        """Remove a group and every tool in it; returns the removed tools."""
        if name == BASIC:
            raise GroupError("the 'basic' group cannot be removed")
        self._group(name)
        removed = [t for n, t in self._tools.items() if self._group_of[n] == name]
        for tool in removed:
            del self._tools[tool.name]
            del self._group_of[tool.name]
        del self._groups[name]
        self._groups_changed(defined=True)
        return removed

    def set_active(self, states: Mapping[str, bool], *, reset: bool = False) -> list[str]:
        """Switch groups on or off; returns the groups that became active.

        With ``reset=True`` the mapping is the final state: every group not set to true is
        deactivated (the meta tool's semantics). All or nothing: an unknown group or an attempt to
        deactivate ``basic`` changes nothing.
        """
        for name, value in states.items():
            self._group(name)
            if name == BASIC and not value:
                raise GroupError("the 'basic' group is always active and cannot be deactivated")
        wanted = {
            n: (bool(states.get(n, False)) if reset else bool(states.get(n, g.active)))
            for n, g in self._groups.items()
            if n != BASIC
        }
        newly = [n for n, on in wanted.items() if on and not self._groups[n].active]
        for n, on in wanted.items():
            if self._groups[n].active != on:
                self._groups[n] = replace(self._groups[n], active=on)
        self._groups_changed()
        return newly

    def activate(self, *names: str) -> list[str]:
        """Activate groups; returns those that were not already active."""
        return self.set_active(dict.fromkeys(names, True))

    def deactivate(self, *names: str) -> None:
        """Deactivate groups."""
        self.set_active(dict.fromkeys(names, False))

    @property
    def groups(self) -> list[ToolGroup]:
        """All groups, ``basic`` first."""
        return list(self._groups.values())

    def group(self, name: str) -> ToolGroup:
        """One group by name."""
        return self._group(name)

    def notes(self) -> str:
        """The notes of every active group, for the agent's prompt."""
        parts = [f"## {g.name}\n{g.notes}" for g in self._groups.values() if g.active and g.notes]
        return "\n\n".join(parts)

    def _group(self, name: str) -> ToolGroup:
        group = self._groups.get(name)
        if group is None:
            raise GroupError(f"no tool group named {name!r}; groups: {', '.join(self._groups)}")
        return group

    def _groups_changed(self, *, defined: bool = False) -> None:
        """Recompute the callable tools; ``defined`` when groups were created or removed, which
        changes the meta tool's schema (one boolean per group)."""
        self._active = {
            n: t for n, t in self._tools.items() if self._groups[self._group_of[n]].active
        }
        if self._meta_tool and defined:
            if len(self._groups) > 1:
                self._add_internal(ResetTools(self), "meta tool")
            else:
                self._drop_internal(META_TOOL)
        self._changed()

    def _changed(self) -> None:
        self._revision += 1

    # -- what the model sees -----------------------------------------------------------------

    def schemas(self, format: SchemaFormat = "openai") -> list[dict[str, Any]]:
        """Tool definitions of the active tools, in the given API's shape."""
        cached = self._schema_cache.get(format)
        if cached is not None and cached[0] == self._revision:
            return cached[1]
        render = schema_formats.RENDERERS.get(format)
        if render is None:
            raise ConfigurationError(
                f"unknown schema format {format!r}; "
                f"use one of {', '.join(schema_formats.RENDERERS)}"
            )
        rendered = [render(t) for t in self._active.values()]
        self._schema_cache[format] = (self._revision, rendered)
        return rendered

    # -- MCP servers -------------------------------------------------------------------------

    async def add_mcp_server(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        url: str | None = None,
        **options: Any,
    ) -> McpServer:
        """Start an MCP server (``command=[...]``, over stdio) or connect to one (``url=``, over
        streamable HTTP, or ``transport="sse"``) and register its tools as
        ``mcp__{name}__{tool}``. Options: ``env``, ``cwd``, ``headers`` (for a url),
        ``enable``/``disable`` (tool names), ``presets`` (per tool), ``group``, ``postprocess``
        (every tool's hook), ``raw_results``, ``timeout_s``, ``max_restarts``; see
        `stockade.engine.mcp.client`. Returns the `McpServer`, whose ``close`` stops it and
        removes its tools."""
        from stockade.engine.mcp.client import add_mcp_server  # the MCP SDK loads only when used

        return await add_mcp_server(self, name, command=command, url=url, **options)

    # -- finish function and skills ----------------------------------------------------------

    def set_finish(
        self,
        model: type[BaseModel],
        *,
        name: str = "generate_response",
        description: str | None = None,
    ) -> RegisteredTool:
        """Register the structured finish function: its arguments are ``model``'s fields; a call
        validates against the model and puts the value in ``result.metadata["response"]``."""

        check_name(name)
        if name in self._tools and self._reserved.get(name) != "finish function":
            raise DuplicateToolError(
                f"cannot add the finish function {name!r}: a tool of that name is registered"
            )
        if self._finish_name is not None:
            self._drop_internal(self._finish_name)
        self._finish_name = name
        return self._add_internal(
            FinishTool(model, name=name, description=description), "finish function"
        )

    def add_skills(self, root: str | Path) -> list[Skill]:
        """Load every skill under ``root`` (folders holding a ``SKILL.md``) and offer the skill
        viewer tool. A skill with the name of an earlier one replaces it."""

        found = load_skills(Path(root))
        for skill in found:
            self._skills[skill.name] = skill
        if SkillViewer.name not in self._reserved:
            self._add_internal(SkillViewer(self._skills), "skill viewer")
        self._changed()
        return found

    @property
    def skills(self) -> list[Skill]:
        """The loaded skills."""
        return list(self._skills.values())

    def skills_prompt(self) -> str:
        """A prompt fragment listing the skills and how to read them; empty without skills."""

        return skills_prompt(self.skills)

    # -- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Group definitions and activation, and which group each tool is in (JSON-ready)."""
        return {
            "version": 1,
            "groups": {
                g.name: {"description": g.description, "active": g.active, "notes": g.notes}
                for g in self._groups.values()
            },
            "tools": {n: self._group_of[n] for n in self._tools if n not in self._reserved},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore groups and activation saved by `state_dict`. The tools themselves are code:
        register them first; every tool the state names must be registered. All or nothing."""
        parsed = parse_state(state, set(self._tools), set(self._groups), set(self._reserved))
        for name, g in parsed.groups.items():
            if name != BASIC:
                self._groups[name] = ToolGroup(name, g.description, g.active, g.notes)
        self._group_of.update({n: g for n, g in parsed.tools.items() if n not in self._reserved})
        self._groups_changed(defined=True)
