"""Helpers shared by the tests."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import select
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from mcp import StdioServerParameters

from stockade.engine import Engine, ToolCall, ToolChunk, tool


async def until(predicate: Callable[[], object], limit: float = 5.0) -> None:
    """Wait (polling) until ``predicate()`` is true; fail the test after ``limit`` seconds."""
    async with asyncio.timeout(limit):
        while not predicate():  # noqa: ASYNC110 - the conditions polled have no event to wait on
            await asyncio.sleep(0.002)


async def listening(port: int, *, tries: int = 100, pause: float = 0.1) -> None:
    """Wait until something accepts connections on loopback ``port`` (a server starting)."""
    for _ in range(tries):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(pause)
        else:
            writer.close()
            return


async def collect(engine: Engine, call: ToolCall) -> list[ToolChunk]:
    """Every chunk of a streamed call, closing the stream properly."""
    chunks: list[ToolChunk] = []
    async with contextlib.aclosing(engine.stream(call)) as stream:
        async for chunk in stream:
            chunks.append(chunk)
    return chunks


def snapshot(root: Path, *, skip: Path | None = None) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root`` (but ``skip`` and what is below it), to compare before and
    after: kind, size, mtime, mode, content hash or link text."""
    found: dict[str, tuple[object, ...]] = {}
    for folder, dirs, files in os.walk(root):
        if skip is not None and Path(folder) == skip:
            dirs.clear()
            continue
        for name in [*dirs, *files]:
            path = Path(folder) / name
            if skip is not None and path == skip:
                continue
            info = path.lstat()
            key = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                found[key] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                found[key] = ("file", info.st_size, info.st_mtime_ns, info.st_mode, digest)
            elif stat.S_ISDIR(info.st_mode):
                found[key] = ("dir", info.st_mode, info.st_mtime_ns)
            else:
                found[key] = ("other", info.st_mode)
    return found


def stray_temp_files(root: Path) -> list[str]:
    """Temporary or backup files the sandbox left behind."""
    return [
        str(Path(folder, name))
        for folder, dirs, files in os.walk(root)
        for name in [*dirs, *files]
        if ".stockade-" in name
    ]


def require_bubblewrap() -> None:
    """For a test that needs bubblewrap: in CI (``CI`` set) its absence is a failure, never a
    skip; on a developer's machine without it, the test is skipped and says how to install it."""
    import pytest

    from stockade.sandbox import isolation_available

    if isolation_available():
        return
    message = (
        "bubblewrap is not available (install the Debian package 'bubblewrap', and allow "
        "unprivileged user namespaces)"
    )
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must run the isolation tests")
    pytest.skip(message)


def require_layers() -> None:
    """For a test that needs commands on copy-on-write layers (bubblewrap, and overlayfs in a
    user namespace): a failure in CI, a skip saying why elsewhere."""
    import pytest

    from stockade.sandbox.layers import layers_available

    require_bubblewrap()
    problem = layers_available()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{problem}; CI must run the copy-on-write tests")
    pytest.skip(problem)


def bin_without_bubblewrap(folder: Path) -> Path:
    """A folder for PATH that holds prlimit and no bwrap: a machine without bubblewrap (nothing
    is faked: Stockade looks bwrap up on PATH as on any machine, when it probes)."""
    bin_dir = folder / "bin-without-bwrap"
    bin_dir.mkdir(exist_ok=True)
    prlimit = shutil.which("prlimit")
    if prlimit and not (bin_dir / "prlimit").exists():
        (bin_dir / "prlimit").symlink_to(prlimit)
    return bin_dir


def stockade_cli(
    *args: str, cwd: Path, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed ``stockade`` command as a user would, answers piped on stdin."""
    script = Path(sys.executable).parent / "stockade"
    return subprocess.run(
        [str(script) if script.exists() else str(shutil.which("stockade")), *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


class Gate:
    """Opened by a test to let a held engine go on."""

    def __init__(self) -> None:
        self.open = asyncio.Event()


@tool(name="hold")
async def hold(gate: Gate) -> str:
    """Hold the engine (this tool runs alone) until the gate opens."""
    await gate.open.wait()
    return "held"


def serve_params(project: Path, *extra: str) -> StdioServerParameters:
    """``stockade serve`` over ``project``/ws, with ``project``/docs at /userinput read-only and
    its state in ``project``/state, as an MCP client starts it."""
    return StdioServerParameters(
        command=str(Path(sys.executable).parent / "stockade"),
        args=[
            "serve",
            "--workspace",
            str(project / "ws"),
            "--mount",
            f"/userinput={project / 'docs'}:ro",
            "--state",
            str(project / "state"),
            *extra,
        ],
        env={"PATH": os.environ["PATH"]},
        cwd=str(project),
    )


def read_until(fd: int, marker: bytes, limit: float = 30.0) -> bytes:
    """What ``fd`` (a pseudo-terminal or a pipe) gives until ``marker`` shows (empty marker:
    until it closes); fails the test after ``limit`` seconds."""
    seen = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # a pseudo-terminal whose other side closed
            return seen
        if not chunk:
            return seen
        seen += chunk
        if marker and marker in seen:
            return seen
    raise AssertionError(f"{marker!r} never came; saw {seen.decode(errors='replace')}")


def one_error_line(stderr: str) -> str:
    """The one line a command's error is (``error: ...``, no traceback), which it returns."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]
