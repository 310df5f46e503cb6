"""How a function's schema is made when registering it: `SchemaShape` (a given JSON Schema, the
docstring's long description, ``*args`` and ``**kwargs``), and `given_schema`, which reads a
JSON Schema handed in at registration.

A function whose signature says nothing of its arguments (a ``**kwargs`` wrapper around a
sub-agent, say) is registered with the schema it is given: either the bare parameters schema
or the OpenAI tool shape, whose name and description then name and describe the tool::

    toolkit.add(ask_researcher, json_schema={
        "type": "function",
        "function": {"name": "researcher", "description": "Ask the researcher.",
                     "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                                    "required": ["query"]}},
    })
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stockade.engine.errors import ToolDefinitionError
from stockade.engine.tools._arguments import plain
from stockade.engine.tools._signature import REQUIRED, SignatureInfo, format_validation_error


@dataclass(frozen=True, slots=True, eq=False)
class SchemaShape:
    """How the schema of a function tool is made.

    ``json_schema``: the schema to show and validate against instead of one read from the
    signature. ``include_long_description``: the docstring's long description goes into the
    tool's description (else only its first paragraph). ``include_var_positional`` and
    ``include_var_keyword``: ``*args`` (an array) and ``**kwargs`` (any further property) appear
    in the schema and reach the function; otherwise they are left out.
    """

    json_schema: Mapping[str, Any] | None = None
    include_long_description: bool = True
    include_var_positional: bool = False
    include_var_keyword: bool = False

    def but(
        self,
        *,
        json_schema: Mapping[str, Any] | None = None,
        include_long_description: bool | None = None,
        include_var_positional: bool | None = None,
        include_var_keyword: bool | None = None,
    ) -> SchemaShape:
        """This shape with what is given (not None) changed."""
        given = {
            "json_schema": json_schema,
            "include_long_description": include_long_description,
            "include_var_positional": include_var_positional,
            "include_var_keyword": include_var_keyword,
        }
        changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        return replace(self, **changes) if changes else self

    @property
    def is_default(self) -> bool:
        """Whether this is the shape a tool has when nothing was asked."""
        return self.json_schema is None and (
            self.include_long_description,
            self.include_var_positional,
            self.include_var_keyword,
        ) == (True, False, False)


DEFAULT_SHAPE = SchemaShape()


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")  # OpenAI's "strict", and whatever comes next

    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class _OpenAITool(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: _Function


@dataclass(frozen=True, slots=True)
class GivenSchema:
    """A schema handed in at registration: the parameters, and the name and description the
    OpenAI shape carries (None when it carries none, or for a bare parameters schema)."""

    parameters: dict[str, Any]
    name: str | None
    description: str | None


def given_schema(given: object, label: str) -> GivenSchema:
    """Read ``given``: the OpenAI tool shape (``{"type": "function", "function": {...}}``), its
    function object alone (``{"name", "description", "parameters"}``), or a bare parameters
    schema (``{"type": "object", "properties": ...}``). Raises `ToolDefinitionError` naming the
    tool (``label``) and what is wrong; whether the parameters are a valid JSON Schema is
    checked where they are compiled."""
    if not isinstance(given, Mapping):
        raise ToolDefinitionError(
            f"tool {label!r}: json_schema must be a dict (the parameters schema, or the OpenAI "
            f'shape {{"type": "function", "function": {{...}}}}), not {type(given).__name__}'
        )
    data = plain(given)
    try:
        if data.get("type") == "function" or "function" in data:
            function = _OpenAITool.model_validate(data).function
        elif "parameters" in data and "properties" not in data:
            function = _Function.model_validate(data)
        else:
            return GivenSchema(data, None, None)
    except ValidationError as exc:
        raise ToolDefinitionError(
            f"tool {label!r}: json_schema is not an OpenAI tool definition "
            f'({{"type": "function", "function": {{"name", "description", "parameters"}}}}): '
            f"{format_validation_error(exc)}"
        ) from None
    return GivenSchema(function.parameters, function.name, function.description)


def check_against_signature(label: str, parameters: Mapping[str, Any], info: SignatureInfo) -> None:
    """Raise `ToolDefinitionError` where a given schema and the function cannot meet: a property
    the function cannot take, a property naming a value injected from the context, or a
    parameter the function needs that the schema never asks the model for."""
    properties = set(parameters.get("properties") or ())
    injected = sorted(properties & {i.name for i in info.injections})
    if injected:
        raise ToolDefinitionError(
            f"tool {label!r}: json_schema has the propert{'ies' if len(injected) > 1 else 'y'} "
            f"{', '.join(map(repr, injected))}, which the function takes from the context; "
            "remove it from the schema"
        )
    named = {p.name for p in info.visible} | info.hidden
    if not info.accepts_any_keyword:
        unknown = sorted(properties - named)
        if unknown:
            raise ToolDefinitionError(
                f"tool {label!r}: json_schema has the propert"
                f"{'ies' if len(unknown) > 1 else 'y'} {', '.join(map(repr, unknown))}, which "
                f"the function does not take (its parameters: "
                f"{', '.join(sorted(named)) or '(none)'}); add **kwargs or remove them"
            )
    needed = [p.name for p in info.visible if p.default is REQUIRED and p.name not in properties]
    if needed:
        raise ToolDefinitionError(
            f"tool {label!r}: the function needs {', '.join(map(repr, needed))}, which json_schema "
            "does not describe; add the propert"
            f"{'ies' if len(needed) > 1 else 'y'} to the schema, give a default, or a preset"
        )


__all__ = [
    "DEFAULT_SHAPE",
    "GivenSchema",
    "SchemaShape",
    "check_against_signature",
    "given_schema",
]
