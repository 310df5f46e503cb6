"""The answers ``stockade run`` accepts at its questions, and how a typed line is read.

A call that asks is answered ``y`` (yes, this call), ``s`` or ``s2`` (yes for the rest of the
run: the first or second suggested approval, kept by the engine), ``a`` or ``a2`` (yes always:
the suggestion is appended to the policy file), or ``n`` (no; an empty line and a closed stdin
are no too). With no suggestion (a protected path, a dangerous command: nothing about them may
be approved for longer than the call) only ``y`` and ``n`` are offered. A line that cannot be
read is asked again, and after `ATTEMPTS` of them the answer is no: a script that pipes in
answers never hangs on a question it did not expect.

A host a command wants to reach keeps its own answers (`ask_host`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from stockade.engine.cli.terminal import Terminal
from stockade.engine.pipeline import Approve
from stockade.policies.suggestions import Suggestion

ATTEMPTS = 3  # lines that cannot be read before the answer is no

_NO = frozenset({"", "n", "no"})
_YES = frozenset({"y", "yes"})
_LASTING = re.compile(r"(s|session|a|always) ?([0-9]+)?")


def read_answer(text: str, suggestions: Sequence[Suggestion]) -> Approve | bool | None:
    """What ``text``, typed at the question about a call offering ``suggestions``, means: an
    `Approve`, False for no, or None when it cannot be read (a number beyond the suggestions,
    or a lasting answer when none is offered, included)."""
    word = text.strip().lower()
    if word in _NO:
        return False
    if word in _YES:
        return Approve("once")
    found = _LASTING.fullmatch(word)
    if found is None:
        return None
    number = int(found[2]) if found[2] else 1
    if not 1 <= number <= len(suggestions):
        return None
    return Approve("session" if found[1][0] == "s" else "always", suggestions[number - 1])


def offered(suggestions: Sequence[Suggestion]) -> list[str]:
    """The lines that number the suggestions (none when there are none)."""
    if not suggestions:
        return []
    return [
        "  or approve for longer than this call (s = this session, a = always):",
        *(f"  {n}. {s.summary}" for n, s in enumerate(suggestions, start=1)),
    ]


def question(suggestions: Sequence[Suggestion], policy_file: Path | None) -> str:
    """The question's last line, saying which answers it takes."""
    if not suggestions:
        return "Allow this call? [y/N] "
    session, always = _numbered("s", len(suggestions)), _numbered("a", len(suggestions))
    where = (
        f"added to {policy_file.name}"
        if policy_file is not None
        else "no policy file: kept for this run"
    )
    return (
        f"Allow this call? [y]es once, {session} for this session, {always} always ({where}), "
        "[N]o: "
    )


def _numbered(letter: str, count: int) -> str:
    if count == 1:
        return f"[{letter}]"
    if count == 2:
        return f"[{letter}]/{letter}2"
    return f"[{letter}]/{letter}2..{letter}{count}"


def _hint(suggestions: Sequence[Suggestion]) -> str:
    if not suggestions:
        return "answer y or n (nothing here may be approved for longer than this call)"
    if len(suggestions) == 1:
        return "answer y, s, a or n"
    last = len(suggestions)
    return f"answer y, s or s1..s{last}, a or a1..a{last}, or n"


async def ask_call(
    terminal: Terminal, suggestions: Sequence[Suggestion], policy_file: Path | None
) -> Approve | bool:
    """Ask about a call (already described) until the answer can be read, at most `ATTEMPTS`
    times. Raises `Interrupted` on Ctrl-C."""
    for _ in range(ATTEMPTS):
        text = await terminal.line(question(suggestions, policy_file))
        if text is None:
            terminal.say("(no answer: no)")
            return False
        answer = read_answer(text, suggestions)
        if answer is not None:
            return answer
        terminal.say(f"  could not read {text!r}: {_hint(suggestions)}")
    terminal.say(f"({ATTEMPTS} answers that could not be read: no)")
    return False


_HOST_ANSWERS: dict[str, bool | str] = {
    "y": True, "yes": True, "s": "session", "session": "session", "a": "always", "always": "always"
}  # fmt: skip


async def ask_host(terminal: Terminal) -> bool | str:
    """Allow a host for this call, the session, always, or not (no answer is no)."""
    text = await terminal.line("Allow? [y]es for this call, [s]ession, [a]lways, [N]o: ")
    return _HOST_ANSWERS.get((text or "").lower(), False)


async def confirm(terminal: Terminal, text: str) -> bool:
    """A yes/no question; no answer is no. Raises `Interrupted` on Ctrl-C."""
    answer = await terminal.line(f"{text} [y/N] ")
    if answer is None:
        terminal.say("(no answer: no)")
        return False
    return answer.lower() in _YES
