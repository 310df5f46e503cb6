"""Stockade's isolation primitives: the namespaced virtual filesystem and the process sandbox.

This package imports nothing from ``engine`` or ``policies``.
"""

from stockade.sandbox.bubblewrap import BOX_PRIVATE_PATHS, Bubblewrap, isolation_available
from stockade.sandbox.egress import Connection, Egress, Verdict
from stockade.sandbox.errors import (
    ExistsError,
    IsADirectoryError_,
    NotADirectoryError_,
    NotFoundError,
    NotTextError,
    PathDeniedError,
    PathEscapeError,
    QuotaError,
    ReadOnlyError,
    SandboxError,
)
from stockade.sandbox.guard import Guard
from stockade.sandbox.hostroot import openat2_available
from stockade.sandbox.limits import Limits, ProcessResult
from stockade.sandbox.mounts import Change, FileInfo, Mount
from stockade.sandbox.process import run_process, run_process_async
from stockade.sandbox.vfs import VirtualFS

__all__ = [
    "BOX_PRIVATE_PATHS",
    "Bubblewrap",
    "Change",
    "Connection",
    "Egress",
    "ExistsError",
    "FileInfo",
    "Guard",
    "IsADirectoryError_",
    "Limits",
    "Mount",
    "NotADirectoryError_",
    "NotFoundError",
    "NotTextError",
    "PathDeniedError",
    "PathEscapeError",
    "ProcessResult",
    "QuotaError",
    "ReadOnlyError",
    "SandboxError",
    "Verdict",
    "VirtualFS",
    "isolation_available",
    "openat2_available",
    "run_process",
    "run_process_async",
]
