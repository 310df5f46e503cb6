"""Answering an ask at the ``stockade run`` question: yes once, for the session or always (one
of the suggested approvals, by number), no; what cannot be read is asked again; and Ctrl-C at
the question refuses the call, stops the replay and exits 130.

The answers are read by the real command (a subprocess, answers piped in, or typed at a real
pseudo-terminal for Ctrl-C); the parser is also checked alone, over any text.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import read_until, require_bubblewrap
from support import stockade_cli as stockade

from stockade.engine import Approve, read_audit, verify_audit
from stockade.engine.cli.answers import ATTEMPTS, ask_call, read_answer
from stockade.engine.cli.terminal import Terminal
from stockade.policies.policy_file import ApprovalSpec
from stockade.policies.suggestions import Suggestion

POLICY = """\
version = 1
default = "allow"

[[rules]]
id = "ask-src"
effect = "ask"
tools = ["write_file"]
actions = ["write"]
paths = ["src/**"]

[[rules]]
id = "ask-echo"
effect = "ask"
tools = ["run_shell"]
commands = ["echo *"]
"""
WRITES = [
    {"name": "write_file", "arguments": {"path": "src/a.py", "content": "a"}},
    {"name": "write_file", "arguments": {"path": "src/b.py", "content": "b"}},
    {"name": "write_file", "arguments": {"path": "src/deep/c.py", "content": "c"}},
]
QUESTION = "Allow this call?"


def _suggestion(n: int) -> Suggestion:
    spec = ApprovalSpec(id="-", subjects=["agent"], tools=["t"], actions=["call"])
    return Suggestion("tool", f"suggestion {n}", (spec,))


THREE = tuple(_suggestion(n) for n in (1, 2, 3))


@pytest.mark.parametrize(
    ("text", "offered", "expected"),
    [
        ("y", THREE, Approve("once")),
        ("YES", (), Approve("once")),
        ("s", THREE, Approve("session", THREE[0])),
        ("s2", THREE, Approve("session", THREE[1])),
        ("session 3", THREE, Approve("session", THREE[2])),
        ("a", THREE, Approve("always", THREE[0])),
        ("a3", THREE, Approve("always", THREE[2])),
        ("n", THREE, False),
        ("", THREE, False),
        ("  no ", (), False),
        ("a3", THREE[:2], None),  # there is no third
        ("s0", THREE, None),
        ("s", (), None),  # nothing may be approved for longer: only y or n
        ("sure", THREE, None),
    ],
)
def test_each_answer_means_what_the_question_says(
    text: str, offered: Sequence[Suggestion], expected: Approve | bool | None
) -> None:
    assert read_answer(text, offered) == expected


@given(st.text(max_size=12), st.integers(min_value=0, max_value=3))
def test_any_line_is_a_yes_a_no_or_asked_again_and_never_approves_what_was_not_offered(
    text: str, count: int
) -> None:
    answer = read_answer(text, THREE[:count])
    assert answer is None or answer is False or isinstance(answer, Approve)
    if isinstance(answer, Approve) and answer.scope != "once":
        assert answer.rule in THREE[:count]


class _Typed(Terminal):
    """A terminal whose person types ``lines`` (None: stdin closed)."""

    def __init__(self, lines: list[str | None]) -> None:
        super().__init__()
        self.lines = lines
        self.said: list[str] = []

    async def line(self, question: str) -> str | None:
        return self.lines.pop(0)

    def say(self, text: str) -> None:
        self.said.append(text)


async def test_a_line_that_cannot_be_read_is_asked_again_then_no() -> None:
    again = _Typed(["what?", "s2"])
    assert await ask_call(again, THREE, None) == Approve("session", THREE[1])
    assert "answer y, s or s1..s3, a or a1..a3, or n" in again.said[0]
    stubborn = _Typed(["?"] * ATTEMPTS + ["y"])
    assert await ask_call(stubborn, THREE, None) is False
    assert stubborn.lines == ["y"]  # never asked a fourth time
    closed = _Typed([None])
    assert await ask_call(closed, THREE, None) is False


# -- the real command --------------------------------------------------------------------------


def _project(tmp_path: Path, calls: list[dict[str, Any]]) -> tuple[Path, Path, Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    policy = tmp_path / "stockade.toml"
    policy.write_text(POLICY, encoding="utf-8")
    transcript = tmp_path / "calls.jsonl"
    transcript.write_text("".join(json.dumps(c) + "\n" for c in calls), encoding="utf-8")
    return workspace, policy, transcript


def _args(tmp_path: Path, workspace: Path, policy: Path, transcript: Path) -> list[str]:
    return ["run", str(transcript), "--workspace", str(workspace), "--policy", str(policy),
            "--state", str(tmp_path / "state")]  # fmt: skip


def _outcomes(tmp_path: Path) -> list[dict[str, Any]]:
    log = tmp_path / "state" / "audit.jsonl"
    assert verify_audit(log).ok
    return list(read_audit(log, kind="outcome"))


def test_s2_approves_the_folder_for_the_rest_of_the_run(tmp_path: Path) -> None:
    workspace, policy, transcript = _project(tmp_path, WRITES)
    done = stockade(*_args(tmp_path, workspace, policy, transcript), cwd=tmp_path, stdin="s2\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.count(QUESTION) == 1  # src/** covered the later writes
    assert "1. writing `src/a.py`" in done.stdout
    assert "2. writing `src/**`" in done.stdout
    assert sorted(p.name for p in (workspace / "src").rglob("*.py")) == ["a.py", "b.py", "c.py"]
    outcomes = _outcomes(tmp_path)
    assert [o.get("approval_scope") for o in outcomes] == ["session"] * 3
    assert "[[approvals]]" not in policy.read_text()  # a session's approval is not written


def test_a_writes_the_narrowest_approval_to_the_policy_file_for_the_next_run(
    tmp_path: Path,
) -> None:
    workspace, policy, transcript = _project(tmp_path, WRITES[:1])
    args = _args(tmp_path, workspace, policy, transcript)
    first = stockade(*args, cwd=tmp_path, stdin="a\n")
    assert first.returncode == 0, first.stdout + first.stderr
    assert 'paths = ["src/a.py"]' in policy.read_text()
    again = stockade(*args, cwd=tmp_path)  # nobody answers: nothing is asked
    assert again.returncode == 0, again.stdout + again.stderr
    assert QUESTION not in again.stderr
    assert _outcomes(tmp_path)[-1]["approval_scope"] == "always"


def test_a3_chooses_the_broadest_command_suggestion(tmp_path: Path) -> None:
    require_bubblewrap()  # a command may be approved for later only when it runs boxed
    calls = [{"name": "run_shell", "arguments": {"command": "echo hi there"}},
             {"name": "run_shell", "arguments": {"command": "echo hi again"}}]  # fmt: skip
    workspace, policy, transcript = _project(tmp_path, calls)
    done = stockade(*_args(tmp_path, workspace, policy, transcript), cwd=tmp_path, stdin="a3\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3. any `echo hi` command" in done.stdout
    assert done.stderr.count(QUESTION) == 1
    assert 'commands = ["echo hi *"]' in policy.read_text()


@pytest.mark.parametrize(
    ("typed", "status", "shown"),
    [
        ("y\n", "ok", "[N]o: y"),
        ("n\n", "denied", "[N]o: n"),
        ("", "denied", "(no answer: no)"),
        ("maybe\ny\n", "ok", "could not read 'maybe'"),
    ],
    ids=["yes", "no", "eof", "garbage-then-yes"],
)
def test_yes_no_and_what_cannot_be_read(
    tmp_path: Path, typed: str, status: str, shown: str
) -> None:
    workspace, policy, transcript = _project(tmp_path, WRITES[:1])
    done = stockade(*_args(tmp_path, workspace, policy, transcript), cwd=tmp_path, stdin=typed)
    assert shown in done.stderr
    outcome = _outcomes(tmp_path)[0]
    assert outcome["status"] == status
    assert outcome["approval"] == ("approved" if status == "ok" else "refused")
    assert outcome.get("approval_scope") == ("once" if status == "ok" else None)
    assert (workspace / "src" / "a.py").exists() is (status == "ok")


# -- Ctrl-C at the question ----------------------------------------------------------------------


def _stockade_script() -> str:
    return str(Path(sys.executable).parent / "stockade")


def _assert_refused_and_stopped(tmp_path: Path, workspace: Path, out: str) -> None:
    assert "interrupted" in out
    outcomes = _outcomes(tmp_path)
    assert len(outcomes) == 1  # no later call ran
    assert outcomes[0]["status"] == "denied"
    assert outcomes[0]["approval"] == "refused"
    assert "interrupted at the prompt (Ctrl-C)" in outcomes[0]["reason"]  # in the audit log
    assert "interrupted at the prompt (Ctrl-C)" in out  # the call's reason, as shown
    traces = (tmp_path / "state" / "traces.jsonl").read_text(encoding="utf-8")
    assert "interrupted at the prompt (Ctrl-C)" in traces
    assert not (workspace / "src").exists()


def test_ctrl_c_typed_at_the_question_refuses_the_call_and_stops_the_run(tmp_path: Path) -> None:
    workspace, policy, transcript = _project(tmp_path, WRITES)
    args = [_stockade_script(), *_args(tmp_path, workspace, policy, transcript)]
    pid, terminal = pty.fork()  # a real terminal: Ctrl-C is a keystroke it turns into SIGINT
    if pid == 0:  # pragma: no cover - the child becomes the command
        os.chdir(tmp_path)
        os.execve(args[0], args, {**os.environ, "COLUMNS": "200"})
    shown = read_until(terminal, b"[N]o: ")
    os.write(terminal, b"\x03")
    shown += read_until(terminal, b"")
    _, status = os.waitpid(pid, 0)
    os.close(terminal)
    out = shown.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 130, out
    _assert_refused_and_stopped(tmp_path, workspace, out)


def test_sigint_while_the_question_waits_on_a_pipe_does_the_same(tmp_path: Path) -> None:
    workspace, policy, transcript = _project(tmp_path, WRITES)
    process = subprocess.Popen(
        [_stockade_script(), *_args(tmp_path, workspace, policy, transcript)],
        cwd=tmp_path,
        stdin=subprocess.PIPE,  # held open: nobody answers, and no end of input either
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert process.stderr is not None
    assert process.stdout is not None
    asked = read_until(process.stderr.fileno(), b"[N]o: ")
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    finally:
        process.kill()
    out = process.stdout.read().decode() + (asked + process.stderr.read()).decode()
    assert process.returncode == 130, out
    _assert_refused_and_stopped(tmp_path, workspace, out)
