"""The XML tool-call format, for models without native tool calling.

A call is written as::

    <tool_call>
      <name>web_search</name>
      <params>
        <query><![CDATA[Python async best practices]]></query>
        <max_results><![CDATA[10]]></max_results>
      </params>
    </tool_call>

Values inside CDATA are taken verbatim; values outside CDATA are stripped and their XML
character references decoded (``&amp;``, ``&lt;``, ``&#38;`` ...; nothing else, so a bare ``&``
in a URL stays as written). Values are converted to the types the tool's schema asks for when a
toolkit is given, otherwise by a fixed rule (true/false, integers, decimals, else text); an
integer of more digits than Python reads as one (4,300) stays text.

The reader is a small linear scanner rather than an XML parser on purpose. Models write sloppy
pseudo-XML (bare ``&``, unclosed tags, a call cut off by the token limit) that a conforming
parser rejects outright, while what matters here is narrower than XML: a ``</tool_call>`` or
``</param>`` inside CDATA must not end anything, whitespace around CDATA is formatting, and no
entity is ever expanded (so "billion laughs" input is inert). Every search moves forward, so
hostile input costs time linear in its length (the scanner is `_xml_reader`). Whatever the text,
the result is calls or a `FormatError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from stockade.engine.errors import FormatError
from stockade.engine.formats import _xml_reader as reader
from stockade.engine.formats._shapes import kind
from stockade.engine.messages import ToolCall, ToolResult, new_call_id

if TYPE_CHECKING:
    from stockade.engine.tools import RegisteredTool
    from stockade.engine.tools.catalog import ToolCatalog

_MAX_DIGITS = 4300  # Python's default limit on the digits of an int read from text
_INT = re.compile(r"\A[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"\A[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?\Z")


def parse_tool_calls(
    text: str, *, toolkit: ToolCatalog | None = None, subject: str = "agent"
) -> list[ToolCall]:
    """Every ``<tool_call>`` in a model's text, in order; text without calls gives []."""
    if not isinstance(text, str):
        raise FormatError(f"expected the model's text as str, got {type(text).__name__}")
    calls = []
    for index, body in enumerate(reader.call_bodies(text)):
        found = dict(reader.elements(body))
        name = reader.value(found.get("name", "")).strip()
        if not name:
            raise FormatError(
                f"<tool_call> #{index} has no <name>; write <name>tool_name</name> inside it"
            )
        params = reader.elements(found.get("params", ""), keep_unclosed=False)
        tool = toolkit.resolve(name) if toolkit is not None else None
        arguments = {key: _convert(reader.value(raw), _types_of(tool, key)) for key, raw in params}
        calls.append(ToolCall(name=name, arguments=arguments, id=new_call_id(), subject=subject))
    return calls


def _types_of(tool: RegisteredTool | None, key: str) -> set[str] | None:
    """JSON Schema types allowed for a parameter, or None when unknown."""
    if tool is None:
        return None
    schema = tool.parameters
    prop = schema.get("properties", {}).get(key)
    if not isinstance(prop, Mapping):
        return None
    return _schema_types(prop, schema.get("$defs", {}))


def _schema_types(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> set[str]:
    types: set[str] = set()
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref.rsplit("/", 1)[1], {})
        types |= _schema_types(target, defs)
    kind = prop.get("type")
    if isinstance(kind, str):
        types.add(kind)
    elif isinstance(kind, list):
        types.update(k for k in kind if isinstance(k, str))
    if "enum" in prop and not kind:
        types.update(_json_type(v) for v in prop["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in prop.get(key, []):
            if isinstance(sub, Mapping):
                types |= _schema_types(sub, defs)
    return types or {"any"}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def _convert(value: str, types: set[str] | None) -> Any:
    """The fixed rule without a schema; with one, only the conversions the schema allows."""
    if types is None:
        return _guess(value)
    if "string" in types:
        return value
    lowered = value.lower()
    if "boolean" in types and lowered in ("true", "false"):
        return lowered == "true"
    if "integer" in types and _INT.match(value):
        return _whole_number(value)
    if "number" in types and _FLOAT.match(value):
        return float(value)
    if "null" in types and lowered in ("null", "none", ""):
        return None
    if types & {"array", "object", "any"}:
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value  # let validation name the mismatch


def _whole_number(value: str) -> int | str:
    """The int ``value`` spells, or ``value`` itself when it has more digits than Python reads
    (``sys.get_int_max_str_digits()``): such a number stays text, for validation to judge,
    rather than failing the whole reply or taking time growing with the square of its length."""
    if len(value) > _MAX_DIGITS:
        return value
    try:
        return int(value)
    except ValueError:  # a lower limit set in this process
        return value


def _guess(value: str) -> Any:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if _INT.match(value):
        return _whole_number(value)
    if _FLOAT.match(value):
        return float(value)
    return value


def _cdata(text: str) -> str:
    """Wrap text in CDATA, splitting any ``]]>`` inside so the section cannot be closed early."""
    return "<![CDATA[" + text.replace("]]>", "]]]]><![CDATA[>") + "]]>"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def render_call(call: ToolCall) -> str:
    """A call in the XML format (useful for few-shot examples and transcripts)."""
    arguments = _argument_object(call)
    params = "".join(f"    <{k}>{_cdata(_param(call, k, v))}</{k}>\n" for k, v in arguments.items())
    return f"<tool_call>\n  <name>{call.name}</name>\n  <params>\n{params}  </params>\n</tool_call>"


def _argument_object(call: ToolCall) -> Mapping[str, Any]:
    """The call's arguments as an object; raw JSON text (as a model wrote it) is read first."""
    arguments = call.arguments
    if not isinstance(arguments, str):
        return arguments
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise FormatError(
            f"call {call.name!r} cannot be written as XML: its arguments are not JSON ({exc})"
        ) from exc
    if not isinstance(value, Mapping):
        raise FormatError(
            f"call {call.name!r} cannot be written as XML: its arguments are not a JSON object "
            f"but {kind(value)}"
        )
    return value


def _param(call: ToolCall, key: str, value: Any) -> str:
    try:
        return _text(value)
    except orjson.JSONEncodeError as exc:  # an int past 64 bits, a lone surrogate, deep nesting
        raise FormatError(
            f"call {call.name!r} cannot be written as XML: argument {key!r} is not JSON ({exc})"
        ) from exc


def render_result(result: ToolResult) -> str:
    """A result in the XML format: name, status, and the content or the error."""
    body = result.text
    tag = "content" if result.ok else "error"
    return (
        f"<tool_result>\n  <name>{result.tool}</name>\n  <call_id>{result.call_id}</call_id>\n"
        f"  <status>{result.status}</status>\n  <{tag}>{_cdata(body)}</{tag}>\n</tool_result>"
    )


def tool_prompt(toolkit: ToolCatalog) -> str:
    """Instructions for an XML agent: the call format, then every active tool with its
    parameters and an example, then the skills (if any)."""
    parts = [
        "## Tools",
        "To use a tool, write a call in exactly this form:",
        "<tool_call>\n  <name>tool_name</name>\n  <params>\n"
        "    <parameter_name><![CDATA[value]]></parameter_name>\n  </params>\n</tool_call>",
        "Wrap every value in CDATA. Write lists and objects as JSON inside the CDATA. You may "
        "make several calls in one reply; each result comes back in a <tool_result> element.",
    ]
    parts += [_describe(tool) for tool in toolkit.tools()]
    skills = toolkit.skills_prompt()
    if skills:
        parts.append(skills)
    notes = toolkit.notes()
    if notes:
        parts.append(notes)
    return "\n\n".join(parts)


def _describe(tool: RegisteredTool) -> str:
    schema = tool.parameters
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    lines = [f"### {tool.name}", f"Description: {tool.description or '(no description)'}"]
    props: Mapping[str, Any] = schema.get("properties", {})
    lines.append("Parameters:" if props else "Parameters: none")
    example: dict[str, Any] = {}
    for name, prop in props.items():
        kind = _type_label(prop, defs)
        need = "required" if name in required else "optional"
        text = prop.get("description", "")
        lines.append(f"  - {name}: {kind} ({need})" + (f" - {text}" if text else ""))
        if "default" in prop:
            lines.append(f"    Default: {_text(prop['default'])}")
        example[name] = prop.get("default", f"your_{name}_here")
    lines.append("Example:")
    lines.append(render_call(ToolCall(name=tool.name, arguments=example, id="example")))
    return "\n".join(lines)


def _type_label(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        prop = {
            **defs.get(ref.rsplit("/", 1)[1], {}),
            **{k: v for k, v in prop.items() if k != "$ref"},
        }
    if "enum" in prop:
        return "one of " + ", ".join(_text(v) for v in prop["enum"])
    if "const" in prop:
        return f"exactly {_text(prop['const'])}"
    if "anyOf" in prop:
        labels = [_type_label(p, defs) for p in prop["anyOf"] if isinstance(p, Mapping)]
        return " or ".join(dict.fromkeys(labels))
    kind = prop.get("type", "any")
    if kind == "array" and isinstance(prop.get("items"), Mapping):
        return f"array of {_type_label(prop['items'], defs)}"
    return str(kind)


def render_results(results: Iterable[ToolResult]) -> str:
    """Several results, one after another."""
    return "\n".join(render_result(r) for r in results)
