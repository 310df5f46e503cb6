"""``stockade run`` as a user runs it: a real subprocess replaying real transcripts through the
engine, in a real workspace, with answers to its questions piped in (no terminal needed).

What a user relies on: every format replays; the policy decides (and asks, on stdin); with
``--overlay`` nothing changes until the diff is confirmed; bad input is one clear line and a
non-zero exit; Ctrl-C leaves an intact audit log, no stray process and no half-applied change.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import require_bubblewrap
from support import stockade_cli as stockade

from stockade.engine import verify_audit
from stockade.engine.cli.common import default_state
from stockade.engine.cli.run_output import MORE, one_line

CALLS = [
    {"name": "write_file", "arguments": {"path": "notes.txt", "content": "hello\n"}},
    {"name": "read_text_file", "arguments": {"path": "notes.txt"}},
    {"name": "write_file", "arguments": {"path": ".env", "content": "KEY=1"}},
]


@pytest.fixture(autouse=True)
def _state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's state folder, where the audit log goes by default: the test's own."""
    home = tmp_path / "state-home"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def jsonl(tmp_path: Path, calls: list[dict[str, object]]) -> Path:
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in calls))
    return path


def test_a_replay_runs_every_call_through_the_policy(tmp_path: Path, ws: Path) -> None:
    done = stockade("run", str(jsonl(tmp_path, CALLS)), "--workspace", str(ws), "--json",
                    "--approve", "no", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1  # the .env write was refused
    report = json.loads(done.stdout)
    assert [r["status"] for r in report["results"]] == ["ok", "ok", "denied"]
    assert (ws / "notes.txt").read_text() == "hello\n"
    assert not (ws / ".env").exists()
    # the audit log and traces: in the workspace's state folder, outside it
    state = default_state(ws)
    assert state.is_relative_to(tmp_path / "state-home" / "stockade")
    assert report["audit"] == str(state / "audit.jsonl")
    assert verify_audit(state / "audit.jsonl").ok
    assert (state / "traces.jsonl").read_text().count("\n") == len(CALLS) + 1
    assert not (tmp_path / ".stockade").exists()
    assert not (ws / ".stockade").exists()


def test_ask_decisions_are_answered_on_stdin_without_a_terminal(tmp_path: Path, ws: Path) -> None:
    transcript = jsonl(tmp_path, CALLS)
    yes = stockade("run", str(transcript), "--workspace", str(ws), cwd=tmp_path, stdin="y\n")
    assert yes.returncode == 0, yes.stdout + yes.stderr
    assert "Allow this call?" in yes.stderr
    assert "a protected path" in yes.stdout  # the reason it asked
    assert (ws / ".env").read_text() == "KEY=1"
    (ws / ".env").unlink()
    no_answer = stockade("run", str(transcript), "--workspace", str(ws), cwd=tmp_path)
    assert no_answer.returncode == 1  # stdin closed: no answer is no
    assert not (ws / ".env").exists()


def test_an_overlay_changes_nothing_until_the_diff_is_confirmed(tmp_path: Path, ws: Path) -> None:
    transcript = jsonl(tmp_path, CALLS[:2])
    args = ("run", str(transcript), "--workspace", str(ws), "--overlay", "--json")
    refused = stockade(*args, cwd=tmp_path, stdin="n\n")
    assert refused.returncode == 0, refused.stderr
    assert "+hello" in refused.stderr  # the diff was shown before the question
    assert json.loads(refused.stdout)["overlay"] == {
        "changes": [{"path": "/workspace/notes.txt", "kind": "added"}],
        "applied": False,
    }
    assert list(ws.iterdir()) == []
    confirmed = stockade(*args, cwd=tmp_path, stdin="y\n")
    assert json.loads(confirmed.stdout)["overlay"]["applied"] is True
    assert (ws / "notes.txt").read_text() == "hello\n"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (
            "openai.json",
            json.dumps({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "write_file",
                             "arguments": json.dumps({"path": "o.txt", "content": "x"})}}]}),
        ),
        (
            "anthropic.json",
            json.dumps([{"role": "user", "content": "write it"}, {"role": "assistant", "content": [
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "t1", "name": "write_file",
                 "input": {"path": "o.txt", "content": "x"}}]}]),
        ),
        (
            "model.txt",
            "Writing it.\n<tool_call><name>write_file</name><params><path>o.txt</path>"
            "<content><![CDATA[x]]></content></params></tool_call>",
        ),
    ],
    ids=["openai", "anthropic", "xml"],
)  # fmt: skip
def test_every_transcript_format_replays(tmp_path: Path, ws: Path, name: str, text: str) -> None:
    transcript = tmp_path / name
    transcript.write_text(text)
    done = stockade("run", str(transcript), "--workspace", str(ws), "--preset", "permissive",
                    cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (ws / "o.txt").read_text() == "x"


@pytest.mark.parametrize(
    ("transcript", "extra", "words"),
    [
        (None, [], "no transcript at"),
        ('{"name": "write_file"', [], "calls.jsonl:1: not valid JSON"),
        ('{"hello": 1}\n', [], "not a tool call or a message"),
        ("", [], "is empty"),
        ("{}", ["--policy", "nope.toml"], "does not exist"),
    ],
    ids=["missing", "bad-json", "not-a-call", "empty", "missing-policy"],
)
def test_bad_input_is_one_clear_line_and_exit_one(
    tmp_path: Path, ws: Path, transcript: str | None, extra: list[str], words: str
) -> None:
    path = tmp_path / "calls.jsonl"
    if transcript is not None:
        path.write_text(transcript)
    done = stockade("run", str(path), "--workspace", str(ws), *extra, cwd=tmp_path)
    assert done.returncode == 1
    assert words in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_workspace_and_an_unknown_tool_are_reported(tmp_path: Path, ws: Path) -> None:
    transcript = jsonl(tmp_path, [{"name": "rm_everything", "arguments": {}}])
    missing = stockade("run", str(transcript), "--workspace", str(tmp_path / "nope"), cwd=tmp_path)
    assert missing.returncode == 2  # a wrong option: a usage error
    assert f"--workspace {tmp_path / 'nope'} does not exist" in missing.stderr
    unknown = stockade("run", str(transcript), "--workspace", str(ws), cwd=tmp_path)
    assert unknown.returncode == 1
    assert "no tool named 'rm_everything'" in unknown.stdout


def test_ctrl_c_stops_the_replay_cleanly(tmp_path: Path, ws: Path) -> None:
    require_bubblewrap()
    calls = [
        CALLS[0],
        {"name": "run_shell", "arguments": {"command": "sleep 30.66"}},
        {"name": "write_file", "arguments": {"path": "late.txt", "content": "x"}},
    ]
    script = Path(sys.executable).parent / "stockade"
    args = [str(script), "run", str(jsonl(tmp_path, calls)), "--workspace", str(ws),
            "--preset", "permissive"]  # fmt: skip
    process = subprocess.Popen(
        args, cwd=tmp_path, stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    deadline = time.monotonic() + 30
    while not _sleeping("30.66") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleeping("30.66"), "the command never started"
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=20)
    assert process.returncode == 130
    assert "interrupted" in out
    assert not _sleeping("30.66")  # the command's tree was killed
    assert not (ws / "late.txt").exists()  # the replay stopped there
    assert verify_audit(default_state(ws) / "audit.jsonl").ok


def _sleeping(marker: str) -> bool:
    for process in psutil.process_iter(["cmdline", "status"]):
        words = process.info["cmdline"] or []
        alive = process.info["status"] != psutil.STATUS_ZOMBIE
        if alive and words[:1] == ["sleep"] and marker in words:
            return True
    return False


def test_a_state_folder_the_agent_could_write_is_refused_unless_insisted_on(
    tmp_path: Path, ws: Path
) -> None:
    transcript = jsonl(tmp_path, CALLS[:1])
    for inside in (ws / ".stockade", ws):
        done = stockade("run", str(transcript), "--workspace", str(ws), "--state", str(inside),
                        cwd=tmp_path)  # fmt: skip
        assert done.returncode == 1
        assert "which the agent can write" in done.stderr
        assert "--state-in-mount" in done.stderr
        assert "Traceback" not in done.stderr
    assert not (ws / "notes.txt").exists()  # nothing ran
    insisted = stockade("run", str(transcript), "--workspace", str(ws), "--state",
                        str(ws / ".stockade"), "--state-in-mount", cwd=tmp_path)  # fmt: skip
    assert insisted.returncode == 0, insisted.stdout + insisted.stderr
    assert verify_audit(ws / ".stockade" / "audit.jsonl").ok


def test_a_cut_log_is_kept_as_evidence_and_the_next_run_refuses_to_write_over_it(
    tmp_path: Path, ws: Path
) -> None:
    transcript = jsonl(tmp_path, CALLS[:2])  # four records
    assert stockade("run", str(transcript), "--workspace", str(ws), cwd=tmp_path).returncode == 0
    log = default_state(ws) / "audit.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(lines[0])
    again = stockade("run", str(transcript), "--workspace", str(ws), cwd=tmp_path)
    assert again.returncode == 1
    assert f"records 2..{len(lines)} are missing" in again.stderr
    assert "Traceback" not in again.stderr
    assert log.read_bytes() == lines[0]  # left as found


# -- what is shown of each call ----------------------------------------------------------------


def _reads(tmp_path: Path, ws: Path, text: str) -> Path:
    (ws / "f.txt").write_text(text)
    return jsonl(tmp_path, [{"name": "read_text_file", "arguments": {"path": "f.txt"}}])


def test_a_long_result_is_cut_saying_so_and_verbose_shows_it_whole(
    tmp_path: Path, ws: Path
) -> None:
    lines = [f"line {n} of the file, with words enough to fill it" for n in range(1, 41)]
    transcript = _reads(tmp_path, ws, "\n".join(lines) + "\n")
    short = stockade("run", str(transcript), "--workspace", str(ws), cwd=tmp_path,
                     env={"COLUMNS": "100"})  # fmt: skip
    assert short.returncode == 0, short.stdout + short.stderr
    (shown,) = [line for line in short.stdout.splitlines() if line.startswith("[1/1]")]
    assert len(shown) <= 100  # one line of the terminal
    assert shown.endswith("… (-v for all)")  # cut, and saying so
    assert "line 1 of the file" in shown
    assert "line 40" not in short.stdout
    whole = stockade("run", str(transcript), "--workspace", str(ws), "-v", cwd=tmp_path,
                     env={"COLUMNS": "100"})  # fmt: skip
    assert whole.returncode == 0, whole.stdout + whole.stderr
    for line in lines:
        assert f"    {line}\n" in whole.stdout
    assert "(-v for all)" not in whole.stdout
    assert '    metadata: {\n      "path": "/workspace/f.txt"' in whole.stdout
    assert '"lines": 40' in whole.stdout


def test_a_short_result_is_shown_whole_on_its_line(tmp_path: Path, ws: Path) -> None:
    transcript = _reads(tmp_path, ws, "root\nroot2\n")
    done = stockade("run", str(transcript), "--workspace", str(ws), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[1/1] read_text_file ok · workspace-files  root ↵ root2\n" in done.stdout
    assert "-v for all" not in done.stdout


def test_a_result_is_shown_as_it_is_not_as_markup_or_terminal_codes(
    tmp_path: Path, ws: Path
) -> None:
    transcript = _reads(tmp_path, ws, "see [/] and [bold]x[/bold] \x1b[2J\x07 end\n")
    for extra in ([], ["-v"]):
        done = stockade("run", str(transcript), "--workspace", str(ws), *extra, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "see [/] and [bold]x[/bold] \\x1b[2J\\x07 end" in done.stdout
        assert "\x1b[2J" not in done.stdout
        assert "Traceback" not in done.stderr


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=300), st.integers(15, 200))
def test_one_line_fits_its_room_and_says_when_it_cut(text: str, room: int) -> None:
    shown, cut = one_line(text, room)
    assert "\n" not in shown
    assert len(shown) + (len(MORE) if cut else 0) <= room
    whole = " ↵ ".join(line.rstrip() for line in text.strip("\n").splitlines())
    assert cut == (whole != shown)
    if cut:
        assert whole.startswith(shown)
