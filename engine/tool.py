"""Defining tools: the `@tool` decorator, the `ToolBase` class, and the compiled `RegisteredTool`.

A function decorated with `@tool` stays an ordinary function (callable directly, testable
directly); the decorator only attaches a `ToolSpec`. Registration in a `Toolkit` compiles a
function or a `ToolBase` into a `RegisteredTool`: the one shape the engine runs.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast, overload

from pydantic import BaseModel, ValidationError

from stockade.engine.calls import ToolResult
from stockade.engine.context import ToolContext
from stockade.engine.errors import ArgumentError, ToolDefinitionError
from stockade.engine.retry import RetryPolicy, as_retry_policy
from stockade.engine.schema import (
    REQUIRED,
    ArgumentSchema,
    Injection,
    analyse_signature,
    format_validation_error,
    strip_titles,
)
from stockade.policies import Decision
from stockade.policies.request import ACCESSES, Access

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
SPEC_ATTRIBUTE = "__stockade_tool__"

F = TypeVar("F", bound=Callable[..., Any])
Postprocess = Callable[[Any, ToolResult], "ToolResult | None"]


class Mode(StrEnum):
    """How the engine runs a tool's body."""

    ASYNC = "async"  # coroutine function: awaited on the event loop
    SYNC = "sync"  # plain function: run in a worker thread, off the loop
    ASYNC_GEN = "async_gen"  # async generator: streamed on the loop
    SYNC_GEN = "sync_gen"  # generator: streamed, each step in a worker thread
    EXTERNAL = "external"  # run elsewhere; the result is delivered to the call context


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """The attributes a tool declares. Policies and the scheduler read them.

    ``concurrency_safe`` defaults to ``read_only``: a tool that changes nothing can share the
    engine with others. ``paths`` maps parameter names to the access the tool makes to the path
    given in that parameter, so the policy can judge the paths before the tool runs.
    ``command`` names the parameter holding a command line the tool executes: the policy then
    judges the call as ``execute`` of that command; ``command_prefix`` words are put before the
    parameter's text when it is not a command line itself (``run_python`` declares
    ``("python3", "-c")``, so its code is judged as ``python3 -c CODE``). ``path_space`` says
    whether the paths are logical (through the virtual filesystem; the default) or host paths
    (raw tools only). ``open_world`` says the tool reaches beyond the machine (the network, other
    people). ``origin`` names where a tool came from when it is not Python code of yours
    (``"mcp:files"``), and ``read_only_hint`` is that source's claim that it changes nothing:
    a claim, so the policy treats the tool as read-only only when it trusts the source.
    """

    name: str | None = None
    description: str | None = None
    read_only: bool = False
    concurrency_safe: bool | None = None
    destructive: bool = False
    idempotent: bool = False
    external: bool = False
    timeout: float | None = None
    retry: RetryPolicy | None = None
    paths: Mapping[str, Access] = field(default_factory=lambda: MappingProxyType({}))
    dangerous_paths: tuple[str, ...] = ()
    command: str | None = None
    command_prefix: tuple[str, ...] = ()
    path_space: Literal["logical", "host"] = "logical"
    open_world: bool = False
    origin: str | None = None
    read_only_hint: bool = False

    def __post_init__(self) -> None:
        if self.timeout is not None and (not math.isfinite(self.timeout) or self.timeout <= 0):
            raise ToolDefinitionError(
                f"timeout must be a positive number of seconds, got {self.timeout}"
            )
        bad = {k: v for k, v in self.paths.items() if v not in ACCESSES}
        if bad:
            raise ToolDefinitionError(
                f"paths must map parameter names to 'read', 'write' or 'delete'; got {bad}"
            )
        object.__setattr__(self, "paths", MappingProxyType(dict(self.paths)))

    @property
    def shares(self) -> bool:
        """Whether calls of this tool may run alongside other sharing calls."""
        return self.read_only if self.concurrency_safe is None else self.concurrency_safe


@overload
def tool(fn: F, /) -> F: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    concurrency_safe: bool | None = None,
    destructive: bool = False,
    idempotent: bool = False,
    external: bool = False,
    timeout: float | None = None,
    retry: RetryPolicy | int | bool | None = None,
    paths: Mapping[str, Access] | None = None,
    dangerous_paths: tuple[str, ...] = (),
    command: str | None = None,
    command_prefix: tuple[str, ...] = (),
    open_world: bool = False,
) -> Callable[[F], F]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    concurrency_safe: bool | None = None,
    destructive: bool = False,
    idempotent: bool = False,
    external: bool = False,
    timeout: float | None = None,
    retry: RetryPolicy | int | bool | None = None,
    paths: Mapping[str, Access] | None = None,
    dangerous_paths: tuple[str, ...] = (),
    command: str | None = None,
    command_prefix: tuple[str, ...] = (),
    open_world: bool = False,
) -> Any:
    """Mark a function (or method) as a tool. Usable bare (``@tool``) or with arguments.

    The function is returned unchanged apart from the attached spec, so it can still be called
    and tested directly. Its schema comes from the signature and docstring at registration.
    """

    def mark(func: F) -> F:
        target = func.__func__ if inspect.ismethod(func) else func
        label = name or getattr(target, "__name__", repr(target))
        try:
            spec = ToolSpec(
                name=name,
                description=description,
                read_only=read_only,
                concurrency_safe=concurrency_safe,
                destructive=destructive,
                idempotent=idempotent,
                external=external,
                timeout=timeout,
                retry=as_retry_policy(retry),
                paths=paths or {},
                dangerous_paths=tuple(dangerous_paths),
                command=command,
                command_prefix=tuple(command_prefix),
                open_world=open_world,
            )
        except (ToolDefinitionError, TypeError, ValueError) as exc:
            raise ToolDefinitionError(f"tool {label!r}: {exc}") from None
        try:
            setattr(target, SPEC_ATTRIBUTE, spec)
        except (AttributeError, TypeError):
            raise ToolDefinitionError(
                f"@tool cannot mark {func!r}; register it with Toolkit.add(...) instead"
            ) from None
        return func

    return mark(fn) if fn is not None else mark


class ToolBase:
    """Base class for tools with an explicit schema, a permission hook, or external execution.

    Declare either ``args_model`` (a pydantic model; preferred) or ``input_schema`` (a JSON Schema
    dict, validated with jsonschema). Override `run` (sync, async, or a generator of either kind)
    unless ``external`` is set, and optionally `check_permissions`.
    """

    name: str = ""
    description: str = ""
    args_model: type[BaseModel] | None = None
    input_schema: Mapping[str, Any] | None = None
    read_only: bool = False
    concurrency_safe: bool | None = None
    destructive: bool = False
    idempotent: bool = False
    external: bool = False
    timeout: float | None = None
    retry: RetryPolicy | int | bool | None = None
    paths: Mapping[str, Access] = MappingProxyType({})
    dangerous_paths: tuple[str, ...] = ()
    command: str | None = None
    command_prefix: tuple[str, ...] = ()
    path_space: Literal["logical", "host"] = "logical"
    open_world: bool = False
    origin: str | None = None
    read_only_hint: bool = False

    def check_permissions(self, args: dict[str, Any], ctx: ToolContext) -> Decision | None:
        """Judge this call before it runs. Return None for no opinion, or a Decision; the engine
        combines it with the policy's and the stricter one wins."""
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        """Do the work. ``args`` are the validated arguments (presets applied)."""
        raise NotImplementedError(f"{type(self).__name__} must implement run()")

    def spec(self) -> ToolSpec:
        """The attributes of this tool as a `ToolSpec`."""
        return ToolSpec(
            name=self.name or None,
            description=self.description or None,
            read_only=self.read_only,
            concurrency_safe=self.concurrency_safe,
            destructive=self.destructive,
            idempotent=self.idempotent,
            external=self.external,
            timeout=self.timeout,
            retry=as_retry_policy(self.retry),
            paths=self.paths,
            dangerous_paths=tuple(self.dangerous_paths),
            command=self.command,
            command_prefix=tuple(self.command_prefix),
            path_space=self.path_space,
            open_world=self.open_world,
            origin=self.origin,
            read_only_hint=self.read_only_hint,
        )


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

    __slots__ = ("_validator", "description", "json_schema")

    def __init__(
        self, schema: Mapping[str, Any], description: str, tool_name: str, hidden: frozenset[str]
    ) -> None:
        import jsonschema  # 50 ms to import; only tools with hand-written schemas need it

        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: input_schema is not a valid JSON Schema: {exc.message}"
            ) from None
        if schema.get("type", "object") != "object":
            raise ToolDefinitionError(
                f"tool {tool_name!r}: input_schema must describe an object (type 'object'), "
                f"not {schema.get('type')!r}"
            )
        full = strip_titles({"type": "object", "properties": {}, **copy.deepcopy(dict(schema))})
        self._validator = jsonschema.Draft202012Validator(full)
        self.json_schema = _drop_properties(full, hidden)
        self.description = description

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        problems = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        if problems:
            raise ArgumentError(
                "; ".join(
                    f"{'.'.join(map(str, e.path)) or '(arguments)'}: {e.message}" for e in problems
                )
            )
        return dict(arguments)


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
) -> RegisteredTool:
    """Compile a plain function, bound method, functools.partial or callable object."""
    if not callable(fn):
        raise ToolDefinitionError(f"cannot register {fn!r} as a tool: it is not callable")
    spec = _spec_of(fn)
    tool_name = check_name(name or spec.name or _default_name(fn))
    presets = dict(presets or {})
    info = analyse_signature(fn, tool_name=tool_name, presets=presets)
    _check_paths(tool_name, spec, {p.name for p in info.visible} | info.hidden)
    doc_source = _unwrap_partial(fn)
    if _is_callable_object(doc_source):
        doc_source = type(doc_source).__call__
    schema = ArgumentSchema(
        tool_name=tool_name,
        info=info,
        doc=inspect.getdoc(doc_source),
        description=description if description is not None else spec.description,
    )
    mode = Mode.EXTERNAL if spec.external else _function_mode(fn)

    def invoke(kwargs: dict[str, Any], ctx: ToolContext | None) -> Any:
        return fn(**kwargs)

    return RegisteredTool(
        name=tool_name,
        spec=replace(spec, name=tool_name),
        schema=schema,
        mode=mode,
        invoke=invoke,
        presets=MappingProxyType(presets),
        hidden=info.hidden,
        injections=info.injections,
        permission_check=None,
        postprocess=postprocess,
        source=fn,
    )


def compile_tool_base(
    obj: ToolBase,
    *,
    name: str | None = None,
    description: str | None = None,
    presets: Mapping[str, Any] | None = None,
    postprocess: Postprocess | None = None,
) -> RegisteredTool:
    """Compile a `ToolBase` instance."""
    try:
        spec = obj.spec()
    except (ToolDefinitionError, TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"tool {name or obj.name or type(obj).__name__!r}: {exc}"
        ) from None
    tool_name = check_name(name or spec.name or type(obj).__name__)
    text = (
        description if description is not None else (spec.description or inspect.getdoc(obj) or "")
    )
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
    )


def compile_any(
    item: Callable[..., Any] | ToolBase | RegisteredTool,
    *,
    name: str | None = None,
    description: str | None = None,
    presets: Mapping[str, Any] | None = None,
    postprocess: Postprocess | None = None,
) -> RegisteredTool:
    """Compile whatever `Toolkit.add` accepts. An already compiled tool is reused as it is
    (renamed if asked), or recompiled from its source when presets or hooks change."""
    if isinstance(item, RegisteredTool):
        if presets is None and description is None and postprocess is None:
            return item.renamed(name) if name and name != item.name else item
        source: Any = item.source
        return compile_any(
            source,
            name=name or item.name,
            description=description,
            presets=presets if presets is not None else item.presets,
            postprocess=postprocess or item.postprocess,
        )
    if isinstance(item, ToolBase):
        return compile_tool_base(
            item, name=name, description=description, presets=presets, postprocess=postprocess
        )
    if isinstance(item, type) and issubclass(item, ToolBase):
        raise ToolDefinitionError(
            f"pass an instance of {item.__name__}, not the class: toolkit.add({item.__name__}())"
        )
    return compile_function(
        item, name=name, description=description, presets=presets, postprocess=postprocess
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
    "Access",
    "Mode",
    "RegisteredTool",
    "ToolBase",
    "ToolSpec",
    "check_name",
    "compile_any",
    "compile_function",
    "compile_tool_base",
    "tool",
]
