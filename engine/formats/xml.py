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
toolkit is given, otherwise by a fixed rule (true/false, integers, decimals, else text).

The reader is a small linear scanner rather than an XML parser on purpose. Models write sloppy
pseudo-XML (bare ``&``, unclosed tags, a call cut off by the token limit) that a conforming
parser rejects outright, while what matters here is narrower than XML: a ``</tool_call>`` or
``</param>`` inside CDATA must not end anything, whitespace around CDATA is formatting, and no
entity is ever expanded (so "billion laughs" input is inert). Every search moves forward, so
hostile input costs time linear in its length.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from stockade.engine.errors import FormatError
from stockade.engine.messages import ToolCall, ToolResult, new_call_id

if TYPE_CHECKING:
    from stockade.engine.tools import RegisteredTool
    from stockade.engine.tools.catalog import ToolCatalog

_OPEN_CALL = "<tool_call>"
_CLOSE_CALL = "</tool_call>"
_CDATA_OPEN = "<![CDATA["
_CDATA_CLOSE = "]]>"
_OPEN_TAG = re.compile(r"<([A-Za-z_][\w.-]*)>")
_CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.DOTALL)
_REFERENCE = re.compile(r"&(lt|gt|amp|quot|apos|#[0-9]{1,7}|#x[0-9A-Fa-f]{1,6});")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}
_INT = re.compile(r"\A[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"\A[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?\Z")


def parse_tool_calls(
    text: str, *, toolkit: ToolCatalog | None = None, subject: str = "agent"
) -> list[ToolCall]:
    """Every ``<tool_call>`` in a model's text, in order; text without calls gives []."""
    if not isinstance(text, str):
        raise FormatError(f"expected the model's text as str, got {type(text).__name__}")
    calls = []
    for index, body in enumerate(_call_bodies(text)):
        elements = dict(_elements(body))
        name = _value(elements.get("name", "")).strip()
        if not name:
            raise FormatError(
                f"<tool_call> #{index} has no <name>; write <name>tool_name</name> inside it"
            )
        params = _elements(elements.get("params", ""), keep_unclosed=False)
        tool = toolkit.resolve(name) if toolkit is not None else None
        arguments = {key: _convert(_value(raw), _types_of(tool, key)) for key, raw in params}
        calls.append(ToolCall(name=name, arguments=arguments, id=new_call_id(), subject=subject))
    return calls


def _skip_cdata(text: str, start: int, stop_at: str) -> int:
    """Index of the first ``stop_at`` at or after ``start`` that is not inside CDATA, or -1."""
    position = start
    while True:
        stop = text.find(stop_at, position)
        cdata = text.find(_CDATA_OPEN, position)
        if cdata == -1 or stop == -1 or stop < cdata:
            return stop
        end = text.find(_CDATA_CLOSE, cdata + len(_CDATA_OPEN))
        if end == -1:
            return -1  # CDATA runs to the end of the text: nothing after it is markup
        position = end + len(_CDATA_CLOSE)


def _call_bodies(text: str) -> list[str]:
    """The inside of each call. A call left unclosed ends where the next call starts, or at
    the end of the text (a reply cut off by the token limit)."""
    bodies: list[str] = []
    position = text.find(_OPEN_CALL)
    while position != -1:
        start = position + len(_OPEN_CALL)
        close = _skip_cdata(text, start, _CLOSE_CALL)
        following = _skip_cdata(text, start, _OPEN_CALL)
        if close == -1 or (following != -1 and following < close):
            end = following if following != -1 else len(text)
            bodies.append(text[start:end])
            position = following
        else:
            bodies.append(text[start:close])
            position = text.find(_OPEN_CALL, close + len(_CLOSE_CALL))
    return bodies


def _elements(text: str, *, keep_unclosed: bool = True) -> list[tuple[str, str]]:
    """Top-level ``<tag>raw</tag>`` pairs, in order; stray text between elements is ignored.
    An element left unclosed (a reply cut off by the token limit) takes the rest of the text,
    or is dropped when ``keep_unclosed`` is false: half a value is not a value."""
    found: list[tuple[str, str]] = []
    position = 0
    while True:
        opening = _OPEN_TAG.search(text, position)
        if opening is None:
            return found
        tag = opening.group(1)
        start = opening.end()
        close = _skip_cdata(text, start, f"</{tag}>")
        if close == -1:
            if keep_unclosed:
                found.append((tag, text[start:]))
            return found
        found.append((tag, text[start:close]))
        position = close + len(tag) + 3


def _value(raw: str) -> str:
    """A value as written: CDATA sections verbatim (whitespace around them is formatting),
    anything else stripped with XML character references decoded."""
    stripped = raw.strip()
    if stripped.startswith(_CDATA_OPEN):
        sections = _CDATA.findall(stripped)
        rest = _CDATA.sub("", stripped).strip()
        if not rest:
            return "".join(sections)
    return _REFERENCE.sub(_decode_reference, stripped)


def _decode_reference(match: re.Match[str]) -> str:
    ref = match.group(1)
    if ref in _NAMED:
        return _NAMED[ref]
    code = int(ref[2:], 16) if ref.startswith("#x") else int(ref[1:])
    try:
        return chr(code)
    except (ValueError, OverflowError):
        return match.group(0)


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
        return int(value)
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


def _guess(value: str) -> Any:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if _INT.match(value):
        return int(value)
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
    arguments = call.arguments
    if isinstance(arguments, str):
        arguments = orjson.loads(arguments) if arguments.strip() else {}
    params = "".join(f"    <{k}>{_cdata(_text(v))}</{k}>\n" for k, v in arguments.items())
    return f"<tool_call>\n  <name>{call.name}</name>\n  <params>\n{params}  </params>\n</tool_call>"


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
