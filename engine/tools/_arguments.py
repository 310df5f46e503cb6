"""Arguments described by the tool author rather than by a signature: a pydantic model
(`ModelSchema`) or a hand-written JSON Schema (`JsonSchemaArgs`), as `ToolBase` declares them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from stockade.engine.errors import ArgumentError, ToolDefinitionError
from stockade.engine.tools._signature import strip_titles


class ModelSchema:
    """Arguments described by a pydantic model the tool author wrote.

    Presets are arguments of the model like any other: they are merged in before validation and
    left out of the schema the model sees.
    """

    __slots__ = ("_hidden", "_json_schema", "description", "model")

    def __init__(self, model: type[BaseModel], description: str, hidden: frozenset[str]) -> None:
        self.model = model
        self.description = description
        self._hidden = hidden
        self._json_schema: dict[str, Any] | None = None

    @property
    def json_schema(self) -> dict[str, Any]:
        if self._json_schema is None:
            schema = self.model.model_json_schema(by_alias=True)
            schema.pop("description", None)  # the class docstring belongs to the tool, not here
            self._json_schema = _drop_properties(strip_titles(schema), self._hidden)
        return self._json_schema

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self.model.model_validate(arguments).__dict__)


class JsonSchemaArgs:
    """Arguments described by a hand-written JSON Schema, validated with jsonschema."""

    __slots__ = ("_unchecked", "_validator", "description", "json_schema")

    def __init__(
        self,
        schema: Mapping[str, Any],
        description: str,
        tool_name: str,
        hidden: frozenset[str],
        *,
        label: str = "input_schema",
        check_hidden: bool = True,
    ) -> None:
        """``hidden`` names (presets) are left out of the schema the model sees; with
        ``check_hidden`` their values are validated against the full schema too (a `ToolBase`'s
        presets are its own arguments), else only what the model gave is (a function
        registered with a schema takes presets the schema may not describe)."""
        import jsonschema  # 50 ms to import; only tools with hand-written schemas need it

        # any Mapping is accepted (a MappingProxyType class attribute, say); jsonschema checks
        # for dicts, so the schema is copied into plain ones first
        schema = plain(schema)
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: {label} is not a valid JSON Schema: {exc.message}"
            ) from None
        if schema.get("type", "object") != "object":
            raise ToolDefinitionError(
                f"tool {tool_name!r}: {label} must describe an object (type 'object'), "
                f"not {schema.get('type')!r}"
            )
        full = strip_titles({"type": "object", "properties": {}, **schema})
        self.json_schema = _drop_properties(full, hidden)
        checked = full if check_hidden else self.json_schema
        self._validator = jsonschema.Draft202012Validator(checked)
        self._unchecked = frozenset() if check_hidden else hidden
        self.description = description

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        shown = arguments
        if self._unchecked:
            shown = {k: v for k, v in arguments.items() if k not in self._unchecked}
        problems = sorted(self._validator.iter_errors(shown), key=lambda e: list(e.path))
        if problems:
            raise ArgumentError(
                "; ".join(
                    f"{'.'.join(map(str, e.path)) or '(arguments)'}: {e.message}" for e in problems
                )
            )
        return dict(arguments)


def plain(value: Any) -> Any:
    """``value`` with every mapping a dict and every list a list, copied."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _drop_properties(schema: dict[str, Any], hidden: frozenset[str]) -> dict[str, Any]:
    if not hidden:
        return schema
    schema = dict(schema)
    schema["properties"] = {
        k: v for k, v in schema.get("properties", {}).items() if k not in hidden
    }
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r not in hidden]
    return schema


__all__ = ["JsonSchemaArgs", "ModelSchema", "plain"]
