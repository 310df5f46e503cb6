"""Stockade's own files, out of every call's reach: the engine's policy protects them.

An agent that can rewrite the audit log erases what it did; one that can rewrite the policy file
chooses the rules of the next session. So the engine hands its policy the files it keeps
(`Policy.protect`, rule ``stockade-state``: denied to every tool and access):

- the audit log, with its rotated files and its seal (``audit.jsonl``, ``audit.jsonl.*``);
- the trace file of a ``tracer_provider("jsonl", path=...)``;
- the file the policy was loaded from (`Policy.file`);
- beside an audit store's spool, every process's spool (``audit-*``): those of processes that
  ended wait there to be shipped.

Each is protected by its host path (for tools on host paths) and, wherever a mount of the
engine's `VirtualFS` holds it, by its logical path. The audit log's folder is Stockade's state
folder: when it lies inside a mount (and is not the mount itself), it is protected whole, so
that neither it nor anything in it (the traces beside the log) can be moved or deleted. Keep
the audit log in a folder of its own, and best outside every mount (the commands default to the
user's state folder).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from stockade.policies import Policy
from stockade.policies.globs import escape

if TYPE_CHECKING:
    from stockade.engine.observe.audit_log import AuditLog
    from stockade.sandbox import VirtualFS

SPOOLS = "audit-*"  # an audit store's spools, their rotated files, seals and locks

# The attribute `stockade.engine.observe.tracing.tracer_provider` puts the files it writes
# under, on the provider it returns (read here without loading the OpenTelemetry SDK)
TRACE_FILES = "stockade_trace_files"


def own_patterns(
    policy: Policy, fs: VirtualFS | None, audit: AuditLog | None, tracer_provider: object
) -> list[str]:
    """The patterns of the engine's own files, host and logical (see the module docstring)."""
    files: list[tuple[Path, bool]] = []  # (host path, with the files named after it)
    state: Path | None = None
    if audit is not None:
        log = audit.path.resolve()
        files.append((log, True))
        state = log.parent
    for trace in getattr(tracer_provider, TRACE_FILES, ()):
        files.append((Path(trace).resolve(), False))
    if policy.file is not None:
        files.append((policy.file, False))
    found: list[str] = []
    for path, family in files:
        found += _forms(escape(str(path)), family)
    if state is not None and _ships(audit):
        # an audit store's folder holds other processes' spools too, waiting to be shipped
        found.append(f"{escape(str(state))}/{SPOOLS}")
    mounts = [] if fs is None else [m for m in fs.mounts if m.root is not None]
    for mount in mounts:
        root = Path(mount.root).resolve()  # type: ignore[arg-type]
        if state is not None and state != root and state.is_relative_to(root):
            found.append(_logical(mount.prefix, root, state))
        for path, family in files:
            if path.is_relative_to(root):
                found += _forms(_logical(mount.prefix, root, path), family)
    return found


def _ships(audit: AuditLog | None) -> bool:
    from stockade.engine.observe.audit_store import AuditStore  # (it imports what this does)

    return isinstance(audit, AuditStore)


def _forms(escaped: str, family: bool) -> list[str]:
    # the log's rotated files and seal are named after it: audit.jsonl.000001, audit.jsonl.seal
    return [escaped, f"{escaped}.*"] if family else [escaped]


def _logical(prefix: str, root: Path, host: Path) -> str:
    relative = host.relative_to(root).as_posix()
    if relative == ".":
        return escape(prefix)
    return escape(f"{prefix.rstrip('/')}/{relative}")
