"""Registering a function the way its signature alone cannot describe it.

1. ``Toolkit.add(fn, json_schema=...)``: a ``**kwargs`` wrapper (a sub-agent's, say) is
   registered with the schema it is given, the bare parameters schema or the OpenAI tool shape
   (whose name and description then name and describe the tool). That schema is what the model
   sees and what calls are validated against; presets stay hidden and forced; a schema that
   cannot be used is a `ToolDefinitionError` (a `TypeError`) saying what is wrong.
2. ``include_long_description`` (default True), ``include_var_positional`` and
   ``include_var_keyword`` (default False): the docstring's long part in the description, and
   ``*args`` (an array) and ``**kwargs`` (further properties) in the schema, passed through to
   the function.

Every call runs through a real `Engine`; the property tests use the compiled tool's own
validate-and-invoke path, the one the engine takes.
"""

from __future__ import annotations

import inspect
import re
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.engine import Engine, ToolBase, ToolCall, ToolDefinitionError, Toolkit, ToolResult
from stockade.engine.injection import ToolContext
from stockade.engine.tools import compile_any, compile_function
from stockade.sandbox import VirtualFS

QUERY_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to ask."},
        "depth": {"type": "integer", "minimum": 1},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def subagent_schema(name: str = "researcher") -> dict[str, Any]:
    """The registration schema a sub-agent factory hands back: the OpenAI tool shape."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": "Ask the research sub-agent a question.",
            "parameters": QUERY_PARAMETERS,
        },
    }


class SubAgent:
    """A sub-agent's wrapper: it takes whatever the schema describes, as keywords."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    async def __call__(self, **kwargs: Any) -> str:
        self.received.append(kwargs)
        return f"answer to {kwargs.get('query')!r}"


async def run(toolkit: Toolkit, name: str, arguments: dict[str, Any] | str) -> ToolResult:
    async with Engine(toolkit) as engine:
        return await engine.call(ToolCall(name=name, arguments=arguments))


# -- 1. an explicit json_schema ----------------------------------------------------------------


async def test_a_kwargs_wrapper_is_registered_with_the_openai_schema_it_is_given() -> None:
    """ "register the sub-agent tool with the json_schema it returns; never derive the schema
    from the wrapper's signature again (the wrapper has no business parameters), or the fields
    its InputModel defines, such as {query}, are lost": the tool's name, description and
    parameters are the given schema's, and a call with them reaches the wrapper."""
    toolkit, agent = Toolkit(), SubAgent()
    registered = toolkit.add(agent, json_schema=subagent_schema())

    assert registered.name == "researcher"
    assert toolkit.schemas("openai") == [subagent_schema()]
    anthropic = toolkit.schemas("anthropic")[0]
    assert anthropic["input_schema"] == QUERY_PARAMETERS

    result = await run(toolkit, "researcher", {"query": "tides", "depth": 2})
    assert result.status == "ok", result.text
    assert result.text == "answer to 'tides'"
    assert agent.received == [{"query": "tides", "depth": 2}]


async def test_without_a_schema_the_wrapper_takes_no_argument_at_all() -> None:
    """The case the given schema exists for: read from the signature, a ``**kwargs`` wrapper
    shows an empty schema and every argument is refused."""
    toolkit, agent = Toolkit(), SubAgent()
    toolkit.add(agent, name="researcher")
    assert toolkit.get("researcher").parameters["properties"] == {}
    result = await run(toolkit, "researcher", {"query": "tides"})
    assert result.status == "error"
    assert agent.received == []


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({}, "'query' is a required property"),
        ({"query": 7}, "query: 7 is not of type 'string'"),
        ({"query": "x", "depth": 0}, "depth: 0 is less than the minimum of 1"),
        ({"query": "x", "colour": "red"}, "('colour' was unexpected)"),
        ('{"query": ', "not valid JSON"),
    ],
)
async def test_calls_are_validated_against_the_given_schema(
    arguments: dict[str, Any] | str, complaint: str
) -> None:
    """ "the given schema is what calls are validated against": a call the schema refuses is
    an argument error naming the problem, and the function never runs."""
    toolkit, agent = Toolkit(), SubAgent()
    toolkit.add(agent, json_schema=subagent_schema())
    result = await run(toolkit, "researcher", arguments)
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ArgumentError"
    assert complaint in result.error.message
    assert agent.received == []


async def test_a_bare_parameters_schema_keeps_the_functions_name_and_docstring() -> None:
    """ "accept the bare parameters schema too": the schema's properties are shown and
    checked; the name and description come from the function, as without a schema."""

    def lookup(**fields: Any) -> dict[str, Any]:
        """Look a record up.

        Any field of the record may be given."""
        return fields

    toolkit = Toolkit()
    toolkit.add(lookup, json_schema=QUERY_PARAMETERS)
    entry = toolkit.schemas("openai")[0]["function"]
    assert entry == {
        "name": "lookup",
        "description": "Look a record up.\n\nAny field of the record may be given.",
        "parameters": QUERY_PARAMETERS,
    }
    result = await run(toolkit, "lookup", {"query": "q"})
    assert result.status == "ok"
    assert result.tool_metadata == {}
    assert '"query"' in result.text


async def test_presets_stay_hidden_and_forced_under_a_given_schema() -> None:
    """ "preset_kwargs are not shown to the model; at call time they are merged with the
    model's arguments": a preset property leaves the schema (and its required list), a model's
    value for it is ignored, and the function gets the preset, even one the schema never
    described."""
    schema = {
        "type": "object",
        "properties": {"query": {"type": "string"}, "api_key": {"type": "string"}},
        "required": ["query", "api_key"],
        "additionalProperties": False,
    }
    toolkit, agent = Toolkit(), SubAgent()
    toolkit.add(
        agent,
        name="search",
        json_schema=schema,
        presets={"api_key": "SECRET", "region": "eu"},
    )
    shown = toolkit.get("search").parameters
    assert shown["properties"] == {"query": {"type": "string"}}
    assert shown["required"] == ["query"]

    result = await run(toolkit, "search", {"query": "q", "api_key": "stolen"})
    assert result.status == "ok", result.text
    assert agent.received == [{"query": "q", "api_key": "SECRET", "region": "eu"}]
    assert result.metadata["ignored_arguments"] == ["api_key"]


def test_name_and_description_given_at_registration_beat_the_schemas() -> None:
    """The program's own words win: ``name=`` and ``description=`` over the OpenAI shape's."""
    toolkit = Toolkit()
    tool = toolkit.add(SubAgent(), json_schema=subagent_schema(), name="ask", description="Ask it.")
    assert (tool.name, tool.description) == ("ask", "Ask it.")
    assert tool.parameters == QUERY_PARAMETERS


def test_a_given_schema_survives_recompiling_with_new_presets() -> None:
    """A compiled tool handed to another toolkit with presets of its own is recompiled from
    its source; the schema it was given goes with it."""
    compiled = compile_any(SubAgent(), json_schema=subagent_schema())
    toolkit = Toolkit()
    again = toolkit.add(compiled, presets={"depth": 3})
    assert again.name == "researcher"
    assert again.parameters["properties"] == {"query": QUERY_PARAMETERS["properties"]["query"]}
    assert again.presets == {"depth": 3}


def kwargs_only(**kwargs: Any) -> None: ...


def fixed(query: str) -> None: ...


def needs_more(query: str, limit: int) -> None: ...


def with_files(query: str, fs: VirtualFS) -> None: ...


@pytest.mark.parametrize(
    ("fn", "schema", "complaint"),
    [
        (kwargs_only, ["query"], "json_schema must be a dict"),
        (kwargs_only, {"type": "array"}, "json_schema must describe an object"),
        (
            kwargs_only,
            {"type": "object", "properties": {"q": {"type": "strng"}}},
            "json_schema is not a valid JSON Schema",
        ),
        (
            kwargs_only,
            {"type": "function", "function": {"name": "x", "parameters": "query"}},
            "function.parameters",
        ),
        (kwargs_only, {"type": "function", "parameters": {}}, "function: Field required"),
        (
            kwargs_only,
            {"type": "function", "function": {"name": "no spaces", "parameters": {}}},
            "invalid tool name 'no spaces'",
        ),
        (
            fixed,
            {"type": "object", "properties": {"query": {}, "extra": {}}},
            "property 'extra', which the function does not take",
        ),
        (
            needs_more,
            {"type": "object", "properties": {"query": {}}},
            "the function needs 'limit', which json_schema does not describe",
        ),
        (
            with_files,
            {"type": "object", "properties": {"query": {}, "fs": {}}},
            "'fs', which the function takes from the context",
        ),
    ],
)
def test_a_schema_that_cannot_be_used_is_a_type_error_saying_why(
    fn: Any, schema: Any, complaint: str
) -> None:
    """ "TypeError (the json_schema is malformed)": refused at registration, naming the tool
    and what is wrong, and nothing is registered."""
    toolkit = Toolkit()
    with pytest.raises(ToolDefinitionError, match=re.escape(complaint)) as caught:
        toolkit.add(fn, json_schema=schema)
    assert isinstance(caught.value, TypeError)
    assert len(toolkit) == 0


def test_a_tool_base_declares_its_own_arguments() -> None:
    """A `ToolBase` describes its arguments itself; a json_schema or the var-argument flags
    given for one are refused rather than silently ignored."""

    class Echo(ToolBase):
        input_schema = MappingProxyType({"type": "object", "properties": {"text": {}}})

        def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
            return str(args["text"])

    with pytest.raises(ToolDefinitionError, match="json_schema is for functions"):
        Toolkit().add(Echo(), json_schema=QUERY_PARAMETERS)
    with pytest.raises(ToolDefinitionError, match="include_var_positional and"):
        Toolkit().add(Echo(), include_var_keyword=True)


# -- 2. the long description, *args and **kwargs ------------------------------------------------


def report(title: str, *sections: str, **labels: str) -> str:
    """Build a report
    from its sections.

    The sections are joined under the title, each on its own line.

    Args:
        title: The report's title.
        *sections: The sections, in order.
        **labels: Labels put after the title.
    """
    tags = " ".join(f"[{k}={v}]" for k, v in sorted(labels.items()))
    return "\n".join([f"{title} {tags}".strip(), *sections])


def test_the_long_description_is_included_unless_asked_not_to() -> None:
    """ "include_long_description controls whether the docstring's long description is written
    into the schema": by default the summary and the long part; with False the summary alone
    (all of it, though it is wrapped onto two lines)."""
    toolkit = Toolkit()
    full = toolkit.add(report, name="full")
    short = toolkit.add(report, name="short", include_long_description=False)
    assert full.description == (
        "Build a report\nfrom its sections.\n\n"
        "The sections are joined under the title, each on its own line."
    )
    assert short.description == "Build a report\nfrom its sections."
    assert toolkit.schemas("openai")[1]["function"]["description"] == short.description


def test_a_tool_base_docstring_can_be_cut_to_its_summary() -> None:
    class Probe(ToolBase):
        """Probe a host.

        Sends one packet and waits for the answer."""

        input_schema = MappingProxyType({"type": "object", "properties": {}})

        def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
            return "up"

    toolkit = Toolkit()
    assert toolkit.add(Probe(), name="a").description == inspect.getdoc(Probe)
    assert toolkit.add(Probe(), name="b", include_long_description=False).description == (
        "Probe a host."
    )


def test_var_arguments_are_left_out_of_the_schema_by_default() -> None:
    """ "include_var_positional / include_var_keyword control whether *args / **kwargs are
    written into the schema" (default: not): only ``title`` is shown, and nothing more is
    accepted."""
    parameters = Toolkit().add(report).parameters
    assert parameters == {
        "type": "object",
        "properties": {"title": {"type": "string", "description": "The report's title."}},
        "required": ["title"],
        "additionalProperties": False,
    }


def test_shown_var_arguments_are_an_array_and_further_properties() -> None:
    """With both flags, ``*sections`` is an array of its annotation (described by the
    docstring's ``*sections`` entry, not required) and ``**labels`` admits further properties
    of its annotation."""
    parameters = (
        Toolkit().add(report, include_var_positional=True, include_var_keyword=True).parameters
    )
    assert parameters["properties"]["sections"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "The sections, in order.",
    }
    assert parameters["required"] == ["title"]
    assert parameters["additionalProperties"] == {"type": "string"}


async def test_var_arguments_reach_the_function_through_the_engine() -> None:
    """ "passed through to the function": the array arrives as positional arguments after the
    ones before it, the further properties as keywords."""
    toolkit = Toolkit()
    toolkit.add(report, include_var_positional=True, include_var_keyword=True)
    arguments = {"title": "Q3", "sections": ["sales up", "costs down"], "team": "north"}
    result = await run(toolkit, "report", arguments)
    assert result.status == "ok", result.text
    assert result.text == "Q3 [team=north]\nsales up\ncosts down"

    bare = await run(toolkit, "report", {"title": "Q4"})
    assert bare.text == "Q4"


async def test_without_the_flags_var_arguments_are_refused() -> None:
    toolkit = Toolkit()
    toolkit.add(report)
    result = await run(toolkit, "report", {"title": "Q3", "sections": ["a"]})
    assert result.status == "error"
    assert result.error is not None
    assert "sections: Extra inputs are not permitted" in result.error.message


async def test_further_properties_are_validated_by_the_kwargs_annotation() -> None:
    toolkit = Toolkit()
    toolkit.add(report, include_var_keyword=True)
    result = await run(toolkit, "report", {"title": "Q3", "team": 7})
    assert result.status == "error"
    assert result.error is not None
    assert "team: Input should be a valid string" in result.error.message


async def test_an_untyped_kwargs_admits_any_json_and_presets_still_win() -> None:
    """An unannotated ``**kwargs`` shows ``additionalProperties: true``; a preset is never
    the model's to set, through ``**kwargs`` either."""
    seen: list[dict[str, Any]] = []

    def record(event: str, **fields):  # type: ignore[no-untyped-def]
        seen.append({"event": event, **fields})
        return "kept"

    toolkit = Toolkit()
    tool = toolkit.add(record, include_var_keyword=True, presets={"source": "engine"})
    assert tool.parameters["additionalProperties"] is True
    result = await run(toolkit, "record", {"event": "login", "user": {"id": 1}, "source": "forged"})
    assert result.status == "ok", result.text
    assert seen == [{"event": "login", "user": {"id": 1}, "source": "engine"}]


async def test_a_preset_before_star_args_is_passed_in_its_place() -> None:
    """A parameter before ``*args`` is passed positionally when the array is, whatever set it
    (here a preset)."""

    def join(separator: str, *parts: str) -> str:
        return separator.join(parts)

    toolkit = Toolkit()
    toolkit.add(join, include_var_positional=True, presets={"separator": "-"})
    result = await run(toolkit, "join", {"parts": ["a", "b", "c"]})
    assert result.text == "a-b-c"


@settings(max_examples=60, deadline=None)
@given(
    sections=st.lists(st.text(max_size=8), max_size=6),
    labels=st.dictionaries(
        st.text(min_size=1, max_size=6).filter(lambda k: k not in ("title", "items")),
        st.text(max_size=6),
        max_size=4,
    ),
)
def test_what_the_model_sends_is_what_the_function_gets(
    sections: list[str], labels: dict[str, str]
) -> None:
    """For any array and any further properties, the function receives exactly them: the
    array as its ``*args`` in order, the properties as its ``**kwargs``."""
    received: list[tuple[tuple[str, ...], dict[str, str]]] = []

    def capture(title: str, *items: str, **extra: str) -> None:
        received.append((items, extra))

    tool = compile_function(capture, include_var_positional=True, include_var_keyword=True)
    kwargs = tool.validate({"title": "t", "items": sections, **labels})
    tool.invoke(kwargs, None)
    assert received == [(tuple(sections), labels)]
