"""Reading an audit log back: `verify_audit` checks every record's seal and the chain between
them, across rotated files, and holds the log to its seal (how far it went: a cut-off end or a
deleted log shows); `read_audit` yields the records that pass filters."""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from stockade.engine.observe._audit_seal import (
    HASH_TAIL,
    Head,
    missing,
    read_seal,
    rotated_files,
    seal_path,
)
from stockade.engine.observe._audit_tail import GENESIS, AuditError


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What `verify_audit` found. ``ok`` when every record is intact and chained, and the log
    reaches its seal; otherwise ``problem`` says what and ``bad_record`` which (its line,
    counted across files from 1; for a cut-off end, the first record missing) and
    ``bad_file``. A half-written last line is reported in ``partial_tail`` and tolerated.
    ``seal`` is the seal the log was held to (None: none was found), ``sealed`` the number of
    records it names."""

    ok: bool
    records: int
    files: tuple[str, ...]
    problem: str | None = None
    bad_record: int | None = None
    bad_file: str | None = None
    partial_tail: bool = False
    seal: str | None = None
    sealed: int | None = None

    def __str__(self) -> str:
        if self.ok:
            tail = "; the last line was half-written (a crash) and is ignored" * self.partial_tail
            unsealed = "; it has no seal, so a cut-off end would not show" * (self.seal is None)
            return (
                f"audit log intact: {self.records} records in {len(self.files)} file(s)"
                f"{tail}{unsealed}"
            )
        return f"audit log NOT intact: {self.problem}"


def verify_audit(path: str | Path, *, seal: str | Path | None = None) -> AuditReport:
    """Check every record's own hash and the chain between them, across rotated files, and that
    the log reaches its seal (``<path>.seal`` unless ``seal`` names another file): a log cut
    short, emptied or deleted is not intact."""
    return verify_log(Path(path), Path(seal) if seal is not None else None, None)


def verify_log(path: Path, seal: Path | None, head: Head | None) -> AuditReport:
    """`verify_audit`, also holding the log to ``head``, the chain's head as the process that
    writes it knows it (`AuditLog.verify`)."""
    if seal is not None and not seal.exists():  # named, so expected: a typo, or it was deleted
        absent = f"the seal {seal} given for {path} does not exist"
        return AuditReport(False, 0, (str(path),), absent, None, str(seal), seal=str(seal))
    seal = seal if seal is not None else seal_path(path)
    files = [*rotated_files(path), path] if path.exists() else rotated_files(path)
    names = tuple(str(f) for f in files)
    try:
        sealed = read_seal(seal)
    except AuditError as exc:
        return AuditReport(False, 0, names, str(exc), None, str(seal), seal=str(seal))
    held = [(f"its seal {seal}", sealed)] if sealed is not None else []
    if head is not None:
        held.append(("the head its writer holds in memory", head))
    sealed_name = str(seal) if sealed is not None else None
    sealed_seq = sealed.seq if sealed is not None else None
    if not files:
        if held:
            what, at = max(held, key=lambda h: h[1].seq)
            gone = (
                f"no audit log at {path}, but {what} says it held {at.seq} records: it was deleted"
            )
            return AuditReport(
                False, 0, (), gone, 1, str(path), seal=sealed_name, sealed=sealed_seq
            )
        return AuditReport(False, 0, (), f"no audit log at {path}", None, str(path))
    prev = GENESIS
    count = 0
    partial = False
    hashes = {h.seq: "" for _, h in held}  # the hash each sealed record turned out to have
    for index, current in enumerate(files):
        try:
            data = current.read_bytes()
        except OSError as exc:  # a folder, or a file this user cannot read
            unreadable = f"cannot read {current}: {exc.strerror or exc}"
            return AuditReport(False, count, names, unreadable, None, str(current))
        lines = data.split(b"\n")
        last_file = index == len(files) - 1
        for number, line in enumerate(lines, start=1):
            if number == len(lines):
                if line and last_file:  # no newline: a half-written last record
                    partial = True
                elif line:
                    return _bad(names, count + 1, current, "a half-written record inside")
                break
            count += 1
            problem = _check(line, prev, count)
            if problem is not None:
                return _bad(names, count, current, problem)
            prev = HASH_TAIL.search(line).group(1).decode()  # type: ignore[union-attr]
            if count in hashes:
                hashes[count] = prev
    for what, at in held:
        if at.seq > count and not (partial and at.seq == count + 1):
            cut = "deleted or emptied" if count == 0 else "truncated"
            problem = (
                f"{missing(count, at.seq)}: the log was {cut} (it ends at record {count}, and "
                f"{what} says {at.seq} were written)"
            )
            return _bad(names, count + 1, path, problem, records=count, seal=sealed_name,
                        sealed=sealed_seq)  # fmt: skip
        if at.seq <= count and at.seq > 0 and hashes[at.seq] != at.hash:
            problem = f"it is not the record {what} names: the log was rewritten"
            return _bad(names, at.seq, path, problem, seal=sealed_name, sealed=sealed_seq)
    return AuditReport(
        True, count, names, partial_tail=partial, seal=sealed_name, sealed=sealed_seq
    )


def _check(line: bytes, prev: str, seq: int) -> str | None:
    tail = HASH_TAIL.search(line)
    if tail is None:
        return "it is not a Stockade audit record (no hash at its end)"
    body = line[: tail.start()] + b"}"
    if hashlib.sha256(body).hexdigest() != tail.group(1).decode():
        return "its content does not match its hash: it was edited"
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return "it is not valid JSON"
    if record.get("prev") != prev:
        return (
            "it does not follow the record before it (its 'prev' is not that record's hash): "
            "records were deleted, inserted or reordered before it"
        )
    if record.get("seq") != seq:
        return f"its number is {record.get('seq')!r} where {seq} was due: records are missing"
    return None


def _bad(
    files: tuple[str, ...],
    record: int,
    current: Path,
    problem: str,
    *,
    records: int | None = None,
    seal: str | None = None,
    sealed: int | None = None,
) -> AuditReport:
    where = f"record {record} (in {current}): " if records is None else ""
    return AuditReport(
        False,
        record - 1 if records is None else records,
        files,
        f"{where}{problem}",
        record,
        str(current),
        seal=seal,
        sealed=sealed,
    )


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """What `read_audit` keeps: tool and path are shell-style globs, the others exact."""

    tool: str | None = None
    kind: str | None = None
    effect: str | None = None
    status: str | None = None
    path: str | None = None
    call_id: str | None = None
    since: float | None = None
    until: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def keeps(self, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` passes every condition given."""
        if self.tool is not None and not fnmatch.fnmatchcase(str(record.get("tool")), self.tool):
            return False
        for key in ("kind", "effect", "status", "call_id"):
            wanted = getattr(self, key)
            if wanted is not None and record.get(key) != wanted:
                return False
        moment = record.get("time")
        if self.since is not None and (not isinstance(moment, float) or moment < self.since):
            return False
        if self.until is not None and (not isinstance(moment, float) or moment > self.until):
            return False
        if self.path is not None:
            paths = [p[0] for p in record.get("paths") or ()] + [record.get("path") or ""]
            if not any(fnmatch.fnmatchcase(str(p), self.path) for p in paths if p):
                return False
        return all(record.get(k) == v for k, v in self.extra.items())


def read_audit(
    path: str | Path,
    *,
    tool: str | None = None,
    kind: str | None = None,
    effect: str | None = None,
    status: str | None = None,
    path_glob: str | None = None,
    call_id: str | None = None,
    since: float | None = None,
    until: float | None = None,
    strict: bool = False,
) -> Iterator[dict[str, Any]]:
    """The records of the log (rotated files first), oldest first, that pass the filters.
    A half-written last line is skipped. Does not verify: use `verify_audit` for that. A line
    that is not JSON is skipped; with ``strict``, a line that is not an audit record (not JSON,
    or no ``seq``, ``kind`` and ``hash``) raises `AuditError` naming the file and the line, so
    that a file that is no audit log says so instead of reading as an empty one."""
    wanted = AuditFilter(tool, kind, effect, status, path_glob, call_id, since, until)
    path = Path(path)
    if not path.exists() and not rotated_files(path):
        raise AuditError(f"no audit log at {path}; check the path")
    for current in [*rotated_files(path), path]:
        if not current.exists():
            continue
        with current.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.endswith(b"\n"):
                    # a half-written last record (a writer's crash, or one writing now)
                    if strict and not line.startswith(b"{"):
                        raise _not_a_record(current, number, "its text is not JSON")
                    break
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    if strict:
                        raise _not_a_record(current, number, "its text is not JSON") from None
                    continue
                if strict and not _is_record(record):
                    raise _not_a_record(current, number, "no seq, kind and hash")
                if isinstance(record, dict) and wanted.keeps(record):
                    yield record


def _is_record(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("seq"), int)
        and isinstance(value.get("kind"), str)
        and isinstance(value.get("hash"), str)
    )


def _not_a_record(path: Path, line: int, why: str) -> AuditError:
    return AuditError(
        f"{path} line {line} is not an audit record ({why}): is it a Stockade audit log? "
        "Check the path (`stockade audit verify` says more)"
    )


__all__ = ["AuditFilter", "AuditReport", "read_audit", "verify_audit", "verify_log"]
