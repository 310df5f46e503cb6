"""What a command sees of its mounts, beyond the folders themselves: a `View`.

Two kinds. `stockade.sandbox.layers.Staging` gives it copy-on-write layers, so nothing it does
reaches the host until its changes are judged and applied. `Rebinds` is the fallback where the
kernel will not mount an overlay in a user namespace: the command writes its mounts directly,
but what it may not read is replaced by an empty file or folder, and the protected paths that
exist (and files with other hard links, which a write would go through) are bound read-only
over themselves, each folder on the way bound onto itself so that none of them can be renamed
or removed to swap the protected path away. What that cannot stop is a protected path that
did not exist being *created*; so the caller compares the protected paths after the run with
those before (`Rebinds.created`), and reports and removes what is new.

    view = Rebinds(fs.mounts, masks=[...], protected=[...], linked=[...])
    result = run_process("make", fs=fs, timeout=60, staging=view)
    for path in view.created(protected_after): ...       # judge; remove what is refused
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from stockade.sandbox.limits import Isolation
from stockade.sandbox.logical import within
from stockade.sandbox.mounts import Mount


class View:
    """How a boxed command sees its mounts (the base: as they are)."""

    isolation: Isolation = "bubblewrap"

    def view_of(self, mount: Mount) -> Path | None:
        """The folder the box binds at ``mount``'s prefix (None: the mount's own)."""
        return None

    def binds(self) -> list[str]:
        """bubblewrap arguments that come after the mounts' binds (masks, read-only binds)."""
        return []

    def launcher(self, group: str | None = None) -> list[str] | None:
        """An argv prefix that prepares the view and then execs what follows ``--`` (None:
        nothing to prepare before bubblewrap); it first joins the control group whose
        ``cgroup.procs`` file is ``group``, if one is given."""
        return None

    def close(self) -> None:
        """Remove what the view made for the run (safe to call twice)."""


class Rebinds(View):
    """The fallback view (see the module docstring). ``masks`` are logical paths the command
    may not read, ``protected`` those it may not change, ``linked`` files with other hard
    links; each is acted on only where it exists."""

    isolation: Isolation = "bubblewrap+rebinds"

    def __init__(
        self,
        mounts: Sequence[Mount],
        *,
        masks: Sequence[str] = (),
        protected: Sequence[str] = (),
        linked: Sequence[str] = (),
    ) -> None:
        self.mounts = tuple(m for m in mounts if m.kind == "host" and m.root is not None)
        self.masks = tuple(masks)
        self.protected = tuple(protected)
        self.linked = tuple(linked)
        # what a masked file is replaced by: an empty file of our own (the host's /dev/null
        # would do, but the box mounts the host's folders nodev, where a device cannot open)
        self._folder = tempfile.mkdtemp(prefix="stockade-rebinds-")
        self._empty = os.path.join(self._folder, "empty")
        with open(self._empty, "wb"):
            pass
        os.chmod(self._empty, 0o444)

    def close(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    def binds(self) -> list[str]:
        argv: list[str] = []
        pinned: set[str] = set()
        masked = set(self.masks)
        for logical in sorted({*self.protected, *self.linked} - masked, key=len):
            host = self._host(logical)
            if host is not None and os.path.lexists(host) and not os.path.islink(host):
                argv += self._pin_folders_to(logical, pinned)
                argv += ["--ro-bind", host, logical]
        for logical in sorted(masked, key=len):
            host = self._host(logical)
            if host is None:
                continue
            try:
                info = os.lstat(host)
            except OSError:
                continue  # not there: if the command creates it, it is found after the run
            argv += self._pin_folders_to(logical, pinned)
            if stat.S_ISDIR(info.st_mode):
                argv += ["--tmpfs", logical, "--remount-ro", logical]
            elif not stat.S_ISLNK(info.st_mode):
                argv += ["--ro-bind", self._empty, logical]
        return argv

    def created(self, before: Sequence[str], after: Sequence[str]) -> list[str]:
        """The protected paths found after the run that were not there before, shallowest
        first (a new protected folder stands for everything in it)."""
        known = set(before)
        new: list[str] = []
        for path in sorted(set(after) - known, key=len):
            if not any(within(path, folder) for folder in new):
                new.append(path)
        return new

    def _host(self, logical: str) -> str | None:
        for mount in sorted(self.mounts, key=lambda m: len(m.prefix), reverse=True):
            if within(logical, mount.prefix) and not mount.read_only:
                relative = logical[len(mount.prefix) :].lstrip("/")
                return os.path.join(os.path.realpath(mount.root or ""), relative)
        return None

    def _pin_folders_to(self, logical: str, pinned: set[str]) -> list[str]:
        """Bind each folder between ``logical``'s mount and it onto itself: a mount point
        cannot be renamed or removed, so the protected path cannot be moved out of the way."""
        argv: list[str] = []
        for mount in self.mounts:
            if not within(logical, mount.prefix) or logical == mount.prefix:
                continue
            root = os.path.realpath(mount.root or "")
            parts = logical[len(mount.prefix) :].strip("/").split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                folder = "/".join([mount.prefix.rstrip("/"), *parts[:depth]])
                if folder not in pinned:
                    pinned.add(folder)
                    argv += ["--bind", os.path.join(root, *parts[:depth]), folder]
        return argv


__all__ = ["Rebinds", "View"]
