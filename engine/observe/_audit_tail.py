"""Where an audit log's chain stands at the end of its file, and what is torn off after it.

A crash can leave the end of the file in two states a write-ahead log knows: a record cut off
part way (a process killed mid-write, a disk that filled), or a tail of zeros (a machine that
lost power after the file grew but before its data reached the disk). Either is a *torn tail*:
bytes after the last complete line. It is cut off when the log is opened again and kept, as
text, in a ``recovered`` record, so the chain goes on and nothing is hidden. What is not torn
tail is not touched: a last complete line that is not a record means the file is not a
Stockade log (or was damaged where no crash reaches), and the log is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from stockade.errors import StockadeError

GENESIS = "0" * 64
_RECORD_START = b'{"seq":'
_READ = 1 << 20  # bytes read from the end: far more than any one line


class AuditError(StockadeError):
    """The audit log cannot be opened or written; the message names the file and what to do."""


@dataclass(frozen=True, slots=True)
class Tail:
    """The end of a chain: its last record's number and hash, and the torn bytes after it in
    the newest file (None: the file ends cleanly)."""

    seq: int
    hash: str
    torn: bytes | None


def read_tail(files: list[Path]) -> Tail:
    """Where the chain of ``files`` (oldest first; the last is the live log) ends. Raises
    AuditError for a file that is not a Stockade audit log."""
    torn: bytes | None = None
    for current in reversed(files):
        if not current.exists():
            continue
        data = _read_end(current)
        if current == files[-1] and data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            torn, data = data[cut:], data[:cut]
            if not data and not _could_be_torn_record(torn):
                raise _not_a_log(current)
        lines = data.splitlines()
        if not lines:
            continue  # nothing complete here (new, or only a torn line): look further back
        try:
            record = orjson.loads(lines[-1])
            return Tail(int(record["seq"]), str(record["hash"]), torn)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise _not_a_log(current) from None
    return Tail(0, GENESIS, torn)


def torn_record(torn: bytes) -> dict[str, object]:
    """The fields of the ``recovered`` record that keeps a torn tail: its size, and its text
    (zeros and undecodable bytes shown as escapes; at most 4 KiB of it)."""
    zeros = torn.count(0) == len(torn)
    shown = torn[:4096].decode("utf-8", "backslashreplace").replace("\x00", "\\x00")
    return {"torn_bytes": len(torn), "all_zero": zeros, "partial_line": shown}


def _could_be_torn_record(torn: bytes) -> bool:
    """Whether bytes alone in a file could be what a crash left of Stockade's first record: the
    start of one (or of its opening), or zeros."""
    head = torn[: len(_RECORD_START)]
    return _RECORD_START.startswith(head) or torn.count(0) == len(torn)


def _not_a_log(path: Path) -> AuditError:
    return AuditError(
        f"{path} does not end in a Stockade audit record; it was not written by Stockade or "
        "was damaged: run `stockade audit verify` on it, and use another path"
    )


def _read_end(path: Path) -> bytes:
    """The end of ``path``, from before its last complete line (however long the torn tail
    after it is): read backwards in growing pieces until two line ends are in (or the start)."""
    with path.open("rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        size = _READ
        while True:
            start = max(0, end - size)
            handle.seek(start)
            data = handle.read()
            if start == 0 or data.count(b"\n") >= 2:
                return data
            size *= 4
