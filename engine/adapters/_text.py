"""What a framework's model is shown of a call's result: its text, a denial as the rule and the
reason, and the warnings of a call that ran with some.

Usage::

    result = await engine.call(call)
    return model_text(result)          # "denied by rule dangerous-path: a protected path ..."

The same wording as Stockade's MCP servers give their clients (the same functions, from
`stockade.engine.mcp.served`), so a model reads one language whichever way it reaches Stockade.
"""

from __future__ import annotations

from stockade.engine.mcp.served import denial_text, warnings_of
from stockade.engine.messages import ToolResult

__all__ = ["denial_text", "model_text", "warnings_of"]


def model_text(result: ToolResult) -> str:
    """The text of ``result`` for a model: a denial names its rule and reason; a failure starts
    with its error (it must never read like a success); warnings follow, a line each."""
    if result.status == "denied" and result.decision is not None:
        text = denial_text(result.decision)
    else:
        text = result.text or ("" if result.ok else result.status)
    lines = [text] if text else []
    lines.extend(warnings_of(result))
    return "\n".join(lines)
