"""Many runs at once, and runs whose owner died: nothing of a run is left behind, and nothing that
is not a run's is touched.

`run_process` is called from many threads at once (which is what `run_process_async` does
through the executor): every run must end as it would alone, and afterwards no process, pids
group or descriptor of any run may remain. A descriptor closed twice in such a process closes
another thread's descriptor, so the runs are also traced (strace) for a close that fails. And a
process killed outright leaves its pids groups: the next group made on the machine sweeps them,
but never the group of an owner that still lives, of another pid namespace, or not Stockade's.

Everything here is real: bubblewrap, the pids cgroup hierarchy, processes killed with SIGKILL.
A test skips, saying why, only where the machine lacks what it needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import require_bubblewrap

from stockade.sandbox import Bubblewrap, VirtualFS
from stockade.sandbox.cgroup_owners import Owner
from stockade.sandbox.cgroups import PidsGroup, pids_parent
from stockade.sandbox.init_report import InitReport
from stockade.sandbox.limits import ProcessResult
from stockade.sandbox.process import IsolationChoice, run_process, run_process_async
from stockade.sandbox.safe_kill import may_kill

pytestmark = pytest.mark.timeout(60)
RUNS = 50


# -- helpers ---------------------------------------------------------------------------------


@pytest.fixture(params=["bubblewrap", "none"])
def isolation(request: pytest.FixtureRequest) -> IsolationChoice:
    if request.param == "bubblewrap":
        require_bubblewrap()
    return "bubblewrap" if request.param == "bubblewrap" else "none"


def parent_or_skip() -> Path:
    parent = pids_parent()
    if parent is None:
        pytest.skip(
            "no writable pids cgroup here (it needs root or a delegated cgroup with the pids "
            "controller): runs get no group, so there is none to sweep"
        )
    return parent


def groups_of(owner: Owner | None) -> set[str]:
    """The pids groups under the caller's whose name records ``owner``."""
    parent = pids_parent()
    if parent is None or owner is None:
        return set()
    return {p.name for p in parent.iterdir() if Owner.of_group(p.name) == owner}


def descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def children() -> set[int]:
    """This process's descendants, zombies included (an unreaped child is left behind too)."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def carrying(mark: str) -> list[psutil.Process]:
    """Live processes whose argv holds ``mark``."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE or process.pid == os.getpid():
            continue
        if any(mark in part for part in process.info["cmdline"] or ()):
            found.append(process)
    return found


def eventually(predicate: Callable[[], object], limit: float = 10.0) -> bool:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def mark() -> Iterator[str]:
    """A unique ``sleep`` duration that finds this test's processes; whatever still carries it
    at teardown is killed, so a failing test leaves no sleepers."""
    value = f"61.{secrets.randbelow(10**9):09d}"
    yield value
    for process in carrying(value):
        with contextlib.suppress(psutil.Error):
            process.kill()


class Leftovers:
    """What runs may leave behind, taken before and compared after: this process's children,
    its descriptors, its pids groups."""

    def __init__(self) -> None:
        self.owner = Owner.current()
        self.children = children()
        self.fds = descriptors()
        self.groups = groups_of(self.owner)

    def assert_none(self, mark: str) -> None:
        assert eventually(lambda: children() <= self.children, 5.0), [
            (p.pid, p.name(), p.status())
            for p in psutil.Process().children(recursive=True)
            if p.pid not in self.children
        ]
        assert carrying(mark) == []
        assert groups_of(self.owner) - self.groups == set()
        assert descriptors() - self.fds == set()


# one of each kind of run, by index: a short sleep, an instant exit, a run that times out, and
# one that leaves children running (one of them in a session of its own)
KINDS = ("sleep", "true", "timeout", "forks")


def command(kind: str, mark: str) -> tuple[str, float]:
    return {
        "sleep": ("sleep 0.2", 30.0),
        "true": ("true", 30.0),
        "timeout": (f"sleep {mark}", 1.0),
        "forks": (f"sleep {mark} & setsid sleep {mark} & echo forked", 30.0),
    }[kind]


def check(kind: str, result: ProcessResult) -> None:
    if kind == "timeout":
        assert result.timed_out, result
    else:
        assert result.ok, result
    if kind == "forks":
        assert result.stdout == "forked\n", result


# -- many threads at once --------------------------------------------------------------------


def test_fifty_threads_run_at_once_and_leave_nothing_behind(
    fs: VirtualFS, isolation: IsolationChoice, mark: str
) -> None:
    machine = Bubblewrap.probe()
    run_process("true", fs=fs, timeout=10, isolation=isolation, bubblewrap=machine)  # warm
    before = Leftovers()
    start = threading.Barrier(RUNS)
    results: dict[int, ProcessResult] = {}
    errors: dict[int, BaseException] = {}

    def one(index: int) -> None:
        text, timeout = command(KINDS[index % len(KINDS)], mark)
        start.wait()
        try:
            results[index] = run_process(
                text, fs=fs, timeout=timeout, isolation=isolation, bubblewrap=machine
            )
        except BaseException as exc:
            errors[index] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(RUNS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == {}
    for index, result in results.items():
        check(KINDS[index % len(KINDS)], result)
    before.assert_none(mark)


async def test_many_async_runs_gathered_and_some_cancelled_leave_nothing_behind(
    fs: VirtualFS, mark: str
) -> None:
    require_bubblewrap()
    machine = Bubblewrap.probe()
    await run_process_async("true", fs=fs, timeout=10, bubblewrap=machine)  # warm
    before = Leftovers()

    async def one(index: int) -> ProcessResult:
        text, timeout = command(KINDS[index % len(KINDS)], mark)
        return await run_process_async(text, fs=fs, timeout=timeout, bubblewrap=machine)

    tasks = [asyncio.create_task(one(i)) for i in range(RUNS)]
    hanging = [
        asyncio.create_task(
            run_process_async(f"sleep {mark}", fs=fs, timeout=30, bubblewrap=machine)
        )
        for _ in range(4)
    ]
    await asyncio.sleep(0.5)
    for task in hanging:
        task.cancel()
    done = await asyncio.gather(*tasks, *hanging, return_exceptions=True)
    for index, outcome in enumerate(done[:RUNS]):
        assert isinstance(outcome, ProcessResult), outcome
        check(KINDS[index % len(KINDS)], outcome)
    assert all(isinstance(outcome, asyncio.CancelledError) for outcome in done[RUNS:]), done
    before.assert_none(mark)


def test_every_descriptor_of_a_run_is_closed_once(workspace: Path, tmp_path: Path) -> None:
    """A descriptor closed twice fails its second close with EBADF when its number is free
    (and when another thread took the number in between, closes that thread's file instead).
    One run of each kind is traced, after a first run has loaded everything, for a close that
    fails."""
    require_bubblewrap()
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (Debian package 'strace'): it traces the closes")
    script = tmp_path / "runs.py"
    script.write_text(
        "import os, sys\n"
        "from stockade.sandbox import Mount, VirtualFS, run_process\n"
        "with VirtualFS([Mount('/workspace', sys.argv[1])]) as fs:\n"
        "    run_process('true', fs=fs, timeout=10)\n"
        "    os.write(2, b'<runs>')\n"
        "    for isolation in ('bubblewrap', 'none'):\n"
        "        run_process('sleep 5 & echo forked', fs=fs, timeout=10, isolation=isolation)\n"
        "        run_process('sleep 5', fs=fs, timeout=0.3, isolation=isolation)\n"
        "    os.write(2, b'</runs>')\n"
    )
    trace = tmp_path / "trace"
    tracing = [strace, "-qq", "-e", "trace=close,write", "-e", "signal=none", "-o", str(trace)]
    done = subprocess.run(
        [*tracing, sys.executable, str(script), str(workspace)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    text = trace.read_text()
    runs = text[text.index("<runs>") : text.index("</runs>")]
    assert [line for line in runs.splitlines() if "EBADF" in line] == []


def test_a_report_closes_each_of_its_descriptors_once() -> None:
    """Once the write end is closed its number is anyone's: closing it again (a second
    `started`, then `close`) must leave alone the file another thread opened under it."""
    theirs = os.open(os.devnull, os.O_RDONLY)
    report = InitReport()
    number = report.write_end
    report.started()
    os.dup2(theirs, number)  # another thread's file, under the freed number
    os.close(theirs)
    try:
        report.started()
        report.close()
        os.fstat(number)  # still open
    finally:
        os.close(number)


class FailingCancel(threading.Event):
    """A cancel event whose check fails once the command runs: an error inside the watching."""

    def __init__(self, mark: str) -> None:
        super().__init__()
        self.mark = mark

    def is_set(self) -> bool:
        if any(p.name() == "sleep" for p in carrying(self.mark)):
            raise RuntimeError("the check failed")
        return False


def test_an_error_while_watching_kills_and_reaps_the_run_before_it_leaves(
    fs: VirtualFS, isolation: IsolationChoice, mark: str
) -> None:
    run_process("true", fs=fs, timeout=10, isolation=isolation)  # warm
    before = Leftovers()
    with pytest.raises(RuntimeError, match="the check failed"):
        run_process(
            f"sleep {mark} & sleep {mark}",
            fs=fs,
            timeout=20,
            isolation=isolation,
            cancel=FailingCancel(mark),
        )
    before.assert_none(mark)


# -- groups of dead owners -------------------------------------------------------------------

# the sleep's duration comes through the environment: the owner's own argv must not carry it
OWNER = """
import os, sys
from stockade.sandbox import Mount, VirtualFS, run_process
with VirtualFS([Mount("/workspace", sys.argv[1])]) as fs:
    run_process("sleep " + os.environ["SLEEP_FOR"], fs=fs, timeout=50, isolation=sys.argv[2])
"""


@contextlib.contextmanager
def owner_running(workspace: Path, mark: str, isolation: str) -> Iterator[subprocess.Popen[bytes]]:
    """Another process running a command through Stockade, once its group and its command
    exist; killed (SIGKILL) and reaped at the end if it still runs."""
    process = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(workspace), isolation],
        env={**os.environ, "SLEEP_FOR": mark},
    )
    try:
        # the command itself runs (not a shell or bubblewrap still on its way to it)
        assert eventually(lambda: any(p.name() == "sleep" for p in carrying(mark)))
        assert groups_of(Owner.of_process(process.pid))
        yield process
    finally:
        process.kill()
        process.wait()


def sweep_now() -> None:
    """What the next run does first: make a group (which sweeps), and remove it."""
    group = PidsGroup.create(secrets.token_hex(8), 8)
    assert group is not None
    group.remove()


def test_the_group_of_an_owner_killed_outright_is_swept_by_the_next_group(
    workspace: Path, isolation: IsolationChoice, mark: str
) -> None:
    """Under bubblewrap the command dies with its owner and the group is left empty; without,
    the command lives on in it. Either way the next group made sweeps it, command and all."""
    parent = parent_or_skip()
    with owner_running(workspace, mark, isolation) as owner_process:
        owner = Owner.of_process(owner_process.pid)
        (name,) = groups_of(owner)
        owner_process.kill()  # no cleanup runs
        owner_process.wait()
    assert (parent / name).is_dir()  # left behind
    if isolation == "none":
        assert carrying(mark), "the command should outlive its owner without a box"
    else:
        assert eventually(lambda: not carrying(mark)), "the box should die with its owner"
    sweep_now()
    assert not (parent / name).exists()
    assert carrying(mark) == []


def test_the_group_of_a_live_owner_is_not_swept(workspace: Path, mark: str) -> None:
    parent = parent_or_skip()
    with owner_running(workspace, mark, "none") as owner_process:
        (name,) = groups_of(Owner.of_process(owner_process.pid))
        sweep_now()
        assert (parent / name).is_dir()
        assert carrying(mark), "the live owner's command was killed"
    sweep_now()
    assert not (parent / name).exists()


@pytest.fixture
def made_groups() -> Iterator[Callable[[str], Path]]:
    """Makes groups by name under the caller's pids group; removes those left at the end."""
    parent = parent_or_skip()
    made: list[Path] = []

    def make(name: str) -> Path:
        made.append(parent / name)
        made[-1].mkdir()
        return made[-1]

    yield make
    for path in made:
        with contextlib.suppress(OSError):
            path.rmdir()


def test_only_groups_of_dead_owners_of_this_pid_namespace_are_swept(
    made_groups: Callable[[str], Path],
) -> None:
    """The owner is judged by pid and start time: a pid now held by a later process is dead,
    a zombie is dead, a process with the same start time lives. A group of another pid
    namespace, or one not named by Stockade this way, is never touched."""
    sleeper = subprocess.Popen(["sleep", "30"])
    exited = subprocess.Popen(["sleep", "30"])
    try:
        live = Owner.of_process(sleeper.pid)
        zombie_owner = Owner.of_process(exited.pid)
        assert live is not None
        assert zombie_owner is not None
        exited.kill()  # and not reaped: a zombie, its pid and start time still there
        assert eventually(lambda: psutil.Process(exited.pid).status() == psutil.STATUS_ZOMBIE)
        reused = Owner(live.namespace, live.pid, live.start + 1)
        other_namespace = Owner(live.namespace + 1, 999_999_999, 1)
        token = secrets.token_hex(8)
        kept = [
            made_groups(live.group_name(token)),
            made_groups(other_namespace.group_name(token)),
            made_groups(f"stockade-{token}"),
            made_groups(f"someone-else-{live.pid}-{live.start}"),
        ]
        swept = [made_groups(reused.group_name(token)), made_groups(zombie_owner.group_name(token))]
        sweep_now()
        assert [path.name for path in kept if not path.is_dir()] == []
        assert [path.name for path in swept if path.exists()] == []
    finally:
        sleeper.kill()
        sleeper.wait()
        exited.wait()


def test_a_group_replaced_under_its_name_is_not_read_as_the_run_s(
    made_groups: Callable[[str], Path], mark: str
) -> None:
    """A group's process list is read only from the file it had when it was made: a group
    removed and made again under the same name (by a sweep and someone else) is not the run's,
    and its processes are not the run's to kill."""
    group = PidsGroup.create(secrets.token_hex(8), 8)
    assert group is not None
    group.remove()
    made_groups(group.path.name)
    stranger = subprocess.Popen(group.join_argv(["sleep", mark]))
    try:
        assert eventually(lambda: (group.path / "cgroup.procs").read_text().split())
        assert group.pids() == []
        assert group.kill(wait_s=0) == []
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


# -- what cleanup may kill -------------------------------------------------------------------


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_cleanup_never_signals_the_caller_its_group_or_everyone(pid: int) -> None:
    own = {os.getpid(), os.getpgrp(), os.getsid(0)}
    assert may_kill(pid) == (pid > 1 and pid not in own)


@pytest.mark.parametrize("value", [True, 2.0, "2", None])
def test_cleanup_kills_only_plain_numbers(value: Any) -> None:
    assert not may_kill(value)


SELF_IN_GROUP = """
import os
from pathlib import Path
from stockade.sandbox.cgroups import PidsGroup, pids_parent
from stockade.sandbox.init_report import InitReport
home = pids_parent()
group = PidsGroup.create("5e1f", 8)
Path(group.procs_file).write_text(str(os.getpid()))
print(group.pids(), group.kill(wait_s=0))
(home / "cgroup.procs").write_text(str(os.getpid()))
print(group.remove())
"""


def test_a_group_that_lists_the_caller_does_not_make_it_kill_itself() -> None:
    """A process that finds its own pid in a group (someone wrote it there) refuses the
    number: its cleanup kills neither itself nor its process group."""
    parent_or_skip()
    done = subprocess.run(
        [sys.executable, "-c", SELF_IN_GROUP], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[] []", "True"]
    assert "not a process a run may have" in done.stderr


# -- group names -----------------------------------------------------------------------------

TOKENS = st.text("0123456789abcdef", min_size=1, max_size=64)
NUMBERS = st.integers(min_value=0, max_value=2**63)


@given(NUMBERS, st.integers(min_value=1, max_value=2**31), NUMBERS, TOKENS)
def test_a_group_name_gives_back_its_owner(
    namespace: int, pid: int, start: int, token: str
) -> None:
    owner = Owner(namespace, pid, start)
    assert Owner.of_group(owner.group_name(token)) == owner


@given(st.text())
def test_any_other_name_has_no_owner_and_never_raises(name: str) -> None:
    owner = Owner.of_group(name)
    if owner is not None:
        assert name == owner.group_name(name.rsplit("-", 1)[1])


@pytest.mark.parametrize(
    "name",
    [
        "stockade-1-2-3-abc\n",
        "stockade-١-2-3-abc",  # a digit, but not an ASCII one
        "stockade-1-2-3-ABC",
        "stockade-1-2-3-",
        "stockade-0123456789abcdef",
        "xstockade-1-2-3-abc",
    ],
)
def test_names_stockade_did_not_make_this_way_have_no_owner(name: str) -> None:
    assert Owner.of_group(name) is None


def test_a_bad_token_cannot_name_a_group() -> None:
    owner = Owner.current()
    assert owner is not None
    with pytest.raises(Exception, match="lowercase hex"):
        owner.group_name("../escape")
