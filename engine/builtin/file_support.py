"""What the file tools share: their limits, lines and text, hashes, and the judged walk.

A walk (`walk`) goes through a guarded view of the virtual filesystem, which judges every
folder it lists and every entry it reaches at the moment of use; what the policy refuses is
counted in a `LeftOut` and said at the end of a result, never named:

    left_out = LeftOut()
    files = list(walk(fs, "/workspace", left_out))
    text = left_out.after("\\n".join(files))   # "... [2 entries left out: the policy ...]"
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from wcmatch import glob as wcglob

from stockade.engine.content import FileReport, ToolOutput
from stockade.sandbox import PathDeniedError, SandboxError, VirtualFS

MAX_READ_CHARS = 200_000
MAX_LIST = 1_000
MAX_WALK = 20_000
GLOB_FLAGS = wcglob.GLOBSTAR | wcglob.DOTGLOB | wcglob.BRACE


def sha(data: bytes | None) -> str | None:
    """The sha256 of ``data`` in hex (None for no data)."""
    return None if data is None else hashlib.sha256(data).hexdigest()


def lines_of(text: str) -> list[str]:
    """Lines split at "\\n" only, each keeping its line break. (``str.splitlines`` also breaks
    at form feeds and Unicode separators, which would put a line number inside a line.)"""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def cut(text: str, hint: str) -> tuple[str, bool]:
    """``text`` bounded to `MAX_READ_CHARS`, with a line saying how much more there was and
    ``hint`` (what to do to see it); and whether it was cut."""
    if len(text) <= MAX_READ_CHARS:
        return text, False
    more = len(text) - MAX_READ_CHARS
    return f"{text[:MAX_READ_CHARS]}\n[... {more} more characters: {hint}]", True


def current(fs: VirtualFS, path: str, *, for_hash: bool = False) -> bytes | None:
    """The file's content before a change; None if it is absent (or too big to read, which must
    not stop it being replaced by something smaller). ``for_hash``: only its sha256 is wanted,
    so a file the call may not read has none (the change itself is judged as what it is)."""
    try:
        if fs.stat(path).size > fs.max_file_bytes:
            return None
        return fs.read_bytes(path)
    except FileNotFoundError:
        return None
    except PathDeniedError:
        if for_hash:
            return None
        raise


def exists(fs: VirtualFS, path: str) -> bool:
    """Whether something is at ``path`` (for a file the call may not read: yes)."""
    try:
        return fs.exists(path)
    except PathDeniedError:
        return True


def changed(path: str, before: bytes | None, after: bytes, message: str) -> ToolOutput:
    """The result of a change: ``message``, and the report of the file's size and hashes."""
    return ToolOutput(message, file=FileReport(path, len(after), sha(before), sha(after)))


@dataclass(slots=True)
class LeftOut:
    """What a walk left out because the policy does not let the call read it: how many entries,
    and the policy's reasons (rules and their words, never a name or a file's content)."""

    count: int = 0
    reasons: set[str] = field(default_factory=set)

    def add(self, refusal: PathDeniedError) -> None:
        self.count += 1
        self.reasons.add(refusal.reason)

    def text(self) -> str:
        """The line a result ends with ("" when nothing was left out)."""
        if not self.count:
            return ""
        one = self.count == 1
        entries = f"{self.count} entr{'y' if one else 'ies'}"
        why = "; ".join(sorted(self.reasons)[:3]) + ("; ..." if len(self.reasons) > 3 else "")
        return (
            f"[{entries} left out: the policy does not let this call read "
            f"{'it' if one else 'them'} ({why})]"
        )

    def metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """``metadata`` with the count and the reasons, when anything was left out."""
        if self.count:
            metadata["left_out"] = self.count
            metadata["left_out_reasons"] = sorted(self.reasons)
        return metadata

    def after(self, text: str) -> str:
        """``text`` followed by the line saying what was left out."""
        line = self.text()
        return f"{text}\n{line}" if line else text


def walk(fs: VirtualFS, root: str, left_out: LeftOut) -> Iterator[str]:
    """Files under ``root`` (logical paths), without following links out or in circles. Every
    folder listed and every entry reached is judged as a read (through a guarded view, where a
    link leads); what is refused is counted in ``left_out`` and not gone into."""
    seen: set[str] = set()
    stack = [root]
    visited = 0
    while stack:
        folder = stack.pop()
        for name in entries_once(fs, folder, root, seen, left_out):
            visited += 1
            if visited > MAX_WALK:
                raise ValueError(
                    f"more than {MAX_WALK} entries under {root}; search a smaller folder"
                )
            child = f"{folder.rstrip('/')}/{name}"
            kind = kind_of(fs, child, left_out)
            if kind == "dir":
                stack.append(child)
            elif kind == "file":
                yield child


def entries_once(
    fs: VirtualFS, folder: str, root: str, seen: set[str], left_out: LeftOut
) -> list[str]:
    """The names in ``folder``, unless a walk that has been in the folders of ``seen`` was
    there already (a link back up) or it is out of reach: then none. A folder the policy
    refuses is counted in ``left_out``, except ``root`` itself, whose refusal is raised (the
    folder asked for: a refusal, not a gap in the results)."""
    try:
        canonical = fs.canonical(folder)
    except SandboxError:
        return []
    if canonical in seen:
        return []
    seen.add(canonical)
    try:
        return fs.list_dir(folder)
    except PathDeniedError as exc:
        if folder == root:
            raise
        left_out.add(exc)
    except SandboxError:
        pass
    return []


def kind_of(fs: VirtualFS, path: str, left_out: LeftOut) -> str | None:
    """What ``path`` is (``file``, ``dir`` ...), judged as a read where a link leads; None when
    the policy refuses it (counted in ``left_out``: not even its name is shown) or it is a link
    out of the mount (skipped, never followed)."""
    try:
        return fs.stat(path).kind
    except PathDeniedError as exc:
        left_out.add(exc)
    except SandboxError:
        pass
    return None
