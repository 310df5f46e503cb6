"""The compiled tool: `RegisteredTool`, the one shape the engine runs, and how a function or a
`ToolBase` becomes one.

A function decorated with `@tool` stays an ordinary function (callable directly, testable
directly); the decorator only attaches a `ToolSpec`. Registration in a `Toolkit` compiles a
function or a `ToolBase` into a `RegisteredTool`.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from stockade.engine.errors import ArgumentError, ToolDefinitionError
from stockade.engine.injection import ToolContext
from stockade.engine.messages import ToolResult
from stockade.engine.tools._arguments import JsonSchemaArgs, ModelSchema, plain
from stockade.engine.tools._docstrings import parse_docstring
from stockade.engine.tools._signature import (
    REQUIRED,
    ArgumentSchema,
    Injection,
    analyse_signature,
    format_validation_error,
)
from stockade.engine.tools.attributes import SPEC_ATTRIBUTE, ToolSpec
from stockade.engine.tools.base import ToolBase
from stockade.engine.tools.shape import (
    DEFAULT_SHAPE,
    SchemaShape,
    check_against_signature,
    given_schema,
)
from stockade.policies import Decision

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

Postprocess = Callable[[Any, ToolResult], "ToolResult | None"]


class Mode(StrEnum):
    """How the engine runs a tool's body."""

    ASYNC = "async"  # coroutine function: awaited on the event loop
    SYNC = "sync"  # plain function: run in a worker thread, off the loop
    ASYNC_GEN = "async_gen"  # async generator: streamed on the loop
    SYNC_GEN = "sync_gen"  # generator: streamed, each step in a worker thread
    EXTERNAL = "external"  # run elsewhere; the result is delivered to the call context


Schema = ArgumentSchema | ModelSchema | JsonSchemaArgs


@dataclass(frozen=True, slots=True, eq=False)
class RegisteredTool:
    """A tool compiled for the engine: name, schema, attributes, and how to run it."""

    name: str
    spec: ToolSpec
    schema: Schema
    mode: Mode
    invoke: Callable[[dict[str, Any], ToolContext | None], Any]
    presets: Mapping[str, Any]
    hidden: frozenset[str]
    injections: tuple[Injection, ...]
    permission_check: Callable[[dict[str, Any], ToolContext], Decision | None] | None
    postprocess: Postprocess | None
    source: object
    shape: SchemaShape = DEFAULT_SHAPE
    """How its schema was made (a given JSON Schema, the docstring's long description,
    ``*args``/``**kwargs``): kept so that a tool recompiled with new presets keeps it."""

    @property
    def description(self) -> str:
        """Description shown to the model."""
        return self.schema.description

    @property
    def parameters(self) -> dict[str, Any]:
        """JSON Schema of the model-visible arguments (presets and injected values left out)."""
        return self.schema.json_schema

    needs_context: bool = field(init=False)
    """Whether running this tool needs a `ToolContext` built for the call (read per call, so
    computed once)."""

    def __post_init__(self) -> None:
        needs = bool(self.injections) or isinstance(self.source, ToolBase)
        object.__setattr__(self, "needs_context", needs)

    def renamed(self, name: str) -> RegisteredTool:
        """The same tool under another name."""
        check_name(name)
        return replace(self, name=name, spec=replace(self.spec, name=name))

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validate model-given arguments and apply presets; raises ArgumentError naming every
        problem. Hidden names must already be stripped from ``arguments``."""
        try:
            if isinstance(self.schema, ArgumentSchema):
                values = self.schema.validate(arguments)
                if self.presets:
                    values.update(self.presets)
                return values
            return self.schema.validate(
                {**arguments, **self.presets} if self.presets else arguments
            )
        except ValidationError as exc:
            raise ArgumentError(
                f"invalid arguments for tool {self.name!r}: {format_validation_error(exc)}"
            ) from None
        except ArgumentError as exc:
            raise ArgumentError(f"invalid arguments for tool {self.name!r}: {exc}") from None


def check_name(name: str) -> str:
    """Tool names must be what every model API accepts: 1-64 of A-Z a-z 0-9 _ -."""
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise ToolDefinitionError(
            f"invalid tool name {name!r}: use 1 to 64 characters from A-Z, a-z, 0-9, '_' and '-'"
        )
    return name


def _function_mode(fn: Callable[..., Any]) -> Mode:
    probe: Any = fn
    if _is_callable_object(fn):
        probe = type(fn).__call__
    if inspect.isasyncgenfunction(probe):
        return Mode.ASYNC_GEN
    if inspect.iscoroutinefunction(probe):
        return Mode.ASYNC
    if inspect.isgeneratorfunction(probe):
        return Mode.SYNC_GEN
    return Mode.SYNC


def _is_callable_object(fn: object) -> bool:
    """An instance with ``__call__`` (not a function, method, partial or class)."""
    return not (inspect.isroutine(fn) or isinstance(fn, functools.partial | type)) and callable(fn)


def _unwrap_partial(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def _spec_of(fn: Callable[..., Any]) -> ToolSpec:
    spec = getattr(_unwrap_partial(fn), SPEC_ATTRIBUTE, None)
    return spec if isinstance(spec, ToolSpec) else ToolSpec()


def _default_name(fn: Callable[..., Any]) -> str:
    target = _unwrap_partial(fn)
    return getattr(target, "__name__", None) or type(target).__name__


def compile_function(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    presets: Mapping[str, Any] | None = None,
    postprocess: Postprocess | None = None,
    json_schema: Mapping[str, Any] | None = None,
    include_long_description: bool = True,
    include_var_positional: bool = False,
    include_var_keyword: bool = False,
) -> RegisteredTool:
    """Compile a plain function, bound method, functools.partial or callable object.

    ``json_schema`` (the parameters schema, or the OpenAI tool shape, whose name and description
    are then the tool's unless ``name`` or ``description`` say otherwise) replaces the schema
    read from the signature; the other three shape that one (see `SchemaShape`)."""
    if not callable(fn):
        # named by its type: the object itself may hold anything (os.environ holds secrets)
        raise ToolDefinitionError(
            f"cannot register an object of type {type(fn).__name__} as a tool: it is not "
            "callable; register a function or a ToolBase"
        )
    spec = _spec_of(fn)
    given = None
    if json_schema is not None:
        given = given_schema(json_schema, name or spec.name or _default_name(fn))
        description = description if description is not None else given.description
    shape = SchemaShape(
        None if json_schema is None else MappingProxyType(plain(json_schema)),
        include_long_description,
        include_var_positional,
        include_var_keyword,
    )
    tool_name = check_name(name or (given and given.name) or spec.name or _default_name(fn))
    presets = dict(presets or {})
    info = analyse_signature(
        fn,
        tool_name=tool_name,
        presets=presets,
        var_positional=include_var_positional and given is None,
        var_keyword=include_var_keyword and given is None,
    )
    names = {p.name for p in info.visible} | info.hidden
    doc_source = _unwrap_partial(fn)
    if _is_callable_object(doc_source):
        doc_source = type(doc_source).__call__
    doc = inspect.getdoc(doc_source)
    text = description if description is not None else spec.description
    schema: Schema
    if given is None:
        schema = ArgumentSchema(
            tool_name=tool_name,
            info=info,
            doc=doc,
            description=text,
            long_description=include_long_description,
        )
    else:
        check_against_signature(tool_name, given.parameters, info)
        text = text if text is not None else parse_docstring(doc, long=include_long_description)[0]
        schema = JsonSchemaArgs(
            given.parameters, text, tool_name, info.hidden, label="json_schema", check_hidden=False
        )
        names |= set(given.parameters.get("properties") or ())
    _check_paths(tool_name, spec, names)
    mode = Mode.EXTERNAL if spec.external else _function_mode(fn)
    return RegisteredTool(
        name=tool_name,
        spec=replace(spec, name=tool_name),
        schema=schema,
        mode=mode,
        invoke=_caller(fn, info.var_positional),
        presets=MappingProxyType(presets),
        hidden=info.hidden,
        injections=info.injections,
        permission_check=None,
        postprocess=postprocess,
        source=fn,
        shape=shape,
    )


def _caller(
    fn: Callable[..., Any], var_positional: str | None
) -> Callable[[dict[str, Any], ToolContext | None], Any]:
    """How the engine calls ``fn`` with validated arguments: by keyword; and when its ``*args``
    is shown (as the list ``var_positional``), that list positionally, after the parameters
    before it, which must then be passed positionally too."""
    if var_positional is None:

        def invoke(kwargs: dict[str, Any], ctx: ToolContext | None) -> Any:
            return fn(**kwargs)

        return invoke
    leading: list[tuple[str, Any]] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            break
        leading.append((param.name, param.default))

    def invoke_with_args(kwargs: dict[str, Any], ctx: ToolContext | None) -> Any:
        rest = dict(kwargs)
        extra = rest.pop(var_positional, None)
        if not extra:
            return fn(**rest)
        head = [rest.pop(n) if n in rest else default for n, default in leading]
        return fn(*head, *extra, **rest)

    return invoke_with_args


def compile_tool_base(
    obj: ToolBase,
    *,
    name: str | None = None,
    description: str | None = None,
    presets: Mapping[str, Any] | None = None,
    postprocess: Postprocess | None = None,
    include_long_description: bool = True,
) -> RegisteredTool:
    """Compile a `ToolBase` instance (without ``include_long_description``, a description
    taken from its docstring is the docstring's first paragraph)."""
    spec = obj.spec()
    tool_name = check_name(name or spec.name or type(obj).__name__)
    text = description if description is not None else spec.description
    if text is None:
        doc = inspect.getdoc(obj) or ""
        text = doc if include_long_description else parse_docstring(doc, long=False)[0]
    presets = dict(presets or {})
    hidden = frozenset(presets)
    schema: Schema
    if obj.args_model is not None:
        if not (isinstance(obj.args_model, type) and issubclass(obj.args_model, BaseModel)):
            raise ToolDefinitionError(
                f"tool {tool_name!r}: args_model must be a pydantic model class"
            )
        schema = ModelSchema(obj.args_model, text, hidden)
        names = {f.alias or n for n, f in obj.args_model.model_fields.items()}
    elif obj.input_schema is not None:
        schema = JsonSchemaArgs(obj.input_schema, text, tool_name, hidden)
        names = set(obj.input_schema.get("properties", {}))
    else:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: a ToolBase needs args_model (a pydantic model) or input_schema "
            "(a JSON Schema dict) to describe its arguments"
        )
    unknown = [k for k in presets if k not in names]
    if unknown:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: preset(s) {', '.join(map(repr, unknown))} name no argument; "
            f"its arguments are {', '.join(sorted(names)) or '(none)'}"
        )
    _check_paths(tool_name, spec, names)
    overrides_run = type(obj).run is not ToolBase.run
    if not spec.external and not overrides_run:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: {type(obj).__name__} must implement run(), or set external = True"
        )
    mode = Mode.EXTERNAL if spec.external else _function_mode(obj.run)
    overrides_check = type(obj).check_permissions is not ToolBase.check_permissions
    return RegisteredTool(
        name=tool_name,
        spec=replace(spec, name=tool_name),
        schema=schema,
        mode=mode,
        invoke=cast(Callable[[dict[str, Any], ToolContext | None], Any], obj.run),
        presets=MappingProxyType(presets),
        hidden=hidden,
        injections=(),
        permission_check=obj.check_permissions if overrides_check else None,
        postprocess=postprocess,
        source=obj,
        shape=SchemaShape(include_long_description=include_long_description),
    )


def compile_any(
    item: Callable[..., Any] | ToolBase | RegisteredTool,
    *,
    name: str | None = None,
    description: str | None = None,
    presets: Mapping[str, Any] | None = None,
    postprocess: Postprocess | None = None,
    json_schema: Mapping[str, Any] | None = None,
    include_long_description: bool | None = None,
    include_var_positional: bool | None = None,
    include_var_keyword: bool | None = None,
) -> RegisteredTool:
    """Compile whatever `Toolkit.add` accepts. An already compiled tool is reused as it is
    (renamed if asked), or recompiled from its source when presets, hooks or its schema's shape
    change (what is not given, None, stays as it was: True, False, False when new)."""
    shape = item.shape if isinstance(item, RegisteredTool) else DEFAULT_SHAPE
    wanted = shape.but(
        json_schema=json_schema,
        include_long_description=include_long_description,
        include_var_positional=include_var_positional,
        include_var_keyword=include_var_keyword,
    )
    if isinstance(item, RegisteredTool):
        unchanged = wanted is shape and description is None and postprocess is None
        if presets is None and unchanged:
            return item.renamed(name) if name and name != item.name else item
        source: Any = item.source
        return compile_any(
            source,
            name=name or item.name,
            description=description,
            presets=presets if presets is not None else item.presets,
            postprocess=postprocess or item.postprocess,
            json_schema=wanted.json_schema,
            include_long_description=wanted.include_long_description,
            include_var_positional=wanted.include_var_positional,
            include_var_keyword=wanted.include_var_keyword,
        )
    if isinstance(item, ToolBase):
        label = name or item.spec().name or type(item).__name__
        if wanted.json_schema is not None:
            raise ToolDefinitionError(
                f"tool {label!r}: a ToolBase declares its arguments itself (args_model or "
                "input_schema); json_schema is for functions"
            )
        if wanted.include_var_positional or wanted.include_var_keyword:
            raise ToolDefinitionError(
                f"tool {label!r}: include_var_positional and include_var_keyword are for "
                "functions with *args or **kwargs; a ToolBase declares its arguments itself"
            )
        return compile_tool_base(
            item,
            name=name,
            description=description,
            presets=presets,
            postprocess=postprocess,
            include_long_description=wanted.include_long_description,
        )
    if isinstance(item, type) and issubclass(item, ToolBase):
        raise ToolDefinitionError(
            f"pass an instance of {item.__name__}, not the class: toolkit.add({item.__name__}())"
        )
    return compile_function(
        item,
        name=name,
        description=description,
        presets=presets,
        postprocess=postprocess,
        json_schema=wanted.json_schema,
        include_long_description=wanted.include_long_description,
        include_var_positional=wanted.include_var_positional,
        include_var_keyword=wanted.include_var_keyword,
    )


def _check_paths(tool_name: str, spec: ToolSpec, names: set[str]) -> None:
    if spec.command is not None and spec.command not in names:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: command names {spec.command!r}, which is not a parameter "
            "of the tool"
        )
    missing = [p for p in spec.paths if p not in names]
    if missing:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: paths names {', '.join(map(repr, missing))}, which "
            f"{'is not a parameter' if len(missing) == 1 else 'are not parameters'} of the tool"
        )


__all__ = [
    "REQUIRED",
    "Mode",
    "Postprocess",
    "RegisteredTool",
    "check_name",
    "compile_any",
    "compile_function",
    "compile_tool_base",
]
