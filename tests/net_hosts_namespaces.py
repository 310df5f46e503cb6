"""Network namespaces for the test hosts: one per host, joined to the host's namespace by a veth
pair on its own /30 of 10.231.0.0/16, so a process on the host reaches the test host and
nothing else does.

Runs never collide: every name carries the run's random token, addresses are chosen under a
machine-wide lock from those no interface holds, and each run holds a lock file for as long
as its process lives. A run that was killed leaves its namespaces, links and folder behind
with a lock file nobody holds; the next run removes them at start.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

LOCK_DIR = Path("/run/stockade-testnet")  # a tmpfs, emptied at boot like the namespaces
SUBNET = ipaddress.IPv4Network("10.231.0.0/16")
RUN_FOLDER_PREFIX = "stockade-testnet-"
NETNS = re.compile(r"^stockade-test-\d+-(?P<token>[0-9a-f]{8})-h\d+$")
VETH = re.compile(r"^st(?P<token>[0-9a-f]{8})h\d+$")
RUN_FOLDER = re.compile(rf"^{RUN_FOLDER_PREFIX}\d+-(?P<token>[0-9a-f]{{8}})$")


class NetworkSetupError(RuntimeError):
    """An ``ip`` command the test network needs failed."""


def ip(*args: str, stdin: str | None = None) -> str:
    """Run ``ip`` with ``args``; its output, or an error quoting the command and its stderr."""
    try:
        done = subprocess.run(
            ["ip", *args], input=stdin, capture_output=True, text=True, timeout=30, check=False
        )
    except FileNotFoundError as error:
        raise NetworkSetupError(
            "the test network needs the `ip` command: install iproute2 (apt-get install iproute2)"
        ) from error
    if done.returncode != 0:
        raise NetworkSetupError(
            f"`ip {' '.join(args)}` failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()}" + (f"\ncommands:\n{stdin}" if stdin else "")
        )
    return done.stdout


def netns_names() -> list[str]:
    """Every named network namespace on the machine."""
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def link_names() -> list[str]:
    """Every network interface of the host's namespace."""
    return [
        line.split(":")[1].strip().split("@")[0]
        for line in ip("-o", "link", "show").splitlines()
        if line.strip()
    ]


# -- the run's lock ----------------------------------------------------------------------------


@dataclass
class RunLock:
    """Held by a live run: its token names everything the run creates."""

    token: str
    path: Path
    fd: int

    @classmethod
    def take(cls) -> RunLock:
        LOCK_DIR.mkdir(mode=0o755, exist_ok=True)
        token = secrets.token_hex(4)
        # locked before it appears under its real name, so no one ever sees it unheld
        draft = LOCK_DIR / f".{token}.new"
        fd = os.open(draft, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        path = LOCK_DIR / f"{token}.lock"
        os.rename(draft, path)
        return cls(token, path, fd)

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self.fd)

    def netns(self, index: int) -> str:
        return f"stockade-test-{os.getpid()}-{self.token}-h{index}"

    def veth(self, index: int) -> str:
        return f"st{self.token}h{index}"  # at most 15 bytes: IFNAMSIZ

    def folder(self) -> Path:
        return Path(tempfile.gettempdir()) / f"{RUN_FOLDER_PREFIX}{os.getpid()}-{self.token}"


@contextlib.contextmanager
def _machine_lock(name: str) -> Iterator[None]:
    LOCK_DIR.mkdir(mode=0o755, exist_ok=True)
    fd = os.open(LOCK_DIR / name, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# -- one host's namespace ----------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A namespace and the veth pair joining it to the host's namespace."""

    netns: str
    veth: str  # the host's end; the namespace's end is called eth0
    gateway: str  # the host's end's address
    address: str  # the test host's address, inside the namespace


def create_link(run: RunLock, index: int) -> Link:
    netns, veth = run.netns(index), run.veth(index)
    with _machine_lock("addresses.lock"):
        gateway, address = _free_pair()
        outside = (
            f"netns add {netns}\n"
            f"link add {veth} type veth peer name eth0 netns {netns}\n"
            f"addr add {gateway}/30 dev {veth}\n"
            f"link set {veth} up\n"
        )
        inside = f"addr add {address}/30 dev eth0\nlink set eth0 up\nlink set lo up\n"
        try:
            ip("-batch", "-", stdin=outside)
            ip("-n", netns, "-batch", "-", stdin=inside)
        except NetworkSetupError:
            remove_link(Link(netns, veth, gateway, address))
            raise
    return Link(netns, veth, gateway, address)


def _free_pair() -> tuple[str, str]:
    """The first /30 of SUBNET whose host end no interface of this namespace holds."""
    used = set(re.findall(r"inet (\S+)/", ip("-4", "-o", "addr", "show")))
    for block in SUBNET.subnets(new_prefix=30):
        gateway, address = block[1], block[2]
        if str(gateway) not in used:
            return str(gateway), str(address)
    raise NetworkSetupError(f"every /30 of {SUBNET} is in use: remove stale test links")


def remove_link(link: Link) -> list[str]:
    """Remove the link, end every process left in the namespace, then the namespace; what
    failed, said in words (empty when all went)."""
    problems: list[str] = []
    if link.veth in link_names():
        try:
            ip("link", "del", link.veth)  # both ends go now, not when the kernel gets to it
        except NetworkSetupError as error:
            problems.append(str(error))
    if link.netns in netns_names():
        try:
            _end_processes(link.netns)
            ip("netns", "del", link.netns)
        except NetworkSetupError as error:
            problems.append(str(error))
    return problems


def _end_processes(netns: str) -> None:
    pids = [int(p) for p in ip("netns", "pids", netns).split()]
    processes = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            process = psutil.Process(pid)
            process.kill()
            processes.append(process)
    _, alive = psutil.wait_procs(processes, timeout=5)
    if alive:
        raise NetworkSetupError(f"processes {[p.pid for p in alive]} in {netns} outlived SIGKILL")


# -- what killed runs left ---------------------------------------------------------------------


def remove_stale_runs() -> list[str]:
    """Remove the namespaces, links, folders and lock files of runs whose process is gone;
    the tokens of the runs removed. Listed before the locks are checked: a run's lock is in
    place before it creates anything, so nothing listed belongs to a run still starting."""
    found: dict[str, list[Link]] = {}
    for name in netns_names():
        if match := NETNS.match(name):
            found.setdefault(match["token"], []).append(Link(name, "", "", ""))
    for name in link_names():
        if match := VETH.match(name):
            found.setdefault(match["token"], []).append(Link("", name, "", ""))
    folders: dict[str, Path] = {}
    for path in Path(tempfile.gettempdir()).glob(f"{RUN_FOLDER_PREFIX}*"):
        if match := RUN_FOLDER.match(path.name):
            folders[match["token"]] = path
    locks = {p.stem for p in LOCK_DIR.glob("*.lock") if p.stem != "addresses"}
    removed = []
    for token in sorted(found.keys() | folders.keys() | locks):
        with _stale(token) as stale:
            if not stale:
                continue
            for link in found.get(token, []):
                remove_link(link)
            if token in folders:
                shutil.rmtree(folders[token], ignore_errors=True)
            removed.append(token)
    return removed


@contextlib.contextmanager
def _stale(token: str) -> Iterator[bool]:
    """Whether the run ``token`` is dead; while it is cleaned, its lock is held so no other
    run cleans it at the same time, then the lock file goes."""
    path = LOCK_DIR / f"{token}.lock"
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False  # held: the run is alive
            return
        yield True
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    finally:
        os.close(fd)
