"""From a Python signature and docstring to a pydantic argument model and a JSON Schema.

Work is split in two on purpose. `analyse_signature` runs at registration and checks everything a
programmer can get wrong (unknown presets, types no schema can describe, positional-only
parameters) so mistakes surface at once. Building the pydantic model and its JSON Schema costs
about a millisecond a tool, so `ArgumentSchema` does it on first use and keeps the result: a
toolkit with hundreds of tools registers in milliseconds and pays only for what is called.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import functools
import inspect
import ipaddress
import pathlib
import reprlib
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError
from pydantic.fields import FieldInfo

from stockade.engine.errors import ToolDefinitionError
from stockade.engine.injection import Emitter, ToolContext, _FromContextMarker
from stockade.engine.messages import ToolCall, escaped
from stockade.engine.tools._docstrings import parse_docstring
from stockade.sandbox.egress import Egress

REQUIRED: Any = inspect.Parameter.empty

# (an Egress, a command's filtered network, is the engine's to give: never a model's to write)
_BUILTIN_INJECTED: tuple[type, ...] = (Emitter, ToolContext, ToolCall, Egress)

# Types pydantic describes natively; checked before falling back to asking pydantic.
_PLAIN_TYPES: frozenset[Any] = frozenset(
    {
        str, int, float, bool, bytes, type(None), Any, object,
        dt.datetime, dt.date, dt.time, dt.timedelta, decimal.Decimal, uuid.UUID,
        pathlib.Path, pathlib.PurePath, pathlib.PurePosixPath,
        ipaddress.IPv4Address, ipaddress.IPv6Address,
    }
)  # fmt: skip
_CONTAINERS: frozenset[Any] = frozenset(
    {
        list, tuple, set, frozenset, dict, typing.Sequence, typing.Mapping, typing.MutableMapping,
        typing.Iterable, typing.Collection, typing.AbstractSet,
        __import__("collections.abc").abc.Sequence, __import__("collections.abc").abc.Mapping,
        __import__("collections.abc").abc.Iterable, __import__("collections.abc").abc.Collection,
        __import__("collections.abc").abc.Set, __import__("collections.abc").abc.MutableMapping,
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Injection:
    """A parameter filled from the context by type rather than by the model."""

    name: str
    type: type
    default: Any  # REQUIRED when the parameter has no default


@dataclass(frozen=True, slots=True)
class VisibleParam:
    """A parameter the model supplies: it appears in the schema."""

    name: str
    annotation: Any
    default: Any  # REQUIRED, a value, or a pydantic FieldInfo


@dataclass(frozen=True, slots=True)
class SignatureInfo:
    """What registration learned about a callable's parameters."""

    visible: tuple[VisibleParam, ...]
    injections: tuple[Injection, ...]
    hidden: frozenset[str]  # presets and functools.partial-bound names
    accepts_any_keyword: bool
    var_positional: str | None = None  # the *args parameter, when shown (a list among visible)
    var_keyword: str | None = None  # the **kwargs parameter, when shown (further properties)
    var_keyword_type: Any = Any  # what each of those holds


def _unwrap_annotated(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    if get_origin(annotation) is Annotated:
        args = get_args(annotation)
        return args[0], tuple(args[1:])
    return annotation, ()


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (annotation, False)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def _pydantic_can_describe(annotation: Any) -> bool:
    try:
        TypeAdapter(annotation).json_schema()
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError, ValueError):
        return False
    return True


def describable(annotation: Any) -> bool:
    """Whether pydantic can validate and describe ``annotation`` as a JSON value.

    A structural walk answers the common cases in microseconds; only unfamiliar classes are
    handed to pydantic to try.
    """
    annotation, _ = _unwrap_annotated(annotation)
    if annotation in _PLAIN_TYPES or annotation is inspect.Parameter.empty:
        return True
    origin = get_origin(annotation)
    if origin is Literal:
        return True
    if origin in (Union, types.UnionType):
        return all(describable(a) for a in get_args(annotation))
    if origin in _CONTAINERS:
        return all(describable(a) for a in get_args(annotation) if a is not Ellipsis)
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel | enum.Enum):
            return True
        if dataclasses.is_dataclass(annotation) or typing.is_typeddict(annotation):
            return True
        if annotation in _CONTAINERS:
            return True
    return _pydantic_can_describe(annotation)


def _injection_type(annotation: Any) -> type | None:
    """The type to inject for a parameter, or None when the model must supply it."""
    inner, metadata = _unwrap_annotated(annotation)
    inner, _ = _strip_optional(inner)
    inner, more = _unwrap_annotated(inner)
    if any(isinstance(m, _FromContextMarker) for m in (*metadata, *more)):
        if not isinstance(inner, type):
            raise ToolDefinitionError(f"FromContext needs a class to look up, got {inner!r}")
        return inner
    if not isinstance(inner, type):
        return None
    if issubclass(inner, _BUILTIN_INJECTED):
        return inner
    # A plain class no schema can describe is something the caller provides by
    # type (a user record, a database handle), not something the model can write.
    if not describable(inner):
        return inner
    return None


def _callable_target(fn: Callable[..., Any]) -> tuple[Callable[..., Any], frozenset[str]]:
    """The function whose annotations describe ``fn``, and names a functools.partial binds."""
    bound: set[str] = set()
    target = fn
    while isinstance(target, functools.partial):
        inner_sig = inspect.signature(target.func)
        positional = list(inner_sig.parameters)[: len(target.args)]
        bound.update(positional)
        bound.update(target.keywords)
        target = target.func
    return target, frozenset(bound)


def analyse_signature(
    fn: Callable[..., Any],
    *,
    tool_name: str,
    presets: Mapping[str, Any],
    var_positional: bool = False,
    var_keyword: bool = False,
) -> SignatureInfo:
    """Classify ``fn``'s parameters into model-visible, injected and hidden ones; with
    ``var_positional`` a ``*args`` is shown as a list, with ``var_keyword`` a ``**kwargs`` as
    further properties (else both are left out).

    Raises `ToolDefinitionError` naming the tool and parameter for anything that could only
    fail later: presets naming no parameter, positional-only parameters, types no schema can
    describe.
    """
    target, partial_bound = _callable_target(fn)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot read its signature ({exc})"
        ) from None
    hint_source = type(target).__call__ if _is_callable_instance(target) else target
    try:
        hints = typing.get_type_hints(hint_source, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot resolve its type annotations ({type(exc).__name__}: {exc})"
        ) from None

    accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    names = set(signature.parameters) | partial_bound
    unknown = [k for k in presets if k not in names and not accepts_any]
    if unknown:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: preset(s) {', '.join(map(repr, unknown))} name no parameter; "
            f"its parameters are {', '.join(signature.parameters) or '(none)'}"
        )

    visible: list[VisibleParam] = []
    injections: list[Injection] = []
    shown_var: dict[str, str] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            wanted = var_positional if param.kind is param.VAR_POSITIONAL else var_keyword
            annotation = hints.get(param.name, Any)
            if wanted and not describable(annotation):
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: parameter {param.name!r} holds {annotation!r}, which no "
                    "JSON Schema can describe; use JSON-compatible types, or leave it out of the "
                    "schema"
                )
            if wanted and param.kind is param.VAR_POSITIONAL:
                shown_var["positional"] = param.name
                items = list.__class_getitem__(annotation)  # list[annotation], built at run time
                visible.append(VisibleParam(param.name, items, Field(default_factory=list)))
            elif wanted:
                shown_var["keyword"] = param.name
            continue
        if param.name in presets or param.name in partial_bound:
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter {param.name!r} is positional-only; tools are "
                "called with keyword arguments, so remove the '/' from the signature"
            )
        annotation = hints.get(param.name, Any)
        try:
            injected = _injection_type(annotation)
        except ToolDefinitionError as exc:
            raise ToolDefinitionError(
                f"tool {tool_name!r}, parameter {param.name!r}: {exc}"
            ) from None
        if injected is not None:
            injections.append(Injection(param.name, injected, param.default))
            continue
        if not describable(annotation):
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter {param.name!r} has type {annotation!r}, which no "
                "JSON Schema can describe; use JSON-compatible types or a pydantic model, or mark "
                "it Annotated[T, FromContext] to have it injected"
            )
        visible.append(VisibleParam(param.name, annotation, param.default))
    return SignatureInfo(
        visible=tuple(visible),
        injections=tuple(injections),
        hidden=frozenset(presets) | partial_bound,
        accepts_any_keyword=accepts_any,
        var_positional=shown_var.get("positional"),
        var_keyword=shown_var.get("keyword"),
        var_keyword_type=hints.get(shown_var.get("keyword", ""), Any),
    )


def _is_callable_instance(obj: object) -> bool:
    return not inspect.isroutine(obj) and not inspect.isclass(obj) and callable(obj)


# -- JSON Schema -------------------------------------------------------------------------------

_NAME_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_VALUES = ("default", "examples", "const", "enum")  # data, not schemas: leave their keys alone


def strip_titles(schema: Any) -> Any:
    """Remove every ``title`` keyword from a JSON Schema (in place), keeping properties that
    happen to be *named* "title". Titles are noise to a model and bias it toward class names."""
    if isinstance(schema, dict):
        if isinstance(schema.get("title"), str):
            del schema["title"]
        for key, value in schema.items():
            if key in _VALUES:
                continue
            if key in _NAME_MAPS and isinstance(value, dict):
                for sub in value.values():
                    strip_titles(sub)
            else:
                strip_titles(value)
    elif isinstance(schema, list):
        for item in schema:
            strip_titles(item)
    return schema


class _ShortRepr(reprlib.Repr):
    """reprlib's bounded repr, and an integer too long for Python to print (over 4,300 digits
    by default: ``repr`` raises ValueError) described by its length instead."""

    def repr_int(self, x: int, level: int) -> str:
        try:
            return super().repr_int(x, level)
        except ValueError:
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1} digits>"


def _short_repr() -> reprlib.Repr:
    shorter = _ShortRepr()  # keyword arguments only from Python 3.12
    shorter.maxlevel, shorter.maxstring, shorter.maxother = 3, 200, 200
    shorter.maxlist = shorter.maxdict = 4
    return shorter


_SHORT_REPR = _short_repr()


def format_validation_error(exc: ValidationError) -> str:
    """One line per problem: where, what, and the offending value when short."""
    lines = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        line = f"{where}: {err['msg']}"
        if err["type"] not in ("missing", "extra_forbidden") and "input" in err:
            shown = _shown(err["input"])
            line += f" (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
        lines.append(line)
    return "; ".join(lines)


def _shown(value: object) -> str:
    """A short repr of an argument's value, whatever it is (bounded depth: inputs can nest 1000
    deep; a value whose repr fails is named by its type)."""
    try:
        return escaped(_SHORT_REPR.repr(value))
    except Exception:
        return f"<{type(value).__name__}>"


class ArgumentSchema:
    """The argument model and JSON Schema of one function tool, built on first use."""

    __slots__ = (
        "_description",
        "_doc",
        "_extras",
        "_info",
        "_json_schema",
        "_long",
        "_model",
        "_name",
        "_renames",
        "_validate_python",
    )

    def __init__(
        self,
        *,
        tool_name: str,
        info: SignatureInfo,
        doc: str | None,
        description: str | None,
        long_description: bool = True,
    ) -> None:
        self._name = tool_name
        self._info = info
        self._doc = doc
        self._description = description
        self._long = long_description
        self._extras: TypeAdapter[Any] | None = None  # validates a shown **kwargs's values
        self._model: type[BaseModel] | None = None
        self._renames: tuple[tuple[str, str], ...] = ()
        self._json_schema: dict[str, Any] | None = None
        self._validate_python: Callable[[Any], Any] | None = None

    @property
    def description(self) -> str:
        """The tool's description: the explicit one, else the docstring's summary and body."""
        if self._description is None:
            self._description, _ = parse_docstring(self._doc, long=self._long)
        return self._description

    @property
    def model(self) -> type[BaseModel]:
        """The pydantic model the model-given arguments validate against."""
        if self._model is None:
            self._build()
        return typing.cast(type[BaseModel], self._model)

    @property
    def json_schema(self) -> dict[str, Any]:
        """JSON Schema of the arguments, ``title`` removed everywhere."""
        if self._json_schema is None:
            schema = self.model.model_json_schema(by_alias=True)
            schema.setdefault("properties", {})
            if isinstance(self._extras, TypeAdapter):
                typed = self._extras.json_schema()  # {"type": "object", "additionalProperties"..}
                schema["additionalProperties"] = typed.get("additionalProperties", True)
                if typed.get("$defs"):
                    schema.setdefault("$defs", {}).update(typed["$defs"])
            self._json_schema = strip_titles(schema)
        return self._json_schema

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments; raises pydantic's ValidationError."""
        validate = self._validate_python
        if validate is None:
            validate = self._validate_python = self.model.__pydantic_validator__.validate_python
        instance = validate(arguments)
        values: dict[str, Any] = instance.__dict__  # the instance is discarded: no copy
        for internal, public in self._renames:
            values[public] = values.pop(internal)
        extras = instance.__pydantic_extra__
        if extras:  # only with a shown **kwargs: the model forbids them otherwise
            if isinstance(self._extras, TypeAdapter):
                extras = self._extras.validate_python(extras)
            values.update(extras)
        return values

    def _build(self) -> None:
        summary, param_docs = parse_docstring(self._doc, long=self._long)
        if self._description is None:
            self._description = summary
        fields: dict[str, Any] = {}
        renames: list[tuple[str, str]] = []
        taken = {p.name for p in self._info.visible}
        for index, param in enumerate(self._info.visible):
            name = param.name
            alias = None
            if name.startswith(("_", "model_")) or hasattr(BaseModel, name):
                # pydantic reserves these names; validate under a free one, alias the real one
                alias, name = name, f"param_{index}"
                while name in taken:
                    name += "_"
                taken.add(name)
                renames.append((name, alias))
            fields[name] = _field_for(param, param_docs.get(param.name), alias)
        extra: Literal["allow", "forbid"] = "forbid"
        if self._info.var_keyword is not None:
            extra = "allow"
            if self._info.var_keyword_type is not Any:
                values: Any = dict.__class_getitem__((str, self._info.var_keyword_type))
                self._extras = TypeAdapter(values)
        try:
            self._model = create_model(
                f"{self._name}_arguments",
                __config__=ConfigDict(extra=extra, populate_by_name=False),
                **fields,
            )
        except Exception as exc:  # pydantic raises several kinds; all mean the same here
            raise ToolDefinitionError(
                f"tool {self._name!r}: cannot build its argument model "
                f"({type(exc).__name__}: {exc})"
            ) from None
        self._renames = tuple(renames)


def _field_for(param: VisibleParam, doc: str | None, alias: str | None) -> tuple[Any, Any]:
    """(annotation, default) for create_model; an explicit description beats the docstring's."""
    _, metadata = _unwrap_annotated(param.annotation)
    explicit = any(isinstance(m, FieldInfo) and m.description for m in metadata)
    default = param.default
    if isinstance(default, FieldInfo):
        explicit = explicit or bool(default.description)
    elif default is REQUIRED:
        default = ...
    extra: dict[str, Any] = {}
    if doc and not explicit:
        extra["description"] = doc
    if alias:
        extra["alias"] = alias
    if not extra:
        return param.annotation, default
    return Annotated[param.annotation, Field(**extra)], default
