"""The bubblewrap command line that puts a process in a box shaped like the virtual filesystem.

Inside, the process sees: the system folders (``/usr`` and the ``/bin``, ``/lib`` links)
read-only; a short list of harmless ``/etc`` files (never ``shadow``, ``sudoers`` or package
manager credentials); the Python installation read-only (so ``run_python`` uses the same
interpreter and packages); each host mount of the VFS at its logical prefix (``/workspace``),
read-write or read-only as mounted; a private ``/tmp`` and ``/dev``; its own ``/proc``. It gets
new user, PID, IPC, UTS, cgroup and (unless allowed) network namespaces, no capabilities, a new
session (no typing into the caller's terminal), and dies with its parent. Home folders, other
projects, ``/root``, ``/var`` and the host's ``/tmp`` do not exist there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from stockade.sandbox.errors import SandboxError
from stockade.sandbox.logical import normalize, within
from stockade.sandbox.mounts import Mount
from stockade.sandbox.views import View

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# what programs need from /etc to start and to name users; nothing secret (an allow-list: each
# bind costs about 0.1 ms of start-up, and a deny-list would miss the secrets nobody listed)
ETC_FILES = (
    "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "passwd",
    "group", "nsswitch.conf", "os-release", "mime.types",
)  # fmt: skip
# and what they need to reach the network and check certificates, when they may (certificates,
# never the private keys beside them)
ETC_NETWORK_FILES = (
    "hosts", "host.conf", "resolv.conf", "gai.conf", "protocols", "services", "ssl/certs",
    "ssl/openssl.cnf", "ca-certificates", "ca-certificates.conf", "pki/tls/certs",
    "pki/ca-trust",
)  # fmt: skip
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Folders a command run under bubblewrap has to itself: each is a fresh, empty tmpfs, private
# to the run and gone when it ends, so what a boxed command writes there reaches nothing else.
# Public for whoever judges what a command may touch; `box` creates exactly these, so what is
# said and what is done cannot drift apart.
BOX_PRIVATE_PATHS: tuple[str, ...] = ("/tmp",)


@dataclass(frozen=True, slots=True)
class Box:
    """A bubblewrap command line prefix, the working folder inside, and what the process
    cannot see (said in the result)."""

    argv: list[str]
    cwd: str
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Bubblewrap:
    """What this machine offers for boxing commands: a working bwrap, or why not.

    Get one with `probe`, when it suits the caller (it blocks), and hand it to `run_process`;
    nothing keeps the answer for the process, so a caller that wants a fresh one probes again.
    """

    executable: str | None  # the path of a bwrap that can create namespaces here
    problem: str  # why there is none ("" when there is), e.g. "bwrap is not installed ..."

    def __post_init__(self) -> None:
        if self.executable is None and not self.problem:
            raise SandboxError(
                "Bubblewrap(executable=None) needs a problem saying why bubblewrap is not "
                "available, e.g. Bubblewrap(None, 'bwrap is not installed')"
            )
        if self.executable is not None and self.problem:
            raise SandboxError(
                f"Bubblewrap({self.executable!r}, problem={self.problem!r}) is contradictory: "
                "give an executable (bubblewrap works) or a problem (it does not), not both"
            )

    @property
    def available(self) -> bool:
        """Whether commands can run boxed here."""
        return self.executable is not None

    @classmethod
    def probe(cls, *, timeout_s: float = 10.0) -> Bubblewrap:
        """Look now, on ``PATH``, for a bwrap that can create namespaces here (a container may
        forbid user namespaces). Blocking: runs bwrap once (a few ms; at most ``timeout_s``)."""
        found = shutil.which("bwrap")
        if found is None:
            return cls(None, "bwrap is not installed (no bwrap on PATH)")
        try:
            trial = subprocess.run(
                [found, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return cls(None, f"bwrap ({found}) did not finish a trial run in {timeout_s:g} s")
        except OSError as exc:
            return cls(None, f"bwrap ({found}) cannot be started: {exc.strerror}")
        if trial.returncode != 0:
            said = trial.stderr.decode("utf-8", "replace").strip().splitlines()
            first = said[0] if said else f"its trial run exited with status {trial.returncode}"
            return cls(None, f"bwrap cannot create namespaces here: {first}")
        return cls(found, "")


def isolation_available() -> bool:
    """Whether commands can run under bubblewrap on this machine. Probes each time it is
    called (runs bwrap once, a few ms): a caller that asks often should keep a `Bubblewrap`."""
    return Bubblewrap.probe().available


def python_folders() -> list[str]:
    """The folders of the running interpreter and its environment, to bind read-only."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    folders.add(str(Path(sys.executable).resolve().parent.parent))
    return sorted(f for f in folders if f and not f.startswith((*SYSTEM_DIRS, "/etc")))


def box(
    mounts: tuple[Mount, ...],
    cwd: str,
    *,
    network: bool,
    executable: str,
    info_fd: int | None = None,
    views: View | None = None,
    filtered: Path | None = None,
) -> Box:
    """The bwrap argv (ending in ``--``) for a process in ``cwd`` (a logical path) that sees
    ``mounts``: each host mount's folder, or with ``views`` the merged copy-on-write view of
    each writable one (and of a memory or overlay mount the views show). With ``filtered`` (a
    folder holding the box's ``resolv.conf`` and ``hosts``) the network is filtered: a network
    namespace of its own, whose first program may open low ports and drops that right before
    the command (`stockade.sandbox.egress_stub`). Raises SandboxError when ``cwd`` is not
    inside a mount the process sees."""
    cwd = normalize(cwd)
    argv = [
        executable,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "stockade",
    ]
    if not network or filtered is not None:
        argv.append("--unshare-net")
    if filtered is not None:
        argv += ["--cap-add", "CAP_NET_BIND_SERVICE", "--cap-add", "CAP_SETPCAP"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]  # where bubblewrap says its init's pid
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            argv += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            argv += ["--ro-bind", folder, folder]
    for name in (*ETC_FILES, *(ETC_NETWORK_FILES if network or filtered else ())):
        if filtered is not None and name in ("resolv.conf", "hosts"):
            argv += ["--ro-bind", str(filtered / name), f"/etc/{name}"]
        else:
            argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for folder in BOX_PRIVATE_PATHS:
        argv += ["--tmpfs", folder]
    for folder in python_folders():
        argv += ["--ro-bind-try", folder, folder]
    warnings: list[str] = []
    # (mount, its host folder, what is bound at its prefix: the folder, or its merged view)
    host_mounts: list[tuple[Mount, Path, Path]] = []
    for mount in sorted(mounts, key=lambda m: len(m.prefix)):
        view = views.view_of(mount) if views is not None else None
        if mount.kind != "host" and view is None:
            if within(cwd, mount.prefix):
                raise SandboxError(
                    f"{cwd} is in {mount.prefix}, {_a(mount.kind)} mount, which a process cannot "
                    f"see (only host folders can be bound into its sandbox); run the command "
                    f"in a host mount",
                    cwd,
                )
            warnings.append(f"{mount.prefix} is a {mount.kind} mount: the process does not see it")
            continue
        # a memory or overlay mount is seen only through its view (`stockade.sandbox.shown`)
        root = Path(mount.root).resolve() if mount.kind == "host" and mount.root else view
        assert root is not None
        source = view if view is not None else root
        host_mounts.append((mount, root, source))
        argv += ["--ro-bind" if mount.read_only else "--bind", str(source), mount.prefix]
    # a read-only folder that also lies inside a writable mount's folder stays read-only there;
    # and each folder between them is bound onto itself, so it is a mount point, which cannot
    # be renamed or removed: the read-only folder cannot be moved away and replaced
    for inner, inner_root, inner_source in host_mounts:
        if not inner.read_only:
            continue
        for outer, outer_root, outer_source in host_mounts:
            if outer.read_only or outer is inner or not inner_root.is_relative_to(outer_root):
                continue
            parts = inner_root.relative_to(outer_root).parts
            for depth in range(1, len(parts)):
                between = Path(outer.prefix, *parts[:depth]).as_posix()
                argv += ["--bind", str(outer_source.joinpath(*parts[:depth])), between]
            argv += ["--ro-bind", str(inner_source), Path(outer.prefix, *parts).as_posix()]
    if views is not None:
        argv += views.binds()
    if not any(within(cwd, m.prefix) for m, _, _ in host_mounts):
        prefixes = ", ".join(m.prefix for m in mounts)
        raise SandboxError(f"{cwd} is outside every mount ({prefixes}); run inside one", cwd)
    argv += ["--chdir", cwd, "--"]
    return Box(argv, cwd, tuple(warnings))


def _a(kind: str) -> str:
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"
