"""What a command may not read, found in its mounts before it runs: every path the policy would
not let the call read (it denies, or asks), at every depth, to be masked in the command's view.

A command's words do not say what it reads (``grep -r KEY .``, a script it wrote), so what it
may not read is hidden from it instead: each host mount is walked, every entry is judged as a
read of that path by the call's subject and tool (`Policy.decide_path`), and what is refused is
masked: a file reads as empty, a folder as empty, without looking inside. A file hard-linked to a
masked one under another name (the same inode, found in the same walk) is masked too.

Walking a large workspace and judging every path on every command would cost more than most
commands, so each folder's listing is kept with the folder's modification and change times,
and with it the verdicts for each kind of call (subject, tool, read-only claim, dangerous
paths): the next command stats each folder once and lists and judges again only the folders
that changed. As in git's index, a listing made while its folder's time is still close to the
clock is not trusted the next time: an entry added within the same clock tick would not change
the time.
Hand-written rather than a file-watching library: a watcher would need a thread per engine and
would still have to be checked against the disk before each command, which is all this does.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

from stockade.errors import StockadeError
from stockade.policies import Effect, Policy, Request
from stockade.policies.request import Access
from stockade.sandbox import Mount, SandboxError, VirtualFS

MAX_ENTRIES = 1_000_000  # in all of a command's mounts; past it the command is refused
_RACY_NS = 2_000_000_000  # a folder changed this close to its listing is listed again
_HIDDEN = (Effect.DENY, Effect.ASK)

_Key = tuple[str, str, bool, tuple[str, ...], str]


class TooManyEntriesError(StockadeError):
    """A command's mounts hold more entries than can be judged before it runs."""


@dataclass(slots=True)
class _Listing:
    stamp: tuple[int, int]  # the folder's (mtime, ctime): a command can set the one, not the other
    trusted: bool  # not racy: the next command may reuse it if the time is unchanged
    entries: list[tuple[str, bool, int]]  # (name, is a folder, inode), links left out
    by_inode: dict[int, list[str]] | None = None  # the files' names by inode, when asked for
    verdicts: dict[tuple[_Key, str], tuple[list[str], list[str]]] = field(default_factory=dict)
    # per kind of call and logical path the folder is seen at (a folder may be mounted twice):
    # (names masked, folders to walk into)

    def files(self) -> dict[int, list[str]]:
        """The names of the folder's files (not folders), by inode (made once per listing)."""
        if self.by_inode is None:
            self.by_inode = {}
            for name, is_dir, inode in self.entries:
                if not is_dir:
                    self.by_inode.setdefault(inode, []).append(name)
        return self.by_inode


class ReadMasks:
    """The read masks of one engine's mounts, with the folder listings they were made from."""

    __slots__ = ("_listings", "policy")

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._listings: dict[str, _Listing] = {}

    def masks(
        self,
        request: Request,
        mounts: tuple[Mount, ...],
        access: Access = "read",
        *,
        fs: VirtualFS | None = None,
    ) -> list[str]:
        """The logical paths the call ``request`` describes may not read (or ``access``
        otherwise), in its host mounts (and with ``fs``, its memory and overlay mounts, walked
        through it, without a cache: their content is in memory), shallowest first (inside
        such a folder nothing is listed)."""
        key: _Key = (
            request.subject,
            request.tool,
            request.read_only,
            request.dangerous_paths,
            access,
        )
        found: list[str] = []
        seen: list[tuple[_Listing, str]] = []  # each folder listed, and its logical path
        masked_inodes: set[int] = set()
        budget = [MAX_ENTRIES]
        for mount in mounts:
            if mount.kind != "host" or mount.root is None:
                if fs is not None:
                    found.extend(self._walk(fs, request, mount.prefix, access, budget))
                continue
            stack = [(os.path.realpath(mount.root), mount.prefix.rstrip("/"))]
            while stack:
                host, logical = stack.pop()
                listing = self._listing(host)
                if listing is None:
                    continue
                _spend(budget, len(listing.entries))
                masked, walk = self._verdicts(listing, key, request, logical, access)
                seen.append((listing, logical))
                files = listing.files()
                for name in masked:
                    found.append(f"{logical}/{name}")
                    masked_inodes.update(i for i, names in files.items() if name in names)
                stack.extend((f"{host}/{name}", f"{logical}/{name}") for name in walk)
        if masked_inodes:  # another name of a masked file, in any folder listed
            hidden = set(found)
            for listing, logical in seen:
                for inode in masked_inodes.intersection(listing.files()):
                    paths = (f"{logical}/{name}" for name in listing.files()[inode])
                    found.extend(path for path in paths if path not in hidden)
        return found

    def _walk(
        self, fs: VirtualFS, request: Request, prefix: str, access: Access, budget: list[int]
    ) -> list[str]:
        """The masks of a mount not on the host, walked through ``fs``."""
        found: list[str] = []
        decide = self.policy.decide_path
        stack = [prefix.rstrip("/") or "/"]
        while stack:
            folder = stack.pop()
            try:
                names = fs.list_dir(folder)
            except SandboxError:
                continue
            _spend(budget, len(names))
            for name in names:
                path = f"{folder.rstrip('/')}/{name}"
                if decide(request, path, access).effect in _HIDDEN:
                    found.append(path)
                    continue
                with contextlib.suppress(SandboxError):
                    if fs.lstat(path).kind == "dir":
                        stack.append(path)
        return found

    def _verdicts(
        self, listing: _Listing, key: _Key, request: Request, logical: str, access: Access
    ) -> tuple[list[str], list[str]]:
        known = listing.verdicts.get((key, logical))
        if known is not None:
            return known
        decide = self.policy.decide_path
        masked: list[str] = []
        walk: list[str] = []
        for name, is_dir, _ in listing.entries:
            if decide(request, f"{logical}/{name}", access).effect in _HIDDEN:
                masked.append(name)
            elif is_dir:
                walk.append(name)
        listing.verdicts[key, logical] = (masked, walk)
        return masked, walk

    def _listing(self, host: str) -> _Listing | None:
        try:
            info = os.stat(host)
        except OSError:
            self._listings.pop(host, None)
            return None
        # the change time too: a command can put a folder's modification time back (touch -r)
        # after adding to it, but setting a time moves the change time, which nothing can set
        stamp = (info.st_mtime_ns, info.st_ctime_ns)
        known = self._listings.get(host)
        if known is not None and known.trusted and known.stamp == stamp:
            return known
        listed_at = time.time_ns()
        try:
            with os.scandir(host) as scan:
                entries = sorted(
                    (entry.name, entry.is_dir(follow_symlinks=False), entry.inode())
                    for entry in scan
                    if not entry.is_symlink()  # a link is masked where it leads, if there
                )
        except OSError:
            return None
        racy = listed_at - max(stamp) <= _RACY_NS
        listing = self._listings[host] = _Listing(stamp, not racy, entries)
        return listing


def _spend(budget: list[int], entries: int) -> None:
    budget[0] -= entries
    if budget[0] < 0:
        raise TooManyEntriesError(
            f"the command's mounts hold more than {MAX_ENTRIES:,} files and folders, too many "
            "to judge what it may read before it runs; mount a smaller folder as the workspace"
        )


def linked_files(mounts: tuple[Mount, ...], skip: set[str]) -> list[str]:
    """The files in the writable host mounts with other hard links (a write in place would go
    through to the other names, perhaps outside the mount); folders in ``skip`` (masked or
    protected whole) are not walked. One stat per file: for the fallback without overlays."""
    found: list[str] = []
    for mount in mounts:
        if mount.kind != "host" or mount.root is None or mount.read_only:
            continue
        stack = [(os.path.realpath(mount.root), mount.prefix.rstrip("/"))]
        while stack:
            host, logical = stack.pop()
            try:
                with os.scandir(host) as scan:
                    entries = list(scan)
            except OSError:
                continue
            for entry in entries:
                path = f"{logical}/{entry.name}"
                if path in skip or entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, path))
                else:
                    with contextlib.suppress(OSError):  # gone since the listing: nothing to bind
                        if entry.stat(follow_symlinks=False).st_nlink > 1:
                            found.append(path)
    return found
