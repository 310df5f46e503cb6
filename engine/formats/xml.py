"""The XML tool-call format (seed 004), for models without native tool calling.

A call is written as::

    <tool_call>
      <name>web_search</name>
      <params>
        <query><![CDATA[Python async best practices]]></query>
        <max_results><![CDATA[10]]></max_results>
      </params>
    </tool_call>

Values inside CDATA are taken verbatim; values outside CDATA are entity-decoded and stripped.
Each call is parsed with defusedxml (no entity expansion, no DTDs), and when a model writes XML
that is not well-formed (a bare ``&``, an unclosed tag, a call cut off at the end of the text)
a lenient regex reading recovers what it can. Values are converted to the types the tool's
schema asks for when a toolkit is given, otherwise by the seed's rule (true/false, integers,
decimals, else text).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from xml.etree.ElementTree import Element, ParseError

import orjson
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from engine.calls import ToolCall, ToolResult, new_call_id
from engine.errors import FormatError

if TYPE_CHECKING:
    from engine.tool import RegisteredTool
    from engine.toolkit import Toolkit

_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_NAME = re.compile(r"<name>(.*?)</name>", re.DOTALL)
_PARAMS = re.compile(r"<params>(.*?)(?:</params>|\Z)", re.DOTALL)
_PARAM = re.compile(r"<([A-Za-z_][\w.-]*)>(.*?)</\1>", re.DOTALL)
_CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.DOTALL)
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


def parse_tool_calls(
    text: str, *, toolkit: Toolkit | None = None, subject: str = "agent"
) -> list[ToolCall]:
    """Every ``<tool_call>`` in a model's text, in order; text without calls gives []."""
    if not isinstance(text, str):
        raise FormatError(f"expected the model's text as str, got {type(text).__name__}")
    calls = []
    for index, match in enumerate(_CALL.finditer(text)):
        body = match.group(1)
        name, params = _strict(body)
        if name is None:
            name, params = _lenient(body)
        if not name:
            raise FormatError(
                f"<tool_call> #{index} has no <name>; write <name>tool_name</name> inside it"
            )
        tool = toolkit.resolve(name) if toolkit is not None else None
        arguments = {key: _convert(value, _types_of(tool, key)) for key, value in params}
        calls.append(ToolCall(name=name, arguments=arguments, id=new_call_id(), subject=subject))
    return calls


def _strict(body: str) -> tuple[str | None, list[tuple[str, str]]]:
    """Well-formed XML: parse it for real. (None, []) when it is not well-formed."""
    try:
        root: Element = fromstring(f"<tool_call>{body}</tool_call>", forbid_dtd=True)
    except (ParseError, DefusedXmlException):
        return None, []
    name = (root.findtext("name") or "").strip()
    params_el = root.find("params")
    params: list[tuple[str, str]] = []
    if params_el is not None:
        raw_params = _PARAMS.search(body)
        raw = raw_params.group(1) if raw_params else ""
        for child in params_el:
            value = "".join(child.itertext())
            if not _raw_has_cdata(raw, child.tag):
                value = value.strip()
            params.append((child.tag, value))
    return name, params


def _raw_has_cdata(raw_params: str, tag: str) -> bool:
    found = re.search(rf"<{re.escape(tag)}>\s*<!\[CDATA\[", raw_params)
    return found is not None


def _lenient(body: str) -> tuple[str, list[tuple[str, str]]]:
    """Not well-formed: take the name and each ``<param>value</param>`` by pattern."""
    name_match = _NAME.search(body)
    name = html.unescape(name_match.group(1)).strip() if name_match else ""
    params_match = _PARAMS.search(body)
    params: list[tuple[str, str]] = []
    if params_match:
        for tag, inner in _PARAM.findall(params_match.group(1)):
            params.append((tag, _value(inner)))
    return name, params


def _value(inner: str) -> str:
    stripped = inner.strip()
    if stripped.startswith("<![CDATA["):
        return "".join(_CDATA.findall(stripped))
    return html.unescape(stripped)


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
    """Seed rule without a schema; with one, only the conversions the schema allows."""
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
    if isinstance(value, bool):
        return "true" if value else "false"
    return orjson.dumps(value).decode() if isinstance(value, list | dict) else str(value)


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


def tool_prompt(toolkit: Toolkit) -> str:
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
