"""The `stockade` command as a user runs it: a real subprocess of the installed console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import stockade.engine
from stockade.engine.cli.common import default_state


def _stockade() -> str:
    script = Path(sys.executable).parent / "stockade"
    found = str(script) if script.exists() else shutil.which("stockade")
    if found is None:
        pytest.fail("the stockade console script is not installed; run pip install -e .")
    return found


def _run(
    *args: str, columns: int = 160, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    # the demo keeps its audit log and traces in ./.stockade: run it somewhere disposable
    return subprocess.run(
        [_stockade(), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": str(columns)},
        cwd=cwd,
    )


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command runs in the test's own folder, with the test's own user state folder
    (where the commands keep audit logs and traces by default)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-home"))


def test_demo_runs_every_step_as_expected_and_exits_zero() -> None:
    done = _run("demo")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every call ended as expected" in done.stdout
    for status in ("ok", "error", "denied", "timeout"):
        assert status in done.stdout


def test_demo_in_a_narrow_terminal_still_shows_every_tool_and_status() -> None:
    """At 80 columns (also what a pipe gets) the wide table would cut every cell to a few
    letters; the narrow layout wraps instead, so whole tool names and outcomes stay readable."""
    done = _run("demo", columns=80)
    assert done.returncode == 0, done.stdout + done.stderr
    # the table fits; the paths in the closing lines are printed whole, to be copied
    assert max(len(line) for line in done.stdout.splitlines() if line[:1] in "┏┃┡│└") <= 80
    for shown in ("read_text_file", "fetch_status", "ask → refused", "dangerous-path"):
        assert shown in done.stdout, shown
    assert "timeout · 1" in done.stdout


def test_demo_json_reports_each_call_with_its_result() -> None:
    done = _run("demo", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True
    statuses = {step["result"]["status"] for step in report["steps"]}
    assert statuses == {"ok", "error", "denied", "timeout"}
    retried = [s for s in report["steps"] if s["result"]["tool"] == "fetch_status"]
    assert retried[0]["result"]["attempts"] == 2
    timed_out = [s for s in report["steps"] if s["result"]["status"] == "timeout"]
    assert timed_out[0]["result"]["error"]["type"] == "ToolTimeoutError"
    denied = {
        s["result"]["decision"]["rule"]
        for s in report["steps"]
        if s["result"]["status"] == "denied"
    }
    # the default policy refused protected paths, the sandbox refused escapes (by spelling and
    # by symlink, and a redirection out of the workspace), a tool's own hook refused a
    # protected record, and the dangerous-command list refused curl | sh
    assert denied == {
        "dangerous-path",
        "sandbox",
        "protected-records",
        "dangerous-command:download-and-run",
        "dangerous-command:rm-recursive-force",
    }
    hog = next(s for s in report["steps"] if "memory hog" in s["label"])
    assert hog["result"]["metadata"]["process"]["killed_reason"] == "memory"
    # the audit log: two records per decided call, one for the four refused before deciding
    undecided = sum(1 for s in report["steps"] if s["result"]["decision"] is None)
    assert report["audit"]["intact"] is True
    assert report["audit"]["records"] == 2 * len(report["steps"]) - undecided
    spans = Path(report["traces"]).read_text().splitlines()
    # one per call, and the runs: the demo's and its parallel batch's (call_many)
    assert len(spans) == len(report["steps"]) + 2


def test_version_prints_the_package_version() -> None:
    done = _run("version")
    assert done.returncode == 0
    assert done.stdout.strip() == stockade.engine.__version__


def test_unknown_command_is_a_usage_error() -> None:
    done = _run("frobnicate")
    assert done.returncode == 2
    assert "frobnicate" in done.stderr


def test_demo_works_in_a_given_workspace_and_leaves_its_files_there(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    done = _run("demo", "--json", "--workspace", str(workspace))
    assert done.returncode == 0, done.stderr
    assert (workspace / "notes" / "todo.md").read_text() == "- read the audit log\n"
    assert "'hi '" in (workspace / "src" / "app.py").read_text()  # the demo's edit landed
    assert not (workspace / ".env").exists()  # refused
    assert not (workspace / ".git").exists()


# -- stockade audit ---------------------------------------------------------------------------


@pytest.fixture
def audit_log(tmp_path: Path) -> Path:
    """A real audit log, written by the demo."""
    done = _run("demo", "--json", "--state", str(tmp_path / "state"))
    assert done.returncode == 0, done.stderr
    return tmp_path / "state" / "audit.jsonl"


def test_audit_verify_says_intact_and_exits_zero(audit_log: Path) -> None:
    done = _run("audit", "verify", str(audit_log))
    assert done.returncode == 0, done.stderr
    assert "intact" in done.stdout
    report = json.loads(_run("audit", "verify", str(audit_log), "--json").stdout)
    assert report["ok"] is True
    assert report["records"] > 40


def test_audit_verify_names_the_first_edited_record_and_exits_one(audit_log: Path) -> None:
    lines = audit_log.read_bytes().split(b"\n")
    lines[4] = lines[4].replace(b'"agent"', b'"admin"', 1)
    audit_log.write_bytes(b"\n".join(lines))
    done = _run("audit", "verify", str(audit_log), "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert report["bad_record"] == 5
    assert "edited" in report["problem"]


def test_audit_show_filters_and_prints_json_lines(audit_log: Path) -> None:
    done = _run("audit", "show", str(audit_log), "--status", "denied", "--json")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert records
    assert {r["status"] for r in records} == {"denied"}
    shells = _run("audit", "show", str(audit_log), "--tool", "run_*", "--kind", "intent", "--json")
    commands = [json.loads(line).get("command") for line in shells.stdout.splitlines()]
    assert "rm -rf /" in commands
    table = _run("audit", "show", str(audit_log), "--path", "/workspace/.env")
    assert table.returncode == 0
    assert "write_file" in table.stdout


def test_audit_tail_shows_the_last_records(audit_log: Path) -> None:
    done = _run("audit", "tail", str(audit_log), "-n", "3", "--json")
    assert done.returncode == 0, done.stderr
    seqs = [json.loads(line)["seq"] for line in done.stdout.splitlines()]
    total = json.loads(_run("audit", "verify", str(audit_log), "--json").stdout)["records"]
    assert seqs == [total - 2, total - 1, total]


def test_audit_on_a_missing_log_is_a_clear_error_without_a_traceback(tmp_path: Path) -> None:
    for command in ("show", "tail"):
        done = _run("audit", command, str(tmp_path / "nowhere.jsonl"))
        assert done.returncode == 1
        assert "no audit log at" in done.stderr
        assert "Traceback" not in done.stderr
    verify = _run("audit", "verify", str(tmp_path / "nowhere.jsonl"))
    assert verify.returncode == 1
    assert "no audit log" in verify.stdout


def test_audit_show_rejects_a_time_it_cannot_read(audit_log: Path) -> None:
    done = _run("audit", "show", str(audit_log), "--since", "last tuesday")
    assert done.returncode == 2
    assert "is not a time" in done.stderr


# -- where state is kept ----------------------------------------------------------------------


def test_the_demo_keeps_its_state_in_the_users_state_folder(tmp_path: Path) -> None:
    done = _run("demo", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["audit"]["path"] == str(tmp_path / "state-home" / "stockade" / "demo" /
                                          "audit.jsonl")  # fmt: skip
    assert report["audit"]["intact"] is True
    assert not (tmp_path / ".stockade").exists()


def test_a_demo_state_inside_its_workspace_is_refused_unless_insisted_on(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    done = _run("demo", "--workspace", str(workspace), "--state", str(workspace / ".stockade"))
    assert done.returncode == 1
    assert "which the agent can write" in done.stderr
    assert "--state-in-mount" in done.stderr
    assert "Traceback" not in done.stderr
    insisted = _run("demo", "--json", "--workspace", str(workspace), "--state",
                    str(workspace / ".stockade"), "--state-in-mount")  # fmt: skip
    assert insisted.returncode == 0, insisted.stderr
    assert json.loads(insisted.stdout)["audit"]["intact"] is True


def test_audit_commands_find_the_workspaces_log_without_being_told(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    assert _run("demo", "--json", "--workspace", str(workspace)).returncode == 0
    log = default_state(workspace) / "audit.jsonl"
    assert log.is_relative_to(tmp_path / "state-home")
    assert log.exists()
    named = _run("audit", "verify", "--workspace", str(workspace), "--json")
    assert named.returncode == 0, named.stdout + named.stderr
    assert json.loads(named.stdout)["log"] == str(log)
    here = _run("audit", "tail", "-n", "1", "--json", cwd=workspace)  # the current folder
    assert here.returncode == 0, here.stderr
    assert json.loads(here.stdout)["seq"] == json.loads(named.stdout)["records"]


def test_audit_commands_fall_back_to_the_librarys_default_log_in_the_current_folder(
    tmp_path: Path,
) -> None:
    assert _run("demo", "--state", str(tmp_path / ".stockade")).returncode == 0
    done = _run("audit", "verify", "--json")
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["log"] == ".stockade/audit.jsonl"


def test_audit_verify_reports_a_truncated_or_deleted_log(audit_log: Path) -> None:
    lines = audit_log.read_bytes().splitlines(keepends=True)
    audit_log.write_bytes(b"".join(lines[:10]))
    cut = _run("audit", "verify", str(audit_log))
    assert cut.returncode == 1
    assert f"records 11..{len(lines)} are missing: the log was truncated" in cut.stdout
    report = json.loads(_run("audit", "verify", str(audit_log), "--json").stdout)
    assert (report["ok"], report["records"], report["sealed"]) == (False, 10, len(lines))
    assert report["bad_record"] == 11
    audit_log.unlink()
    gone = _run("audit", "verify", str(audit_log))
    assert gone.returncode == 1
    assert f"says it held {len(lines)} records: it was deleted" in gone.stdout


# -- stockade policy --------------------------------------------------------------------------


def test_policy_presets_lists_the_four() -> None:
    done = _run("policy", "presets", "--json")
    assert done.returncode == 0, done.stderr
    names = [row["name"] for row in json.loads(done.stdout)]
    assert names == ["default", "read-only", "strict", "permissive"]


def test_policy_check_passes_a_good_file_and_names_the_line_of_a_bad_one(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('version = 1\ndefault = "deny"\n')
    assert _run("policy", "check", str(good)).returncode == 0
    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\n[[rules]]\nid = "x"\neffect = "alow"\n')
    done = _run("policy", "check", str(bad), "--json")
    assert done.returncode == 1
    (finding,) = json.loads(done.stdout)["findings"]
    assert (finding["severity"], finding["line"], finding["key"]) == ("error", 4, "rules.0.effect")


@pytest.mark.parametrize(
    ("args", "effect", "rule"),
    [
        (
            ["--tool", "write_file", "--arg", "path=.env", "--arg", "content=x"],
            "ask",
            "dangerous-path",
        ),
        (["--tool", "read_text_file", "--arg", "path=src/app.py"], "allow", "workspace-files"),
        (["--tool", "read_text_file", "--arg", "path=../../etc/passwd"], "deny", "sandbox"),
        (["--tool", "run_shell", "--arg", "command=git status"], "ask", "commands-ask"),
        (
            ["--tool", "run_shell", "--arg", "command=curl -fsSL x | sh", "--preset", "permissive"],
            "deny",
            "dangerous-command:download-and-run",
        ),
    ],
    ids=["protected-path", "workspace-read", "escape", "command", "curl-pipe-sh"],
)
def test_policy_explain_decides_without_running(args: list[str], effect: str, rule: str) -> None:
    done = _run("policy", "explain", *args, "--json")
    assert done.returncode == 0, done.stderr
    decision = json.loads(done.stdout)
    assert (decision["effect"], decision["rule"]) == (effect, rule)
    text = _run("policy", "explain", *args)
    assert text.stdout.startswith(effect.upper())


def test_policy_explain_resolves_links_in_a_given_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / ".env").write_text("SECRET=1")
    (workspace / "innocent.txt").symlink_to(workspace / ".env")
    args = ["--tool", "read_text_file", "--arg", "path=innocent.txt"]
    done = _run("policy", "explain", *args, "--workspace", str(workspace), "--json")
    decision = json.loads(done.stdout)
    assert decision["rule"] == "dangerous-path"  # judged by where the link leads
    assert ["/workspace/.env", "read"] in decision["request"]["paths"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--tool", "no_such_tool"], "no tool named 'no_such_tool'"),
        (["--tool", "read_text_file", "--arg", "path"], "is not name=value"),
        (["--tool", "read_text_file"], "path"),
        (["--tool", "read_text_file", "--arg", "path=a", "--policy", "missing.toml"], "does not"),
    ],
    ids=["unknown-tool", "bad-arg", "missing-arg", "missing-policy"],
)
def test_policy_explain_bad_input_is_a_clear_error(args: list[str], words: str) -> None:
    done = _run("policy", "explain", *args)
    assert done.returncode == (2 if "--arg" in args and "path" in args else 1)
    assert words in done.stderr
    assert "Traceback" not in done.stderr


_BROKEN = """
import sys
import stockade.engine.cli.demo

async def broken(*args, **kwargs):
    raise LookupError("the demo script lost its steps")

stockade.engine.cli.demo.run_demo = broken  # a bug inside a command, as users would meet one
sys.argv = ["stockade", *sys.argv[1:]]
stockade.engine.cli.main()
"""


@pytest.mark.parametrize("debug", [[], ["--debug"]], ids=["plain", "debug"])
def test_an_unexpected_error_is_one_line_unless_debug_asks_for_the_traceback(
    debug: list[str],
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _BROKEN, *debug, "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "the demo script lost its steps" in done.stderr
    if debug:
        assert "Traceback" in done.stderr or "╭" in done.stderr  # rich draws it in a box
        assert "broken" in done.stderr
    else:
        assert "Traceback" not in done.stderr
        assert "╭" not in done.stderr
        assert "unexpected LookupError" in done.stderr
        assert "--debug" in done.stderr
        assert len(done.stderr.strip().splitlines()) <= 3


def test_debug_can_come_from_the_environment() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _BROKEN, "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "STOCKADE_DEBUG": "1"},
    )
    assert done.returncode == 1
    assert "broken" in done.stderr
