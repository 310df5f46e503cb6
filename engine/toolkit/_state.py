"""A toolkit's saved state: which groups exist, which are active, and which group each tool is
in; the boundary model `Toolkit.state_dict` writes and `Toolkit.load_state_dict` checks."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from stockade.engine.errors import GroupError, ToolDefinitionError
from stockade.engine.tools import check_name
from stockade.engine.tools.catalog import BASIC


class _GroupState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = ""
    active: bool = False
    notes: str = ""


class ToolkitState(BaseModel):
    """The boundary model of `Toolkit.state_dict` output."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1] = 1
    groups: dict[str, _GroupState]
    tools: dict[str, str]


def parse_state(
    state: Mapping[str, Any], tools: Set[str], groups: Set[str], reserved: Set[str]
) -> ToolkitState:
    """``state`` checked against a toolkit holding ``tools``, ``groups`` and the ``reserved``
    tools it manages itself; raises `GroupError` naming the first thing that cannot be
    restored (so loading is all or nothing)."""
    try:
        parsed = ToolkitState.model_validate(state)
    except ValidationError as exc:
        raise GroupError(f"not a toolkit state: {exc}") from None
    missing = [n for n in parsed.tools if n not in tools]
    if missing:
        raise GroupError(
            f"the state names tools that are not registered: {', '.join(missing)}; register "
            "them before loading the state"
        )
    if BASIC in parsed.groups and not parsed.groups[BASIC].active:
        raise GroupError("the state deactivates the 'basic' group, which is always active")
    for name in parsed.groups:
        try:
            check_name(name)
        except ToolDefinitionError as exc:
            raise GroupError(f"the state holds an invalid group name: {exc}") from None
    moved = [n for n, g in parsed.tools.items() if n in reserved and g != BASIC]
    if moved:
        raise GroupError(
            f"the state moves {', '.join(moved)} out of 'basic'; tools the toolkit manages "
            "always stay there"
        )
    known = set(groups) | set(parsed.groups)
    for tool_name, group in parsed.tools.items():
        if group not in known:
            raise GroupError(f"the state puts {tool_name!r} in unknown group {group!r}")
    return parsed
