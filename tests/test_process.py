"""The process sandbox (``sandbox.process``) against the bad commands an agent may write.

Each bad input the issue lists must be contained and reported, never raised: a command that
hangs, prints gigabytes, allocates without end, forks without end, leaves children sleeping
after it exits, tries the network, reads secrets, writes outside the workspace, or is not even
valid shell. After every call nothing the run started is alive, and (under bubblewrap) the host
is unchanged outside the workspace. Most tests run twice: under bubblewrap, and in the fallback
without isolation (``isolation="none"``), which must keep the same limits and cleanup and say
loudly that it isolated nothing.

Processes of a run are found by a unique ``sleep 61.<digits>`` argv, so a test sees only its
own processes even when other runs share the machine. Limits and timeouts are small so that
the whole file runs in well under a minute on two cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import select
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import psutil
import pytest
from support import bin_without_bubblewrap, require_bubblewrap, snapshot, until

from stockade.sandbox import (
    BOX_PRIVATE_PATHS,
    Bubblewrap,
    Mount,
    SandboxError,
    VirtualFS,
    isolation_available,
)
from stockade.sandbox.bubblewrap import box, python_folders
from stockade.sandbox.cgroups import PidsGroup
from stockade.sandbox.init_report import InitReport
from stockade.sandbox.limits import Limits, MiB, ProcessResult
from stockade.sandbox.process import IsolationChoice, run_process, run_process_async

ISOLATIONS = ("bubblewrap", "none")
# a sandbox that hangs must fail its test, not the whole run
pytestmark = pytest.mark.timeout(30)
# how long after its deadline a killed run may take to return (kill, reap, drain the pipes)
SLACK_S = 1.0

# -- helpers ---------------------------------------------------------------------------------


@pytest.fixture
def needs_bubblewrap() -> None:
    """For a test that needs bubblewrap: fails in CI without it, skips elsewhere."""
    require_bubblewrap()


@pytest.fixture(autouse=True)
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temp folder the fallback makes its scratch HOME in: the test's own, so that no
    test litters the machine's and the tests below can see what a run left there."""
    folder = tmp_path / "temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture(params=ISOLATIONS)
def isolation(request: pytest.FixtureRequest) -> IsolationChoice:
    if request.param == "bubblewrap":
        require_bubblewrap()
    return cast(IsolationChoice, request.param)


def run(
    fs: VirtualFS, isolation: IsolationChoice, command: str | list[str], **options: Any
) -> ProcessResult:
    """``run_process`` with a default timeout; checks that the run was boxed as asked."""
    options.setdefault("timeout", 10.0)
    result = run_process(command, fs=fs, isolation=isolation, **options)
    assert result.isolation == isolation
    return result


def survivors(mark: str) -> list[psutil.Process]:
    """Live processes (zombies are dead in every way that matters) whose argv holds ``mark``."""
    found = []
    for process in psutil.process_iter(["cmdline", "name", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE or process.pid == os.getpid():
            continue
        if any(mark in part for part in process.info["cmdline"] or ()):
            found.append(process)
    return found


@pytest.fixture
def marks() -> Iterator[Callable[[], str]]:
    """Hands out unique sleep durations; kills whatever still carries one at teardown, so a
    failing test does not leave minute-long sleepers (or worse) on the machine."""
    issued: list[str] = []

    def mark() -> str:
        issued.append(f"61.{secrets.randbelow(10**9):09d}")
        return issued[-1]

    yield mark
    for value in issued:
        for process in survivors(value):
            with contextlib.suppress(psutil.Error):
                process.kill()


class Listener:
    """A TCP server on 127.0.0.1 that records what connecting clients send."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port: int = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    self.received.append(conn.recv(1024))

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def knock(port: int) -> str:
    """A command that connects to 127.0.0.1:port and sends 'knock'."""
    code = (
        "import socket; "
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=2); "
        "s.sendall(b'knock'); s.close()"
    )
    return f'python3 -c "{code}"'


def eventually(predicate: Callable[[], bool], limit: float = 2.0) -> bool:
    """Whether ``predicate()`` becomes true within ``limit`` seconds (another thread acts)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- 1. a command that hangs -----------------------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    ["sleep {m}", "sleep {m} & setsid sleep {m} & sleep {m}"],
    ids=["alone", "with-children"],
)
def test_hanging_command_times_out_and_dies(
    fs: VirtualFS, isolation: IsolationChoice, marks: Callable[[], str], shape: str
) -> None:
    mark = marks()
    started = time.monotonic()
    result = run(fs, isolation, shape.format(m=mark), timeout=0.5)
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.killed_reason == "timeout"
    assert result.exit_code != 0
    assert 0.5 <= elapsed < 0.5 + SLACK_S
    assert survivors(mark) == []


# -- 2. a command that prints gigabytes ------------------------------------------------------


def test_endless_stdout_is_cut_and_then_stopped(fs: VirtualFS, isolation: IsolationChoice) -> None:
    limits = Limits(output_bytes=1000, drain_bytes=2 * MiB)
    started = time.monotonic()
    result = run(fs, isolation, "yes", limits=limits)
    assert result.killed_reason == "output"
    assert not result.timed_out
    assert result.truncated
    assert result.stdout == "y\n" * 500  # exactly the kept bytes, from the start
    assert result.stdout_bytes > 2 * MiB  # everything written is counted, not only what is kept
    assert time.monotonic() - started < 5  # stopped at the drain limit, not by the timeout


def test_gigabytes_on_stderr_are_cut_and_stopped(fs: VirtualFS, isolation: IsolationChoice) -> None:
    limits = Limits(output_bytes=4096, drain_bytes=4 * MiB)
    result = run(fs, isolation, "head -c 2G /dev/zero >&2", limits=limits)
    assert result.killed_reason == "output"
    assert result.truncated
    assert result.stderr == "\0" * 4096
    assert result.stdout == ""
    assert 4 * MiB < result.stderr_bytes < 2 * 1024 * MiB


def test_output_past_the_kept_part_is_counted_and_the_run_completes(
    fs: VirtualFS, isolation: IsolationChoice
) -> None:
    # under the drain limit the extra output is read and dropped: the command is not stopped
    result = run(
        fs, isolation, "head -c 100000 /dev/zero | tr '\\0' a", limits=Limits(output_bytes=1000)
    )
    assert result.ok
    assert result.killed_reason is None
    assert result.truncated
    assert result.stdout == "a" * 1000
    assert result.stdout_bytes == 100_000


# -- 3. a command that allocates without end -------------------------------------------------


def test_endless_allocation_is_killed_for_memory(fs: VirtualFS, isolation: IsolationChoice) -> None:
    hog = "python3 -c 'chunks = []\nwhile True: chunks.append(b\"x\" * 10**7)'"
    result = run(fs, isolation, hog, limits=Limits(memory_mb=200))
    assert result.killed_reason == "memory"
    assert not result.ok
    assert result.peak_rss > 100 * MiB
    assert result.duration_s < 5


# -- 4. a command that forks without end -----------------------------------------------------


def test_too_many_processes_are_killed(
    fs: VirtualFS, isolation: IsolationChoice, marks: Callable[[], str]
) -> None:
    # not a real fork bomb: in the fallback we are root, whom no kernel process limit binds
    mark = marks()
    command = f"for i in $(seq 40); do sleep {mark} & done; wait"
    result = run(fs, isolation, command, limits=Limits(max_procs=10))
    assert result.killed_reason == "processes"
    assert survivors(mark) == []


@pytest.mark.usefixtures("needs_bubblewrap")
@pytest.mark.parametrize(
    ("bomb", "reason"),
    [
        (":(){ :|:& };:", None),
        # a tree of ~500 shells whose parents stay (bounded: safe even if containment fails)
        ("f(){ [ $1 -gt 0 ] && { f $(($1-1)) & f $(($1-1)) & }; sleep 3; }; f 7", "processes"),
    ],
    ids=["classic", "bounded-tree"],
)
def test_fork_bomb_is_contained_in_the_box(
    fs: VirtualFS, marks: Callable[[], str], bomb: str, reason: str | None
) -> None:
    """The classic bomb's first shell exits at once, its forks go on: they must all be gone
    when the call returns. The forking tree keeps its shells running, so it must be stopped
    for its process count."""
    tag = f"forkbomb-{marks()}"  # every fork keeps bash's argv: finds them all
    before = len(psutil.pids())
    started = time.monotonic()
    result = run(fs, "bubblewrap", f"{bomb} # {tag}", timeout=3, limits=Limits(max_procs=50))
    assert time.monotonic() - started < 3 + SLACK_S
    if reason is not None:
        assert result.killed_reason == reason
    assert survivors(tag) == []
    assert len(psutil.pids()) < before + 20  # the machine is back to what it was
    assert run(fs, "bubblewrap", "echo fine").stdout == "fine\n"


@pytest.mark.usefixtures("needs_bubblewrap")
def test_kernel_process_limit_holds_in_the_box(fs: VirtualFS) -> None:
    """Between two looks of the watcher (20 ms) only the kernel bounds forks: a pids cgroup
    where one can be made (root, whom RLIMIT_NPROC never binds), else RLIMIT_NPROC, which the
    box sets to max_procs + 1 (bubblewrap's init). With max_procs=1 the box already holds its
    init and bash, so the subshell's fork must be refused."""
    result = run(fs, "bubblewrap", "(exit 0) && echo forked", timeout=2, limits=Limits(max_procs=1))
    assert "forked" not in result.stdout, result


@pytest.mark.usefixtures("needs_bubblewrap")
def test_unbounded_fork_bomb_whose_first_shell_stays_is_stopped(
    fs: VirtualFS, marks: Callable[[], str]
) -> None:
    # only where the kernel bounds it: a pids cgroup, or a user RLIMIT_NPROC binds (not root)
    probe = PidsGroup.create(secrets.token_hex(8), 10)
    if probe is None and os.geteuid() == 0:
        pytest.skip("root without a writable pids cgroup: nothing in the kernel bounds a bomb")
    if probe is not None:
        probe.remove()
    tag = f"forkbomb-{marks()}"
    started = time.monotonic()
    result = run(
        fs,
        "bubblewrap",
        f":(){{ :|:& }};: ; sleep 5 # {tag}",
        timeout=4,
        limits=Limits(max_procs=50),
    )
    assert time.monotonic() - started < 4 + SLACK_S
    assert result.killed_reason in ("processes", "timeout")
    assert survivors(tag) == []
    assert run(fs, "bubblewrap", "echo fine").stdout == "fine\n"


# -- 5. children left running after the command exits --------------------------------------


@pytest.mark.parametrize(
    "shape",
    [
        "sleep {m} & echo started",
        "setsid sleep {m} & echo started",
        "(setsid sh -c 'sleep {m} &' &); echo started",
        # leaves the group and the tree, and drops the environment (with the run's token)
        "(env -i setsid sleep {m} >/dev/null 2>&1 &); sleep 0.2; echo started",
    ],
    ids=["background", "setsid", "double-fork", "double-fork-no-env"],
)
def test_children_left_behind_do_not_outlive_the_call(
    fs: VirtualFS, isolation: IsolationChoice, marks: Callable[[], str], shape: str
) -> None:
    mark = marks()
    started = time.monotonic()
    result = run(fs, isolation, shape.format(m=mark))
    assert time.monotonic() - started < SLACK_S  # the call does not wait for the sleeper
    assert result.exit_code == 0
    assert result.stdout == "started\n"
    assert survivors(mark) == []


# -- 6. the network --------------------------------------------------------------------------


@pytest.mark.usefixtures("needs_bubblewrap")
def test_box_has_no_network_by_default(fs: VirtualFS, listener: Listener) -> None:
    result = run(fs, "bubblewrap", knock(listener.port))
    assert result.exit_code != 0
    assert not result.network
    time.sleep(0.2)  # a connection that got through would be recorded by now
    assert listener.received == []


@pytest.mark.usefixtures("needs_bubblewrap")
def test_box_reaches_the_network_when_allowed(fs: VirtualFS, listener: Listener) -> None:
    result = run(fs, "bubblewrap", knock(listener.port), network=True)
    assert result.ok, result.stderr
    assert result.network
    assert eventually(lambda: b"knock" in b"".join(listener.received))


def test_fallback_is_not_isolated_and_says_so_loudly(fs: VirtualFS, listener: Listener) -> None:
    # the fallback cannot take the network away; what matters is that the result says so
    result = run(fs, "none", knock(listener.port), network=False)
    assert result.ok, result.stderr
    assert eventually(lambda: b"knock" in b"".join(listener.received))
    assert any("turned off" in w and "WITHOUT isolation" in w for w in result.warnings)
    assert result.network  # it could reach the network, and the result says so


@pytest.mark.usefixtures("needs_bubblewrap")
def test_boxed_run_has_no_isolation_warning(fs: VirtualFS) -> None:
    assert run(fs, "bubblewrap", "true").warnings == ()


# -- whether bubblewrap works here: the caller's probe, or one made at the call ----------------


def fake_bwrap(tmp_path: Path, script: str) -> Path:
    """A folder holding a ``bwrap`` that runs ``script`` (sh)."""
    folder = tmp_path / "bin-with-fake-bwrap"
    folder.mkdir()
    (folder / "bwrap").write_text(f"#!/bin/sh\n{script}\n")
    (folder / "bwrap").chmod(0o755)
    return folder


def test_probe_without_bwrap_on_path_says_it_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(bin_without_bubblewrap(tmp_path)))
    probe = Bubblewrap.probe()
    assert not probe.available
    assert probe.executable is None
    assert probe.problem.startswith("bwrap is not installed")
    assert not isolation_available()


def test_probe_of_a_bwrap_that_cannot_make_namespaces_says_its_first_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = "echo 'bwrap: setting up uid map: Permission denied' >&2; echo more >&2; exit 1"
    monkeypatch.setenv("PATH", str(fake_bwrap(tmp_path, said)))
    assert Bubblewrap.probe() == Bubblewrap(
        None, "bwrap cannot create namespaces here: bwrap: setting up uid map: Permission denied"
    )


def test_probe_of_a_bwrap_that_hangs_gives_up_at_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(fake_bwrap(tmp_path, "exec /bin/sleep 30")))
    started = time.monotonic()
    probe = Bubblewrap.probe(timeout_s=0.3)
    assert time.monotonic() - started < 5
    assert not probe.available
    assert "did not finish a trial run in 0.3 s" in probe.problem


@pytest.mark.usefixtures("needs_bubblewrap")
def test_probe_finds_the_working_bwrap() -> None:
    assert Bubblewrap.probe() == Bubblewrap(shutil.which("bwrap"), "")
    assert Bubblewrap.probe().available


def test_a_bubblewrap_says_it_works_or_why_not() -> None:
    with pytest.raises(SandboxError, match="needs a problem"):
        Bubblewrap(None, "")
    with pytest.raises(SandboxError, match="contradictory"):
        Bubblewrap("/usr/bin/bwrap", "it is broken")


@pytest.mark.usefixtures("needs_bubblewrap")
def test_a_given_unavailable_bubblewrap_makes_auto_run_unboxed_and_say_why(
    fs: VirtualFS, caplog: pytest.LogCaptureFixture
) -> None:
    # bwrap works here and PATH is untouched: a run that probed would be boxed
    told = Bubblewrap(None, "the caller found no bwrap")
    with caplog.at_level(logging.WARNING, logger="stockade.sandbox"):
        result = run_process("echo ran", fs=fs, timeout=10, bubblewrap=told)
    assert result.isolation == "none"
    assert result.stdout == "ran\n"
    [warning] = result.warnings
    assert warning.startswith("bubblewrap is not available: the command ran WITHOUT isolation")
    assert warning.endswith("; why: the caller found no bwrap")
    assert any("why: the caller found no bwrap" in r.getMessage() for r in caplog.records)


@pytest.mark.usefixtures("needs_bubblewrap")
async def test_a_given_bubblewrap_reaches_the_async_run(fs: VirtualFS) -> None:
    told = Bubblewrap(None, "the caller found no bwrap")
    result = await run_process_async("true", fs=fs, timeout=10, bubblewrap=told)
    assert result.isolation == "none"
    assert "why: the caller found no bwrap" in result.warnings[0]


def test_a_given_unavailable_bubblewrap_refuses_a_run_that_requires_it(
    fs: VirtualFS, workspace: Path
) -> None:
    told = Bubblewrap(None, "user namespaces are off")
    with pytest.raises(SandboxError, match=r"isolation was required.*\(user namespaces are off\)"):
        run_process(
            "echo ran > ran.txt", fs=fs, timeout=10, isolation="bubblewrap", bubblewrap=told
        )
    assert not (workspace / "ran.txt").exists()


@pytest.mark.usefixtures("needs_bubblewrap")
def test_a_given_available_bubblewrap_is_the_one_used(
    fs: VirtualFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PATH holds no bwrap at all: a probe would find none, so the run used the one given
    real = shutil.which("bwrap")
    called = tmp_path / "called-with"
    wrapper = tmp_path / "my-bwrap"
    wrapper.write_text(f'#!/bin/sh\necho "$@" > {called}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_without_bubblewrap(tmp_path)))
    result = run_process("echo boxed", fs=fs, timeout=10, bubblewrap=Bubblewrap(str(wrapper), ""))
    assert result.isolation == "bubblewrap"
    assert result.stdout == "boxed\n"
    assert result.warnings == ()
    assert "--unshare-user" in called.read_text()


@pytest.mark.usefixtures("needs_bubblewrap")
def test_box_runs_prlimit_found_through_a_link_outside_the_box(
    fs: VirtualFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prlimit sets the kernel limits inside the box: found on PATH through a link in a folder
    the box does not show, it is run by the path it leads to, which the box does show."""
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit (util-linux) is not installed")
    here = Bubblewrap.probe()
    monkeypatch.setenv("PATH", str(bin_without_bubblewrap(tmp_path)))  # its prlimit is a link
    result = run_process("ulimit -c; echo boxed", fs=fs, timeout=10, bubblewrap=here)
    assert (result.isolation, result.stderr, result.stdout) == ("bubblewrap", "", "0\nboxed\n")


@pytest.mark.usefixtures("needs_bubblewrap")
def test_every_run_without_a_given_bubblewrap_probes_at_its_call(
    fs: VirtualFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing remembers the answer for the life of the process: a change is seen at once."""
    path = os.environ["PATH"]
    assert run_process("true", fs=fs, timeout=10).isolation == "bubblewrap"
    assert isolation_available()
    monkeypatch.setenv("PATH", str(bin_without_bubblewrap(tmp_path)))
    result = run_process("true", fs=fs, timeout=10)
    assert result.isolation == "none"
    assert "why: bwrap is not installed" in result.warnings[0]
    assert not isolation_available()
    monkeypatch.setenv("PATH", path)
    assert run_process("true", fs=fs, timeout=10).isolation == "bubblewrap"


def test_box_private_paths_are_the_folders_the_box_makes_private(workspace: Path) -> None:
    assert BOX_PRIVATE_PATHS == ("/tmp",)
    argv = box((Mount("/workspace", workspace),), "/workspace", network=False, executable="bwrap")
    pairs = set(zip(argv.argv, argv.argv[1:], strict=False))
    assert {("--tmpfs", folder) for folder in BOX_PRIVATE_PATHS} <= pairs


@pytest.mark.usefixtures("needs_bubblewrap")
def test_box_private_paths_start_empty_and_are_gone_after_the_run(fs: VirtualFS) -> None:
    name = f"left-{secrets.token_hex(4)}"
    for folder in BOX_PRIVATE_PATHS:
        first = run(
            fs, "bubblewrap", f"ls -A {folder}; stat -f -c %T {folder}; echo x > {folder}/{name}"
        )
        assert first.ok, first.stderr
        # empty but for the Python installation, bound read-only where it lives (a checkout
        # under /tmp brings its .venv there), and a tmpfs of its own
        bound = sorted(
            {
                Path(p).relative_to(folder).parts[0]
                for p in python_folders()
                if p.startswith(f"{folder}/")
            }
        )
        assert first.stdout == "".join(f"{name}\n" for name in bound) + "tmpfs\n"
        assert run(fs, "bubblewrap", f"ls -A {folder}").stdout.split() == bound
        assert not Path(folder, name).exists()  # nor did it reach the host's


# -- 7. secrets --------------------------------------------------------------------------------


@pytest.mark.usefixtures("needs_bubblewrap")
def test_etc_shadow_does_not_exist_in_the_box(fs: VirtualFS) -> None:
    # also through /proc/1/root: the box's first process is its own init, with the box's root
    result = run(fs, "bubblewrap", "cat /etc/shadow /proc/1/root/etc/shadow")
    assert result.exit_code != 0
    assert result.stderr.count("No such file or directory") == 2
    assert result.stdout == ""
    assert "shadow" not in run(fs, "bubblewrap", "ls -a /etc").stdout.split()
    with contextlib.suppress(OSError):  # the host's copy, readable when the tests run as root
        for line in Path("/etc/shadow").read_text().splitlines():
            assert line not in result.stdout + result.stderr


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A home folder outside the workspace holding an SSH key; HOME points at it, as the real
    one would for the user running the agent."""
    secret = f"PRIVATE-KEY-{secrets.token_hex(16)}"
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_rsa").write_text(secret)
    monkeypatch.setenv("HOME", str(ssh.parent))
    return ssh.parent, secret


def test_ssh_key_is_not_reachable_through_home(
    fs: VirtualFS, isolation: IsolationChoice, fake_home: tuple[Path, str]
) -> None:
    _, secret = fake_home
    result = run(fs, isolation, 'cat ~/.ssh/id_rsa; echo "$HOME"')
    assert secret not in result.stdout + result.stderr


@pytest.mark.usefixtures("needs_bubblewrap")
def test_ssh_key_is_not_readable_by_its_host_path_in_the_box(
    fs: VirtualFS, fake_home: tuple[Path, str]
) -> None:
    home, secret = fake_home
    result = run(fs, "bubblewrap", f"cat {home}/.ssh/id_rsa; ls -a {home}; grep -r . {home}")
    assert result.exit_code != 0
    assert secret not in result.stdout + result.stderr
    assert "id_rsa" not in result.stdout


def test_host_environment_does_not_reach_the_command(
    fs: VirtualFS, isolation: IsolationChoice, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"env-secret-{secrets.token_hex(16)}"
    monkeypatch.setenv("STOCKADE_TEST_SECRET", secret)
    result = run(fs, isolation, "env; tr '\\0' '\\n' < /proc/self/environ", env={"MINE": "given"})
    assert result.ok
    assert secret not in result.stdout
    assert "STOCKADE_TEST_SECRET" not in result.stdout
    assert "MINE=given" in result.stdout  # what the caller passes does arrive


# -- 8. writes outside the workspace -----------------------------------------------------------


@pytest.fixture
def sibling(tmp_path: Path) -> Path:
    """A folder next to the workspace on the host, with content to damage."""
    folder = tmp_path / "sibling"
    (folder / "sub").mkdir(parents=True)
    (folder / "keep.txt").write_text("keep me")
    (folder / "sub" / "deep.txt").write_text("deep")
    return folder


@pytest.mark.usefixtures("needs_bubblewrap")
@pytest.mark.parametrize(
    "command",
    [
        "echo x > /etc/passwd",
        "touch /usr/x",
        "echo x > {sibling}/new.txt",
        "echo x > {sibling}/keep.txt",
        "rm -r {sibling}",
    ],
)
def test_writes_outside_the_workspace_fail(
    fs: VirtualFS, tmp_path: Path, workspace: Path, sibling: Path, command: str
) -> None:
    passwd = digest(Path("/etc/passwd"))
    assert not Path("/usr/x").exists()
    before = snapshot(tmp_path, skip=workspace)
    result = run(fs, "bubblewrap", command.format(sibling=sibling))
    assert result.exit_code != 0
    assert digest(Path("/etc/passwd")) == passwd
    assert not Path("/usr/x").exists()
    assert snapshot(tmp_path, skip=workspace) == before


@pytest.mark.usefixtures("needs_bubblewrap")
def test_host_paths_recreated_in_the_box_stay_in_the_box(
    fs: VirtualFS, tmp_path: Path, workspace: Path, sibling: Path
) -> None:
    # the box's /tmp is its own: making the host path there succeeds, but touches nothing real
    before = snapshot(tmp_path, skip=workspace)
    run(fs, "bubblewrap", f"mkdir -p {sibling} && echo x > {sibling}/keep.txt")
    assert snapshot(tmp_path, skip=workspace) == before
    assert (sibling / "keep.txt").read_text() == "keep me"


def test_writes_inside_the_workspace_reach_the_host(
    fs: VirtualFS, isolation: IsolationChoice, workspace: Path
) -> None:
    # the box sees the logical path; the fallback runs in the host folder itself
    target = "/workspace/out.txt" if isolation == "bubblewrap" else "out.txt"
    result = run(fs, isolation, f"mkdir -p made/here && echo written > {target}")
    assert result.ok, result.stderr
    assert (workspace / "out.txt").read_text() == "written\n"
    assert (workspace / "made" / "here").is_dir()


@pytest.fixture
def layered(tmp_path: Path, workspace: Path) -> Iterator[tuple[VirtualFS, dict[str, Path]]]:
    """Read-only mounts: one outside the workspace, one a folder of the workspace itself, one
    two levels down in it."""
    folders = {
        "outside": tmp_path / "inputs",
        "inside": workspace / "data",
        "deep": workspace / "deep" / "inputs",
    }
    for folder in folders.values():
        folder.mkdir(parents=True)
        (folder / "data.txt").write_text("original")
    mounts = [
        Mount("/workspace", workspace),
        Mount("/userinput", folders["outside"], read_only=True),
        Mount("/nested", folders["inside"], read_only=True),
        Mount("/deepinput", folders["deep"], read_only=True),
    ]
    with VirtualFS(mounts) as vfs:
        yield vfs, folders


@pytest.mark.usefixtures("needs_bubblewrap")
@pytest.mark.parametrize(
    ("logical", "key"),
    [
        ("/userinput", "outside"),
        ("/nested", "inside"),
        ("/workspace/data", "inside"),  # the same folder through the writable workspace
        ("/deepinput", "deep"),
        ("/workspace/deep/inputs", "deep"),
    ],
)
@pytest.mark.parametrize(
    "write",
    ["echo x > {p}/data.txt", "echo x > {p}/new.txt", "rm {p}/data.txt", "mkdir {p}/sub"],
    ids=["overwrite", "create", "delete", "mkdir"],
)
def test_read_only_mount_reads_but_refuses_writes(
    layered: tuple[VirtualFS, dict[str, Path]], logical: str, key: str, write: str
) -> None:
    fs, folders = layered
    before = snapshot(folders[key])
    read = run(fs, "bubblewrap", f"cat {logical}/data.txt")
    assert read.stdout == "original"
    result = run(fs, "bubblewrap", write.format(p=logical))
    assert result.exit_code != 0
    assert "Read-only file system" in result.stderr
    assert snapshot(folders[key]) == before


@pytest.mark.usefixtures("needs_bubblewrap")
@pytest.mark.parametrize(
    ("move", "inner", "key", "logical"),
    [
        ("/workspace/data", "data", "inside", "/nested"),
        ("/workspace/deep", "deep/inputs", "deep", "/deepinput"),
    ],
    ids=["the-folder", "its-parent"],
)
def test_read_only_folder_inside_the_workspace_cannot_be_swapped(
    layered: tuple[VirtualFS, dict[str, Path]], move: str, inner: str, key: str, logical: str
) -> None:
    """Moving the read-only folder (or a folder above it) away in the writable workspace and
    making a new one in its place would replace the read-only input on the host: the next run
    would read the agent's file at the read-only mount."""
    fs, folders = layered
    swap = (
        f"mv {move} /workspace/moved && mkdir -p /workspace/{inner} "
        f"&& echo forged > /workspace/{inner}/data.txt"
    )
    run(fs, "bubblewrap", swap)
    assert (folders[key] / "data.txt").read_text() == "original"
    assert run(fs, "bubblewrap", f"cat {logical}/data.txt").stdout == "original"


# -- 9. not valid shell ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "said"),
    [("echo 'unterminated", "unexpected EOF"), ("if then fi", "syntax error")],
)
def test_invalid_shell_is_a_clean_failure(
    fs: VirtualFS, isolation: IsolationChoice, command: str, said: str
) -> None:
    result = run(fs, isolation, command)
    assert result.exit_code == 2  # bash's status for a syntax error
    assert result.killed_reason is None
    assert said in result.stderr
    assert result.stdout == ""


# -- 10. the rest of the contract --------------------------------------------------------------


@pytest.fixture
def mixed_fs(workspace: Path) -> Iterator[VirtualFS]:
    (workspace / "notes.txt").write_text("a file")
    with VirtualFS([Mount("/workspace", workspace), Mount("/scratch", memory=True)]) as vfs:
        vfs.mkdir("/scratch/sub")
        yield vfs


@pytest.mark.parametrize(
    "cwd",
    ["/elsewhere", "/workspace/missing", "/workspace/notes.txt", "/scratch", "/scratch/sub"],
    ids=["outside-mounts", "missing", "a-file", "memory-mount", "in-memory-mount"],
)
def test_bad_cwd_is_refused_naming_the_path(
    mixed_fs: VirtualFS, isolation: IsolationChoice, cwd: str
) -> None:
    with pytest.raises(SandboxError, match=cwd):
        run(mixed_fs, isolation, "true", cwd=cwd)


@pytest.mark.parametrize("cwd", ["/workspace/notes.txt", "/scratch"], ids=["a-file", "memory"])
def test_refused_fallback_run_leaves_nothing_in_the_temp_folder(
    mixed_fs: VirtualFS, temp: Path, cwd: str
) -> None:
    # the fallback makes a scratch HOME in the temp folder; a refused call must not leave it
    with pytest.raises(SandboxError):
        run(mixed_fs, "none", "true", cwd=cwd)
    assert os.listdir(temp) == []


def test_fallback_run_leaves_nothing_in_the_temp_folder(fs: VirtualFS, temp: Path) -> None:
    result = run(fs, "none", 'echo x > "$HOME/dropped" && echo x > "$TMPDIR/dropped2"')
    assert result.ok, result.stderr
    assert os.listdir(temp) == []


@pytest.mark.parametrize("command", ["", "   \n", []], ids=["empty", "blank", "empty-argv"])
def test_empty_command_is_refused(
    fs: VirtualFS, isolation: IsolationChoice, command: str | list[str]
) -> None:
    with pytest.raises(SandboxError, match="empty"):
        run(fs, isolation, command)


@pytest.mark.parametrize("name", ["A=B", "", "1ABC", "HAS SPACE", "semi;colon"])
def test_bad_environment_name_is_refused(
    fs: VirtualFS, isolation: IsolationChoice, name: str
) -> None:
    with pytest.raises(SandboxError, match="not valid"):
        run(fs, isolation, "true", env={name: "x"})


def test_bad_timeout_is_refused(fs: VirtualFS, isolation: IsolationChoice) -> None:
    with pytest.raises(SandboxError, match="timeout"):
        run(fs, isolation, "true", timeout=0)


def test_input_reaches_stdin(fs: VirtualFS, isolation: IsolationChoice) -> None:
    assert run(fs, isolation, ["cat"], input=b"fed in\n").stdout == "fed in\n"
    # more than a pipe holds: written while the output is read, or both would stall
    data = os.urandom(300_000)
    result = run(fs, isolation, "sha256sum", input=data)
    assert result.stdout.split()[0] == hashlib.sha256(data).hexdigest()
    # a command that never reads its input still ends normally
    assert run(fs, isolation, "exit 0", input=data).ok


@pytest.mark.usefixtures("needs_bubblewrap")
def test_box_shows_logical_paths(fs: VirtualFS, workspace: Path) -> None:
    (workspace / "hello.txt").write_text("from the host")
    result = run(fs, "bubblewrap", "pwd; cat /workspace/hello.txt; echo; cat hello.txt")
    assert result.stdout == "/workspace\nfrom the host\nfrom the host"


@pytest.mark.usefixtures("needs_bubblewrap")
def test_box_runs_in_a_subfolder_cwd(fs: VirtualFS, workspace: Path) -> None:
    (workspace / "src" / "pkg").mkdir(parents=True)
    assert run(fs, "bubblewrap", "pwd", cwd="/workspace/src/pkg").stdout == "/workspace/src/pkg\n"


def test_fallback_runs_in_the_host_folder(fs: VirtualFS, workspace: Path) -> None:
    (workspace / "hello.txt").write_text("from the host")
    result = run(fs, "none", "pwd; cat hello.txt")
    assert result.stdout == f"{workspace.resolve()}\nfrom the host"


def test_cpu_limit_kills_a_busy_loop(fs: VirtualFS, isolation: IsolationChoice) -> None:
    result = run(fs, isolation, "python3 -c 'while True: pass'", limits=Limits(cpu_s=1))
    assert result.killed_reason == "cpu"
    assert not result.timed_out
    assert 0.9 <= result.cpu_s < 3
    assert result.duration_s < 4


async def test_cancelled_async_run_kills_the_tree_before_cancelling(
    fs: VirtualFS, isolation: IsolationChoice, marks: Callable[[], str]
) -> None:
    mark = marks()
    task = asyncio.create_task(
        run_process_async(f"sleep {mark} & sleep {mark}", fs=fs, timeout=30, isolation=isolation)
    )
    # both sleeps run: the tree is there to kill
    await until(lambda: sum(p.info["name"] == "sleep" for p in survivors(mark)) >= 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert survivors(mark) == []  # gone by the time the cancellation arrives


def test_cancel_event_stops_the_run(
    fs: VirtualFS, isolation: IsolationChoice, marks: Callable[[], str]
) -> None:
    mark = marks()
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    try:
        started = time.monotonic()
        result = run(fs, isolation, f"sleep {mark} & sleep {mark}", timeout=30, cancel=cancel)
    finally:
        timer.cancel()
    assert result.killed_reason == "cancelled"
    assert not result.timed_out
    assert time.monotonic() - started < 0.3 + SLACK_S
    assert survivors(mark) == []


def test_stdout_and_stderr_are_kept_apart(fs: VirtualFS, isolation: IsolationChoice) -> None:
    result = run(fs, isolation, "echo out; echo err >&2; echo out2")
    assert result.stdout == "out\nout2\n"
    assert result.stderr == "err\n"
    assert result.ok
    assert not result.truncated


def test_exit_code_is_reported(fs: VirtualFS, isolation: IsolationChoice) -> None:
    result = run(fs, isolation, "echo before; exit 3")
    assert result.exit_code == 3
    assert result.signal is None
    assert result.killed_reason is None
    assert not result.ok
    assert result.stdout == "before\n"


def read_report(report: InitReport, limit: float = 5.0) -> None:
    """Read ``report`` as the watching loop does: whenever its pipe is ready, until done."""
    deadline = time.monotonic() + limit
    while not report.read():
        assert time.monotonic() < deadline, "the report never completed"
        select.select([report.read_end], [], [], 0.1)


def test_bubblewraps_init_pid_is_read_even_when_its_report_arrives_in_pieces() -> None:
    """bubblewrap writes its --info-fd report a line at a time; on a busy machine the first
    read got only part of it, the init's pid was lost, and every boxed run then warned that
    a process (bubblewrap's own init) was left running."""
    with InitReport() as report:
        theirs = os.dup(report.write_end)  # bubblewrap's copy
        report.started()  # ours is closed once bubblewrap has started

        def bubblewrap() -> None:
            for piece in (b"{\n", b'    "child-pid": 12', b"345", b",\n", b'    "x": 1\n}\n'):
                os.write(theirs, piece)
                time.sleep(0.02)
            os.close(theirs)

        writer = threading.Thread(target=bubblewrap)
        writer.start()
        try:
            read_report(report)
        finally:
            writer.join()
        assert report.pid == 12345


def test_no_init_pid_when_bubblewrap_closes_its_report_early() -> None:
    with InitReport() as report:
        theirs = os.dup(report.write_end)
        report.started()
        os.write(theirs, b'{\n    "child-pid": 4')
        os.close(theirs)
        read_report(report)
        assert report.pid is None


@pytest.mark.usefixtures("needs_bubblewrap")
def test_kernel_process_limit_holds_on_copy_on_write_layers(fs: VirtualFS) -> None:
    """On layers the launcher, not a shell, joins the run's pids group: the limit holds the
    same (see the test above)."""
    from support import require_layers

    from stockade.sandbox.layers import Staging

    require_layers()
    with Staging(fs.mounts) as staging:
        result = run_process(
            "(exit 0) && echo forked",
            fs=fs,
            timeout=2,
            staging=staging,
            limits=Limits(max_procs=1),
        )
    assert result.isolation == "bubblewrap+layers"
    assert "forked" not in result.stdout, result
