"""An audit log's seal and its files: the seal keeps the chain's head apart from the log (see
``audit_log``), so that a log cut short, emptied, deleted or rewritten does not pass for whole;
the files are the live log and the ones rotated out before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from stockade.engine.observe._audit_tail import AuditError

HASH_TAIL = re.compile(rb',"hash":"([0-9a-f]{64})"\}$')
ROTATED = re.compile(r"\.(\d{6})$")
SEAL_SUFFIX = ".seal"
SEAL_SIZE = 160  # bytes with the newline: a seal is padded to this, so it is rewritten whole
_SEAL = re.compile(rb'^\{"stockade_audit_seal":1,"seq":(\d+),"hash":"([0-9a-f]{64})"\} *\n?$')


@dataclass(frozen=True, slots=True)
class Head:
    """Where a chain stands: its last record's number and hash."""

    seq: int
    hash: str


def seal_path(log: Path) -> Path:
    """Where the seal of ``log`` is kept unless told otherwise: beside it, ``<name>.seal``."""
    return log.with_name(log.name + SEAL_SUFFIX)


def read_seal(path: Path) -> Head | None:
    """The head a seal names, or None when there is no seal (or an empty one: a writer opens
    its seal before it first writes it). Raises AuditError for a seal that cannot be read or is
    not one."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AuditError(f"cannot read the audit log's seal {path}: {exc.strerror}") from exc
    if not data:
        return None
    found = _SEAL.match(data)
    if found is None:
        raise AuditError(
            f"the audit log's seal {path} is damaged: it does not hold a Stockade seal, so "
            "something other than Stockade changed it"
        )
    return Head(int(found.group(1)), found.group(2).decode())


def missing(have: int, sealed: int) -> str:
    """``records 5..9 are missing`` (or ``record 5 is missing``)."""
    if sealed == have + 1:
        return f"record {sealed} is missing"
    return f"records {have + 1}..{sealed} are missing"


def check_seal(path: Path, seal: Path, head: Head, partial: bytes | None) -> None:
    """Raise AuditError when the log at ``path``, whose chain ends at ``head``, does not reach
    what its seal says was written (truncated, emptied, deleted) or is not what was sealed
    (rewritten). A seal behind the log is no alarm when the sealed record is still there (a
    crash between the two writes); nor is the sealed last record half on disk (a machine
    crash, where nothing was fsynced)."""
    sealed = read_seal(seal)
    if sealed is None or sealed == head:
        return
    what = "deleted or emptied" if head.seq == 0 else "truncated"
    keep = (
        "It is left as it is: check it with `stockade audit verify`, move the log and its seal "
        "aside to keep them, and start again"
    )
    if sealed.seq > head.seq:
        if partial is not None and sealed.seq == head.seq + 1:
            return
        raise AuditError(
            f"the audit log {path} ends at record {head.seq}, but its seal {seal} says "
            f"{sealed.seq} were written: {missing(head.seq, sealed.seq)} (the log was {what}). "
            + keep
        )
    if sealed.seq == head.seq or hash_at(path, sealed.seq) != sealed.hash:
        raise AuditError(
            f"record {sealed.seq} of the audit log {path} is not the record its seal {seal} "
            f"names: the log was rewritten. {keep}"
        )


def hash_at(path: Path, seq: int) -> str | None:
    """The hash of record ``seq`` of the log (its rotated files too), or None if it has none."""
    prefix = b'{"seq":%d,' % seq
    for current in [*rotated_files(path), path]:
        if not current.exists():
            continue
        with current.open("rb") as handle:
            for line in handle:
                if line.startswith(prefix):
                    found = HASH_TAIL.search(line.rstrip(b"\n"))
                    return found.group(1).decode() if found else None
    return None


def rotated_files(path: Path) -> list[Path]:
    """The rotated files of ``path``, oldest first."""
    if not path.parent.exists():
        return []
    found = [p for p in path.parent.glob(f"{path.name}.*") if ROTATED.search(p.name)]
    return sorted(found, key=lambda p: p.name)
