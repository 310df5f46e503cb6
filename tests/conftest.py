"""Fixtures shared by the process-sandbox tests: a host folder mounted at /workspace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stockade.sandbox import Mount, VirtualFS


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The host folder mounted at /workspace; its siblings in ``tmp_path`` are 'the host'."""
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def fs(workspace: Path) -> Iterator[VirtualFS]:
    """A VirtualFS with ``workspace`` at /workspace."""
    with VirtualFS([Mount("/workspace", workspace)]) as vfs:
        yield vfs
