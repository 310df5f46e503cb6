"""The README's promises: the two Quickstart commands, CI running exactly the test command, and
the library example working as printed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.MULTILINE | re.DOTALL)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def test_quickstart_has_exactly_two_commands_install_plus_demo_and_install_plus_tests() -> None:
    commands = [b.strip() for b in _blocks(_section("Quickstart"), "bash")]
    assert len(commands) == 2
    demo, tests = commands
    assert "pip install" in demo
    assert demo.endswith("stockade demo")
    assert "pip install" in tests
    assert "[test]" in tests
    assert tests.endswith("pytest")


def test_ci_runs_exactly_the_readme_test_command() -> None:
    test_command = _blocks(_section("Quickstart"), "bash")[1].strip()
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci_lines


def test_library_example_is_the_quickstart_example_and_runs_as_described(tmp_path: Path) -> None:
    """The README shows examples/quickstart.py from its imports on (so the two cannot drift),
    and run on its own the block does what the text after it says."""
    (example,) = _blocks(_section("In your program"), "python")
    quickstart = (ROOT / "examples" / "quickstart.py").read_text(encoding="utf-8")
    assert quickstart.rstrip().endswith(example.rstrip())
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    statuses = [
        line.split("->")[1].split(":")[0].strip()
        for line in done.stdout.splitlines()
        if "->" in line
    ]
    assert statuses == ["ok", "ok", "denied", "denied"]
    assert "rule dangerous-path" in done.stdout
    assert "rule sandbox" in done.stdout
