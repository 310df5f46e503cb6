"""How ``stockade demo`` shows its steps: the table, the summary and the audit log's verdict.

No cell is ever cut silently. Every text column wraps at word boundaries; a word too long for
its column (a long rule name at 80 columns) is cut with "…", as is a result longer than a table
should hold (cut at a word boundary). The lines under the table say where every result is whole:
``stockade demo --json``. Counts agree with their numbers ("1 call", "2 calls").

    console.print(demo_table(steps, console.width))
    console.print(summary(report))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from stockade.engine.cli.demo_session import DemoReport, DemoStep

if TYPE_CHECKING:  # rich loads only when a command prints with it, not at start-up
    from rich.table import Table

    from stockade.engine.messages import ToolResult
    from stockade.engine.observe import AuditReport

ELLIPSIS = "…"
_STATUS_STYLE = {
    "ok": "green",
    "error": "red",
    "denied": "magenta",
    "timeout": "yellow",
    "cancelled": "dim",
}
# Below this width a column each for tool, decision and status cannot be read; the narrow
# layout stacks them into the cells beside the label.
_WIDE = 140
# The most of a result a row shows (its whole text is in --json): enough for any error message
# to say what to do, not so much that one row fills the screen.
_RESULT_CHARS = {True: 240, False: 160}


def plural(count: int, word: str, many: str | None = None) -> str:
    """``count`` and ``word``, in the plural unless there is one: "1 call", "3 calls"."""
    return f"{count} {word if count == 1 else many or word + 's'}"


def clip(text: str, limit: int) -> str:
    """``text`` whole when it holds at most ``limit`` characters; otherwise cut at the last
    word boundary before the limit (mid-word only for a single word longer than it) and ended
    with "…", so a reader always sees that something is missing."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:  # a word boundary not too far back: the row keeps most of it
        cut = cut[:space]
    return cut.rstrip() + ELLIPSIS


def approval(result: ToolResult) -> str | None:
    """What became of the call's ask: "approved" or "refused" by the demo's scripted approver
    ("unanswered" when nobody could answer), None when the policy did not ask."""
    notes = result.notes
    return notes.approval if notes is not None else None


def decision_text(result: ToolResult) -> str:
    """The decision as a row shows it: ``ask → approved (scripted)`` for an ask the demo's
    approver answered, else the policy's effect; ``-`` when the call was refused before any
    decision (a tool that does not exist, bad arguments)."""
    answer = approval(result)
    if answer in ("approved", "refused"):
        return f"ask → {answer} (scripted)"
    if answer is not None:
        return f"ask → {answer}"
    return result.decision.effect.value if result.decision is not None else "-"


class _Row(NamedTuple):
    """One finished step, marked up for the table."""

    label: str
    tool: str
    decision: str
    rule: str
    status: str
    tries: str
    took: str
    result: str


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _row(step: DemoStep, wide: bool) -> _Row | None:
    result = step.result
    if result is None:
        return None
    style = _STATUS_STYLE.get(result.status, "")
    status = f"[{style}]{result.status}[/]"
    if not step.as_expected:
        status += f" [bold red](expected {step.expected})[/]"
    rule = result.decision.rule if result.decision is not None else ""
    shown = " ".join(result.text.split())  # one paragraph: the table wraps it
    if step.chunks:
        shown = f"[{plural(step.chunks, 'chunk')}] {shown}"
    took = f"{result.duration_s * 1000:.0f} ms"
    return _Row(
        _escape(step.label),
        result.tool,
        decision_text(result),
        _escape(rule or ""),
        status,
        str(result.attempts),
        took,
        _escape(clip(shown, _RESULT_CHARS[wide])),
    )


def demo_table(steps: list[DemoStep], width: int) -> Table:
    """The steps so far as a table ``width`` columns wide: a column each for tool, decision,
    status (with tries and time) from 140 columns, else those stacked beside the label."""
    from rich.table import Table

    wide = width >= _WIDE
    # expand: the ratios share out the width left by the short columns, so the result column
    # gets the most of it and the short ones are never squeezed
    table = Table(
        title="Stockade demo: an untrusted agent's session", title_justify="left", expand=True
    )
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    # every text column wraps at spaces and cuts a word too long for it with "…"; the decision
    # column has a width of its own (in a table that expands, ratio columns ignore minimums):
    # enough for "ask → approved (scripted)" and most rule names, never more
    decision = max(20, min(26, width // 4 - 1))
    if wide:
        table.add_column("what the agent did", ratio=2, overflow="ellipsis")
        table.add_column("tool", style="cyan", no_wrap=True)
        table.add_column("decision · rule", width=decision, overflow="ellipsis")
        table.add_column("status · tries · time", overflow="ellipsis")
        table.add_column("result", ratio=4, overflow="ellipsis")
    else:
        table.add_column("what the agent did · tool", ratio=3, overflow="ellipsis")
        title = "decision · rule · status · tries · time"
        table.add_column(title, width=decision, overflow="ellipsis")
        table.add_column("result", ratio=5, overflow="ellipsis")
    for n, step in enumerate(steps, 1):
        row = _row(step, wide)
        if row is None:
            continue
        decided = f"{row.decision}\n{row.rule}" if row.rule else row.decision
        outcome = f"{row.status} · {row.tries} · {row.took}"
        if wide:
            table.add_row(str(n), row.label, row.tool, decided, outcome, row.result)
        else:
            table.add_row(
                str(n),
                f"{row.label}\n[cyan]{row.tool}[/]",
                f"{decided}\n{outcome}",
                row.result,
            )
    return table


def summary(report: DemoReport) -> str:
    """Two lines: the verdict first (so that it is never wrapped away from its start) with how
    many calls ended how, then what the scripted approver answered."""
    counts: dict[str, int] = {}
    answers = {"approved": 0, "refused": 0}
    for step in report.steps:
        if step.result is None:
            continue
        counts[step.result.status] = counts.get(step.result.status, 0) + 1
        answer = approval(step.result)
        if answer in answers:
            answers[answer] += 1
    parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items(), key=_by_count))
    verdict = (
        "every call ended as expected"
        if report.passed
        else "[bold red]SOME CALLS DID NOT END AS EXPECTED[/] (marked above)"
    )
    calls = plural(len(report.steps), "call")
    text = f"Result: {verdict} ({calls} in {report.seconds:.2f}s: {parts})."
    if any(answers.values()):
        text += (
            f"\nThe demo's scripted approver answered {plural(sum(answers.values()), 'ask')}: "
            f"{answers['approved']} approved, {answers['refused']} refused (no person was asked)."
        )
    return text


def _by_count(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def audit_verdict(audit: AuditReport) -> str:
    """Whether the log verifies, as the demo's closing lines say it: "intact (64 records)", or
    "NOT intact: <what is wrong, and where>"."""
    if not audit.ok:
        return f"[bold red]NOT intact[/]: {_escape(audit.problem or 'unknown problem')}"
    files = f" in {plural(len(audit.files), 'file')}" if len(audit.files) > 1 else ""
    notes = ""
    if audit.partial_tail:
        notes += "; its last line was half-written (a crash) and is ignored"
    if audit.seal is None:
        notes += "; it has no seal, so a cut-off end would not show"
    return f"[green]intact[/] ({plural(audit.records, 'record')}{files}{notes})"


__all__ = ["ELLIPSIS", "audit_verdict", "clip", "decision_text", "demo_table", "plural", "summary"]
