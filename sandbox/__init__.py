"""Stockade's isolation primitives: the namespaced virtual filesystem and the process sandbox.

This package imports nothing from ``engine`` or ``policies``.
"""

from sandbox.bubblewrap import isolation_available
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
from sandbox.limits import Limits, ProcessResult
from sandbox.mounts import Change, FileInfo, Mount
from sandbox.process import run_process, run_process_async
from sandbox.vfs import VirtualFS

__all__ = [
    "Change",
    "ExistsError",
    "FileInfo",
    "IsADirectoryError_",
    "Limits",
    "Mount",
    "NotADirectoryError_",
    "NotFoundError",
    "NotTextError",
    "PathEscapeError",
    "ProcessResult",
    "QuotaError",
    "ReadOnlyError",
    "SandboxError",
    "VirtualFS",
    "isolation_available",
    "openat2_available",
    "run_process",
    "run_process_async",
]
