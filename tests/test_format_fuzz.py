"""Every reader of outside input in `stockade.engine.formats` gives calls or a `FormatError`,
whatever it is handed: any JSON-like value (wrong types at every level, None, floats, bools,
huge ints, deep nesting, lone surrogates, NULs), any text or bytes, any file.

The property tests feed arbitrary values; the examples below them are the inputs once found to
escape as another exception, each kept as a test of its own. How the XML reader's time grows
with its input is measured by benchmarks/bench_formats.py, not asserted here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.engine import FormatError, ToolCall, Toolkit, tool
from stockade.engine.formats import anthropic, openai, xml
from stockade.engine.formats.transcripts import TranscriptError, load_transcript

# -- what comes out ------------------------------------------------------------------------------


def calls_or_format_error(read: Callable[[Any], list[ToolCall]], given: Any) -> list[ToolCall]:
    """What ``read(given)`` gives, checked to be well-formed calls; a `FormatError` (with a
    message) counts as no calls. Any other exception fails the test."""
    outcome: list[ToolCall] | FormatError
    try:
        outcome = read(given)
    except FormatError as exc:
        outcome = exc
    if isinstance(outcome, FormatError):
        assert str(outcome), "a FormatError must say what was wrong"
        return []
    assert isinstance(outcome, list)
    for call in outcome:
        assert isinstance(call, ToolCall)
        assert isinstance(call.name, str)
        assert call.name
        assert isinstance(call.id, str)
        assert call.id
        assert isinstance(call.arguments, str | Mapping)
    return outcome


# -- what goes in --------------------------------------------------------------------------------

# text with everything in it: lone surrogates ("\ud800") and NULs included
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=20)
# the words of the formats, so that generated values reach past the first check
WORDS = [
    "choices", "message", "tool_calls", "output", "type", "function", "name", "arguments",
    "id", "call_id", "content", "input", "function_call", "tool_use", "text", "role",
    "assistant", "subject",
]  # fmt: skip
KEYS = st.sampled_from(WORDS) | ANY_TEXT
# built, not listed: a strategy that holds a 5,000-digit int cannot even be shown by repr()
HUGE_INTS = st.builds(
    lambda sign, digits: sign * 10**digits, st.sampled_from([1, -1]), st.sampled_from([19, 5000])
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | HUGE_INTS
    | st.floats()  # NaN and infinities included
    | ANY_TEXT
    | st.sampled_from(WORDS)
)


def json_like(scalars: st.SearchStrategy[Any] = SCALARS) -> st.SearchStrategy[Any]:
    """Values as a JSON parser hands them over (and a little more: huge ints, NaN, surrogates),
    nested a few levels, their objects keyed mostly by the formats' own words."""
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
        max_leaves=25,
    )


ANY_VALUE = json_like(SCALARS | st.binary(max_size=8))


def shaped(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Messages of each format, each field either what the format wants or ``inner``: the
    shapes that get furthest before a wrong type is met (and often all the way, to calls)."""
    name = st.sampled_from(["search", "typed"]) | ANY_TEXT | inner
    call_id = ANY_TEXT | inner
    arguments = st.dictionaries(KEYS, inner, max_size=3) | ANY_TEXT | inner
    function = st.fixed_dictionaries({"name": name}, optional={"arguments": arguments}) | inner
    chat = st.fixed_dictionaries(
        {"type": st.just("function") | inner, "function": function}, optional={"id": call_id}
    )
    responses = st.fixed_dictionaries(
        {"type": st.just("function_call"), "name": name},
        optional={"call_id": call_id, "id": call_id, "arguments": arguments},
    )
    other = st.fixed_dictionaries({"type": st.sampled_from(["message", "reasoning", "text"])})
    items = st.lists(chat | responses | other | inner, max_size=3)
    tool_use = st.fixed_dictionaries(
        {"type": st.just("tool_use"), "name": name}, optional={"id": call_id, "input": arguments}
    )
    blocks = st.lists(tool_use | other | inner, max_size=3)
    message = st.fixed_dictionaries({"tool_calls": items}) | inner
    return st.one_of(
        st.fixed_dictionaries({"tool_calls": items | inner}),
        st.fixed_dictionaries({"output": items | inner}),
        st.fixed_dictionaries(
            {
                "choices": st.lists(st.fixed_dictionaries({"message": message}) | inner, max_size=2)
                | inner
            }
        ),
        st.fixed_dictionaries({"content": blocks | inner}),
        items,
        blocks,
        responses,
    )


FUZZ = settings(max_examples=400, deadline=None)


# == 1. OpenAI and Anthropic: any value ===========================================================


@FUZZ
@given(ANY_VALUE)
def test_openai_gives_calls_or_a_format_error_for_any_value(value: Any) -> None:
    calls_or_format_error(openai.parse_tool_calls, value)


@FUZZ
@given(shaped(ANY_VALUE))
def test_openai_gives_calls_or_a_format_error_for_any_message_shape(value: Any) -> None:
    calls_or_format_error(openai.parse_tool_calls, value)


@FUZZ
@given(ANY_VALUE)
def test_anthropic_gives_calls_or_a_format_error_for_any_value(value: Any) -> None:
    calls_or_format_error(anthropic.parse_tool_calls, value)


@FUZZ
@given(shaped(ANY_VALUE))
def test_anthropic_gives_calls_or_a_format_error_for_any_message_shape(value: Any) -> None:
    calls_or_format_error(anthropic.parse_tool_calls, value)


@FUZZ
@given(shaped(ANY_VALUE))
def test_a_parsed_call_is_written_as_xml_or_refused_with_a_format_error(value: Any) -> None:
    for read in (openai.parse_tool_calls, anthropic.parse_tool_calls):
        for call in calls_or_format_error(read, value):
            written: str | FormatError
            try:
                written = xml.render_call(call)
            except FormatError as exc:
                written = exc
            if isinstance(written, FormatError):
                assert "cannot be written as XML" in str(written)
            else:
                assert written.startswith("<tool_call>")


def deep(depth: int, make: Callable[[Any], Any]) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = make(value)
    return value


DEEP_LIST = deep(100_000, lambda v: [v])
DEEP_DICT = deep(100_000, lambda v: {"choices": [v], "content": [v], "tool_calls": [v]})
DEEP_MESSAGE = deep(100_000, lambda v: {"choices": [{"message": v}], "output": [v]})


PLACES: dict[str, Callable[[Any], Any]] = {
    "whole": lambda d: d,
    "choices": lambda d: {"choices": d},
    "choice": lambda d: {"choices": [d]},
    "message": lambda d: {"choices": [{"message": d}]},
    "tool_calls": lambda d: {"tool_calls": d},
    "output-item": lambda d: {"output": [d]},
    "type": lambda d: [{"type": d}],
    "function-name": lambda d: [{"type": "function", "function": {"name": d, "arguments": "{}"}}],
    "id": lambda d: [{"type": "function", "id": d, "function": {"name": "x"}}],
    "call_id": lambda d: [{"type": "function_call", "name": "x", "call_id": d}],
    "content": lambda d: {"content": d},
    "tool_use-name": lambda d: {"content": [{"type": "tool_use", "name": d, "input": {}}]},
    "tool_use-id": lambda d: {"content": [{"type": "tool_use", "name": "x", "id": d, "input": {}}]},
}


@pytest.mark.parametrize(
    "nested", [DEEP_LIST, DEEP_DICT, DEEP_MESSAGE], ids=["lists", "dicts", "msgs"]
)
@pytest.mark.parametrize("place", list(PLACES.values()), ids=list(PLACES))
def test_nesting_of_any_depth_at_any_level_gives_calls_or_a_format_error(
    place: Callable[[Any], Any], nested: Any
) -> None:
    for read in (openai.parse_tool_calls, anthropic.parse_tool_calls):
        calls_or_format_error(read, place(nested))


# == 2. XML: any text, anything not text ==========================================================


@tool(read_only=True)
def typed(count: int, flag: bool, ratio: float, items: list[int], maybe: int | None = None) -> str:
    """Take values of every kind.

    Args:
        count: A whole number.
        flag: Yes or no.
        ratio: A decimal.
        items: Whole numbers.
        maybe: A whole number, or nothing.
    """
    return f"{count} {flag} {ratio} {items} {maybe}"


TOOLKIT = Toolkit()
TOOLKIT.add(typed)

PIECES = [
    "<tool_call>", "</tool_call>", "<name>", "</name>", "<params>", "</params>", "<![CDATA[",
    "]]>", "<count>", "</count>", "<flag>", "</flag>", "<ratio>", "</ratio>", "<items>",
    "</items>", "<maybe>", "</maybe>", "typed", "echo", " ", "\n", "\x00", "\ud800", "<", ">",
    "&amp;", "&#0;", "&#55296;", "&#x110000;", "&#9999999;", "&", "1" * 5000, "-7", "1e999",
    "0.5", "true", "null", "[1, 2]", "[1, ", '{"a": ', "]]]]>", "<a", "</",
]  # fmt: skip
SOUP = st.lists(st.sampled_from(PIECES) | ANY_TEXT, max_size=40).map("".join)
XML_VALUE = st.sampled_from(PIECES) | ANY_TEXT


@st.composite
def xml_calls(draw: st.DrawFn) -> str:
    """Calls much as a model writes them, with a piece of anything here and there."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        params = "".join(
            f"<{tag}>{f'<![CDATA[{value}]]>' if cdata else value}</{tag}>"
            for tag, value, cdata in draw(
                st.lists(
                    st.tuples(
                        st.sampled_from(["count", "flag", "ratio", "items", "maybe", "x"]),
                        XML_VALUE,
                        st.booleans(),
                    ),
                    max_size=4,
                )
            )
        )
        name = draw(st.sampled_from(["typed", "echo"]) | XML_VALUE)
        close = draw(st.sampled_from(["</tool_call>", "", "</tool_call>\n"]))
        parts.append(f"{draw(SOUP)}<tool_call><name>{name}</name><params>{params}</params>{close}")
    return "".join(parts)


XML_TEXT = ANY_TEXT | SOUP | xml_calls()


@settings(max_examples=600, deadline=None)
@given(XML_TEXT, st.booleans())
def test_xml_gives_calls_or_a_format_error_for_any_text(text: str, with_toolkit: bool) -> None:
    toolkit = TOOLKIT if with_toolkit else None
    calls_or_format_error(lambda t: xml.parse_tool_calls(t, toolkit=toolkit), text)


@FUZZ
@given(ANY_VALUE.filter(lambda v: not isinstance(v, str)))
def test_xml_refuses_anything_but_text_with_a_format_error(value: Any) -> None:
    with pytest.raises(FormatError, match="expected the model's text as str"):
        xml.parse_tool_calls(value)


@FUZZ
@given(st.binary())
def test_xml_refuses_bytes_with_a_format_error(data: bytes) -> None:
    with pytest.raises(FormatError, match="got bytes"):
        xml.parse_tool_calls(data)  # type: ignore[arg-type]


# == 3. transcripts: any file =====================================================================


@pytest.fixture(scope="module")
def transcript_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("transcripts") / "transcript.jsonl"


def transcript_or_error(path: Path) -> None:
    """Calls, or a `TranscriptError` naming the file; nothing else."""
    outcome: list[ToolCall] | TranscriptError
    try:
        outcome = load_transcript(path)
    except TranscriptError as exc:
        outcome = exc
    if isinstance(outcome, TranscriptError):
        assert str(path) in str(outcome)
    else:
        calls_or_format_error(lambda _: outcome, None)


# what json.dumps can write: ints of up to 4,300 digits, NaN as the non-standard "NaN"
FILE_INTS = st.sampled_from([2**64, -(2**63) - 1, 10**400])
JSON_VALUES = json_like(
    st.none() | st.booleans() | st.integers() | FILE_INTS | st.floats() | ANY_TEXT
)
FILE_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@FILE_SETTINGS
@given(st.lists(JSON_VALUES | shaped(JSON_VALUES), min_size=1, max_size=3), st.booleans())
def test_a_transcript_of_any_json_gives_calls_or_a_transcript_error(
    transcript_file: Path, values: list[Any], ascii_only: bool
) -> None:
    # written as JSON Lines and as one document; lone surrogates make the file invalid UTF-8
    # (or, escaped, invalid JSON), which must be refused like anything else
    for text in (
        "\n".join(json.dumps(v, ensure_ascii=ascii_only) for v in values),
        json.dumps(values, ensure_ascii=ascii_only),
    ):
        transcript_file.write_bytes(text.encode("utf-8", "surrogatepass"))
        transcript_or_error(transcript_file)


@FILE_SETTINGS
@given(
    st.binary()
    | XML_TEXT.map(lambda t: t.encode("utf-8", "surrogatepass"))
    | st.sampled_from(
        [
            b'{"name": "x", "arguments": {}, "id": ' + b"1" * 5000 + b"}",
            b'{"name": "x", "arguments": {}, "id": 1e999}',
            b"[" * 1100 + b"]" * 1100,
            b"\x00" * 100,
            b"\xef\xbb\xbf[]",
        ]
    )
)
def test_a_transcript_of_any_bytes_gives_calls_or_a_transcript_error(
    transcript_file: Path, data: bytes
) -> None:
    transcript_file.write_bytes(data)
    transcript_or_error(transcript_file)


# == 4. the inputs once found to escape as another exception ======================================


@pytest.mark.parametrize(
    ("message", "pattern"),
    [
        pytest.param({"choices": 5}, r"^choices is an int, not a list$", id="choices-int"),
        pytest.param({"choices": {"a": 1}}, r"^choices is a dict, not a list$", id="choices-dict"),
        pytest.param({"choices": None}, r"^choices is null, not a list$", id="choices-none"),
        pytest.param(
            {"choices": [{"message": "hi"}]},
            r"^choices\[0\]\.message is a str, not an object$",
            id="message-str",
        ),
        pytest.param({"tool_calls": 5}, r"^tool_calls is an int, not a list$", id="calls-int"),
        pytest.param({"tool_calls": "x"}, r"^tool_calls is a str, not a list$", id="calls-str"),
        pytest.param(
            [{"type": {}}], r"^tool call #0: its type is a dict, not a string$", id="type-dict"
        ),
        pytest.param([{"type": ["function"]}], r"tool call #0: its type is a list", id="type-list"),
        pytest.param(
            [{"type": "function", "function": {"name": 10**5000}}],
            r"^tool call #0: function name is an int, not a string$",
            id="name-huge-int",
        ),
        pytest.param(
            [{"type": "function", "function": {"name": DEEP_LIST}}],
            r"^tool call #0: function name is a list, not a string$",
            id="name-deep-list",
        ),
        pytest.param(
            [{"type": "function", "id": DEEP_LIST, "function": {"name": "x"}}],
            r"^tool call #0: id is a list, not a string$",
            id="id-deep-list",
        ),
        pytest.param(
            [{"type": "function_call", "name": "x", "call_id": 10**5000}],
            r"^function_call item #0: call_id is an int, not a string$",
            id="call-id-huge-int",
        ),
    ],
)
def test_openai_wrong_types_are_format_errors_naming_the_place(message: Any, pattern: str) -> None:
    with pytest.raises(FormatError, match=pattern):
        openai.parse_tool_calls(message)


@pytest.mark.parametrize(
    "content",
    [5, None, 1.5, True, math.nan, 10**5000, b"x", {"a": 1}],
    ids=["int", "none", "float", "bool", "nan", "huge-int", "bytes", "dict"],
)
def test_anthropic_content_that_is_not_a_list_is_a_format_error(content: Any) -> None:
    with pytest.raises(FormatError, match=r"^content is (an? \w+|null), not a list$"):
        anthropic.parse_tool_calls({"content": content})


@pytest.mark.parametrize(
    ("block", "pattern"),
    [
        pytest.param(
            {"type": "tool_use", "name": 10**5000, "input": {}},
            r"^tool_use block #0: name is an int, not a string$",
            id="name-huge-int",
        ),
        pytest.param(
            {"type": "tool_use", "name": DEEP_LIST, "input": {}},
            r"^tool_use block #0: name is a list, not a string$",
            id="name-deep-list",
        ),
        pytest.param(
            {"type": "tool_use", "name": "x", "id": DEEP_DICT, "input": {}},
            r"^tool_use block #0: id is a dict, not a string$",
            id="id-deep-dict",
        ),
    ],
)
def test_anthropic_wrong_types_are_format_errors_naming_the_place(
    block: dict[str, Any], pattern: str
) -> None:
    with pytest.raises(FormatError, match=pattern):
        anthropic.parse_tool_calls({"content": [block]})


@pytest.mark.parametrize("with_toolkit", [False, True], ids=["fixed-rule", "schema"])
def test_xml_an_integer_too_long_for_python_stays_text(with_toolkit: bool) -> None:
    digits = "1" * 5000
    text = f"<tool_call><name>typed</name><params><count>{digits}</count></params></tool_call>"
    (call,) = xml.parse_tool_calls(text, toolkit=TOOLKIT if with_toolkit else None)
    assert call.arguments == {"count": digits}


def test_xml_an_integer_python_reads_is_still_an_int() -> None:
    digits = "9" * 4300
    text = f"<tool_call><name>typed</name><params><count>{digits}</count></params></tool_call>"
    (call,) = xml.parse_tool_calls(text, toolkit=TOOLKIT)
    assert call.arguments == {"count": int(digits)}


@pytest.mark.parametrize(
    ("arguments", "pattern"),
    [
        pytest.param("[1, 2]", r"its arguments are not a JSON object but a list", id="json-list"),
        pytest.param('{"query": ', r"its arguments are not JSON", id="bad-json"),
        pytest.param({"query": 2**70}, r"argument 'query' is not JSON", id="int-past-64-bits"),
        pytest.param({"query": DEEP_DICT}, r"argument 'query' is not JSON", id="deep-nesting"),
    ],
)
def test_xml_render_call_of_arguments_it_cannot_write_is_a_format_error(
    arguments: Any, pattern: str
) -> None:
    call = ToolCall(name="search", arguments=arguments)
    with pytest.raises(FormatError, match=rf"call 'search' cannot be written as XML: {pattern}"):
        xml.render_call(call)


def test_transcript_nested_a_thousand_lists_deep_is_read(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 1000 + '{"name": "search", "arguments": {}}' + "]" * 1000)
    assert [c.name for c in load_transcript(path)] == ["search"]


def test_transcript_call_with_a_deeply_nested_id_is_a_transcript_error(tmp_path: Path) -> None:
    path = tmp_path / "deep-id.jsonl"
    deep_id = "[" * 1020 + "]" * 1020
    path.write_text(f'{{"name": "search", "arguments": {{}}, "id": {deep_id}}}\n')
    with pytest.raises(TranscriptError, match=r"deep-id\.jsonl: the call's id is a list"):
        load_transcript(path)


def test_transcript_path_with_a_nul_is_a_transcript_error(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match="cannot read the transcript"):
        load_transcript(str(tmp_path / "a\x00b.jsonl"))
