"""`stockade demo` as a new user runs it: it writes only in the folder it is given (refusing one
that holds other files), says whether the audit log it wrote verifies, never cuts a word of its
table without "…" (in a terminal of 80 columns, or through a pipe), says which asks its scripted
approver answered, and counts in good English."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import one_error_line, snapshot, stockade_cli

from stockade import AuditLog, Engine, ToolCall, Toolkit, tool
from stockade.engine.cli.demo_session import DemoReport, DemoStep
from stockade.engine.cli.demo_table import ELLIPSIS, audit_verdict, clip, plural, summary
from stockade.engine.observe import AuditReport, verify_audit

_SCRIPT = str(Path(sys.executable).parent / "stockade")
_DEMO_FILES = {"README.md", "src", "src/app.py", "notes", "notes/todo.md"}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The test's own user state folder and temporary folder (where the demo keeps its
    secret), so that both can be checked."""
    (tmp_path / "tmp").mkdir()
    return {"XDG_STATE_HOME": str(tmp_path / "state-home"), "TMPDIR": str(tmp_path / "tmp")}


def _demo(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return stockade_cli("demo", *args, cwd=cwd, env=env)


def _demo_names(workspace: Path) -> set[str]:
    """What is in ``workspace`` but the cache a command's Python leaves."""
    return {
        str(path.relative_to(workspace))
        for path in workspace.rglob("*")
        if "__pycache__" not in path.parts
    }


# -- 1. it writes in the folder given, and nowhere else ------------------------------------------


def test_a_new_workspace_gets_the_demo_files_and_nothing_beside_it_changes(
    tmp_path: Path, env: dict[str, str]
) -> None:
    parent = tmp_path / "projects"
    (parent / "mine").mkdir(parents=True)
    (parent / "mine" / "app.py").write_text("print('mine')\n")
    (parent / "README.md").write_text("my own readme\n")
    workspace = parent / "dws"
    before = snapshot(parent)
    done = _demo("--json", "--workspace", str(workspace), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert snapshot(parent, skip=workspace) == before  # not a byte beside it: no secret there
    assert _demo_names(workspace) == _DEMO_FILES  # the symbolic link went with its target
    assert "'hi '" in (workspace / "src" / "app.py").read_text()  # the agent's edit landed
    assert list((tmp_path / "tmp").iterdir()) == []  # its temporary folder is gone
    report = json.loads(done.stdout)
    assert report["workspace"] == str(workspace)
    link = next(s for s in report["steps"] if s["label"] == "a symlink that leads out")
    assert link["result"]["status"] == "denied"
    assert link["result"]["decision"]["rule"] == "sandbox"


def test_a_relative_workspace_works_from_the_current_folder(
    tmp_path: Path, env: dict[str, str]
) -> None:
    (tmp_path / "here").mkdir()
    (tmp_path / "beside.txt").write_text("beside\n")
    before = snapshot(tmp_path, skip=tmp_path / "here")
    done = _demo("--workspace", "dws", cwd=tmp_path / "here", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every call ended as expected" in " ".join(done.stdout.split())
    assert _demo_names(tmp_path / "here" / "dws") == _DEMO_FILES
    assert os.listdir(tmp_path / "here") == ["dws"]
    after = snapshot(tmp_path, skip=tmp_path / "here")
    # the state folder is the user's, the temporary one the system's (both given in env, and
    # the demo's temporary folder gone from it); nothing else changed above the workspace
    assert list((tmp_path / "tmp").iterdir()) == []
    mine = {k: v for k, v in after.items() if k.split("/")[0] not in ("state-home", "tmp")}
    assert mine == {k: v for k, v in before.items() if k != "tmp"}


def test_a_folder_that_is_not_empty_is_refused_and_left_untouched(
    tmp_path: Path, env: dict[str, str]
) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_text("the user's own code\n")
    (project / "README.md").write_text("the user's own readme\n")
    before = snapshot(tmp_path)
    done = _demo("--workspace", str(project), cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_error_line(done.stderr)
    assert f"--workspace {project} is not empty" in line
    assert "--force" in line
    assert "new or empty folder" in line
    # even --force will not write where the demo's own files would replace the user's
    forced = _demo("--workspace", str(project), "--force", cwd=tmp_path, env=env)
    assert forced.returncode == 2, forced.stdout + forced.stderr
    assert "README.md, src" in one_error_line(forced.stderr)
    assert snapshot(tmp_path) == before  # no state folder, nothing at all


def test_force_adds_the_demo_files_beside_others_without_touching_them(
    tmp_path: Path, env: dict[str, str]
) -> None:
    folder = tmp_path / "scratch"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "rows.csv").write_text("a,b\n1,2\n")
    (folder / "notes.txt").write_text("keep me\n")
    before = snapshot(folder)
    done = _demo("--json", "--workspace", str(folder), "--force", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    after = snapshot(folder)
    assert {k: after[k] for k in ("data/rows.csv", "notes.txt")} == {
        k: before[k] for k in ("data/rows.csv", "notes.txt")
    }
    assert _demo_names(folder) == _DEMO_FILES | {"data", "data/rows.csv", "notes.txt"}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--workspace", "missing/dws"], "does not exist; create it first"),
        (["--force"], "--force goes with --workspace"),
    ],
    ids=["missing-parent", "force-alone"],
)
def test_bad_workspace_options_are_usage_errors(
    tmp_path: Path, env: dict[str, str], args: list[str], words: str
) -> None:
    done = _demo(*args, cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert words in one_error_line(done.stderr)
    assert sorted(os.listdir(tmp_path)) == ["tmp"]  # nothing created: no missing/, no state


def test_a_workspace_that_is_a_link_to_nothing_is_a_usage_error(
    tmp_path: Path, env: dict[str, str]
) -> None:
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    done = _demo("--workspace", "dangling", cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "a link to nothing" in one_error_line(done.stderr)
    assert not (tmp_path / "nowhere").exists()


def test_a_state_folder_that_cannot_be_made_leaves_the_workspace_unwritten(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The state folder is made before the workspace is written: a demo that cannot keep its
    log writes nothing, so running it again with a good --state finds the folder still new."""
    (tmp_path / "a-file").write_text("not a folder\n")
    bad_state = str(tmp_path / "a-file" / "state")
    done = _demo("--workspace", "ws", "--state", bad_state, cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "--state" in one_error_line(done.stderr)
    assert not (tmp_path / "ws").exists()


# -- 2. the audit log's verdict -------------------------------------------------------------------


def test_two_demos_at_once_on_one_state_folder_leave_a_log_that_verifies(
    tmp_path: Path, env: dict[str, str]
) -> None:
    args = ["demo", "--json", "--state", str(tmp_path / "state")]
    runs = [
        subprocess.Popen(
            [_SCRIPT, *args],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=120) for run in runs]
    for run, (out, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, out + err
        assert json.loads(out)["audit"]["intact"] is True
    verdict = verify_audit(tmp_path / "state" / "audit.jsonl")
    assert verdict.ok, verdict.problem
    # the run that ended last verified the whole log, both runs' records in it
    assert verdict.records == max(json.loads(out)["audit"]["records"] for out, _ in outputs)


@tool(name="noop")
def _noop() -> str:
    """Do nothing."""
    return "done"


def _tampered_state(folder: Path) -> Path:
    """A state folder whose audit log (a real one) had its first record edited."""
    folder.mkdir()

    async def write() -> None:
        toolkit = Toolkit()
        toolkit.add(_noop)
        async with Engine(toolkit, audit=AuditLog(folder / "audit.jsonl")) as engine:
            await engine.call(ToolCall(name="noop", arguments={}))

    asyncio.run(write())
    log = folder / "audit.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace('"noop"', '"nope"', 1)
    log.write_text("".join(lines))
    assert not verify_audit(log).ok
    return log


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_a_log_that_does_not_verify_after_the_demo_is_said_and_exits_one(
    tmp_path: Path, env: dict[str, str], as_json: bool
) -> None:
    log = _tampered_state(tmp_path / "state")
    json_args = ["--json"] if as_json else []
    done = _demo(*json_args, "--state", str(tmp_path / "state"), cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    line = one_error_line(done.stderr)
    assert f"the audit log {log} does not verify: record 1" in line
    assert "stockade audit verify" in line
    if as_json:
        report = json.loads(done.stdout)
        assert report["passed"] is True  # every call ended as expected; the log did not
        assert report["audit"]["intact"] is False
        assert "record 1" in report["audit"]["problem"]
    else:
        assert "every call ended as expected" in done.stdout
        assert f"Audit log: {log}: NOT intact: record 1" in done.stdout


def test_the_demo_says_its_log_verifies() -> None:
    assert audit_verdict(AuditReport(True, 64, ("a",), seal="a.seal")) == (
        "[green]intact[/] (64 records)"
    )
    one = audit_verdict(AuditReport(True, 1, ("a", "b"), seal="a.seal"))
    assert "(1 record in 2 files)" in one


# -- 3 and 4. the table: no word cut without "…"; the scripted approver's answers ---------------


@pytest.fixture(scope="module")
def words(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every word the demo's table may show, from a run's JSON (labels, results, rules...)."""
    home = tmp_path_factory.mktemp("words")
    done = stockade_cli("demo", "--json", cwd=home, env={"XDG_STATE_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    found = {"ask", "→", "approved", "refused", "(scripted)", "chunks]"}
    for text in _strings(json.loads(done.stdout)):
        found.update(text.split())
    return found


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _cut_without_ellipsis(output: str, words: set[str]) -> list[str]:
    """Words in the table's rows that are the start of a longer word the demo shows, without
    "…" to say so: a word cut silently, or folded onto the next line."""
    cut = []
    for line in output.splitlines():
        if not line.startswith("│"):
            continue
        for cell in line.strip("│ ").split("│"):
            for token in cell.split():
                if token.endswith(ELLIPSIS) or token in words or len(token) < 3:
                    continue
                if token.isdigit():  # times and counts
                    continue
                if any(word.startswith(token) for word in words):
                    cut.append(token)
    return cut


def _check_table(out: str, words: set[str]) -> None:
    flat = " ".join(out.split())  # as read: the lines under the table wrap
    assert "every call ended as expected" in flat, out
    assert _cut_without_ellipsis(out, words) == [], out
    assert "`stockade demo --json` prints every result whole" in flat
    # the scripted approver's answers, on their rows and in the summary
    assert "ask → approved" in out
    assert "(scripted)" in out
    assert "ask → refused" in out
    assert "The demo's scripted approver answered 7 asks: 5 approved, 2 refused" in flat


@pytest.mark.parametrize("columns", [None, "80", "100", "200"])
def test_through_a_pipe_no_word_is_cut_without_an_ellipsis(
    tmp_path: Path, env: dict[str, str], words: set[str], columns: str | None
) -> None:
    environment = {**os.environ, **env}
    environment.pop("COLUMNS", None)  # a pipe without COLUMNS: rich's 80
    if columns is not None:
        environment["COLUMNS"] = columns
    done = subprocess.run(
        [_SCRIPT, "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=environment,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    _check_table(done.stdout, words)
    width = int(columns or 80)
    assert max(len(line) for line in done.stdout.splitlines() if line.startswith("│")) == width


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _in_a_terminal(
    args: list[str], cwd: Path, env: dict[str, str], *, stop: bytes = b""
) -> tuple[int, str]:
    """Run ``stockade`` under a pseudo-terminal of 80 columns and 24 rows; with ``stop``,
    press Ctrl-C once it shows. Returns the exit code and the screen's text."""
    pid, terminal = pty.fork()
    if pid == 0:  # pragma: no cover - the child becomes the command
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        os.chdir(cwd)
        environment = {**os.environ, **env, "TERM": "xterm-256color"}
        environment.pop("COLUMNS", None)
        environment.pop("LINES", None)
        os.execve(_SCRIPT, [_SCRIPT, *args], environment)
    seen = b""
    deadline = time.monotonic() + 60
    pressed = False
    while time.monotonic() < deadline:
        if stop and not pressed and stop in seen:
            os.write(terminal, b"\x03")
            pressed = True
        ready, _, _ = select.select([terminal], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = os.read(terminal, 65536)
        except OSError:  # the command ended and closed its side
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    os.close(terminal)
    text = _ANSI.sub("", seen.decode(errors="replace"))
    return os.waitstatus_to_exitcode(status), text.replace("\r\n", "\n").replace("\r", "\n")


def test_in_a_terminal_of_80_columns_no_word_is_cut_without_an_ellipsis(
    tmp_path: Path, env: dict[str, str], words: set[str]
) -> None:
    code, screen = _in_a_terminal(["demo"], tmp_path, env)
    assert code == 0, screen
    _check_table(screen, words)


def test_ctrl_c_stops_the_demo_with_130_and_cleans_up(tmp_path: Path, env: dict[str, str]) -> None:
    args = ["demo", "--workspace", "dws", "--state", str(tmp_path / "state")]
    code, screen = _in_a_terminal(args, tmp_path, env, stop=b"a typed call")
    assert code == 130, screen
    assert "interrupted" in screen
    assert "of the demo ran; the audit log" in screen
    assert "intact" in screen
    assert "Traceback" not in screen
    assert list((tmp_path / "tmp").iterdir()) == []  # its temporary folder (and secret) gone
    assert not (tmp_path / "dws" / "docs-link").is_symlink()
    assert verify_audit(tmp_path / "state" / "audit.jsonl").ok


# -- 5. counts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "shown"), [(0, "0 calls"), (1, "1 call"), (2, "2 calls"), (21, "21 calls")]
)
def test_plural_agrees_with_the_count(count: int, shown: str) -> None:
    assert plural(count, "call") == shown


def test_a_one_call_summary_says_1_call() -> None:
    async def one() -> DemoReport:
        toolkit = Toolkit()
        toolkit.add(_noop)
        async with Engine(toolkit) as engine:
            result = await engine.call(ToolCall(name="noop", arguments={}))
        return DemoReport(steps=[DemoStep("one call", "ok", result, chunks=1)], seconds=0.5)

    text = summary(asyncio.run(one()))
    assert text == "Result: every call ended as expected (1 call in 0.50s: 1 ok)."


@given(st.text(alphabet=st.sampled_from("ab cd-/é "), max_size=300), st.integers(4, 200))
def test_clip_keeps_short_text_and_marks_every_cut(text: str, limit: int) -> None:
    shown = clip(text, limit)
    if len(text) <= limit:
        assert shown == text
        return
    assert len(shown) <= limit
    assert shown.endswith(ELLIPSIS)
    kept = shown[: -len(ELLIPSIS)]
    assert text.startswith(kept)
    if " " in text[limit // 2 + 1 : limit - 1]:  # a word boundary near the limit: cut there
        assert text[len(kept)] == " "
