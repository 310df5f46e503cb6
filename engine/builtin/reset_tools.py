"""The ``reset_tools`` meta tool: the agent chooses which tool groups are active.

Its input is the *final* state of every non-basic group, not a change: a group not set to true
is switched off whatever it was before. The answer carries the description and notes of each
group that just became active, so the agent learns how to use what it switched on.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from stockade.engine.injection import ToolContext
from stockade.engine.tools import ToolBase
from stockade.engine.tools.catalog import BASIC, ToolCatalog


class ResetTools(ToolBase):
    """Choose which tool groups are active."""

    name = "reset_tools"  # engine.toolkit.META_TOOL
    description = (
        "Choose which tool groups are active. Set a group to true to use its tools; every group "
        "not set to true is switched off (this is the final state, not a change). Tools outside "
        "groups are always available."
    )

    def __init__(self, toolkit: ToolCatalog) -> None:
        self._toolkit = toolkit
        groups = [g for g in toolkit.groups if g.name != BASIC]
        # Group names are arbitrary ("_drafts", "model_config", "json"); pydantic reserves some
        # of those, so fields get neutral names and the group name is the alias the model sees.
        self._group_of = {f"group_{i}": g.name for i, g in enumerate(groups)}
        fields: dict[str, Any] = {
            f"group_{i}": (
                bool,
                Field(False, alias=g.name, description=g.description or f"the {g.name} tools"),
            )
            for i, g in enumerate(groups)
        }
        self.args_model: type[BaseModel] = create_model(
            "reset_tools_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        states = {self._group_of[field]: value for field, value in args.items()}
        newly = self._toolkit.set_active(states, reset=True)
        active = [g for g in self._toolkit.groups if g.active and g.name != BASIC]
        lines = ["Active tool groups: " + (", ".join(g.name for g in active) or "none") + "."]
        for name in newly:
            group = self._toolkit.group(name)
            lines.append(f"\n## {group.name}\n{group.description}".rstrip())
            if group.notes:
                lines.append(group.notes)
        return "\n".join(lines)
