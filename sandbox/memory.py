"""Files that exist only in memory: a pyfakefs tree per mount, nothing reaches the host.

pyfakefs is used as a library here, never to patch ``os`` or ``open``: each memory mount owns a
`FakeFilesystem` and reaches it only through its own fake ``os`` module and ``open``. The tree
starts empty and holds no symlinks (nothing in the sandbox's interface creates one), so paths
resolve lexically; a lock makes each operation atomic with respect to the others, and an
operation's ``check`` (`stockade.sandbox.guard`) is asked under that lock, about the path it
acts on.
"""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from pyfakefs.fake_filesystem import FakeFilesystem
from pyfakefs.fake_open import FakeFileOpen
from pyfakefs.fake_os import FakeOsModule
from pyfakefs.helpers import FakeStatResult

from stockade.sandbox.errors import (
    ExistsError,
    IsADirectoryError_,
    NotADirectoryError_,
    QuotaError,
    SandboxError,
    from_os_error,
)
from stockade.sandbox.guard import Check
from stockade.sandbox.mounts import FileInfo, Kind


class MemoryBackend:
    """One in-memory mount."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._fs = FakeFilesystem(path_separator="/")
        self._os = FakeOsModule(self._fs)
        self._open = FakeFileOpen(self._fs)
        self._lock = threading.RLock()

    def close(self) -> None:
        """Nothing to release."""

    def name(self, parts: list[str]) -> str:
        """The logical path of ``parts``."""
        return "/".join([self.prefix.rstrip("/"), *parts]) if parts else self.prefix

    @staticmethod
    def _fake(parts: list[str]) -> str:
        return "/" + "/".join(parts)

    def read_bytes(self, parts: list[str], limit: int, check: Check | None = None) -> bytes:
        """The content of a file; QuotaError past ``limit`` bytes."""
        with self._lock:
            if check is not None:
                check(self.name(parts), "read")
            info = self._stat(parts)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError_(
                    f"{self.name(parts)} is a folder, not a file", self.name(parts)
                )
            if info.st_size > limit:
                raise QuotaError(
                    f"{self.name(parts)} is {info.st_size} bytes, over the {limit}-byte limit",
                    self.name(parts),
                )
            with self._open(self._fake(parts), "rb") as handle:
                data: bytes = handle.read()
                return data

    def read_range(
        self, parts: list[str], offset: int, length: int, check: Check | None = None
    ) -> bytes:
        """Up to ``length`` bytes of a file from byte ``offset`` (fewer at its end)."""
        with self._lock:
            if check is not None:
                check(self.name(parts), "read")
            if stat.S_ISDIR(self._stat(parts).st_mode):
                raise IsADirectoryError_(
                    f"{self.name(parts)} is a folder, not a file", self.name(parts)
                )
            with self._open(self._fake(parts), "rb") as handle:
                # the file is in memory already: what is read up to the range costs no I/O
                data: bytes = handle.read(offset + length)
                return data[offset:]

    def _stat(self, parts: list[str]) -> FakeStatResult:
        try:
            return self._os.stat(self._fake(parts))
        except OSError as exc:
            raise from_os_error(exc, self.name(parts)) from None

    def list_dir(self, parts: list[str], check: Check | None = None) -> list[str]:
        """Names in a folder, sorted."""
        with self._lock:
            if check is not None:
                check(self.name(parts), "read")
            try:
                return sorted(self._os.listdir(self._fake(parts)))
            except OSError as exc:
                raise from_os_error(exc, self.name(parts), want_dir=True) from None

    def stat(self, parts: list[str], check: Check | None = None) -> FileInfo:
        """Kind, size, time and mode."""
        with self._lock:
            if check is not None:
                check(self.name(parts), "read")
            info = self._stat(parts)
            kind: Kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
            return FileInfo(
                self.name(parts), kind, info.st_size, info.st_mtime, stat.S_IMODE(info.st_mode)
            )

    def lstat(self, parts: list[str], check: Check | None = None) -> FileInfo:
        """Memory mounts hold no links: the same as `stat`."""
        return self.stat(parts, check)

    def resolve(self, parts: list[str]) -> list[str]:
        """Memory mounts hold no links: the parts as they are."""
        return list(parts)

    def host_path(self, parts: list[str]) -> Path:
        """Memory mounts are not on the host."""
        raise SandboxError(
            f"{self.name(parts)} is in a memory mount, which has no host path", self.name(parts)
        )

    def write_bytes(
        self,
        parts: list[str],
        data: bytes,
        check: Check | None = None,
        *,
        mode: int | None = None,
        follow_last: bool = True,  # a memory mount holds no links: nothing to follow
    ) -> None:
        """Replace (or create) a file, creating missing folders on the way (with ``mode``:
        those permission bits; else a replaced file keeps its own, a new one gets 0o644)."""
        if not parts:
            raise IsADirectoryError_(f"{self.prefix} is a folder, not a file", self.prefix)
        with self._lock:
            if check is not None:
                check(self.name(parts), "write")
            self.mkdir(parts[:-1])
            path = self._fake(parts)
            if self._os.path.isdir(path):
                raise IsADirectoryError_(
                    f"{self.name(parts)} is a folder; cannot write a file over it", self.name(parts)
                )
            new = not self._os.path.exists(path)
            with self._open(path, "wb") as handle:
                handle.write(data)
            if mode is not None or new:
                # a new file gets 0o644 whatever the umask was when the mount was made
                self._os.chmod(path, 0o644 if mode is None else mode)

    def chmod(self, parts: list[str], mode: int, check: Check | None = None) -> None:
        """Set the permission bits of a file or folder."""
        with self._lock:
            if check is not None:
                check(self.name(parts), "write")
            self._stat(parts)
            self._os.chmod(self._fake(parts), mode)

    def symlink(self, parts: list[str], target: str, check: Check | None = None) -> None:
        """Refused: a memory mount holds no links (its paths resolve lexically)."""
        raise SandboxError(
            f"{self.name(parts)} is in a memory mount, which holds no symbolic links",
            self.name(parts),
        )

    def mkdir(self, parts: list[str], check: Check | None = None) -> None:
        """Create a folder and any missing folders above it (each one created is judged)."""
        with self._lock:
            for depth in range(1, len(parts) + 1):
                path = self._fake(parts[:depth])
                if self._os.path.isdir(path):
                    continue
                if self._os.path.exists(path):
                    raise NotADirectoryError_(
                        f"{self.name(parts[:depth])} is a file, not a folder", self.name(parts)
                    )
                if check is not None:
                    check(self.name(parts[:depth]), "write")
                self._os.mkdir(path)

    def delete(self, parts: list[str], *, recursive: bool, check: Check | None = None) -> None:
        """Delete a file or a folder (empty, or ``recursive``)."""
        if not parts:
            raise SandboxError(
                f"{self.prefix} is the mount itself and cannot be deleted", self.prefix
            )
        with self._lock:
            if check is not None:
                check(self.name(parts), "delete")
            path = self._fake(parts)
            try:
                if self._os.path.isdir(path):
                    if recursive:
                        self._fs.remove_object(path)
                    else:
                        self._os.rmdir(path)
                else:
                    self._os.remove(path)
            except OSError as exc:
                raise from_os_error(exc, self.name(parts)) from None

    def rename(
        self, source: list[str], target: list[str], *, overwrite: bool, check: Check | None = None
    ) -> None:
        """Move within the mount."""
        if not source or not target:
            raise SandboxError("the mount itself cannot be moved", self.prefix)
        with self._lock:
            if check is not None:
                check(self.name(source), "delete")
                check(self.name(target), "write")
            self._stat(source)
            if not overwrite and self._os.path.exists(self._fake(target)):
                raise ExistsError(
                    f"{self.name(target)} already exists; pass overwrite to replace it",
                    self.name(target),
                )
            self.mkdir(target[:-1])
            try:
                self._os.replace(self._fake(source), self._fake(target))
            except OSError as exc:
                raise from_os_error(exc, self.name(source)) from None
