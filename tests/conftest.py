"""Fixtures shared by the tests: a host folder mounted at /workspace, and a machine without
bubblewrap."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from net_hosts import fake_net, loopback_host  # noqa: F401 - the test network's fixtures
from support import bin_without_bubblewrap

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


@pytest.fixture
def no_bubblewrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without bubblewrap, for the rest of the test: PATH holds prlimit only."""
    monkeypatch.setenv("PATH", str(bin_without_bubblewrap(tmp_path)))
