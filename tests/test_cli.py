"""The `stockade` command as a user runs it: a real subprocess of the installed console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import engine


def _stockade() -> str:
    script = Path(sys.executable).parent / "stockade"
    found = str(script) if script.exists() else shutil.which("stockade")
    if found is None:
        pytest.fail("the stockade console script is not installed; run pip install -e .")
    return found


def _run(*args: str, columns: int = 160) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_stockade(), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": str(columns)},
    )


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
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    for shown in ("read_text_file", "fetch_status", "deny · dangerous-path", "timeout · 1"):
        assert shown in done.stdout, shown


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
    }


def test_version_prints_the_package_version() -> None:
    done = _run("version")
    assert done.returncode == 0
    assert done.stdout.strip() == engine.__version__


def test_unknown_command_is_a_usage_error() -> None:
    done = _run("frobnicate")
    assert done.returncode == 2
    assert "frobnicate" in done.stderr


def test_demo_works_in_a_given_workspace_and_leaves_its_files_there(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    done = _run("demo", "--json", "--workspace", str(workspace))
    assert done.returncode == 0, done.stderr
    assert (workspace / "notes" / "todo.md").read_text() == "x"
    assert "'hi '" in (workspace / "src" / "app.py").read_text()  # the demo's edit landed
    assert not (workspace / ".env").exists()  # refused
    assert not (workspace / ".git").exists()
