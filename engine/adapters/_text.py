"""What a framework's model is shown of a call's result: its text, a denial as the rule and the
reason, and the warnings of a call that ran with some.

Usage::

    result = await engine.call(call)
    return model_text(result)          # "denied by rule dangerous-path: a protected path ..."

The same wording as Stockade's MCP server gives its clients, so a model reads one language
whichever way it reaches Stockade.
"""

from __future__ import annotations

from stockade.engine.messages import ToolResult
from stockade.policies import Decision, Effect


def denial_text(decision: Decision) -> str:
    """A denial as a model reads it: the rule that decided, and why."""
    return f"denied by rule {decision.rule or 'default'}: {decision.reason}"


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


def warnings_of(result: ToolResult) -> list[str]:
    """One line per warning of ``result``: its warn decision's (naming the rule), then the
    engine's other notes (the decision's reason is among them: said once)."""
    lines: list[str] = []
    said: set[str] = set()
    decision = result.decision
    if decision is not None and decision.effect is Effect.WARN:
        lines.append(f"warning (rule {decision.rule or 'default'}): {decision.reason}")
        said.add(decision.reason)
    noted = result.metadata.get("warnings")
    for warning in noted if isinstance(noted, list) else ():
        if isinstance(warning, str) and warning not in said:
            lines.append(f"warning: {warning}")
            said.add(warning)
    return lines
