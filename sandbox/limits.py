"""What a process may use, and what a run reports: the two records at the process boundary."""

from __future__ import annotations

import resource
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stockade.sandbox.egress import Connection

MiB = 1024 * 1024

Isolation = Literal["bubblewrap", "bubblewrap+layers", "bubblewrap+rebinds", "none"]
"""How a run was isolated: boxed by bubblewrap (its mounts' folders written directly), boxed on
copy-on-write layers (nothing reached the mounts; the changes are the caller's to judge and
apply), boxed with its protected paths bound read-only (the fallback without overlays: new
protected paths are the caller's to find), or not at all (limits only)."""
KilledReason = Literal["timeout", "memory", "cpu", "processes", "output", "file_size", "cancelled"]


class Limits(BaseModel):
    """Resource limits of one run. Every run gets all of them; isolation or not.

    ``memory_mb`` bounds the resident memory of the whole process tree (watched, the tree is
    killed past it); each process also gets an address-space limit (``address_space_mb``, by
    default four times ``memory_mb`` plus 4 GiB, since runtimes reserve far more than they touch)
    so that one huge allocation fails at once. ``cpu_s`` bounds the CPU time of the whole tree
    (and of each process, through the kernel). ``max_procs`` bounds the processes alive at once.
    ``output_bytes`` is how much of each of stdout and stderr is kept; more is read and dropped,
    and past ``drain_bytes`` in all the run is stopped. ``file_mb`` bounds any file a process
    writes.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_mb: int = Field(default=2048, ge=16)
    cpu_s: float = Field(default=120.0, gt=0)
    max_procs: int = Field(default=256, ge=1)
    output_bytes: int = Field(default=1_000_000, ge=1)
    drain_bytes: int = Field(default=64 * MiB, ge=1)
    file_mb: int = Field(default=1024, ge=1)
    open_files: int = Field(default=1024, ge=16)
    address_space_mb: int | None = Field(default=None, ge=16)

    @property
    def address_space(self) -> int:
        """The per-process address-space limit, in bytes."""
        if self.address_space_mb is not None:
            return self.address_space_mb * MiB
        return (self.memory_mb * 4 + 4096) * MiB

    def rlimits(self, *, processes: bool) -> list[tuple[int, int, int]]:
        """``(resource, soft, hard)`` for ``setrlimit``; ``processes`` adds RLIMIT_NPROC (only
        meaningful inside a user namespace, where it counts the sandbox's processes alone).
        The CPU limit's soft value sends SIGXCPU (reported as a CPU limit); the hard one, a
        second later, SIGKILL for a process that ignores it."""
        cpu = max(1, int(self.cpu_s + 0.999))
        limits = [
            (resource.RLIMIT_AS, self.address_space, self.address_space),
            (resource.RLIMIT_CPU, cpu, cpu + 1),
            (resource.RLIMIT_FSIZE, self.file_mb * MiB, self.file_mb * MiB),
            (resource.RLIMIT_NOFILE, self.open_files, self.open_files),
            (resource.RLIMIT_CORE, 0, 0),
        ]
        if processes:
            limits.append((resource.RLIMIT_NPROC, self.max_procs, self.max_procs))
        return limits


class ProcessResult(BaseModel):
    """What one run did.

    ``exit_code`` is the exit status (None when a signal ended the process); ``signal`` the
    signal that ended the command: from the wait status, or from the ``128 + N`` status a shell
    or bubblewrap reports for a command a signal ended. ``stdout``/``stderr`` hold at most the
    limit's ``output_bytes`` each (decoded as UTF-8, bad bytes replaced); ``stdout_bytes`` and
    ``stderr_bytes`` count everything the command wrote, and ``truncated`` says whether
    either was cut. ``killed_reason`` says which limit
    stopped the run (``timeout`` also sets ``timed_out``). ``peak_rss`` is the largest resident
    memory of the whole tree seen, in bytes (sampled every few milliseconds: a run that ends
    before the first look reports 0); ``cpu_s`` the CPU time of the tree (what the kernel
    reported for reaped processes, or what was sampled, whichever is more). ``isolation``
    says whether bubblewrap contained the run; ``network`` whether it could reach any network;
    with a filtered network, ``connections`` are those it asked for, allowed and refused (the
    first thousand; ``connections_dropped`` counts the rest). ``warnings`` say what a reader
    must know (no isolation, a mount the process could not see).
    """

    model_config = ConfigDict(frozen=True)

    exit_code: int | None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    truncated: bool = False
    timed_out: bool = False
    killed_reason: KilledReason | None = None
    peak_rss: int = 0
    cpu_s: float = 0.0
    duration_s: float = 0.0
    isolation: Isolation = "none"
    network: bool = False
    connections: tuple[Connection, ...] = ()
    connections_dropped: int = 0
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the command exited 0 without being stopped."""
        return self.exit_code == 0 and self.killed_reason is None
