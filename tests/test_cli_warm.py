"""``--warm``: ``stockade serve`` and ``stockade hook claude-code`` forked from a warm server.

A warm start must behave as a cold one (same files, environment, folder, exit code, signals),
end when its stand-in ends, and be refused to any process that is not in the warm server's
own context: a sandboxed command that reached the socket must not get an unsandboxed Stockade.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from support import require_bubblewrap

from stockade.engine.cli import warm

STOCKADE = str(Path(sys.executable).parent / "stockade")
HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}},
}


# a client speaking the launcher's wire format by hand: argv[1] the socket, argv[2] the command
# line to ask for (JSON), after running argv[3] (a change to its own process) first
RAW_CLIENT = """
import array, json, resource, socket, struct, sys
exec(sys.argv[3])
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
body = json.dumps({"argv": json.loads(sys.argv[2]), "cwd": "/", "env": {}, "umask": 18}).encode()
files = array.array("i", [0, 1, 2])
try:  # a refused client may find the server gone from its end: it answered already
    s.sendmsg([struct.pack("!I", len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, files)])
    s.sendall(body)
except OSError:
    pass
print(s.makefile().readline())
"""


def until(predicate: Callable[[], object], limit: float) -> bool:
    """Poll ``predicate`` until true (True) or ``limit`` seconds pass (False)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def ended(process: psutil.Process) -> bool:
    return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE


@pytest.fixture
def runtime() -> Iterator[dict[str, str]]:
    """An environment whose warm servers live in a folder of this test's own (short: a Unix
    socket's path holds about 100 bytes); they are stopped afterwards. Warm starts need a
    kernel that gives a socket's peer as a pidfd (Linux 6.5): before it every start is cold,
    and these tests say so rather than fail."""
    one, other = socket.socketpair()
    with one, other:
        pidfd = warm.peer_pidfd(one)
    if pidfd is None:
        pytest.skip("no SO_PEERPIDFD (Linux before 6.5): warm starts stay cold here")
    os.close(pidfd)
    folder = Path(tempfile.mkdtemp(prefix="warm-", dir="/tmp"))
    env = {**os.environ, "XDG_RUNTIME_DIR": str(folder), "STOCKADE_WARM_IDLE": "60"}
    yield env
    for server in warm_servers(env):
        for fork in server.children():  # a command a failed test left running
            fork.kill()
        server.terminate()  # a first start's child, or this test's: poll, not wait
        assert until(lambda server=server: ended(server), 10)
    shutil.rmtree(folder)


def path_for(env: dict[str, str]) -> str:
    """Where a launcher started with ``env`` (from this process, as the tests' commands are)
    looks for its warm server ("None": nowhere)."""
    script = "from stockade.engine.cli.warm import socket_path; print(socket_path())"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def warm_servers(env: dict[str, str]) -> list[psutil.Process]:
    """The live warm servers of ``env``'s folder."""
    found = []
    for lock in Path(env["XDG_RUNTIME_DIR"], "stockade").glob("*.lock"):
        text = lock.read_text().strip()
        with contextlib.suppress(ValueError, psutil.Error):
            process = psutil.Process(int(text))
            if "stockade.engine.cli.warm_server" in process.cmdline():  # not a reused pid
                found.append(process)
    return found


def started(env: dict[str, str]) -> psutil.Process:
    """Wait for the warm server a first (cold) start launched to listen."""
    folder = Path(env["XDG_RUNTIME_DIR"], "stockade")
    assert until(lambda: any(folder.glob("*.sock")), 60), "no warm server started"
    [server] = warm_servers(env)
    return server


def hook(
    env: dict[str, str], data: dict[str, object], project: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [STOCKADE, "hook", "claude-code", "--warm", "--state", str(project.parent / "state")],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        env={**env, "CLAUDE_PROJECT_DIR": str(project)},
        cwd=project,
        timeout=60,
    )


def write_call(project: Path, path: str) -> dict[str, object]:
    return {
        "session_id": "s",
        "hook_event_name": "PreToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": path, "content": "x"},
        "cwd": str(project),
    }


def test_a_warm_hook_decides_as_a_cold_one_with_the_clients_environment_and_exit_codes(
    tmp_path: Path, runtime: dict[str, str]
) -> None:
    project = tmp_path / "project"
    (project / ".git" / "hooks").mkdir(parents=True)
    cold = hook(runtime, write_call(project, str(project / ".git/hooks/pre-commit")), project)
    server = started(runtime)
    warm_reply = hook(runtime, write_call(project, str(project / ".git/hooks/pre-commit")), project)
    assert cold.returncode == warm_reply.returncode == 0
    assert json.loads(cold.stdout) == json.loads(warm_reply.stdout)
    assert json.loads(warm_reply.stdout)["hookSpecificOutput"]["permissionDecision"] == "ask"
    # the workspace came from the client's $CLAUDE_PROJECT_DIR: a file in it is allowed
    inside = hook(runtime, write_call(project, str(project / "notes.txt")), project)
    assert json.loads(inside.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"
    # input it cannot judge still blocks the call (2), warm as cold
    bad = hook(runtime, {"nonsense": True}, project)
    assert bad.returncode == 2
    assert "Stockade blocked this tool call" in bad.stderr
    assert warm_servers(runtime) == [server]  # one server served them all
    audit = (tmp_path / "state" / "audit.jsonl").read_text().splitlines()
    assert sum('"claude_code:Write"' in line for line in audit) == 3
    # and it is the warm server's fork that reads the call, not the process Claude Code started
    waiting = subprocess.Popen(
        [STOCKADE, "hook", "claude-code", "--warm", "--state", str(tmp_path / "state")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**runtime, "CLAUDE_PROJECT_DIR": str(project)},
        cwd=project,
    )
    assert until(lambda: len(server.children()) == 1, 30)
    assert psutil.Process(waiting.pid).children() == []
    out, _ = waiting.communicate(json.dumps(write_call(project, str(project / "a.txt"))).encode())
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow"


def serve(env: dict[str, str], project: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [STOCKADE, "serve", "--warm", "--workspace", ".", "--state", str(project.parent / "state")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=project,
    )


def warmed(tmp_path: Path, runtime: dict[str, str]) -> tuple[Path, psutil.Process]:
    """A project folder, and the warm server a first (cold) ``serve --warm`` there started."""
    project = tmp_path / "project"
    project.mkdir()
    serve(runtime, project).communicate(b"", timeout=30)
    return project, started(runtime)


def ask(process: subprocess.Popen[bytes], message: dict[str, object]) -> dict[str, object]:
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()
    answer = json.loads(process.stdout.readline())
    assert isinstance(answer, dict)
    return answer


def test_a_warm_server_runs_in_the_fork_on_the_clients_folder_and_ends_with_its_stdin(
    tmp_path: Path, runtime: dict[str, str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("from the client's folder\n")
    first = serve(runtime, project)
    assert "result" in ask(first, HELLO)
    first.communicate(timeout=30)
    server = started(runtime)
    second = serve(runtime, project)
    assert "result" in ask(second, HELLO)
    # the work runs in a fork of the warm server, not in the process the client started
    assert psutil.Process(second.pid).children() == []
    [fork] = server.children()
    call = {"name": "read_text_file", "arguments": {"path": "/workspace/notes.txt"}}
    answer = ask(second, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
    assert answer["result"]["content"][0]["text"] == "from the client's folder\n"  # type: ignore[index]
    assert second.stdin is not None
    second.stdin.close()
    assert second.wait(timeout=30) == 0
    assert until(lambda: ended(fork), 10)


@pytest.mark.parametrize("how", ["SIGTERM to the stand-in", "the stand-in killed"])
def test_a_warm_command_ends_when_its_stand_in_is_stopped_or_killed(
    tmp_path: Path, runtime: dict[str, str], how: str
) -> None:
    project, server = warmed(tmp_path, runtime)
    standing = serve(runtime, project)
    assert "result" in ask(standing, HELLO)
    [fork] = server.children()
    standing.send_signal(signal.SIGTERM if how == "SIGTERM to the stand-in" else signal.SIGKILL)
    code = standing.wait(timeout=30)
    assert until(lambda: ended(fork), 20)
    if how == "SIGTERM to the stand-in":
        assert code == 0  # the server's own answer to SIGTERM: a clean stop
    assert server.is_running()


def connect_as(path: Path, command: list[str], change: str = "", *wrapper: str) -> str:
    """What the warm server at ``path`` answers a raw client asking it to run ``command``,
    the client's process changed by ``change`` first and run under ``wrapper``."""
    done = subprocess.run(
        [*wrapper, sys.executable, "-c", RAW_CLIENT, str(path), json.dumps(command), change],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_client_in_another_context_is_refused(tmp_path: Path, runtime: dict[str, str]) -> None:
    _project, _ = warmed(tmp_path, runtime)
    [path] = Path(runtime["XDG_RUNTIME_DIR"], "stockade").glob("*.sock")
    assert '"pid"' in connect_as(path, ["stockade", "version"])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lower = f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft // 2}, {hard}))"
    assert "another context" in connect_as(path, ["stockade", "version"], lower)


def test_a_client_whose_process_is_gone_when_judged_is_refused(
    tmp_path: Path, runtime: dict[str, str]
) -> None:
    """A client's context is read from /proc/<pid> of the process that connected; once that
    process has exited its pid could name another, so a connection whose process is gone when
    the server gets to it (here: the server held stopped meanwhile) is refused, even though the
    socket, handed on to a child, still speaks."""
    _project, server = warmed(tmp_path, runtime)
    [path] = Path(runtime["XDG_RUNTIME_DIR"], "stockade").glob("*.sock")
    handed_on = RAW_CLIENT.replace(
        "s.connect(sys.argv[1])\n",
        "s.connect(sys.argv[1])\nimport os, time\nif os.fork():\n    os._exit(0)\ntime.sleep(1)\n",
    )
    server.suspend()
    try:
        client = subprocess.Popen(
            [sys.executable, "-c", handed_on, str(path), '["stockade", "version"]', ""],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)  # the connecting process has exited; its child holds the socket
    finally:
        server.resume()
    answer, _ = client.communicate(timeout=60)
    assert "the peer's process is gone" in answer
    assert server.children() == []


def test_a_foreign_client_is_refused_before_it_sends_a_byte(
    tmp_path: Path, runtime: dict[str, str]
) -> None:
    """A process in another context cannot hold the server up: it is refused the moment it
    connects, without a byte read from it."""
    _project, _ = warmed(tmp_path, runtime)
    [path] = Path(runtime["XDG_RUNTIME_DIR"], "stockade").glob("*.sock")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    silent = f"""
import resource, socket
resource.setrlimit(resource.RLIMIT_NOFILE, ({soft // 2}, {hard}))
held = [socket.socket(socket.AF_UNIX) for _ in range(4)]
for s in held:
    s.connect({str(path)!r})
    s.settimeout(10)
print([s.makefile().readline().strip() for s in held])
"""
    done = subprocess.run(
        [sys.executable, "-c", silent], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("another context") == 4


def test_a_sandboxed_process_that_reaches_the_socket_is_refused(
    tmp_path: Path, runtime: dict[str, str]
) -> None:
    require_bubblewrap()
    _project, server = warmed(tmp_path, runtime)
    folder = Path(runtime["XDG_RUNTIME_DIR"], "stockade")
    [path] = folder.glob("*.sock")
    # the socket's folder bound into a bubblewrap sandbox, as a careless mount would
    sandbox = ["bwrap", "--ro-bind", "/", "/", "--bind", str(folder), str(folder),
               "--dev", "/dev", "--unshare-pid", "--die-with-parent"]  # fmt: skip
    answer = connect_as(path, ["stockade", "run", "--", "id"], "", *sandbox)
    assert "another context" in answer
    assert server.children() == []  # nothing was forked for it


def test_an_untrusted_socket_folder_means_a_cold_start_and_no_server(
    tmp_path: Path, runtime: dict[str, str]
) -> None:
    folder = Path(runtime["XDG_RUNTIME_DIR"], "stockade")
    folder.mkdir(mode=0o700)
    folder.chmod(0o777)  # others could plant a socket here
    project = tmp_path / "project"
    project.mkdir()
    first = serve(runtime, project)
    assert "result" in ask(first, HELLO)
    first.communicate(timeout=30)
    time.sleep(1)
    assert list(folder.iterdir()) == []
    assert path_for(runtime) == "None"


def test_a_lock_file_replaced_by_a_link_is_not_followed(
    runtime: dict[str, str], tmp_path: Path
) -> None:
    """A link planted where the lock file goes must not make the server write through it."""
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    folder = Path(runtime["XDG_RUNTIME_DIR"], "stockade")
    folder.mkdir(mode=0o700)
    sock = folder / "warm-test.sock"
    Path(f"{sock}.lock").symlink_to(victim)
    done = subprocess.run(
        [sys.executable, "-P", "-m", "stockade.engine.cli.warm_server", str(sock)],
        capture_output=True, env=runtime, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert victim.read_text() == "untouched\n"
    assert not sock.exists()


def test_a_listener_in_another_context_gets_nothing_and_the_command_runs_cold(
    tmp_path: Path, runtime: dict[str, str]
) -> None:
    """The launcher checks the server as the server checks it: something else listening at the
    socket's path (here a process with other limits) gets neither the command's files nor its
    environment, and the command runs cold."""
    path = path_for(runtime)
    report = tmp_path / "impostor.json"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    impostor = f"""
import json, resource, socket
resource.setrlimit(resource.RLIMIT_NOFILE, ({soft // 2}, {hard}))
s = socket.socket(socket.AF_UNIX)
s.bind({path!r})
s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
c.settimeout(5)
try:
    data, ancillary, _, _ = c.recvmsg(65536, 64)
except OSError:
    data, ancillary = b"", []
open({str(report)!r}, "w").write(json.dumps({{"bytes": len(data), "files": len(ancillary)}}))
"""
    listener = subprocess.Popen([sys.executable, "-c", impostor], stdout=subprocess.PIPE, text=True)
    assert listener.stdout is not None
    assert listener.stdout.readline().strip() == "ready"
    project = tmp_path / "project"
    project.mkdir()
    reply = hook(runtime, write_call(project, str(project / "notes.txt")), project)
    assert reply.returncode == 0
    assert json.loads(reply.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"
    listener.wait(timeout=30)
    assert json.loads(report.read_text()) == {"bytes": 0, "files": 0}
    assert "SECRET" not in report.read_text()


def test_the_warm_server_ignores_modules_in_the_clients_folder(
    tmp_path: Path, runtime: dict[str, str]
) -> None:
    """A module the agent wrote into the project (``typer.py``) is not imported by a warm server
    started there, as a cold start does not import it either."""
    project = tmp_path / "project"
    project.mkdir()
    marker = tmp_path / "imported"
    (project / "typer.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    serve(runtime, project).communicate(b"", timeout=30)
    started(runtime)
    second = serve(runtime, project)
    assert "result" in ask(second, HELLO)
    second.communicate(b"", timeout=30)
    assert not marker.exists()


def test_stopping_the_warm_server_stops_its_commands_and_tells_their_clients(
    tmp_path: Path, runtime: dict[str, str]
) -> None:
    project, server = warmed(tmp_path, runtime)
    running = serve(runtime, project)
    assert "result" in ask(running, HELLO)
    [fork] = server.children()
    server.terminate()
    assert running.wait(timeout=30) == 0  # the command's own answer to SIGTERM: a clean stop
    assert until(lambda: ended(fork), 10)
    assert until(lambda: ended(server), 10)


def test_a_warm_server_exits_when_idle_and_takes_its_socket_along(
    tmp_path: Path, runtime: dict[str, str]
) -> None:
    runtime["STOCKADE_WARM_IDLE"] = "1"
    _project, server = warmed(tmp_path, runtime)
    assert until(lambda: ended(server), 30)
    assert list(Path(runtime["XDG_RUNTIME_DIR"], "stockade").glob("*.sock")) == []


def test_a_process_context_changes_with_resource_limits() -> None:
    """Quoted: "the same user and groups, the same namespaces ..., cgroup, capabilities,
    no_new_privs and seccomp state and resource limits"."""
    script = (
        "import resource, sys; from stockade.engine.cli.warm import process_context; "
        "s, h = resource.getrlimit(resource.RLIMIT_NOFILE); "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (s // 2, h)); "
        "sys.stdout.buffer.write(process_context())"
    )
    mine = warm.process_context()
    theirs = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True).stdout
    assert theirs != mine
    plain = script.split("s, h =")[0] + "sys.stdout.buffer.write(process_context())"
    same = subprocess.run([sys.executable, "-c", plain], capture_output=True, check=True).stdout
    assert same == mine
