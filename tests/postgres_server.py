"""A real PostgreSQL server for the tests: its own data folder, bound to loopback, stoppable.

    with PostgresServer.start(tmp_path / "pg") as server:
        url = server.url            # postgresql://stockade:...@127.0.0.1:PORT/stockade
        server.stop(); server.restart()

The server binaries come from the machine (``.ci/run`` installs Debian's ``postgresql``; its
binaries live in ``/usr/lib/postgresql/<version>/bin``, off the PATH). PostgreSQL refuses to
run as root, so under root (as in CI) the data folder belongs to the ``postgres`` system user
the package creates and the server runs as that user. Without the binaries the tests fail
saying what to install: they are part of what CI checks, never skipped silently.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

PASSWORD = "stockade-test"  # loopback only, a throwaway cluster


def binaries() -> Path:
    """The folder holding initdb, pg_ctl and postgres; fails the test when there is none."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if versions:
        return Path(versions[-1]).parent
    pytest.fail(
        "PostgreSQL's server binaries (initdb, pg_ctl) are not installed: "
        "`apt-get install postgresql` (.ci/run does)"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    """One throwaway PostgreSQL cluster on 127.0.0.1."""

    data: Path
    port: int
    bin: Path
    user: str | None  # the OS user the server runs as (None: this one)

    @classmethod
    @contextmanager
    def start(cls, folder: Path) -> Iterator[PostgresServer]:
        """Create a cluster in ``folder`` and run it until the block ends. Under root the
        cluster lives in a folder of its own in the system's temporary folder instead, owned
        by the server's user: pytest keeps its folders private to this user (and every pytest
        run makes them so again)."""
        user = "postgres" if os.geteuid() == 0 else None
        own = None
        if user is not None:
            own = folder = Path(tempfile.mkdtemp(prefix="stockade-pg-"))
            uid, gid = pwd.getpwnam(user).pw_uid, pwd.getpwnam(user).pw_gid
            os.chown(folder, uid, gid)
        folder.mkdir(parents=True, exist_ok=True)
        server = cls(folder / "data", _free_port(), binaries(), user)
        pwfile = folder / "pw"
        pwfile.write_text(PASSWORD)
        if user is not None:
            os.chown(pwfile, uid, gid)
        server._run(
            "initdb",
            "-D",
            str(server.data),
            "-U",
            "stockade",
            "--pwfile",
            str(pwfile),
            "-A",
            "scram-sha-256",
            "--no-sync",
        )
        with (server.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {server.port}\n"
                f"unix_socket_directories = '{folder}'\nfsync = off\n"
                "max_connections = 200\n"
            )
        server.boot()
        server._run("createdb", "-h", "127.0.0.1", "-p", str(server.port), "stockade")
        try:
            yield server
        finally:
            server.stop()
            if own is not None:
                shutil.rmtree(own, ignore_errors=True)

    @property
    def url(self) -> str:
        """The SQLAlchemy/libpq URL of the ``stockade`` database."""
        return f"postgresql://stockade:{PASSWORD}@127.0.0.1:{self.port}/stockade"

    def new_database(self) -> str:
        """A fresh, empty database on this server; returns its URL (each test its own)."""
        import psycopg2

        name = f"t{time.monotonic_ns()}"
        conn = psycopg2.connect(self.url)
        try:
            conn.autocommit = True  # CREATE DATABASE runs outside a transaction
            conn.cursor().execute(f"CREATE DATABASE {name}")
        finally:
            conn.close()
        return self.url.rsplit("/", 1)[0] + "/" + name

    def boot(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.data.parent / "log"), "-w", "start"
        )

    def stop(self) -> None:
        """Stop the server at once (connections cut), if it runs."""
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self, *, down_s: float = 0.0) -> None:
        """Stop, stay down ``down_s`` seconds, start again."""
        self.stop()
        time.sleep(down_s)
        self.boot()

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin / program), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        env = {**os.environ, "PGPASSWORD": PASSWORD, "PGUSER": "stockade"}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"{program} failed ({done.returncode}): {done.stderr or done.stdout}"
            )
