"""Stockade's isolation primitives: the namespaced virtual filesystem (and, to come, the
process sandbox).

This package imports nothing from ``engine`` or ``policies``.
"""

from sandbox.errors import (
    ExistsError,
    IsADirectoryError_,
    NotADirectoryError_,
    NotFoundError,
    NotTextError,
    PathEscapeError,
    QuotaError,
    ReadOnlyError,
    SandboxError,
)
from sandbox.hostroot import openat2_available
from sandbox.mounts import Change, FileInfo, Mount
from sandbox.vfs import VirtualFS

__all__ = [
    "Change",
    "ExistsError",
    "FileInfo",
    "IsADirectoryError_",
    "Mount",
    "NotADirectoryError_",
    "NotFoundError",
    "NotTextError",
    "PathEscapeError",
    "QuotaError",
    "ReadOnlyError",
    "SandboxError",
    "VirtualFS",
    "openat2_available",
]
