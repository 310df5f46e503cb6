"""A small private internet for the egress tests: named hosts, each in its own network
namespace on an address no one else uses, serving HTTP, HTTPS, a package index, a git
repository and a raw TCP sink, and logging everything that reaches them.

Nothing resolves the names: the egress policy under test maps each ``TestHost.name`` to its
``address`` (``TestNet.addresses()``). From the host's namespace every test host is reachable
at its address; HTTPS clients trust ``TestNet.ca_path``. Needs root (network namespaces);
without it the ``fake_net`` fixture skips, saying so.

    def test_something(fake_net: TestNet) -> None:
        allowed = fake_net.host("allowed.test")      # started on first use, kept for the session
        before = allowed.mark()
        ...                                          # a client fetches http://allowed.test/hello.txt
        assert allowed.requests(since=before) == [...]
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import selectors
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal

import pytest
from net_hosts_content import BIG_SIZE, Shared, hello_text, make_shared, make_web_root
from net_hosts_namespaces import (
    Link,
    NetworkSetupError,
    RunLock,
    create_link,
    remove_link,
    remove_stale_runs,
)
from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from net_hosts_certs import Authority

HTTP_PORT, HTTPS_PORT, SINK_PORT = 80, 443, 9418  # 9418: where git:// would go
SERVER = Path(__file__).with_name("net_hosts_server.py")
START_LIMIT = 10.0  # seconds a host's servers get to come up
HOST_NAME = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9-]{1,63}$")
NEEDS_ROOT = "needs root to create network namespaces"

__all__ = [
    "BIG_SIZE",
    "HTTPS_PORT",
    "HTTP_PORT",
    "NEEDS_ROOT",
    "SINK_PORT",
    "NetworkSetupError",
    "Received",
    "TestHost",
    "TestNet",
    "fake_net",
    "hello_text",
    "loopback_host",
]


class Received(BaseModel):
    """One thing a test host's servers received: a line of its log."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    service: Literal["http", "https", "sink"]
    event: Literal["connect", "tls", "tls-error", "request", "data", "datagram", "error", "close"]
    peer: str  # "address:port" of the client
    line: str | None = None  # request: the request line
    host: str | None = None  # request: the Host header, None when absent
    sni: str | None = None  # tls: the server name the client sent, None when none
    data: str | None = None  # data, datagram: what the sink got, to read (bad UTF-8 as \\x..)
    raw: str | None = None  # data, datagram: the same bytes exactly, in base64
    error: str | None = None

    def describe(self) -> str:
        """One line saying what arrived, e.g. ``http GET /hello.txt HTTP/1.1 Host: a.test``."""
        said = {
            "connect": f"connect from {self.peer}",
            "tls": f"tls SNI: {self.sni}",
            "request": f"{self.line} Host: {self.host}",
            "data": f"data {self.data!r}",
            "datagram": f"datagram from {self.peer} {self.data!r}",
        }.get(self.event, f"{self.event} {self.error or ''}".strip())
        return f"{self.service} {said}"


class _Ports(BaseModel):
    http: int
    https: int
    sink: int


@dataclass
class TestHost:
    """A named host and its servers: ``/hello.txt``, ``/big.bin``, ``/simple/`` (PEP 503),
    ``/packages/``, ``/repo.git`` over HTTP and HTTPS, and a sink that answers nothing on
    ``sink_port``, TCP and UDP alike."""

    __test__ = False  # not a test class, whatever its name

    name: str
    address: str
    netns: str | None  # None for a host on the host's loopback
    http_port: int
    https_port: int
    sink_port: int
    folder: Path  # its web root is folder/"www"; its log folder/"requests.jsonl"
    process: subprocess.Popen[bytes] = field(repr=False)
    link: Link | None = field(default=None, repr=False)
    skip: int = field(default=0, repr=False)  # log lines of the start-up check

    def received(self) -> list[Received]:
        """Everything the servers received since they started, in order."""
        text = (self.folder / "requests.jsonl").read_text(encoding="utf-8")
        lines = text.split("\n")[:-1]  # a last line still being written has no newline yet
        return [Received.model_validate_json(line) for line in lines[self.skip :]]

    def requests(self, since: int = 0) -> list[str]:
        """What arrived after ``mark()`` returned ``since``, one line each (see ``describe``)."""
        return [entry.describe() for entry in self.received()[since:]]

    def sink_bytes(self, since: int = 0) -> bytes:
        """Every byte the sink received (by TCP and UDP) after ``mark()`` returned ``since``,
        in order."""
        kinds = ("data", "datagram")
        chunks = [e.raw for e in self.received()[since:] if e.event in kinds and e.raw]
        return b"".join(base64.b64decode(chunk) for chunk in chunks)

    def mark(self) -> int:
        """Where the log is now: pass it to ``requests(since=...)`` to see only what follows."""
        return len(self.received())

    def wait_for(self, text: str, since: int = 0, timeout: float = 5.0) -> str:
        """The first line of ``requests(since)`` holding ``text``, waiting for it to arrive
        (a sink logs data as it comes, after the client has sent it)."""
        deadline = time.monotonic() + timeout
        while True:
            seen = self.requests(since)
            found = next((line for line in seen if text in line), None)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} received no {text!r} in {timeout}s: {seen}")
            time.sleep(0.02)

    def url(self, path: str = "/", scheme: Literal["http", "https"] = "http") -> str:
        """The URL of ``path`` by name (for clients that go through the egress proxy)."""
        return self._url(self.name, path, scheme)

    def address_url(self, path: str = "/", scheme: Literal["http", "https"] = "http") -> str:
        """The URL of ``path`` by address (for clients in the host's namespace, no proxy)."""
        return self._url(self.address, path, scheme)

    def _url(self, where: str, path: str, scheme: str) -> str:
        port = self.http_port if scheme == "http" else self.https_port
        default = HTTP_PORT if scheme == "http" else HTTPS_PORT
        return f"{scheme}://{where}{'' if port == default else f':{port}'}{path}"


class TestNet:
    """The test hosts of one run; a context manager that removes every namespace, link,
    process and file it made on exit, whatever happened inside."""

    __test__ = False

    def __init__(self) -> None:
        self.hosts: dict[str, TestHost] = {}
        self._run: RunLock | None = None
        self._next_index = 0

    # -- set-up and tear-down ------------------------------------------------------------------

    def __enter__(self) -> TestNet:
        if os.geteuid() != 0:
            raise NetworkSetupError(f"the test network {NEEDS_ROOT}; run the tests as root")
        # cryptography loads here, not in every session: conftest.py imports this module
        from net_hosts_certs import make_authority

        self._run = RunLock.take()
        try:
            remove_stale_runs()
            self.folder = self._run.folder()
            self.folder.mkdir(mode=0o755)
            self.authority: Authority = make_authority(self.folder, self._run.token)
            self.shared: Shared = make_shared(self.folder / "shared")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop every host and remove all the run made; raises, once all is tried, if
        something would not go."""
        problems: list[str] = []
        for host in self.hosts.values():
            problems += _stop(host)
        self.hosts.clear()
        if self._run is not None:
            shutil.rmtree(self._run.folder(), ignore_errors=True)
            self._run.release()
            self._run = None
        if problems:
            raise NetworkSetupError("the test network left things behind: " + "; ".join(problems))

    # -- what tests use ------------------------------------------------------------------------

    @property
    def token(self) -> str:
        """The run's random token: every namespace, link, folder and lock it makes carries it."""
        return self._require_run().token

    @property
    def ca_path(self) -> Path:
        """The CA certificate (PEM) every host's HTTPS certificate is signed by."""
        return self.authority.cert_path

    @property
    def big_sha256(self) -> str:
        """The sha256 of every host's ``/big.bin`` (``BIG_SIZE`` random bytes)."""
        return self.shared.big_sha256

    def addresses(self) -> dict[str, str]:
        """Each host's name and address: the mapping the egress policy is given."""
        return {name: host.address for name, host in self.hosts.items()}

    def add(self, name: str) -> TestHost:
        """A new host called ``name`` in a namespace of its own, its servers on ports 80, 443
        and 9418 (TCP and UDP) of its address."""
        self._check_new(name)
        link = create_link(self._require_run(), self._next_index)
        try:
            host = self._start(name, link.address, (HTTP_PORT, HTTPS_PORT, SINK_PORT), link)
        except BaseException:
            remove_link(link)
            raise
        self.hosts[name] = host
        return host

    def host(self, name: str) -> TestHost:
        """The host called ``name``, added on first use (hosts are shared by a session's
        tests: compare against ``mark()``, not against an empty log)."""
        return self.hosts[name] if name in self.hosts else self.add(name)

    def add_loopback(
        self, name: str = "localhost", ports: tuple[int, int, int] = (0, 0, 0)
    ) -> TestHost:
        """The same servers bound to the host's own 127.0.0.1: a service no sandboxed client
        may reach. ``ports`` (HTTP, HTTPS, sink) are chosen free where 0."""
        self._check_new(name)
        host = self._start(name, "127.0.0.1", ports, None)
        self.hosts[name] = host
        return host

    # -- inside --------------------------------------------------------------------------------

    def _require_run(self) -> RunLock:
        if self._run is None:
            raise NetworkSetupError("the test network is closed: use it inside `with TestNet()`")
        return self._run

    def _check_new(self, name: str) -> None:
        if not HOST_NAME.match(name):
            raise ValueError(f"{name!r} is not a lower-case DNS name; pick one like 'ok.test'")
        if name in self.hosts:
            raise ValueError(f"the test network already has a host {name!r}: use host({name!r})")

    def _start(
        self, name: str, address: str, ports: tuple[int, int, int], link: Link | None
    ) -> TestHost:
        self._require_run()
        folder = self.folder / "hosts" / f"{self._next_index}-{name}"
        self._next_index += 1
        folder.mkdir(parents=True)
        root = make_web_root(self.shared, name, folder)
        cert, key = self.authority.issue(name, [address], folder)
        (folder / "requests.jsonl").touch()
        command = [
            sys.executable, "-I", "-S", str(SERVER), "--bind", address, "--root", str(root),
            "--cert", str(cert), "--key", str(key), "--log", str(folder / "requests.jsonl"),
            "--http-port", str(ports[0]), "--https-port", str(ports[1]),
            "--sink-port", str(ports[2]), "--parent", str(os.getpid()),
        ]  # fmt: skip
        if link is not None:
            command = ["ip", "netns", "exec", link.netns, *command]
        with (folder / "server.err").open("wb") as stderr:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr
            )
        host = TestHost(name, address, link.netns if link else None, 0, 0, 0, folder, process, link)
        try:
            found = _await_ports(host)
            host.http_port, host.https_port, host.sink_port = found.http, found.https, found.sink
            _await_route(host)
            host.skip = len(host.received())  # the start-up check's own lines
        except BaseException:
            _stop(host)
            raise
        return host


def _await_ports(host: TestHost) -> _Ports:
    """The ports the servers print once all three listen; an error with their stderr if they
    die or stay silent."""
    assert host.process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(host.process.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout=START_LIMIT)
    line = host.process.stdout.readline() if ready else b""
    host.process.stdout.close()
    if not line:
        host.process.kill()
        host.process.wait()
        said = (host.folder / "server.err").read_text(encoding="utf-8", errors="replace")
        raise NetworkSetupError(
            f"the servers of test host {host.name} ({host.address}) did not start within "
            f"{START_LIMIT}s (exit {host.process.returncode}); their stderr:\n{said.strip()}"
        )
    return _Ports.model_validate_json(line)


def _await_route(host: TestHost) -> None:
    """One HTTP request from the host's namespace: the link routes and the server answers.
    It is logged before it is answered, so the log's first lines are known to be its own."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no *_proxy variables
    deadline = time.monotonic() + START_LIMIT
    while True:
        try:
            with direct.open(host.address_url("/hello.txt"), timeout=2) as answer:
                said = answer.read().decode()
        except OSError as error:
            said = str(error)
        if said == hello_text(host.name):
            return
        if time.monotonic() > deadline:
            raise NetworkSetupError(
                f"test host {host.name} does not answer at {host.address_url('/hello.txt')} "
                f"from the host's namespace: {said}"
            )
        time.sleep(0.02)


def _stop(host: TestHost) -> list[str]:
    """End the host's servers, then remove its namespace and link; what would not go."""
    with contextlib.suppress(ProcessLookupError):
        host.process.terminate()
    try:
        host.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        host.process.kill()
        host.process.wait()
    if host.process.stdout is not None:
        host.process.stdout.close()
    return remove_link(host.link) if host.link is not None else []


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fake_net() -> Iterator[TestNet]:
    """The session's test network; hosts are added by the tests that need them."""
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    with TestNet() as net:
        yield net


@pytest.fixture(scope="session")
def loopback_host(fake_net: TestNet) -> TestHost:
    """Test servers on the host's 127.0.0.1 (free ports), named ``localhost``."""
    return fake_net.add_loopback()
