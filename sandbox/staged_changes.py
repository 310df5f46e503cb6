"""What a command changed, read back from the upper layer of its copy-on-write view.

An overlay's upper layer holds exactly what the command wrote: new and changed files (copied
up whole), new folders, whiteouts (a character device 0/0) where it deleted, opaque folders
where it replaced one whole, links it made. Read against what lies below (the lower folders),
that is the list of `StagedChange`s to judge. The lower folders are usually one host folder;
a mount that is not on the host is shown as a folder of its content over the host folder
beneath it (`stockade.sandbox.shown`), and then what lies below is what the top-most lower
folder holding an entry says, as overlayfs reads it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ChangeKind = Literal["added", "modified", "deleted", "created_dir", "mode", "link", "special"]

_OPAQUE = ("user.overlay.opaque", "trusted.overlay.opaque")
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class StagedChange:
    """One thing a command changed in a mount, as the host would get it if applied.

    ``kind``: ``added`` or ``modified`` (a file; ``source`` holds its new content, ``mode`` its
    permission bits), ``deleted`` (a file, a link or a whole folder), ``created_dir``, ``mode``
    (permission bits only), ``link`` (a symbolic link to ``target``), or ``special`` (a device,
    a pipe or a socket, which is never applied). ``sha256_before`` / ``sha256_after`` are of the
    file's content (None: no such file)."""

    path: str
    kind: ChangeKind
    size: int | None = None
    sha256_before: str | None = None
    sha256_after: str | None = None
    mode: int | None = None
    target: str | None = None
    source: Path | None = None


@dataclass(frozen=True, slots=True)
class Lower:
    """What a layer's lower folders (top first) hold at one path below them."""

    folders: tuple[Path, ...]
    parts: tuple[str, ...] = ()

    def child(self, name: str) -> Lower:
        """The entry ``name`` in this folder."""
        return Lower(self.folders, (*self.parts, name))

    def find(self) -> tuple[Path, os.stat_result] | None:
        """Where the entry is on disk and what it is (not followed), or None: no such entry.
        The top-most folder holding one decides; a whiteout, or a file where a folder on the
        way would be, hides what lies further below."""
        if len(self.folders) == 1:  # the common case, one host folder: one lstat
            path = self.folders[0].joinpath(*self.parts)
            info = _lstat(path)
            return None if info is None else (path, info)
        for folder in self.folders:
            path = folder
            for depth, name in enumerate(self.parts, 1):
                path = path / name
                info = _lstat(path)
                if info is None:
                    break  # nothing here: the next folder down may hold it
                if _whiteout(info) or (depth < len(self.parts) and not stat.S_ISDIR(info.st_mode)):
                    return None
            else:
                info = _lstat(path)
                return None if info is None else (path, info)
        return None

    def names(self) -> list[str]:
        """The names this folder holds, merged over every lower folder."""
        names: set[str] = set()
        for folder in self.folders:
            try:
                names.update(os.listdir(folder.joinpath(*self.parts)))
            except OSError:
                continue
        return sorted(n for n in names if self.child(n).find() is not None)


def read_layer(prefix: str, upper: Path, lower: Lower) -> Iterator[StagedChange]:
    """The changes an upper layer holds over ``lower``, for the mount at ``prefix``: parents
    before children (a deleted or replaced folder before what is created in its place)."""
    yield from _read_folder(prefix, upper, lower, lower_present=True)


def _read_folder(
    logical: str, upper: Path, lower: Lower, *, lower_present: bool
) -> Iterator[StagedChange]:
    """The changes under one folder of the upper layer. ``lower_present``: the lower layer's
    folder shows through (it does not when the folder is new, or opaque: replaced whole)."""
    try:
        entries = sorted(os.scandir(upper), key=lambda e: e.name)
    except OSError:
        return
    if lower_present and _opaque(upper):
        # the folder was replaced whole: what the lower one holds and the upper does not is gone
        names = {e.name for e in entries}
        for name in lower.names():
            if name not in names:
                yield StagedChange(_join(logical, name), "deleted")
        lower_present = False
    for entry in entries:
        path = _join(logical, entry.name)
        below = lower.child(entry.name)
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        # what the host holds there now: what the change replaces (its lower entry shows
        # through unless the folder is new or was replaced whole, but it is replaced all the same)
        found = below.find()
        where, before = (None, None) if found is None else found
        mode = info.st_mode
        if _whiteout(info):  # deleted
            if before is not None and lower_present:
                yield StagedChange(path, "deleted")
            continue
        if before is not None and stat.S_ISDIR(before.st_mode) and not stat.S_ISDIR(mode):
            yield StagedChange(path, "deleted")  # a folder replaced by something else
            where, before = None, None
        if stat.S_ISDIR(mode):
            if before is None or not stat.S_ISDIR(before.st_mode):
                if before is not None:
                    yield StagedChange(path, "deleted")
                yield StagedChange(path, "created_dir", mode=stat.S_IMODE(mode))
                yield from _read_folder(path, Path(entry.path), below, lower_present=False)
                continue
            if stat.S_IMODE(mode) != stat.S_IMODE(before.st_mode):
                yield StagedChange(path, "mode", mode=stat.S_IMODE(mode))
            yield from _read_folder(path, Path(entry.path), below, lower_present=True)
        elif stat.S_ISLNK(mode):
            target = os.readlink(entry.path)
            if (
                where is not None
                and before is not None
                and stat.S_ISLNK(before.st_mode)
                and os.readlink(where) == target
            ):
                continue
            yield StagedChange(path, "link", target=target, sha256_before=_sha_of(where, before))
        elif stat.S_ISREG(mode):
            yield from _file_change(path, Path(entry.path), info, where, before)
        else:
            yield StagedChange(path, "special", mode=stat.S_IMODE(mode))


def _file_change(
    path: str,
    source: Path,
    info: os.stat_result,
    below: Path | None,
    before: os.stat_result | None,
) -> Iterator[StagedChange]:
    after_sha = _sha256(source)
    mode = stat.S_IMODE(info.st_mode)
    if below is None or before is None or not stat.S_ISREG(before.st_mode):
        yield StagedChange(
            path, "added" if before is None else "modified", info.st_size,
            _sha_of(below, before), after_sha, mode, source=source,
        )  # fmt: skip
        return
    before_sha = _sha256(below) if before.st_size == info.st_size else None
    if before_sha == after_sha:  # copied up, not changed (opened for writing, touched)
        if stat.S_IMODE(before.st_mode) != mode:
            yield StagedChange(path, "mode", mode=mode)
        return
    yield StagedChange(
        path, "modified", info.st_size, before_sha or _sha256(below), after_sha, mode,
        source=source,
    )  # fmt: skip


def _whiteout(info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def _opaque(folder: Path) -> bool:
    for name in _OPAQUE:
        try:
            if os.getxattr(folder, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _sha_of(path: Path | None, info: os.stat_result | None) -> str | None:
    if path is None or info is None or not stat.S_ISREG(info.st_mode):
        return None
    return _sha256(path)


def _sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def _join(folder: str, name: str) -> str:
    return f"{folder.rstrip('/')}/{name}"


__all__ = ["ChangeKind", "Lower", "StagedChange", "read_layer"]
