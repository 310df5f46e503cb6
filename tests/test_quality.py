"""Style and types are part of the build: ruff (lint and format) and mypy must be clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; install the test extra: pip install -e '.[test]'")
    return str(found)


@pytest.mark.parametrize(
    "args",
    [["check", "."], ["format", "--check", "."]],
    ids=["ruff-check", "ruff-format"],
)
def test_ruff_is_clean(args: list[str]) -> None:
    done = subprocess.run([_tool("ruff"), *args], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_is_clean() -> None:
    done = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
