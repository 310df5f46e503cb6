"""`ToolBase`: a tool written as a class, for an explicit schema, a permission hook, or work
carried out outside the engine."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from pydantic import BaseModel

from stockade.engine.injection import ToolContext
from stockade.engine.tools.attributes import ToolSpec
from stockade.policies import Decision


class ToolBase:
    """Base class for tools with an explicit schema, a permission hook, or external execution.

    Declare either ``args_model`` (a pydantic model; preferred) or ``input_schema`` (a JSON Schema
    dict, validated with jsonschema). Set any `ToolSpec` attribute as a class (or instance)
    attribute: ``name = "grep"``, ``read_only = True``, ``paths = {"path": "read"}`` ...
    Override `run` (sync, async, or a generator of either kind) unless ``external`` is set, and
    optionally `check_permissions`.
    """

    args_model: type[BaseModel] | None = None
    input_schema: Mapping[str, Any] | None = None

    def check_permissions(self, args: dict[str, Any], ctx: ToolContext) -> Decision | None:
        """Judge this call before it runs. Return None for no opinion, or a Decision; the engine
        combines it with the policy's and the stricter one wins."""
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        """Do the work. ``args`` are the validated arguments (presets applied)."""
        raise NotImplementedError(f"{type(self).__name__} must implement run()")

    def spec(self) -> ToolSpec:
        """The `ToolSpec` attributes set on this tool (or its class), the rest defaulted."""
        declared = {
            f.name: getattr(self, f.name) for f in fields(ToolSpec) if hasattr(self, f.name)
        }
        if not declared.get("name"):
            declared.pop("name", None)  # an empty name means the class's name
        if not declared.get("description"):
            declared.pop("description", None)
        return ToolSpec.of(declared, label=declared.get("name") or type(self).__name__)


__all__ = ["ToolBase"]
