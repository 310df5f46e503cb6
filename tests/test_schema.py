"""Argument schemas: from a signature and docstring (or a ToolBase) to JSON Schema and validation.

Sections:
  1. the schema table: many signatures, each with its exact expected ``parameters`` dict
  2. ``title`` keywords are removed everywhere (and only keywords)
  3. tool descriptions from Google, NumPy and reST docstrings
  4. ``validate()``: lax conversion, nested models, and the messages of ArgumentError
  5. functools.partial, bound methods, callable objects, and the run mode of each kind
  6. context injection: which parameters are filled by type instead of by the model
  7. registration-time errors (ToolDefinitionError)
  8. ToolBase with ``args_model`` or ``input_schema``
  9. laziness: the pydantic model is built on first use and cached
 10. a hypothesis property: validate() returns coerced values or raises ArgumentError
"""

import dataclasses
import datetime as dt
import enum
import functools
import math
import pathlib
import re
import uuid
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from stockade.engine.errors import ArgumentError, ToolDefinitionError
from stockade.engine.injection import Emitter, FromContext, ToolContext
from stockade.engine.messages import ToolCall
from stockade.engine.tools import Mode, ToolBase, compile_function, compile_tool_base, tool
from stockade.engine.tools._signature import REQUIRED, ArgumentSchema

# -- shared types ------------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Book(BaseModel):
    """A book on the shelf."""

    title: str
    pages: int = 0


class Database:
    """A plain class: no JSON Schema can describe it, so it is injected from the context."""


@dataclasses.dataclass
class User:
    name: str


def compiled(fn: Any, **kwargs: Any) -> Any:
    return compile_function(fn, **kwargs)


def params(fn: Any, **kwargs: Any) -> dict[str, Any]:
    return compile_function(fn, **kwargs).parameters


def book_def() -> dict[str, Any]:
    """How the nested `Book` model appears under ``$defs``: its docstring is its description."""
    return {
        "description": "A book on the shelf.",
        "type": "object",
        "properties": {"title": {"type": "string"}, "pages": {"type": "integer", "default": 0}},
        "required": ["title"],
    }


def obj(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict:
    """The top-level shape every function tool's schema has."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        **extra,
    }
    if required:
        schema["required"] = required
    return schema


# The same signature documented in each docstring style must give the same schema.
DOCUMENTED_SCHEMA = obj(
    {
        "path": {"type": "string", "description": "Where the file is."},
        "limit": {"type": "integer", "default": 10, "description": "How many lines at most."},
    },
    ["path"],
)


# -- 1. the schema table -----------------------------------------------------------------------


def no_params() -> None: ...


def scalars(text: str, count: int, ratio: float, flag: bool) -> None: ...


def with_defaults(text: str = "hi", count: int = 3, ratio: float = 0.5, flag: bool = True): ...


def optional_default(limit: Optional[int] = None) -> None: ...  # noqa: UP045 (testing Optional)


def pipe_none_required(limit: int | None) -> None: ...


def literal_str(mode: Literal["r", "w"] = "r") -> None: ...


def literal_int(level: Literal[1, 2, 3]) -> None: ...


def enum_param(color: Color) -> None: ...


def enum_default(color: Color = Color.GREEN) -> None: ...


def list_int(numbers: list[int]) -> None: ...


def list_str_or_none(tags: list[str] | None = None) -> None: ...


def dict_str_int(counts: dict[str, int]) -> None: ...


def dict_str_list(groups: dict[str, list[str]]) -> None: ...


def tuple_pair(pair: tuple[int, str]) -> None: ...


def tuple_variadic(values: tuple[int, ...]) -> None: ...


def set_of_str(names: set[str]) -> None: ...


def nested_model(book: Book) -> None: ...


def list_of_models(books: list[Book]) -> None: ...


def annotated_description(limit: Annotated[int, Field(description="Explicit text.")]) -> None:
    """Cut output.

    Args:
        limit: Docstring text that must lose to the explicit one.
    """


def annotated_constraints(n: Annotated[int, Field(ge=1, le=10)] = 5) -> None: ...


def fieldinfo_default(count: int = Field(3, description="How many.")) -> None:
    """Count things.

    Args:
        count: Docstring text that must lose to the Field description.
    """


def fieldinfo_default_docstring(count: int = Field(3)) -> None:
    """Count things.

    Args:
        count: From the docstring.
    """


def property_named_title(title: str, subtitle: str | None = None) -> None: ...


def shadowing_names(json: int, model_config: str, schema: bool = False, _private: int = 0): ...


def google_doc(path: str, limit: int = 10) -> str:
    """Read a file.

    Args:
        path: Where the file is.
        limit: How many lines at most.

    Returns:
        The text.
    """
    return ""


def numpy_doc(path: str, limit: int = 10) -> str:
    """Read a file.

    Parameters
    ----------
    path : str
        Where the file is.
    limit : int
        How many lines at most.

    Returns
    -------
    str
        The text.
    """
    return ""


def rest_doc(path: str, limit: int = 10) -> str:
    """Read a file.

    :param path: Where the file is.
    :param limit: How many lines at most.
    :returns: The text.
    """
    return ""


def var_args(a: int, *args: int, flag: bool = False, **kwargs: str) -> None: ...


def stdlib_types(when: dt.datetime, day: dt.date, id: uuid.UUID, where: pathlib.Path): ...


def untyped_and_any(x, y: Any) -> None: ...


def with_emitter(query: str, emit: Emitter) -> None: ...


def dataclass_param(user: User) -> None: ...


SCHEMA_TABLE = [
    pytest.param(no_params, obj({}), id="no-params"),
    pytest.param(
        scalars,
        obj(
            {
                "text": {"type": "string"},
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "flag": {"type": "boolean"},
            },
            ["text", "count", "ratio", "flag"],
        ),
        id="str-int-float-bool",
    ),
    pytest.param(
        with_defaults,
        obj(
            {
                "text": {"type": "string", "default": "hi"},
                "count": {"type": "integer", "default": 3},
                "ratio": {"type": "number", "default": 0.5},
                "flag": {"type": "boolean", "default": True},
            }
        ),
        id="defaults",
    ),
    pytest.param(
        optional_default,
        obj({"limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}}),
        id="optional-int-default-none",
    ),
    pytest.param(
        pipe_none_required,
        obj({"limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}, ["limit"]),
        id="int-or-none-without-default-is-required",
    ),
    pytest.param(
        literal_str,
        obj({"mode": {"type": "string", "enum": ["r", "w"], "default": "r"}}),
        id="literal-strings",
    ),
    pytest.param(
        literal_int,
        obj({"level": {"type": "integer", "enum": [1, 2, 3]}}, ["level"]),
        id="literal-ints",
    ),
    pytest.param(
        enum_param,
        obj(
            {"color": {"$ref": "#/$defs/Color"}},
            ["color"],
            **{"$defs": {"Color": {"type": "string", "enum": ["red", "green"]}}},
        ),
        id="enum",
    ),
    pytest.param(
        enum_default,
        obj(
            {"color": {"$ref": "#/$defs/Color", "default": "green"}},
            **{"$defs": {"Color": {"type": "string", "enum": ["red", "green"]}}},
        ),
        id="enum-default-by-value",
    ),
    pytest.param(
        list_int,
        obj({"numbers": {"type": "array", "items": {"type": "integer"}}}, ["numbers"]),
        id="list-int",
    ),
    pytest.param(
        list_str_or_none,
        obj(
            {
                "tags": {
                    "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                    "default": None,
                }
            }
        ),
        id="list-str-or-none",
    ),
    pytest.param(
        dict_str_int,
        obj(
            {"counts": {"type": "object", "additionalProperties": {"type": "integer"}}},
            ["counts"],
        ),
        id="dict-str-int",
    ),
    pytest.param(
        dict_str_list,
        obj(
            {
                "groups": {
                    "type": "object",
                    "additionalProperties": {"type": "array", "items": {"type": "string"}},
                }
            },
            ["groups"],
        ),
        id="dict-str-list-str",
    ),
    pytest.param(
        tuple_pair,
        obj(
            {
                "pair": {
                    "type": "array",
                    "prefixItems": [{"type": "integer"}, {"type": "string"}],
                    "minItems": 2,
                    "maxItems": 2,
                }
            },
            ["pair"],
        ),
        id="tuple-int-str",
    ),
    pytest.param(
        tuple_variadic,
        obj({"values": {"type": "array", "items": {"type": "integer"}}}, ["values"]),
        id="tuple-int-ellipsis",
    ),
    pytest.param(
        set_of_str,
        obj(
            {"names": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
            ["names"],
        ),
        id="set-str",
    ),
    pytest.param(
        nested_model,
        obj({"book": {"$ref": "#/$defs/Book"}}, ["book"], **{"$defs": {"Book": book_def()}}),
        id="nested-model-docstring-in-defs",
    ),
    pytest.param(
        list_of_models,
        obj(
            {"books": {"type": "array", "items": {"$ref": "#/$defs/Book"}}},
            ["books"],
            **{"$defs": {"Book": book_def()}},
        ),
        id="list-of-nested-models",
    ),
    pytest.param(
        annotated_description,
        obj({"limit": {"type": "integer", "description": "Explicit text."}}, ["limit"]),
        id="annotated-field-description-beats-docstring",
    ),
    pytest.param(
        annotated_constraints,
        obj({"n": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5}}),
        id="annotated-field-ge-le",
    ),
    pytest.param(
        fieldinfo_default,
        obj({"count": {"type": "integer", "default": 3, "description": "How many."}}),
        id="fieldinfo-default-description-beats-docstring",
    ),
    pytest.param(
        fieldinfo_default_docstring,
        obj({"count": {"type": "integer", "default": 3, "description": "From the docstring."}}),
        id="fieldinfo-default-without-description-uses-docstring",
    ),
    pytest.param(
        property_named_title,
        obj(
            {
                "title": {"type": "string"},
                "subtitle": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            },
            ["title"],
        ),
        id="property-named-title-is-kept",
    ),
    pytest.param(
        shadowing_names,
        obj(
            {
                "json": {"type": "integer"},
                "model_config": {"type": "string"},
                "schema": {"type": "boolean", "default": False},
                "_private": {"type": "integer", "default": 0},
            },
            ["json", "model_config"],
        ),
        id="names-shadowing-basemodel-and-leading-underscore",
    ),
    pytest.param(
        google_doc,
        DOCUMENTED_SCHEMA,
        id="google-docstring",
    ),
    pytest.param(
        numpy_doc,
        DOCUMENTED_SCHEMA,
        id="numpy-docstring",
    ),
    pytest.param(
        rest_doc,
        DOCUMENTED_SCHEMA,
        id="rest-docstring",
    ),
    pytest.param(
        var_args,
        obj({"a": {"type": "integer"}, "flag": {"type": "boolean", "default": False}}, ["a"]),
        id="star-args-and-star-star-kwargs-excluded",
    ),
    pytest.param(
        stdlib_types,
        obj(
            {
                "when": {"type": "string", "format": "date-time"},
                "day": {"type": "string", "format": "date"},
                "id": {"type": "string", "format": "uuid"},
                "where": {"type": "string", "format": "path"},
            },
            ["when", "day", "id", "where"],
        ),
        id="datetime-date-uuid-path",
    ),
    pytest.param(
        untyped_and_any,
        obj({"x": {}, "y": {}}, ["x", "y"]),
        id="unannotated-and-any-accept-anything",
    ),
    pytest.param(
        with_emitter,
        obj({"query": {"type": "string"}}, ["query"]),
        id="emitter-parameter-left-out",
    ),
    pytest.param(
        dataclass_param,
        obj(
            {"user": {"$ref": "#/$defs/User"}},
            ["user"],
            **{
                "$defs": {
                    "User": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                        "required": ["name"],
                        "additionalProperties": False,
                    }
                }
            },
        ),
        id="stdlib-dataclass-is-described-not-injected",
    ),
]


@pytest.mark.parametrize(("fn", "expected"), SCHEMA_TABLE)
def test_schema_table(fn: Any, expected: dict[str, Any]) -> None:
    assert params(fn) == expected


def test_schema_table_is_big_enough() -> None:
    assert len(SCHEMA_TABLE) >= 24


# -- 2. title keywords -------------------------------------------------------------------------

_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_VALUE_KEYWORDS = ("default", "examples", "const", "enum")


def title_keywords(schema: Any, where: str = "#") -> list[str]:
    """Paths of every ``title`` keyword in a schema. A property *named* title is not a keyword,
    and neither is a key inside a value (a default, an example)."""
    found: list[str] = []
    if isinstance(schema, dict):
        if "title" in schema:
            found.append(where)
        for key, value in schema.items():
            if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
                for name, sub in value.items():
                    found += title_keywords(sub, f"{where}/{key}/{name}")
            elif key not in _VALUE_KEYWORDS:
                found += title_keywords(value, f"{where}/{key}")
    elif isinstance(schema, list):
        for index, item in enumerate(schema):
            found += title_keywords(item, f"{where}/{index}")
    return found


def test_title_helper_finds_keywords_and_ignores_property_names() -> None:
    schema = {
        "title": "Top",
        "properties": {"title": {"type": "string"}, "x": {"anyOf": [{"title": "X"}]}},
        "$defs": {"title": {"type": "object", "default": {"title": "a value"}}},
    }
    assert title_keywords(schema) == ["#", "#/properties/x/anyOf/0"]


@pytest.mark.parametrize(("fn", "expected"), SCHEMA_TABLE)
def test_no_title_keyword_anywhere(fn: Any, expected: dict[str, Any]) -> None:
    assert title_keywords(params(fn)) == []


def test_title_property_survives_inside_nested_model() -> None:
    schema = params(list_of_models)
    assert "title" in schema["$defs"]["Book"]["properties"]
    assert schema["$defs"]["Book"]["required"] == ["title"]


def test_default_value_with_a_title_key_is_not_stripped() -> None:
    # strip_titles must remove the *keyword* only; a default value is data, not a schema.
    def report(meta: dict[str, str] = {"title": "Q3"}) -> None: ...  # noqa: B006

    assert params(report)["properties"]["meta"]["default"] == {"title": "Q3"}


def test_model_default_with_a_title_field_is_not_stripped() -> None:
    def shelve(book: Book = Book(title="Dune")) -> None: ...  # noqa: B008

    assert params(shelve)["properties"]["book"]["default"] == {"title": "Dune", "pages": 0}


# -- 3. tool descriptions ----------------------------------------------------------------------


@pytest.mark.parametrize("fn", [google_doc, numpy_doc, rest_doc], ids=["google", "numpy", "rest"])
def test_description_is_summary_only_without_body(fn: Any) -> None:
    assert compiled(fn).description == "Read a file."


def long_google(path: str) -> None:
    """Read a file.

    Reads the whole file, then cuts it
    to the limit.

    Args:
        path: Where the file is.
    """


def long_numpy(path: str) -> None:
    """Read a file.

    Reads the whole file, then cuts it
    to the limit.

    Parameters
    ----------
    path : str
        Where the file is.
    """


def long_rest(path: str) -> None:
    """Read a file.

    Reads the whole file, then cuts it
    to the limit.

    :param path: Where the file is.
    """


@pytest.mark.parametrize(
    "fn", [long_google, long_numpy, long_rest], ids=["google", "numpy", "rest"]
)
def test_description_is_summary_plus_long_description(fn: Any) -> None:
    t = compiled(fn)
    assert t.description == "Read a file.\n\nReads the whole file, then cuts it\nto the limit."
    assert t.parameters["properties"]["path"] == {
        "type": "string",
        "description": "Where the file is.",
    }


def test_explicit_description_beats_docstring() -> None:
    t = compiled(long_google, description="Custom.")
    assert t.description == "Custom."
    # the parameter descriptions still come from the docstring
    assert t.parameters["properties"]["path"]["description"] == "Where the file is."
    assert t.description == "Custom."  # building the model did not overwrite it


def test_description_from_tool_decorator() -> None:
    @tool(description="Decorated.")
    def fn(path: str) -> None:
        """Docstring summary."""

    assert compiled(fn).description == "Decorated."


def test_no_docstring_gives_empty_description() -> None:
    def bare(x: int) -> None: ...

    t = compiled(bare)
    assert t.description == ""
    assert t.parameters == obj({"x": {"type": "integer"}}, ["x"])


# -- 4. validate() -----------------------------------------------------------------------------


def test_validate_lax_int_from_string() -> None:
    assert compiled(scalars).validate(
        {"text": "t", "count": "5", "ratio": "0.5", "flag": "true"}
    ) == {"text": "t", "count": 5, "ratio": 0.5, "flag": True}


def test_validate_fills_defaults() -> None:
    assert compiled(with_defaults).validate({}) == {
        "text": "hi",
        "count": 3,
        "ratio": 0.5,
        "flag": True,
    }


def test_validate_fieldinfo_default_gives_the_value_not_the_fieldinfo() -> None:
    assert compiled(fieldinfo_default).validate({}) == {"count": 3}


def test_validate_nested_dict_becomes_model_instance() -> None:
    values = compiled(nested_model).validate({"book": {"title": "Dune", "pages": "412"}})
    assert isinstance(values["book"], Book)
    assert values["book"] == Book(title="Dune", pages=412)


def test_validate_list_of_nested_models() -> None:
    values = compiled(list_of_models).validate({"books": [{"title": "A"}, {"title": "B"}]})
    assert values == {"books": [Book(title="A"), Book(title="B")]}


def test_validate_converts_enum_and_stdlib_types() -> None:
    assert compiled(enum_param).validate({"color": "red"}) == {"color": Color.RED}
    values = compiled(stdlib_types).validate(
        {
            "when": "2024-05-01T12:30:00",
            "day": "2024-05-01",
            "id": "12345678-1234-5678-1234-567812345678",
            "where": "a/b.txt",
        }
    )
    assert values == {
        "when": dt.datetime(2024, 5, 1, 12, 30),
        "day": dt.date(2024, 5, 1),
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "where": pathlib.Path("a/b.txt"),
    }


def test_validate_returns_real_names_for_shadowing_parameters() -> None:
    t = compiled(shadowing_names)
    assert t.validate({"json": "1", "model_config": "c", "_private": 7}) == {
        "json": 1,
        "model_config": "c",
        "schema": False,
        "_private": 7,
    }


def test_missing_shadowing_parameter_is_reported_by_its_real_name() -> None:
    with pytest.raises(ArgumentError, match=r"\bjson: Field required"):
        compiled(shadowing_names).validate({"model_config": "c"})


def test_internal_names_of_renamed_parameters_are_not_accepted() -> None:
    with pytest.raises(ArgumentError, match="param_0"):
        compiled(shadowing_names).validate({"json": 1, "model_config": "c", "param_0": 2})


def test_renamed_parameter_does_not_collide_with_a_real_parameter() -> None:
    # 'json' is validated under an internal name; it must not clash with a real parameter
    def clash(a: int, json: str, param_1: int) -> None: ...

    t = compiled(clash)
    assert t.parameters == obj(
        {"a": {"type": "integer"}, "json": {"type": "string"}, "param_1": {"type": "integer"}},
        ["a", "json", "param_1"],
    )
    assert t.validate({"a": 1, "json": "j", "param_1": 2}) == {"a": 1, "json": "j", "param_1": 2}


def test_extra_field_is_rejected_by_name() -> None:
    with pytest.raises(ArgumentError) as info:
        compiled(list_int).validate({"numbers": [1], "surprise": 1})
    message = str(info.value)
    assert "list_int" in message
    assert "surprise" in message
    assert "Extra inputs are not permitted" in message


def test_missing_required_field_is_named() -> None:
    with pytest.raises(ArgumentError) as info:
        compiled(scalars).validate({"text": "t", "ratio": 1.0, "flag": False})
    assert "count: Field required" in str(info.value)
    assert str(info.value).count("Field required") == 1  # only the missing one is reported


def test_wrong_type_names_the_field_and_shows_the_value() -> None:
    with pytest.raises(ArgumentError) as info:
        compiled(scalars).validate({"text": "t", "count": "abc", "ratio": 1.0, "flag": False})
    message = str(info.value)
    assert "count:" in message
    assert "'abc'" in message


def test_every_problem_is_reported_with_its_location() -> None:
    with pytest.raises(ArgumentError) as info:
        compiled(list_of_models).validate({"books": [{"title": "A"}, {"pages": "many"}]})
    message = str(info.value)
    assert "books.1.title: Field required" in message
    assert "books.1.pages:" in message
    assert "'many'" in message


@pytest.mark.parametrize(
    ("fn", "arguments", "field"),
    [
        pytest.param(literal_str, {"mode": "x"}, "mode", id="literal"),
        pytest.param(annotated_constraints, {"n": 11}, "n", id="le-constraint"),
        pytest.param(annotated_constraints, {"n": 0}, "n", id="ge-constraint"),
        pytest.param(enum_param, {"color": "blue"}, "color", id="enum"),
        pytest.param(pipe_none_required, {}, "limit", id="int-or-none-is-required"),
        pytest.param(scalars, {"text": 1, "count": 1, "ratio": 1, "flag": 1}, "text", id="str"),
    ],
)
def test_invalid_values_are_rejected(fn: Any, arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(ArgumentError, match=rf"\b{field}:"):
        compiled(fn).validate(arguments)


def test_long_bad_value_is_shortened_in_the_message() -> None:
    with pytest.raises(ArgumentError) as info:
        compiled(list_int).validate({"numbers": "x" * 500})
    assert "x" * 50 in str(info.value)
    assert "x" * 100 not in str(info.value)


def test_arguments_that_are_not_a_mapping_raise_argument_error() -> None:
    with pytest.raises(ArgumentError):
        compiled(list_int).validate([1, 2, 3])  # type: ignore[arg-type]


def test_presets_are_hidden_and_applied() -> None:
    def read(path: str, root: str = "/") -> None: ...

    t = compiled(read, presets={"root": "/srv"})
    assert t.parameters == obj({"path": {"type": "string"}}, ["path"])
    assert t.hidden == frozenset({"root"})
    assert t.validate({"path": "a"}) == {"path": "a", "root": "/srv"}


def test_required_parameter_can_be_preset() -> None:
    def read(path: str, root: str) -> None: ...

    t = compiled(read, presets={"root": "/srv"})
    assert "required" in t.parameters
    assert t.parameters["required"] == ["path"]
    assert t.validate({"path": "a"}) == {"path": "a", "root": "/srv"}


# -- 5. partial, methods, callable objects, modes ----------------------------------------------


def partial_target(a: int, b: str, c: float = 1.0, d: bool = False) -> None:
    """Do things.

    Args:
        a: First.
        b: Second.
        c: Third.
        d: Fourth.
    """


def test_partial_bound_arguments_disappear_from_schema() -> None:
    t = compiled(functools.partial(partial_target, 1, d=True))
    assert t.name == "partial_target"
    assert t.parameters == obj(
        {
            "b": {"type": "string", "description": "Second."},
            "c": {"type": "number", "default": 1.0, "description": "Third."},
        },
        ["b"],
    )
    assert t.description == "Do things."


def test_partial_bound_arguments_are_hidden() -> None:
    t = compiled(functools.partial(partial_target, 1, d=True))
    assert "d" in t.hidden
    assert t.hidden == frozenset({"a", "d"})
    # the bound values are the partial's business: validate() does not return them
    assert t.validate({"b": "x"}) == {"b": "x", "c": 1.0}


def test_partial_bound_keyword_cannot_be_supplied_by_the_model() -> None:
    t = compiled(functools.partial(partial_target, d=True))
    with pytest.raises(ArgumentError, match=r"\bd: Extra inputs"):
        t.validate({"a": 1, "b": "x", "d": False})


def test_nested_partials() -> None:
    inner = functools.partial(partial_target, c=2.0)
    t = compiled(functools.partial(inner, 7))
    assert set(t.parameters["properties"]) == {"b", "d"}
    assert t.hidden == frozenset({"a", "c"})


class Greeter:
    """A class whose methods and instances become tools."""

    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    @tool(read_only=True)
    def greet(self, name: str, times: int = 1) -> str:
        """Greet someone.

        Args:
            name: Who to greet.
            times: How often.
        """
        return " ".join([f"{self.greeting} {name}"] * times)

    async def agreet(self, name: str) -> str:
        return name


def test_bound_method_schema_has_no_self() -> None:
    t = compiled(Greeter("hi").greet)
    assert t.name == "greet"
    assert t.parameters == obj(
        {
            "name": {"type": "string", "description": "Who to greet."},
            "times": {"type": "integer", "default": 1, "description": "How often."},
        },
        ["name"],
    )
    assert t.spec.read_only is True
    assert t.description == "Greet someone."


def test_bound_method_invoke_uses_the_instance() -> None:
    t = compiled(Greeter("hello").greet)
    assert t.invoke(t.validate({"name": "Ann", "times": "2"}), None) == "hello Ann hello Ann"


class Adder:
    def __call__(self, a: int, b: int = 1) -> int:
        return a + b


class AsyncAdder:
    async def __call__(self, a: int) -> int:
        return a


def test_callable_object_schema_comes_from_call() -> None:
    t = compiled(Adder())
    assert t.name == "Adder"
    assert t.parameters == obj(
        {"a": {"type": "integer"}, "b": {"type": "integer", "default": 1}}, ["a"]
    )
    assert t.invoke(t.validate({"a": "2"}), None) == 3


def sync_fn(x: int) -> int:
    return x


async def async_fn(x: int) -> int:
    return x


def sync_gen(x: int):
    yield x


async def async_gen(x: int):
    yield x


@tool(external=True)
def external_fn(x: int) -> int:
    return x


@pytest.mark.parametrize(
    ("fn", "mode"),
    [
        pytest.param(sync_fn, Mode.SYNC, id="sync"),
        pytest.param(async_fn, Mode.ASYNC, id="async"),
        pytest.param(sync_gen, Mode.SYNC_GEN, id="sync-generator"),
        pytest.param(async_gen, Mode.ASYNC_GEN, id="async-generator"),
        pytest.param(Adder(), Mode.SYNC, id="sync-call-object"),
        pytest.param(AsyncAdder(), Mode.ASYNC, id="async-call-object"),
        pytest.param(functools.partial(async_fn, 1), Mode.ASYNC, id="partial-of-async"),
        pytest.param(functools.partial(async_gen), Mode.ASYNC_GEN, id="partial-of-async-gen"),
        pytest.param(Greeter("hi").agreet, Mode.ASYNC, id="async-bound-method"),
        pytest.param(external_fn, Mode.EXTERNAL, id="external"),
    ],
)
def test_mode_detection(fn: Any, mode: Mode) -> None:
    assert compiled(fn).mode is mode


# -- 6. context injection ----------------------------------------------------------------------


def lookup(
    query: str,
    db: Database,
    user: Annotated[User, FromContext],
    emit: Emitter,
    ctx: ToolContext,
    call: ToolCall,
    cache: Optional[Database] = None,  # noqa: UP045 (testing Optional)
    other: Database | None = None,
) -> None: ...


def test_injected_parameters_are_left_out_of_the_schema() -> None:
    assert params(lookup) == obj({"query": {"type": "string"}}, ["query"])


def test_injections_are_listed_with_type_and_default() -> None:
    found = {i.name: (i.type, i.default) for i in compiled(lookup).injections}
    assert found == {
        "db": (Database, REQUIRED),
        "user": (User, REQUIRED),
        "emit": (Emitter, REQUIRED),
        "ctx": (ToolContext, REQUIRED),
        "call": (ToolCall, REQUIRED),
        "cache": (Database, None),
        "other": (Database, None),
    }


def test_injected_parameters_cannot_be_supplied_by_the_model() -> None:
    with pytest.raises(ArgumentError, match=r"\bdb: Extra inputs"):
        compiled(lookup).validate({"query": "q", "db": {}})


def test_tool_without_injections_needs_no_context() -> None:
    assert compiled(lookup).needs_context is True
    assert compiled(list_int).needs_context is False


def test_from_context_on_a_describable_type_forces_injection() -> None:
    def plain(user: User) -> None: ...

    def forced(user: Annotated[User, FromContext]) -> None: ...

    assert set(params(plain)["properties"]) == {"user"}
    assert params(forced) == obj({})
    assert [i.name for i in compiled(forced).injections] == ["user"]


# -- 7. registration-time errors ---------------------------------------------------------------


def positional_only(a: int, /, b: int) -> None: ...


def injected_positional_only(db: Database, /, query: str) -> None: ...


def list_of_plain(items: list[Database]) -> None: ...


def dict_of_plain(items: dict[str, Database]) -> None: ...


def from_context_not_a_class(numbers: Annotated[list[int], FromContext]) -> None: ...


@tool(paths={"nope": "read"})
def paths_unknown(path: str) -> None: ...


@pytest.mark.parametrize(
    ("register", "fragments"),
    [
        pytest.param(
            lambda: compiled(partial_target, presets={"nope": 1}),
            ["'partial_target'", "'nope'"],
            id="preset-names-no-parameter",
        ),
        pytest.param(
            lambda: compiled(positional_only),
            ["'positional_only'", "'a'", "positional-only"],
            id="positional-only",
        ),
        pytest.param(
            lambda: compiled(injected_positional_only),
            ["'injected_positional_only'", "'db'", "positional-only"],
            id="positional-only-injected-parameter",
        ),
        pytest.param(
            lambda: compiled(list_of_plain),
            ["'list_of_plain'", "'items'"],
            id="list-of-plain-class",
        ),
        pytest.param(
            lambda: compiled(dict_of_plain),
            ["'dict_of_plain'", "'items'"],
            id="dict-of-plain-class",
        ),
        pytest.param(
            lambda: compiled(from_context_not_a_class),
            ["'from_context_not_a_class'", "'numbers'"],
            id="from-context-on-a-non-class",
        ),
        pytest.param(
            lambda: compiled(paths_unknown),
            ["'paths_unknown'", "'nope'"],
            id="paths-names-no-parameter",
        ),
        pytest.param(
            lambda: compiled(sync_fn, name="has space"),
            ["'has space'"],
            id="name-with-space",
        ),
        pytest.param(
            lambda: compiled(sync_fn, name="x" * 65),
            ["x" * 65],
            id="name-too-long",
        ),
        pytest.param(
            lambda: compiled(lambda x: x),
            ["'<lambda>'"],
            id="lambda-needs-a-name",
        ),
        pytest.param(
            lambda: compiled(42),
            ["of type int", "not callable"],  # its type, never its contents (a secret, say)
            id="not-callable",
        ),
    ],
)
def test_registration_errors(register: Any, fragments: list[str]) -> None:
    with pytest.raises(ToolDefinitionError) as info:
        register()
    for fragment in fragments:
        assert fragment in str(info.value)


def test_longest_valid_name_is_accepted() -> None:
    assert compiled(sync_fn, name="x" * 64).name == "x" * 64
    assert compiled(sync_fn, name="a-b_C9").name == "a-b_C9"


@pytest.mark.parametrize("timeout", [0, -1.5, math.nan, math.inf])
def test_bad_timeout_is_rejected(timeout: float) -> None:
    with pytest.raises(ToolDefinitionError, match="timeout"):
        tool(timeout=timeout)(slow)


def test_bad_path_access_is_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match="execute"):
        tool(paths={"p": "execute"})(slow)  # type: ignore[dict-item]


def slow(p: str) -> None: ...


def test_bad_timeout_error_names_the_tool() -> None:
    with pytest.raises(ToolDefinitionError) as info:
        tool(timeout=0)(slow)
    assert "slow" in str(info.value)


def test_bad_path_access_error_names_the_tool() -> None:
    with pytest.raises(ToolDefinitionError) as info:
        tool(paths={"p": "execute"})(slow)  # type: ignore[dict-item]
    assert "slow" in str(info.value)


def test_tool_base_bad_timeout_error_names_the_tool() -> None:
    class Slow(ModelTool):
        name = "slow_tool"
        timeout = 0

    with pytest.raises(ToolDefinitionError) as info:
        compile_tool_base(Slow())
    assert "slow_tool" in str(info.value)
    assert "timeout" in str(info.value)


def test_tool_definition_error_is_a_type_error() -> None:
    # registration mistakes are programming errors; callers may catch TypeError
    with pytest.raises(TypeError):
        compiled(positional_only)


# -- 8. ToolBase -------------------------------------------------------------------------------


class ReadArgs(BaseModel):
    """Model docstring: must not become the tool description."""

    path: str
    mode: Literal["r", "w"] = "r"
    root: str


class ModelTool(ToolBase):
    """Read a file from the workspace."""

    name = "read_file"
    args_model = ReadArgs

    def run(self, args: dict[str, Any], ctx: Any) -> Any:
        return args


def test_args_model_schema_and_description() -> None:
    t = compile_tool_base(ModelTool())
    assert t.name == "read_file"
    assert t.description == "Read a file from the workspace."
    assert t.parameters == {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "mode": {"type": "string", "enum": ["r", "w"], "default": "r"},
            "root": {"type": "string"},
        },
        "required": ["path", "root"],
    }


def test_args_model_presets_hidden_and_merged_before_validation() -> None:
    t = compile_tool_base(ModelTool(), presets={"root": "/srv"})
    assert t.parameters == {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "mode": {"type": "string", "enum": ["r", "w"], "default": "r"},
        },
        "required": ["path"],
    }
    assert t.hidden == frozenset({"root"})
    assert t.validate({"path": "a", "mode": "w"}) == {"path": "a", "mode": "w", "root": "/srv"}


def test_args_model_presets_win_over_model_input() -> None:
    t = compile_tool_base(ModelTool(), presets={"root": "/srv"})
    assert t.validate({"path": "a", "root": "/etc"})["root"] == "/srv"


def test_args_model_wrong_type_raises_argument_error() -> None:
    t = compile_tool_base(ModelTool())
    with pytest.raises(ArgumentError) as info:
        t.validate({"path": "a", "root": "/", "mode": "x"})
    assert "read_file" in str(info.value)
    assert "mode:" in str(info.value)


def test_args_model_preset_naming_no_field_is_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match="'nope'"):
        compile_tool_base(ModelTool(), presets={"nope": 1})


def test_args_model_must_be_a_pydantic_model() -> None:
    class Bad(ModelTool):
        args_model = dict  # type: ignore[assignment]

    with pytest.raises(ToolDefinitionError, match="args_model"):
        compile_tool_base(Bad())


def test_explicit_description_attribute_beats_class_docstring() -> None:
    class Described(ModelTool):
        """Class docstring."""

        description = "Attribute text."

    assert compile_tool_base(Described()).description == "Attribute text."


COUNT_SCHEMA = {
    "type": "object",
    "title": "CountArgs",
    "properties": {
        "n": {"type": "integer", "title": "N", "minimum": 0},
        "label": {"type": "string"},
    },
    "required": ["n"],
}


class SchemaTool(ToolBase):
    name = "count"
    description = "Count up to n."
    input_schema = COUNT_SCHEMA

    async def run(self, args: dict[str, Any], ctx: Any) -> Any:
        return args


def test_input_schema_is_used_with_titles_removed() -> None:
    t = compile_tool_base(SchemaTool())
    assert t.mode is Mode.ASYNC
    assert t.description == "Count up to n."
    assert t.parameters == {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0}, "label": {"type": "string"}},
        "required": ["n"],
    }
    assert COUNT_SCHEMA["title"] == "CountArgs"  # the author's dict is not modified


def test_input_schema_validates_with_jsonschema() -> None:
    t = compile_tool_base(SchemaTool())
    assert t.validate({"n": 3}) == {"n": 3}
    with pytest.raises(ArgumentError) as info:
        t.validate({"n": "three"})
    assert "count" in str(info.value)
    assert "n: 'three' is not of type 'integer'" in str(info.value)
    with pytest.raises(ArgumentError, match="n: -1 is less than the minimum"):
        t.validate({"n": -1})
    with pytest.raises(ArgumentError, match="'n' is a required property"):
        t.validate({})


def test_input_schema_presets_hidden_and_merged() -> None:
    t = compile_tool_base(SchemaTool(), presets={"label": "fixed"})
    assert set(t.parameters["properties"]) == {"n"}
    assert t.validate({"n": 1}) == {"n": 1, "label": "fixed"}


def test_invalid_input_schema_is_a_definition_error() -> None:
    class Broken(SchemaTool):
        input_schema = {"type": "object", "properties": {"n": {"type": "integr"}}}  # noqa: RUF012

    with pytest.raises(ToolDefinitionError, match=r"'count'.*not a valid JSON Schema"):
        compile_tool_base(Broken())


def test_input_schema_must_describe_an_object() -> None:
    class Listy(SchemaTool):
        input_schema = {"type": "array"}  # noqa: RUF012

    with pytest.raises(ToolDefinitionError, match="object"):
        compile_tool_base(Listy())


def test_tool_base_without_run_is_rejected_unless_external() -> None:
    class NoRun(ToolBase):
        name = "no_run"
        args_model = ReadArgs

    with pytest.raises(ToolDefinitionError, match=r"'no_run'.*run"):
        compile_tool_base(NoRun())

    class Remote(NoRun):
        external = True

    assert compile_tool_base(Remote()).mode is Mode.EXTERNAL


def test_tool_base_without_any_schema_is_rejected() -> None:
    class Schemaless(ToolBase):
        name = "schemaless"

        def run(self, args: dict[str, Any], ctx: Any) -> Any:
            return None

    with pytest.raises(ToolDefinitionError, match=r"'schemaless'.*args_model.*input_schema"):
        compile_tool_base(Schemaless())


def test_tool_base_generator_run_streams() -> None:
    class Streamer(ModelTool):
        def run(self, args: dict[str, Any], ctx: Any) -> Any:
            yield args

    assert compile_tool_base(Streamer()).mode is Mode.SYNC_GEN


# -- 9. laziness -------------------------------------------------------------------------------


def test_model_is_built_on_first_parameters_access_and_cached() -> None:
    t = compiled(list_of_models)
    assert isinstance(t.schema, ArgumentSchema)
    assert t.schema._model is None
    assert t.description == ""  # the description alone does not need the model
    assert t.schema._model is None
    first = t.parameters
    model = t.schema._model
    assert model is not None
    assert t.parameters is first
    assert t.schema._model is model


def test_model_is_built_on_first_validate_and_reused() -> None:
    t = compiled(scalars)
    assert t.schema._model is None
    t.validate({"text": "t", "count": 1, "ratio": 1.0, "flag": True})
    model = t.schema._model
    assert model is not None
    t.validate({"text": "u", "count": 2, "ratio": 2.0, "flag": False})
    _ = t.parameters
    assert t.schema._model is model


def test_registering_many_tools_builds_no_models() -> None:
    tools = [compiled(fn) for fn, *_ in (p.values for p in SCHEMA_TABLE)]
    assert all(t.schema._model is None for t in tools)


def test_model_schema_json_is_cached() -> None:
    t = compile_tool_base(ModelTool())
    assert t.parameters is t.parameters


# -- 10. property: validate() returns coerced values or raises ArgumentError ------------------


def typed(a: int, b: str, c: list[int]) -> None: ...


TYPED = compiled(typed)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.integers().map(str),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)

# values a lax int field accepts, in their several spellings
lax_ints = st.one_of(
    st.integers(),
    st.integers().map(str),
    st.booleans(),
    st.integers(-(10**6), 10**6).map(float),
)

argument_dicts = st.one_of(
    # anything at all, mostly rejected
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]) | st.text(max_size=3), json_values),
    # the right keys, with values that are usually acceptable
    st.fixed_dictionaries(
        {
            "a": lax_ints | json_values,
            "b": st.text() | json_values,
            "c": st.lists(lax_ints, max_size=4) | json_values,
        },
        optional={"extra": json_values},
    ),
)


INVALID = object()


def as_int(value: Any) -> Any:
    """What a lax int field may turn ``value`` into, or INVALID when it must be rejected."""
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() else INVALID
    if isinstance(value, str):
        if re.fullmatch(r"[+-]?[0-9]+", value):
            return int(value)
        try:  # other spellings ("5.0", " 5 ", "1_000") may or may not be accepted
            number = Decimal(value.strip())
        except InvalidOperation:
            return INVALID
        return int(number) if number.is_finite() and number == number.to_integral() else INVALID
    return INVALID


def is_canonical(arguments: dict[str, Any]) -> bool:
    """Exactly a, b, c with values of exactly the declared types."""
    return (
        set(arguments) == {"a", "b", "c"}
        and type(arguments["a"]) is int
        and type(arguments["b"]) is str
        and type(arguments["c"]) is list
        and all(type(x) is int for x in arguments["c"])
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argument_dicts)
def test_validate_returns_coerced_values_or_raises_argument_error(arguments: dict) -> None:
    try:
        result = TYPED.validate(arguments)
    except ArgumentError:
        assert not is_canonical(arguments), "well-typed arguments were rejected"
        return
    # any other exception type propagates and fails the test
    assert set(arguments) == {"a", "b", "c"}
    assert set(result) == {"a", "b", "c"}
    assert type(result["a"]) is int
    assert result["a"] == as_int(arguments["a"])
    assert type(arguments["b"]) is str
    assert result["b"] == arguments["b"]
    assert type(arguments["c"]) is list
    assert all(type(x) is int for x in result["c"])
    assert result["c"] == [as_int(x) for x in arguments["c"]]
    if is_canonical(arguments):
        assert result == arguments


@settings(max_examples=100, deadline=None)
@given(st.fixed_dictionaries({"a": st.integers(), "b": st.text(), "c": st.lists(st.integers())}))
def test_well_typed_arguments_come_back_unchanged(arguments: dict) -> None:
    assert TYPED.validate(arguments) == arguments
