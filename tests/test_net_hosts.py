"""The test network itself, from the host's namespace with real clients and no sandbox: each
service answers, each request is logged as it arrived, and nothing outlives the network."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from net_hosts import BIG_SIZE, NEEDS_ROOT, NetworkSetupError, TestHost, TestNet, hello_text
from net_hosts_content import PROBE_MESSAGE, PROBE_PROJECT, REPO_FILE, REPO_TEXT
from net_hosts_namespaces import LOCK_DIR, link_names, netns_names

TESTS = Path(__file__).parent
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no *_proxy variables
CLEAN_ENV = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "LC_ALL": "C.UTF-8"}


@pytest.fixture
def allowed(fake_net: TestNet) -> TestHost:
    return fake_net.host("allowed.test")


def run(*command: str, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=60, env={**CLEAN_ENV, **env}, check=False
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    return run("curl", "--silent", "--show-error", "--fail", "--noproxy", "*", *args)


# -- each service, by a real client ------------------------------------------------------------


def test_http_serves_hello_and_logs_the_request_line_with_its_host_header(
    allowed: TestHost,
) -> None:
    before = allowed.mark()
    request = urllib.request.Request(allowed.address_url("/hello.txt"))
    request.add_header("Host", "allowed.test")
    with DIRECT.open(request, timeout=10) as answer:
        assert answer.read().decode() == "hello from allowed.test\n" == hello_text(allowed.name)
    with DIRECT.open(allowed.address_url("/hello.txt"), timeout=10) as answer:
        assert answer.status == 200
    assert allowed.requests(since=before) == [
        f"http connect from {peer_of(allowed, 0, before)}",
        "http GET /hello.txt HTTP/1.1 Host: allowed.test",
        f"http connect from {peer_of(allowed, 2, before)}",
        f"http GET /hello.txt HTTP/1.1 Host: {allowed.address}",
    ]


def peer_of(host: TestHost, index: int, since: int) -> str:
    """The client address of an entry: the host's namespace's end of the link, a free port."""
    peer = host.received()[since + index].peer
    assert peer.startswith(f"{host.link.gateway}:") if host.link else peer.startswith("127.")
    return peer


def test_https_by_name_with_the_ca_logs_the_sni_and_the_request(
    fake_net: TestNet, allowed: TestHost
) -> None:
    before = allowed.mark()
    done = curl(
        "--cacert", str(fake_net.ca_path),
        "--resolve", f"allowed.test:443:{allowed.address}",
        "https://allowed.test/hello.txt",
    )  # fmt: skip
    assert done.stdout == "hello from allowed.test\n"
    seen = allowed.requests(since=before)
    assert seen[1:] == [
        "https tls SNI: allowed.test",
        "https GET /hello.txt HTTP/1.1 Host: allowed.test",
    ]


def test_https_by_address_verifies_against_the_ca_and_sends_no_sni(
    fake_net: TestNet, allowed: TestHost
) -> None:
    before = allowed.mark()
    context = ssl.create_default_context(cafile=str(fake_net.ca_path))
    url = allowed.address_url("/hello.txt", scheme="https")
    with urllib.request.urlopen(url, context=context, timeout=10) as answer:
        assert answer.read().decode() == "hello from allowed.test\n"
    assert "https tls SNI: None" in allowed.requests(since=before)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(url, context=ssl.create_default_context(), timeout=10)


def test_the_ca_file_copied_elsewhere_still_verifies(
    fake_net: TestNet, allowed: TestHost, tmp_path: Path
) -> None:
    copy = tmp_path / "workspace" / "test-ca.pem"
    copy.parent.mkdir()
    shutil.copy(fake_net.ca_path, copy)
    done = curl("--cacert", str(copy), allowed.address_url("/hello.txt", scheme="https"))
    assert done.stdout == "hello from allowed.test\n"


def test_big_file_arrives_whole(fake_net: TestNet, allowed: TestHost, tmp_path: Path) -> None:
    target = tmp_path / "big.bin"
    curl("--output", str(target), allowed.address_url("/big.bin"))
    assert target.stat().st_size == BIG_SIZE
    assert hashlib.sha256(target.read_bytes()).hexdigest() == fake_net.big_sha256


def test_git_clones_the_repository_over_dumb_http(
    fake_net: TestNet, allowed: TestHost, tmp_path: Path
) -> None:
    before = allowed.mark()
    clone = tmp_path / "clone"
    git_env = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "no_proxy": "*"}
    run("git", "clone", "--quiet", allowed.address_url("/repo.git"), str(clone), **git_env)
    assert (clone / REPO_FILE).read_text() == REPO_TEXT
    head = run("git", "-C", str(clone), "rev-parse", "HEAD", **git_env).stdout.strip()
    assert head == fake_net.shared.repo_head
    assert allowed.wait_for("GET /repo.git/info/refs", since=before).endswith(
        f"Host: {allowed.address}"
    )


def test_pip_downloads_the_probe_from_the_simple_index_and_it_runs(
    allowed: TestHost, tmp_path: Path
) -> None:
    before = allowed.mark()
    pip = [
        sys.executable,
        "-m",
        "pip",
        "--isolated",
        "--no-cache-dir",
        "--disable-pip-version-check",
    ]
    env = {"PIP_CONFIG_FILE": os.devnull, "no_proxy": "*"}
    run(
        *pip, "download", "--no-deps", "--index-url", allowed.address_url("/simple"),
        "--trusted-host", allowed.address, PROBE_PROJECT, "-d", str(tmp_path / "got"), **env,
    )  # fmt: skip
    (wheel,) = (tmp_path / "got").iterdir()
    site = str(tmp_path / "site")
    run(*pip, "install", "--quiet", "--no-deps", "--target", site, str(wheel), **env)
    done = run(sys.executable, "-s", "-m", "stockade_egress_probe", PYTHONPATH=site)
    assert done.stdout == PROBE_MESSAGE + "\n"
    seen = allowed.requests(since=before)
    assert f"http GET /simple/{PROBE_PROJECT}/ HTTP/1.1 Host: {allowed.address}" in seen
    assert any(line.startswith(f"http GET /packages/{wheel.name} ") for line in seen)


def test_the_sink_logs_each_connection_and_what_was_sent(allowed: TestHost) -> None:
    before = allowed.mark()
    with socket.create_connection((allowed.address, allowed.sink_port), timeout=10) as client:
        client.sendall(b"secret token\n\xff\x00")
    allowed.wait_for("sink close", since=before)
    seen = allowed.requests(since=before)
    assert seen[0].startswith("sink connect from ")
    assert "sink data 'secret token\\n\\\\xff\\x00'" in seen
    assert allowed.sink_bytes(since=before) == b"secret token\n\xff\x00"


def test_the_sink_logs_udp_datagrams_on_the_same_port(allowed: TestHost) -> None:
    before = allowed.mark()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.sendto(b"secret\xfe", (allowed.address, allowed.sink_port))
        port = client.getsockname()[1]
    line = allowed.wait_for("sink datagram", since=before)
    assert line == f"sink datagram from {peer_of(allowed, 0, before)} 'secret\\\\xfe'"
    assert line.split()[3].endswith(f":{port}")
    assert allowed.sink_bytes(since=before) == b"secret\xfe"


def test_hosts_are_apart_and_named_in_the_policy_mapping(fake_net: TestNet) -> None:
    first, second = fake_net.host("allowed.test"), fake_net.host("denied.test")
    assert fake_net.host("denied.test") is second
    assert first.address != second.address
    assert first.netns != second.netns
    assert fake_net.addresses()["denied.test"] == second.address
    before = first.mark()
    with DIRECT.open(second.address_url("/hello.txt"), timeout=10) as answer:
        assert answer.read() == b"hello from denied.test\n"
    assert first.requests(since=before) == []
    with pytest.raises(ValueError, match=r"already has a host 'denied\.test'"):
        fake_net.add("denied.test")
    with pytest.raises(ValueError, match="not a lower-case DNS name"):
        fake_net.add("Bad Name")


def test_the_loopback_host_serves_on_127_0_0_1(fake_net: TestNet, loopback_host: TestHost) -> None:
    assert loopback_host.address == "127.0.0.1"
    assert loopback_host.netns is None
    before = loopback_host.mark()
    with DIRECT.open(loopback_host.address_url("/hello.txt"), timeout=10) as answer:
        assert answer.read() == b"hello from localhost\n"
    done = curl("--cacert", str(fake_net.ca_path), loopback_host.url("/hello.txt", scheme="https"))
    assert done.stdout == "hello from localhost\n"
    assert "https tls SNI: localhost" in loopback_host.requests(since=before)


# -- the log is faithful, whatever arrives -----------------------------------------------------


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(payload=st.binary(min_size=1, max_size=200_000))
def test_the_sink_keeps_every_byte_sent(allowed: TestHost, payload: bytes) -> None:
    before = allowed.mark()
    with socket.create_connection((allowed.address, allowed.sink_port), timeout=10) as client:
        client.sendall(payload)
    allowed.wait_for("sink close", since=before)
    assert allowed.sink_bytes(since=before) == payload


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=st.binary(max_size=2000).filter(lambda b: b"\r" not in b and b"\n" not in b))
def test_every_request_line_is_logged_as_sent(allowed: TestHost, path: bytes) -> None:
    """Even lines http.server refuses (spaces, NULs, bytes past ASCII) are in the log."""
    before = allowed.mark()
    line = b"GET /" + path + b" HTTP/1.0"
    with socket.create_connection((allowed.address, allowed.http_port), timeout=10) as client:
        client.sendall(line + b"\r\nHost: allowed.test\r\n\r\n")
        while client.recv(65536):
            pass
    requests = [e for e in allowed.received()[before:] if e.event == "request"]
    assert [e.line for e in requests] == [line.decode("iso-8859-1")]


# -- nothing outlives the network --------------------------------------------------------------


def traces(net_folder: Path, host: TestHost) -> dict[str, bool]:
    assert host.link is not None
    return {
        "namespace": host.link.netns in netns_names(),
        "veth": host.link.veth in link_names(),
        "server": psutil.pid_exists(host.process.pid),
        "folder": net_folder.exists(),
    }


@pytest.mark.usefixtures("fake_net")  # root, or skip
def test_closing_removes_namespaces_links_processes_and_files() -> None:
    with TestNet() as net:
        host = net.add("gone.test")
        assert host.requests() == []  # the start-up check is not counted
        folder = net.folder
        lock = LOCK_DIR / f"{net.token}.lock"
        assert lock.exists()
        assert traces(folder, host) == dict.fromkeys(
            ["namespace", "veth", "server", "folder"], True
        )
    assert traces(folder, host) == dict.fromkeys(["namespace", "veth", "server", "folder"], False)
    assert host.process.returncode is not None
    assert not lock.exists()


def fail_inside_a_net(made: list[tuple[Path, TestHost]]) -> None:
    with TestNet() as net:
        made.append((net.folder, net.add("failing.test")))
        raise RuntimeError("the test failed")


@pytest.mark.usefixtures("fake_net")
def test_a_failing_test_body_still_removes_everything() -> None:
    made: list[tuple[Path, TestHost]] = []
    with pytest.raises(RuntimeError, match="the test failed"):
        fail_inside_a_net(made)
    ((folder, host),) = made
    assert traces(folder, host) == dict.fromkeys(["namespace", "veth", "server", "folder"], False)


KILLED_RUN = textwrap.dedent(
    """
    import json, os, signal, sys
    sys.path.insert(0, sys.argv[1])
    from net_hosts import TestNet
    net = TestNet().__enter__()
    host = net.add("killed.test")
    print(json.dumps({"netns": host.netns, "veth": host.link.veth, "pid": host.process.pid,
                      "folder": str(net.folder), "token": net.token}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.usefixtures("fake_net")
def test_a_killed_run_loses_its_servers_and_the_next_run_removes_the_rest() -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, str(TESTS)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    left = json.loads(done.stdout)
    deadline = time.monotonic() + 5
    while psutil.pid_exists(left["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(left["pid"]), "the server outlived its test run"
    assert left["netns"] in netns_names()
    assert left["veth"] in link_names()
    assert Path(left["folder"]).exists()
    with TestNet():
        assert left["netns"] not in netns_names()
        assert left["veth"] not in link_names()
        assert not Path(left["folder"]).exists()
        assert not (LOCK_DIR / f"{left['token']}.lock").exists()


TWO_HOSTS_RUN = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from net_hosts import TestNet
    with TestNet() as net:
        hosts = [net.add("same.test"), net.add("also.test")]
        print(json.dumps([[h.netns, h.link.veth, h.address] for h in hosts]), flush=True)
        sys.stdin.read()  # both runs hold their hosts until the test has compared them
    """
)


@pytest.mark.usefixtures("fake_net")
def test_two_runs_at_once_get_their_own_names_and_addresses(fake_net: TestNet) -> None:
    command = [sys.executable, "-c", TWO_HOSTS_RUN, str(TESTS)]
    pipe = subprocess.PIPE
    runs = [
        subprocess.Popen(command, stdin=pipe, stdout=pipe, stderr=pipe, text=True) for _ in range(2)
    ]
    made = []
    for run_ in runs:
        assert run_.stdout is not None
        made.append(json.loads(run_.stdout.readline() or "null"))
    for run_ in runs:
        _, errors = run_.communicate("", timeout=60)
        assert run_.returncode == 0, errors
    names = [item for listing in made for host in listing for item in host]
    assert len(set(names)) == len(names) == 12
    session = {h.address for h in fake_net.hosts.values()}
    assert not session & {host[2] for listing in made for host in listing}


@pytest.mark.usefixtures("fake_net")
def test_servers_that_cannot_start_say_why() -> None:
    with socket.socket() as taken, TestNet() as net:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(NetworkSetupError, match=r"did not start(.|\n)*Address already in use"):
            net.add_loopback("busy.test", ports=(port, 0, 0))
        assert "busy.test" not in net.hosts


def test_without_root_the_fixture_skips_saying_why(tmp_path: Path) -> None:
    """Run as the user nobody: the fixture skips, and TestNet refuses with the same reason."""
    if os.geteuid() != 0:
        pytest.skip("this test switches to the user nobody, which needs root")
    folder = Path(tempfile.mkdtemp(prefix="stockade-netnoroot-"))
    try:
        folder.chmod(0o755)
        (folder / "test_needs_net.py").write_text(
            "from net_hosts import TestNet, fake_net\n\n"
            "def test_uses_it(fake_net: TestNet) -> None:\n    pass\n"
        )
        done = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
             sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q",
             "--rootdir", str(folder), str(folder / "test_needs_net.py")],
            capture_output=True, text=True, timeout=120, cwd=folder,
            env={**CLEAN_ENV, "PYTHONPATH": str(TESTS)},
        )  # fmt: skip
    finally:
        shutil.rmtree(folder)
    assert "1 skipped" in done.stdout, done.stdout + done.stderr
    assert NEEDS_ROOT in done.stdout
