"""Copy-on-write layers for a command: it sees each writable host mount through an overlay whose
upper layer is a folder of Stockade's own, so nothing it does reaches the host until it has been
judged; paths it may not read are masked in that view; and when it ends, what it created,
changed, deleted or linked is read back from the upper layers as a list of `StagedChange`s.

    with Staging(fs.mounts, masks=["/workspace/.env"]) as staging:
        result = run_process("make", fs=fs, timeout=60, staging=staging)
        for change in staging.changes(): ...        # judge each; apply the ones allowed

How, and why this way. bubblewrap 0.8 (what Debian ships) cannot mount an overlay itself. So
before bubblewrap starts, the command's first process enters a user and mount namespace of its
own, mounts the overlays there (kernels since 5.11 allow it without privileges) and the masks,
and only then execs bubblewrap, which binds the merged views where the host folders would have
been. That first step is a few lines of Perl (`LAUNCHER`: Perl is part of every Debian and
Ubuntu system, starts in under a millisecond, and can make the two system calls), because
``unshare`` and ``mount`` from util-linux cost three process starts; where Perl is missing, the
same lines in Python (`PY_LAUNCHER`, a fresh interpreter: about 15 ms). Never between fork and
exec in the engine's own process: at-fork handlers (a tracing SDK's) may start a thread in the
child, and a process with two threads cannot enter a user namespace.
The mounts live and die with that namespace: the host never sees them, and nothing is left on
the host but the upper layers, in the staging folder, which `close` removes. Overlay semantics
give the rest for free: a file hard-linked to one outside is copied up before it is written, so
the outside file is never written through; a deleted file is a whiteout in the upper layer; a
renamed folder is a whiteout and a new folder.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from stockade.sandbox.errors import SandboxError
from stockade.sandbox.limits import Isolation
from stockade.sandbox.logical import within
from stockade.sandbox.mounts import Mount
from stockade.sandbox.staged_changes import ChangeKind, Lower, StagedChange, read_layer
from stockade.sandbox.views import View

Shown = Callable[[Mount, Path], tuple[Path, ...]]
"""How a mount not on the host is shown to a command: given the mount and an empty folder of
the staging's own, fill it and return the lower folders of the mount's view, top first (empty:
the command does not see the mount)."""

_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 0x1, 0x2, 0x4
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
# an overlay option (kernels since 5.10; the mount is made again without it where refused): the
# upper layer is never synced to disk, which its unmount would otherwise do for every command.
# The layers are thrown away or applied (with a flush of their own), never mounted again after
# a crash, so nothing is lost by it
_VOLATILE = b",volatile"
# unshare(2) and mount(2) by machine, for the launcher (Perl has no names for them)
_SYSCALLS = {"x86_64": (272, 165), "aarch64": (97, 40), "arm64": (97, 40)}

LAUNCHER = r"""
my ($unshare, $mount, $uid, $gid, $group, $n, @rest) = @ARGV;
if ($group ne "") {
  open(my $g, ">", $group) or die "stockade layers: join $group: $!\n";
  print $g $$;
  close($g) or die "stockade layers: join $group: $!\n";
}
syscall($unshare + 0, 0x10020000) == 0 or die "stockade layers: unshare: $!\n";
for (["setgroups", "deny"], ["uid_map", "$uid $uid 1"], ["gid_map", "$gid $gid 1"]) {
  open(my $f, ">", "/proc/self/$_->[0]") or die "stockade layers: $_->[0]: $!\n";
  print $f $_->[1];
  close($f) or die "stockade layers: $_->[0]: $!\n";
}
my ($none, $root) = ("none", "/");
syscall($mount + 0, $none, $root, 0, 0x44000, 0) == 0 or die "stockade layers: mount /: $!\n";
for (1 .. $n) {
  my ($s, $t, $y, $fl, $d) = splice(@rest, 0, 5);
  my $ok = syscall($mount + 0, $s, $t, ($y eq "" ? 0 : $y), $fl + 0, ($d eq "" ? 0 : $d)) == 0;
  $ok = syscall($mount + 0, $s, $t, $y, $fl + 0, $d) == 0 if !$ok && $d =~ s/,volatile$//;
  $ok or die "stockade layers: mount $t: $!\n";
}
shift @rest;
exec { $rest[0] } @rest or die "stockade layers: exec $rest[0]: $!\n";
"""
"""Joins a control group (its ``cgroup.procs`` file, "" for none), enters the layers, then
execs the rest of its arguments: ``UNSHARE MOUNT UID GID GROUP N`` then N mounts of five
arguments (source, target, type, flags, data; "" for none), ``--``, argv."""

PY_LAUNCHER = r"""
import ctypes, os, sys
def die(what, number=None):
    number = ctypes.get_errno() if number is None else number
    print("stockade layers: %s: %s" % (what, os.strerror(number)), file=sys.stderr)
    os._exit(125)
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
args = [os.fsencode(a) for a in sys.argv[1:]]
uid, gid, group, n, rest = args[0], args[1], args[2], int(args[3]), args[4:]
if group:
    try:
        with open(group, "wb") as g:
            g.write(b"%d" % os.getpid())
    except OSError as e:
        die("join " + os.fsdecode(group), e.errno)
if libc.unshare(0x10020000) != 0:
    die("unshare")
for name, text in ((b"setgroups", b"deny"), (b"uid_map", b"%s %s 1" % (uid, uid)),
                   (b"gid_map", b"%s %s 1" % (gid, gid))):
    with open(b"/proc/self/" + name, "wb", buffering=0) as f:
        f.write(text)
if libc.mount(b"none", b"/", None, 0x44000, None) != 0:
    die("mount /")
for i in range(n):
    s, t, y, fl, d = rest[5 * i:5 * i + 5]
    ok = libc.mount(s, t, y or None, int(fl), d or None) == 0
    if not ok and d.endswith(b",volatile"):
        ok = libc.mount(s, t, y or None, int(fl), d[:-9]) == 0
    if not ok:
        die("mount " + os.fsdecode(t))
argv = rest[5 * n + 1:]
try:
    os.execvp(argv[0], argv)
except OSError as e:
    die("exec " + os.fsdecode(argv[0]), e.errno)
"""
"""`LAUNCHER` in Python, for machines without Perl: ``UID GID GROUP N``, the mounts, ``--``,
argv (run by ``python -I -S -c``)."""


@dataclass(frozen=True, slots=True)
class _Layer:
    prefix: str
    lowers: tuple[Path, ...]  # top first: a mount's own folder, or what shows one not on the host
    upper: Path | None  # None: a read-only mount, bound as it is (with its masks over it)
    work: Path
    merged: Path


class Staging(View):
    """The copy-on-write layers of one command run (see the module docstring).

    ``mounts`` are the VFS's; each writable host mount gets a layer, each read-only one a
    view of its own (read-only, so that it can be masked too). ``masks`` are logical paths
    hidden from the command: a file reads as empty and cannot be written, a folder is empty and
    read-only. The layers live in a new folder under ``base`` (the system's temporary folder by
    default), which must not lie inside a mount. Use as a context manager, or `close` it.
    """

    isolation: Isolation = "bubblewrap+layers"

    def __init__(
        self,
        mounts: Sequence[Mount],
        *,
        masks: Sequence[str] = (),
        base: str | Path | None = None,
        shown: Shown | None = None,
    ) -> None:
        roots = [Path(m.root).resolve() for m in mounts if m.root]
        self.folder = Path(tempfile.mkdtemp(prefix="stockade-layers-", dir=base)).resolve()
        if any(self.folder.is_relative_to(root) for root in roots):
            shutil.rmtree(self.folder, ignore_errors=True)
            raise SandboxError(
                f"the staging folder {self.folder} lies inside a mount, where the command could "
                "reach its own layers; give a base folder outside every mount"
            )
        self.layers: list[_Layer] = []
        try:
            for number, mount in enumerate(mounts):
                lowers = self._lowers(mount, number, shown)
                if not lowers:
                    continue  # a mount the command does not see
                layer = _Layer(
                    mount.prefix,
                    lowers,
                    None if mount.read_only else self.folder / f"upper{number}",
                    self.folder / f"work{number}",
                    self.folder / f"merged{number}",
                )
                for folder in (layer.upper, layer.work, layer.merged):
                    if folder is not None and not (folder is layer.work and layer.upper is None):
                        folder.mkdir()
                self.layers.append(layer)
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        self.masks = tuple(masks)
        self._empty_file = self.folder / "empty"  # bound over masked files; made if needed
        self._plan = self._mount_plan()
        self._uid, self._gid = os.getuid(), os.getgid()
        self._launched = False
        self.closed = False

    def _lowers(self, mount: Mount, number: int, shown: Shown | None) -> tuple[Path, ...]:
        if mount.kind == "host" and mount.root:
            return (Path(mount.root).resolve(),)
        if shown is None:
            return ()
        folder = self.folder / f"shown{number}"
        folder.mkdir()
        return shown(mount, folder)

    # -- what the box binds ------------------------------------------------------------------

    def view_of(self, mount: Mount) -> Path | None:
        """The merged folder the box binds at ``mount``'s prefix (None: bind the mount as is)."""
        for layer in self.layers:
            if layer.prefix == mount.prefix:
                return layer.merged
        return None

    # -- in the command's first process, before bubblewrap ------------------------------------

    def launcher(self, group: str | None = None) -> list[str]:
        """The argv prefix that joins the control group whose ``cgroup.procs`` file is
        ``group`` (if any), enters the layers and then execs what follows it (``--`` first):
        Perl's `LAUNCHER`, or `PY_LAUNCHER` where Perl or the system call numbers are missing.
        Joining here spares the run the shell that would join it."""
        if self._launched:
            self._forget_mounts()
        self._launched = True
        numbers = _SYSCALLS.get(os.uname().machine)
        perl = shutil.which("perl")
        ids = [str(self._uid), str(self._gid), group or "", str(len(self._plan))]
        if numbers is None or perl is None:
            argv = [sys.executable, "-I", "-S", "-c", PY_LAUNCHER, *ids]
        else:
            argv = [perl, "-e", LAUNCHER, *map(str, numbers), *ids]
        for source, target, kind, flags, data in self._plan:
            argv += [os.fsdecode(source), os.fsdecode(target), os.fsdecode(kind or b"")]
            argv += [str(flags), os.fsdecode(data or b"")]
        return argv

    def _forget_mounts(self) -> None:
        """Let the layers be mounted again: a volatile overlay marks its work folder so that
        it cannot be (the mark is for layers left by a crash; these were unmounted cleanly)."""
        for layer in self.layers:
            shutil.rmtree(layer.work / "work" / "incompat", ignore_errors=True)

    def _mount_plan(self) -> list[tuple[bytes, bytes, bytes | None, int, bytes | None]]:
        """The mount calls the launcher makes, in order: an overlay per layer, then each mask (a
        read-only empty file bound over a file, a read-only empty tmpfs over a folder)."""
        plan: list[tuple[bytes, bytes, bytes | None, int, bytes | None]] = []
        for layer in self.layers:
            lowerdir = ":".join(map(str, layer.lowers))
            if layer.upper is None and len(layer.lowers) == 1:
                # read-only: the folder itself, for the masks to go over
                source = os.fsencode(layer.lowers[0])
                plan.append((source, os.fsencode(layer.merged), None, _MS_BIND | _MS_REC, None))
                continue
            if layer.upper is None:  # read-only, several lowers: an overlay without an upper
                options = f"lowerdir={lowerdir}"
            else:
                options = f"lowerdir={lowerdir},upperdir={layer.upper},workdir={layer.work}"
            plan.append(
                (
                    b"stockade",
                    os.fsencode(layer.merged),
                    b"overlay",
                    _MS_NOSUID | _MS_NODEV,
                    f"{options},userxattr".encode() + _VOLATILE,
                )
            )
        for logical in self.masks:
            where = self._merged_path(logical)
            if where is None:
                continue
            found = where.lower.find()  # as the command will find it, before it runs
            if found is None:
                continue  # not there: what it creates in its place is judged after the run
            info = found[1]
            target = os.fsencode(where.merged)
            if stat.S_ISDIR(info.st_mode):
                flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV
                plan.append((b"none", target, b"tmpfs", flags, b"size=4k,mode=0555"))
            elif not stat.S_ISLNK(info.st_mode):
                if not self._empty_file.exists():
                    self._empty_file.touch(mode=0o444)
                plan.append((os.fsencode(self._empty_file), target, None, _MS_BIND, None))
                plan.append((b"none", target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None))
        return plan

    def _merged_path(self, logical: str) -> _Where | None:
        for layer in sorted(self.layers, key=lambda lay: len(lay.prefix), reverse=True):
            if within(logical, layer.prefix):
                relative = logical[len(layer.prefix) :].lstrip("/")
                below = Lower(layer.lowers, tuple(p for p in relative.split("/") if p))
                return _Where(below, layer.merged / relative)
        return None

    # -- afterwards ------------------------------------------------------------------------------

    def changes(self) -> list[StagedChange]:
        """What the command changed, mount by mount, parents before children (a deleted or
        replaced folder before what is created in its place)."""
        found: list[StagedChange] = []
        for layer in self.layers:
            if layer.upper is not None:
                found.extend(read_layer(layer.prefix, layer.upper, Lower(layer.lowers)))
        return found

    def close(self) -> None:
        """Remove the layers (what was not applied is dropped). Safe to call twice."""
        if not self.closed:
            self.closed = True
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class _Where:
    lower: Lower
    merged: Path


def layers_available(timeout_s: float = 10.0) -> str | None:
    """Whether this machine lets a process mount an overlay in a user namespace of its own:
    None if so, else why not. Runs ``true`` in a throwaway staging once (a few milliseconds)."""
    folder = Path(tempfile.mkdtemp(prefix="stockade-layers-probe-"))
    try:
        (folder / "lower").mkdir()
        staging = Staging([Mount("/probe", folder / "lower")], base=folder)
        # the way commands will enter it: through the launcher, a fresh process
        argv = [*staging.launcher(), "--", "true"]
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"an overlay cannot be mounted in a user namespace here ({exc})"
        finally:
            staging.close()
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
            return f"an overlay cannot be mounted in a user namespace here ({said})"
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["ChangeKind", "Shown", "StagedChange", "Staging", "layers_available"]
