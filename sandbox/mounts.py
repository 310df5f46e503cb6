"""Mounts, and the small records the virtual filesystem hands out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from stockade.errors import ConfigurationError
from stockade.sandbox.logical import normalize


@dataclass(frozen=True, slots=True)
class Mount:
    """A logical prefix and what backs it.

    * ``Mount("/workspace", "/home/me/project")``: a host folder, read-write;
    * ``read_only=True``: reads only;
    * ``memory=True`` (no root): an empty in-memory tree; nothing reaches the host;
    * ``overlay=True`` (with a root): reads fall through to the host folder, writes and deletes
      are staged in memory until `VirtualFS.commit` applies them (or `discard` drops them).
    """

    prefix: str
    root: str | Path | None = None
    read_only: bool = False
    memory: bool = False
    overlay: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or not self.prefix.startswith("/"):
            raise ConfigurationError(
                f"a mount prefix must be an absolute logical path, got {self.prefix!r}"
            )
        normal = normalize(self.prefix)
        if normal != self.prefix:
            raise ConfigurationError(f"write the mount prefix as {normal!r}, not {self.prefix!r}")
        if self.memory and self.root is not None:
            raise ConfigurationError(f"mount {self.prefix}: a memory mount has no root folder")
        if not self.memory and self.root is None:
            raise ConfigurationError(
                f"mount {self.prefix}: give a root folder, or memory=True for an in-memory tree"
            )
        if self.overlay and self.memory:
            raise ConfigurationError(
                f"mount {self.prefix}: an overlay needs a host root, not memory"
            )
        if self.overlay and self.read_only:
            raise ConfigurationError(
                f"mount {self.prefix}: an overlay exists to stage writes; drop read_only"
            )

    @property
    def kind(self) -> Literal["host", "memory", "overlay"]:
        """What backs the mount."""
        if self.memory:
            return "memory"
        return "overlay" if self.overlay else "host"


Kind = Literal["file", "dir", "link", "other"]
ChangeKind = Literal["added", "modified", "deleted", "created_dir"]


@dataclass(frozen=True, slots=True)
class FileInfo:
    """What `VirtualFS.stat` reports."""

    path: str
    kind: Kind
    size: int
    modified: float
    mode: int


@dataclass(frozen=True, slots=True)
class Change:
    """One staged change of an overlay mount."""

    path: str
    kind: ChangeKind
    diff: str
