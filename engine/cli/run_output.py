"""What ``stockade run`` prints of each call: a line (tool, status, rule and the start of the
result, cut to the terminal's width and saying so), or with ``-v`` the whole result and its
metadata under that line.

    for line in progress(1, 3, result, console.width, verbose=False):
        console.print(line)

Every piece is `rich.text.Text`, never markup: a result quoting ``[bold]`` or ``[/]`` (a file
read back, a command's output) is shown as it is, not styled or refused; and its control
characters are shown as escapes (``\x1b``), so what a tool returned cannot drive the terminal.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from stockade.engine.messages import ToolResult

if TYPE_CHECKING:  # rich loads only when a command prints with it, not at start-up
    from rich.text import Text

MORE = "… (-v for all)"  # what ends a result cut short
_JOIN = " ↵ "  # where the lines of a result meet on its one line
_MIN_ROOM = 40  # the least of a result shown on its line, however narrow the terminal
_INDENT = "    "
_STYLES = {"ok": "green", "denied": "magenta", "timeout": "yellow", "pending": "cyan"}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but tab and newline


def progress(
    number: int, total: int, result: ToolResult, width: int, *, verbose: bool = False
) -> list[Text]:
    """The lines printed for the ``number``-th of ``total`` calls, on a terminal ``width``
    columns wide."""
    from rich.text import Text

    head = Text.assemble(
        (f"[{number}/{total}] ", "dim"),
        result.tool,
        " ",
        (result.status, _STYLES.get(result.status, "red")),
    )
    decision = result.decision
    if decision is not None and decision.rule:
        head.append(f" · {decision.rule}")
    if verbose:
        return _whole(head, result)
    detail = visible(result.error.message if result.error is not None else result.text)
    shown, cut = one_line(detail, max(_MIN_ROOM, width - len(head.plain) - 2))
    if shown:
        head.append("  " + shown)
    if cut:
        head.append(MORE, "dim")
    return [head]


def one_line(text: str, room: int) -> tuple[str, bool]:
    """``text`` on one line of at most ``room`` characters (its lines joined by ``↵``), and
    whether some of it was left out (then room is kept for `MORE`)."""
    lines = text.strip("\n").splitlines()
    joined = _JOIN.join(line.rstrip() for line in lines)
    if len(joined) <= room:
        return joined, False
    return joined[: max(0, room - len(MORE))].rstrip(), True


def visible(text: str) -> str:
    """``text`` with its control characters (but tab and newline; a CR before a newline is
    dropped) written as escapes."""
    return _CONTROL.sub(lambda found: repr(found.group())[1:-1], text.replace("\r\n", "\n"))


def _whole(head: Text, result: ToolResult) -> list[Text]:
    from rich.text import Text

    took = f"{result.duration_s * 1000:.0f} ms"
    tries = f", {result.attempts} attempts" if result.attempts > 1 else ""
    head.append(f"  ({took}{tries})", "dim")
    lines = [head]
    text = visible(result.text)
    if text:
        lines.append(Text("\n".join(_INDENT + line for line in text.splitlines())))
    else:
        lines.append(Text(f"{_INDENT}(no output)", "dim"))
    if result.metadata:
        shown = json.dumps(result.metadata, indent=2, ensure_ascii=False, default=str)
        body = f"\n{_INDENT}".join(visible(shown).splitlines())
        lines.append(Text.assemble((f"{_INDENT}metadata: ", "dim"), body))
    return lines
