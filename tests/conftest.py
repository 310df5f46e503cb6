"""Fixtures shared by the tests: a host folder mounted at /workspace, and a machine without
bubblewrap."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from net_hosts import fake_net, loopback_host  # noqa: F401 - the test network's fixtures
from postgres_server import PostgresServer
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


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """One real PostgreSQL server on loopback for the whole run (tests that stop it start
    their own with `PostgresServer.start`)."""
    with PostgresServer.start(tmp_path_factory.mktemp("postgres")) as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a fresh database of its own on the shared PostgreSQL server."""
    return postgres_server.new_database()
