"""How a mount that is not a host folder is shown to a command: written out as folders the
command's copy-on-write view (`stockade.sandbox.layers.Staging`) is laid over.

A process sees only files in the kernel, so a memory mount is written out whole into a folder
of the staging's own, and that folder is the lower layer of its view. An overlay mount is its
host folder plus changes held in memory: only the changes are written out, as a layer above
the host folder, which overlayfs merges as it merges any two layers: a staged file is a file, a
staged deletion a whiteout (a character device 0/0, which the kernel lets anyone make), and a
folder deleted and made again is a folder with a whiteout for each host entry it no longer
holds. What the command then changes is read from its own upper layer and applied through the
virtual filesystem, so it joins the overlay's staged changes, never the host.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from stockade.sandbox.errors import SandboxError
from stockade.sandbox.logical import within
from stockade.sandbox.mounts import Mount
from stockade.sandbox.vfs import VirtualFS

MAX_SHOWN_BYTES = 256 << 20
"""The most a memory mount or an overlay's staged changes may hold to be shown to a command."""


def show(fs: VirtualFS, mount: Mount, folder: Path) -> tuple[Path, ...]:
    """Fill ``folder`` with what ``mount`` (a memory or overlay mount of ``fs``) holds beyond
    the host, and return the lower folders of its view, top first (`stockade.sandbox.layers.
    Shown`). Raises SandboxError when it holds more than `MAX_SHOWN_BYTES`."""
    if mount.kind == "memory":
        _write_tree(fs, mount.prefix, folder, [0])
        return (folder,)
    if mount.kind == "overlay" and mount.root:
        root = Path(mount.root).resolve()
        _write_staged(fs, mount, root, folder)
        return (folder, root)
    return ()


def _write_tree(fs: VirtualFS, logical: str, folder: Path, budget: list[int]) -> None:
    """Everything under ``logical`` written into ``folder`` (which exists)."""
    for name in fs.list_dir(logical):
        path = f"{logical.rstrip('/')}/{name}"
        info = fs.lstat(path)
        target = folder / name
        if info.kind == "dir":
            target.mkdir(mode=0o755)
            _write_tree(fs, path, target, budget)
            os.chmod(target, stat.S_IMODE(info.mode) or 0o755)
        elif info.kind == "file":
            _write_file(fs, path, target, info.mode, budget)


def _write_staged(fs: VirtualFS, mount: Mount, root: Path, folder: Path) -> None:
    """The overlay's staged changes in ``mount`` written into ``folder`` as a layer over
    ``root``."""
    budget = [0]
    gone: list[str] = []  # deleted whole: nothing beneath needs writing
    for change in fs.changes():  # in path order: a folder before what it holds
        if not within(change.path, mount.prefix) or change.path == mount.prefix:
            continue
        if any(within(change.path, path) for path in gone):
            continue
        relative = change.path[len(mount.prefix) :].strip("/")
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if change.kind == "deleted":
            if not _write_deleted(fs, change.path, root / relative, target):
                gone.append(change.path)
        elif change.kind == "created_dir":
            target.mkdir(exist_ok=True)
        else:
            info = fs.lstat(change.path)
            _write_file(fs, change.path, target, info.mode, budget)


def _write_deleted(fs: VirtualFS, logical: str, host: Path, target: Path) -> bool:
    """A deletion written out: a whiteout (False), or, for a folder made again since, the
    folder with a whiteout for each entry it lost (True)."""
    if not fs.exists(logical):
        _whiteout(target)
        return False
    if fs.lstat(logical).kind != "dir":
        return True  # a file written in its place: written out with its own change
    # deleted, then made again as a folder: what the host folder holds and it does not is gone
    target.mkdir(exist_ok=True)
    now = set(fs.list_dir(logical))
    try:
        before = os.listdir(host)
    except OSError:
        return True
    for name in before:
        if name not in now:
            _whiteout(target / name)
    return True


def _write_file(fs: VirtualFS, logical: str, target: Path, mode: int, budget: list[int]) -> None:
    data = fs.read_bytes(logical)
    budget[0] += len(data)
    if budget[0] > MAX_SHOWN_BYTES:
        raise SandboxError(
            f"the mount holding {logical} has more than {MAX_SHOWN_BYTES >> 20} MiB beyond the "
            "host, too much to show to a command; commit or discard the changes first",
            logical,
        )
    target.write_bytes(data)
    os.chmod(target, stat.S_IMODE(mode) or 0o644)


def _whiteout(target: Path) -> None:
    if target.is_char_device() and os.lstat(target).st_rdev == 0:
        return  # already written (an entry of a folder made again)
    try:
        os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(0, 0))
    except OSError as exc:
        raise SandboxError(
            f"cannot show a deletion to a command here (making a whiteout at {target}: "
            f"{exc.strerror}); commit or discard the overlay's changes first"
        ) from None


__all__ = ["MAX_SHOWN_BYTES", "show"]
