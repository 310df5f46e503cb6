"""Run a command an agent wrote: boxed by bubblewrap where it exists, limited and watched always.

    result = run_process("pytest -q", fs=fs, timeout=60, limits=Limits(memory_mb=1024))
    result.exit_code, result.stdout, result.killed_reason, result.isolation

One run, start to end:

1. The command line runs as ``bash -c`` (a list runs as it is) inside the bubblewrap box of
   ``sandbox.bubblewrap`` (the VFS mounts at their logical paths, nothing else of the host's
   files, no network unless asked), under ``prlimit`` for the per-process kernel limits; its
   environment is an allow-list (``PATH``, ``HOME``, ``LANG`` ...) plus what the caller gives,
   never the host's.
2. One loop (``sandbox.watch``) waits on the process's pidfd and its output pipes at once, so
   it wakes when the process exits, when output arrives, at the deadline, or when the tree is
   due for a look: psutil sums the tree's resident memory, CPU time and process count, and the
   tree is killed past a limit. Output past the limit is read and dropped (a full pipe would
   stall the command).
3. On any limit, timeout or cancellation, the whole tree is killed (``sandbox.tree``): its
   process group, every process seen in it, its pids control group where it has one (which
   also bounds how many processes it may have, even for root), and under bubblewrap the PID
   namespace, whose every process the kernel kills when bubblewrap's init dies. After a normal
   exit the same cleanup runs, so a child left sleeping in the background does not outlive the
   call either.

Runs may be made from any number of threads at once (`run_process_async` does, through the
executor): each has its own token, pids group, report pipe and home, each closed or removed
exactly once by what made it, and cleanup signals only numbers read from the run itself
(``sandbox.safe_kill``).

Whether bubblewrap works here is a `Bubblewrap` probe: the caller's, when it passes one, or
else one made at the call. Without bubblewrap (not installed, or user namespaces forbidden) the
run has the same limits and watching but sees the host as this user does; the result and the
log say so and why, and a policy can refuse such runs (``require_isolation``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import resource
import secrets
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from stockade.sandbox.bubblewrap import SANDBOX_PATH, Bubblewrap, box
from stockade.sandbox.cgroups import PidsGroup
from stockade.sandbox.egress import HOSTS, PROXY_ENV, RESOLV_CONF, Egress
from stockade.sandbox.errors import SandboxError
from stockade.sandbox.init_report import InitReport
from stockade.sandbox.limits import Isolation, Limits, ProcessResult
from stockade.sandbox.logical import normalize
from stockade.sandbox.tree import RUN_TOKEN
from stockade.sandbox.vfs import VirtualFS
from stockade.sandbox.views import View
from stockade.sandbox.watch import WatchedRun

if TYPE_CHECKING:  # the proxy (and the DNS library under it) loads only for a filtered network
    from stockade.sandbox.egress_proxy import Proxy

log = logging.getLogger("stockade.sandbox")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NO_BUBBLEWRAP = "bubblewrap is not available"
NO_ISOLATION_WARNING = (
    "the command ran WITHOUT isolation, with resource limits only; it could read and write "
    "anything this user can, and reach the network"
)

IsolationChoice = Literal["auto", "bubblewrap", "none"]


def run_process(
    argv_or_command: str | Sequence[str],
    *,
    fs: VirtualFS,
    cwd: str = "/workspace",
    timeout: float,
    limits: Limits | None = None,
    network: bool | Egress = False,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    isolation: IsolationChoice = "auto",
    cancel: threading.Event | None = None,
    bubblewrap: Bubblewrap | None = None,
    staging: View | None = None,
) -> ProcessResult:
    """Run a command line (with bash) or an argv inside the sandbox and wait for it.

    ``cwd`` is a logical folder of a host mount of ``fs``. ``timeout`` is wall-clock seconds;
    ``cancel`` stops the run from another thread. ``isolation="auto"`` uses bubblewrap when it
    works here and says loudly, and why, when it does not; ``"bubblewrap"`` raises SandboxError
    instead; ``"none"`` runs with limits only. ``bubblewrap`` is the caller's answer to whether
    it works here (see `Bubblewrap.probe`); without one, ``"auto"`` and ``"bubblewrap"`` probe
    at this call, which runs bwrap once. With ``staging`` (which needs bubblewrap) the command
    sees the writable mounts through its copy-on-write layers: nothing it does reaches them
    until the caller applies ``staging.changes()``. ``network`` is False (none), True (all of
    it) or an `Egress` (the hosts its judge allows, through a proxy on this side; needs
    bubblewrap), whose connections the result lists. Raises SandboxError for a bad ``cwd``,
    ``env`` or ``timeout`` (nothing ran); everything the command does is in the result.
    """
    limits = limits or Limits()
    if not timeout > 0:
        raise SandboxError(f"timeout must be a positive number of seconds, got {timeout}")
    command = _argv(argv_or_command)
    extra_env = _checked_env(env)
    cwd = normalize(cwd)
    _check_cwd(fs, cwd)
    if isolation == "none":
        bwrap: str | None = None
        unboxed = f"isolation was turned off: {NO_ISOLATION_WARNING}"
    else:
        machine = bubblewrap if bubblewrap is not None else Bubblewrap.probe()
        bwrap = machine.executable
        unboxed = f"{NO_BUBBLEWRAP}: {NO_ISOLATION_WARNING}; why: {machine.problem}"
        if (isolation == "bubblewrap" or staging is not None) and bwrap is None:
            raise SandboxError(
                f"isolation was required but {NO_BUBBLEWRAP} here ({machine.problem}): install "
                "the 'bubblewrap' package (and allow unprivileged user namespaces), or run "
                "without it"
            )
    if isinstance(network, Egress) and bwrap is None:
        raise SandboxError(
            "a network filtered by host needs bubblewrap (without a box the command reaches "
            "every host): install the 'bubblewrap' package, or run with network=False"
        )
    with contextlib.ExitStack() as cleanup:
        # everything below is this run's alone (its token, group, report, home), and each
        # thing is closed or removed once, by the one that made it
        token = secrets.token_hex(8)
        prlimit = _prlimit()
        warnings: list[str] = []
        report: InitReport | None = None
        proxy: Proxy | None = None
        if bwrap is not None:
            report = cleanup.enter_context(InitReport())  # bubblewrap says its init's pid here
            filtered = None
            stub: list[str] = []
            if isinstance(network, Egress):
                proxy, filtered, stub = _filtered(network, cleanup)
            boxed = box(
                fs.mounts,
                cwd,
                network=network is True,
                executable=bwrap,
                info_fd=report.write_end,
                views=staging,
                filtered=filtered,
            )
            warnings += boxed.warnings
            argv = [*boxed.argv, *stub, *_limited(prlimit, limits, boxed=True), *command]
            host_cwd: str | None = None
            home = "/tmp"  # one of BOX_PRIVATE_PATHS: the run's own, and gone after it
            used: Isolation = "bubblewrap" if staging is None else staging.isolation
        else:
            host_cwd = str(fs.host_path(cwd))
            warnings.append(unboxed)
            if isolation == "auto":
                log.warning("%s: %s", unboxed, _shown(command))
            home = tempfile.mkdtemp(prefix="stockade-home-")
            cleanup.callback(shutil.rmtree, home, ignore_errors=True)
            argv = [*_limited(prlimit, limits, boxed=False), *command]
            used = "none"
        # bubblewrap's two processes (its outer one and the namespace's init) are not the
        # command's, but they count in the group
        group = PidsGroup.create(token, limits.max_procs + (2 if bwrap else 0))
        if group is not None:
            cleanup.callback(group.remove)
        # the copy-on-write layers are entered just before bubblewrap, by a launcher that
        # joins the control group first (from outside the new namespaces); without one, a
        # shell joins the group
        launcher = None
        if staging is not None and bwrap is not None:
            launcher = staging.launcher(group.procs_file if group is not None else None)
        if launcher is not None:
            argv = [*launcher, "--", *argv]
        elif group is not None:
            argv = group.join_argv(argv)
        environment = {
            "PATH": _path_with_python(),
            "HOME": home,
            "TMPDIR": home,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PWD": host_cwd or cwd,
            "USER": "sandbox",
            "LOGNAME": "sandbox",
            "SHELL": "/bin/bash",
            **(PROXY_ENV if proxy is not None else {}),
            **extra_env,
            RUN_TOKEN: token,
        }
        outcome = WatchedRun(
            argv,
            environment,
            host_cwd,
            limits,
            timeout,
            input,
            cancel,
            used,
            group,
            report=report,
            argv_has_limits=prlimit is not None,
            pass_fds=(proxy.box_end,) if proxy is not None else (),
            started=proxy.started if proxy is not None else None,
        ).run()
    # without a box the command could reach the network whatever was asked
    reachable = network is not False if bwrap is not None else True
    result = outcome.result(used, reachable, tuple(warnings))
    if proxy is None:
        return result
    return result.model_copy(
        update={"connections": tuple(proxy.connections), "connections_dropped": proxy.dropped}
    )


async def run_process_async(
    argv_or_command: str | Sequence[str],
    *,
    fs: VirtualFS,
    cwd: str = "/workspace",
    timeout: float,  # noqa: ASYNC109 - the process's own deadline, enforced by run_process
    limits: Limits | None = None,
    network: bool | Egress = False,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    isolation: IsolationChoice = "auto",
    bubblewrap: Bubblewrap | None = None,
    staging: View | None = None,
) -> ProcessResult:
    """`run_process` from async code (a probe it makes runs in the worker thread, not on the
    event loop). Cancelling the awaiting task kills the process tree, and the cancellation
    propagates only once the tree is gone."""
    cancel = threading.Event()
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(
        None,
        lambda: run_process(
            argv_or_command,
            fs=fs,
            cwd=cwd,
            timeout=timeout,
            limits=limits,
            network=network,
            env=env,
            input=input,
            isolation=isolation,
            cancel=cancel,
            bubblewrap=bubblewrap,
            staging=staging,
        ),
    )
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        cancel.set()
        with contextlib.suppress(Exception):
            await future
        raise


# -- helpers -----------------------------------------------------------------------------------


def _filtered(egress: Egress, cleanup: contextlib.ExitStack) -> tuple[Proxy, Path, list[str]]:
    """A run's filtered network: its proxy (closed when the run is over), the folder of the
    box's ``resolv.conf`` and ``hosts``, and the argv of the box's first program."""
    folder = Path(tempfile.mkdtemp(prefix="stockade-net-"))
    cleanup.callback(shutil.rmtree, folder, ignore_errors=True)
    (folder / "resolv.conf").write_text(RESOLV_CONF)
    (folder / "hosts").write_text(HOSTS)
    from stockade.sandbox.egress_proxy import Proxy

    proxy = Proxy(egress)
    cleanup.callback(proxy.close)
    ports = ",".join(str(port) for port in egress.captured())
    stub = [sys.executable, "-I", "-S", "-c", _STUB_SOURCE, str(proxy.box_end), ports, "--"]
    return proxy, folder, stub


_STUB_SOURCE = (Path(__file__).parent / "egress_stub.py").read_text(encoding="utf-8")


def _argv(argv_or_command: str | Sequence[str]) -> list[str]:
    if isinstance(argv_or_command, str):
        if "\x00" in argv_or_command:
            raise SandboxError("the command line contains a NUL byte; remove it")
        if not argv_or_command.strip():
            raise SandboxError("the command line is empty; give a command to run")
        return ["/bin/bash", "-c", argv_or_command]
    argv = [str(a) for a in argv_or_command]
    if not argv:
        raise SandboxError("the argv is empty; give at least the program to run")
    if any("\x00" in a for a in argv):
        raise SandboxError("an argument contains a NUL byte; remove it")
    return argv


def _checked_env(env: Mapping[str, str] | None) -> dict[str, str]:
    if not env:
        return {}
    checked = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise SandboxError(
                f"environment variable name {name!r} is not valid; use letters, digits and _"
            )
        if not isinstance(value, str) or "\x00" in value:
            raise SandboxError(f"environment variable {name} must be text without NUL bytes")
        checked[name] = value
    return checked


def _check_cwd(fs: VirtualFS, cwd: str) -> None:
    try:
        info = fs.stat(cwd)
    except SandboxError:
        raise
    except OSError as exc:
        raise SandboxError(f"cannot run in {cwd}: {exc}", cwd) from None
    if info.kind != "dir":
        raise SandboxError(f"cannot run in {cwd}: it is a {info.kind}, not a folder", cwd)


_PRLIMIT_FLAGS = {
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_NOFILE: "--nofile",
    resource.RLIMIT_CORE: "--core",
    resource.RLIMIT_NPROC: "--nproc",
}


def _limited(prlimit: str | None, limits: Limits, *, boxed: bool) -> list[str]:
    """The ``prlimit`` prefix that sets the kernel limits. Inside the box it also sets the
    process limit, which the kernel counts per user namespace, so there it counts the box's
    processes alone (plus bubblewrap's init); outside, it would count every process of this
    user, so the watcher alone bounds processes there. Empty when prlimit is missing (then a
    pre-exec hook sets the other limits)."""
    if prlimit is None:
        return []
    argv = [prlimit]
    for number, soft, hard in limits.rlimits(processes=boxed):
        if number == resource.RLIMIT_NPROC:
            soft = hard = soft + 1  # bubblewrap's init runs as the same user in the namespace
        argv.append(f"{_PRLIMIT_FLAGS[number]}={soft}:{hard}")
    return [*argv, "--"]


def _prlimit() -> str | None:
    """Where prlimit really is: a link to it on ``PATH`` may lie in a folder the box does not
    show, while the file it leads to is in the system folders the box binds."""
    found = shutil.which("prlimit")
    return os.path.realpath(found) if found is not None else None


def _path_with_python() -> str:
    return f"{os.path.dirname(sys.executable)}:{SANDBOX_PATH}"


def _shown(command: list[str]) -> str:
    text = command[-1] if command[:2] == ["/bin/bash", "-c"] else " ".join(command)
    return text if len(text) <= 200 else text[:200] + "..."
