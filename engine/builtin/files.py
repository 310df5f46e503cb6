"""The file tools: everything an agent does to files, through the virtual filesystem.

Each tool receives the engine's `VirtualFS` by injection (``Engine(fs=...)``) and never opens a
host path. Paths are logical (``/workspace/...``, ``/userinput/...``; relative ones are under
``/workspace``) and declared to the policy with how they are used, so a call is judged on its
canonical paths before it runs. Under the engine the file system a tool gets is a guarded view
that judges again, at the moment of use, what each operation really reaches: the walking tools
(grep, glob_files, list_directory) leave out what the policy would not let the call read, and
say how many entries and why, never what they hold. Results say how many bytes moved and, for
changes, the sha256 of the file before and after.

    toolkit = Toolkit()
    add_file_tools(toolkit)
    engine = Engine(toolkit, fs=VirtualFS([Mount("/workspace", "project")]))
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field
from wcmatch import glob as wcglob

from stockade.engine.content import FileReport, ToolOutput
from stockade.engine.tools import RegisteredTool, tool
from stockade.engine.tools.catalog import BASIC, ToolCatalog
from stockade.sandbox import NotTextError, PathDeniedError, SandboxError, VirtualFS

MAX_READ_CHARS = 200_000
MAX_LIST = 1_000
MAX_WALK = 20_000
MAX_GREP_MATCHES = 200
MAX_GREP_LINE = 2_000
_GLOB_FLAGS = wcglob.GLOBSTAR | wcglob.DOTGLOB | wcglob.BRACE


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _current(fs: VirtualFS, path: str, *, for_hash: bool = False) -> bytes | None:
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


@dataclass(slots=True)
class _LeftOut:
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


def _lines(text: str) -> list[str]:
    """Lines split at "\n" only, each keeping its line break. (``str.splitlines`` also breaks
    at form feeds and Unicode separators, which would put a line number inside a line.)"""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _changed(path: str, before: bytes | None, after: bytes, message: str) -> ToolOutput:
    return ToolOutput(message, file=FileReport(path, len(after), _sha(before), _sha(after)))


@tool(read_only=True, paths={"path": "read"})
def read_text_file(
    path: str,
    fs: VirtualFS,
    start_line: Annotated[int | None, Field(ge=1)] = None,
    end_line: Annotated[int | None, Field(ge=1)] = None,
) -> ToolOutput:
    """Read a UTF-8 text file, whole or a range of lines.

    Args:
        path: The file, e.g. /workspace/src/app.py (relative paths are under /workspace).
        start_line: First line to return (1-based); default the first.
        end_line: Last line to return (inclusive); default the last.
    """
    data = fs.read_bytes(path)
    text = _decode(data, fs.canonical(path))
    lines = _lines(text)
    first = (start_line or 1) - 1
    last = end_line if end_line is not None else len(lines)
    if end_line is not None and start_line is not None and end_line < start_line:
        raise ValueError(f"end_line {end_line} is before start_line {start_line}")
    if first >= len(lines) and first > 0:
        raise ValueError(f"start_line {first + 1} is past the end: the file has {len(lines)} lines")
    chosen = "".join(lines[first:last])
    metadata: dict[str, Any] = {
        "path": fs.canonical(path),
        "bytes": len(data),
        "lines": len(lines),
        "sha256": _sha(data),
    }
    if len(chosen) > MAX_READ_CHARS:
        metadata["truncated"] = True
        chosen = (
            chosen[:MAX_READ_CHARS]
            + f"\n[... {len(chosen) - MAX_READ_CHARS} more characters: read a line range]"
        )
    return ToolOutput(chosen, metadata)


def _decode(data: bytes, path: str) -> str:
    if b"\x00" in data[:8192]:
        raise NotTextError(f"{path} looks binary (it contains NUL bytes); it is not text", path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotTextError(
            f"{path} is not UTF-8 text (byte {exc.start} cannot be decoded)", path
        ) from None


@tool(paths={"path": "write"}, idempotent=True)
def write_file(path: str, content: str, fs: VirtualFS) -> ToolOutput:
    """Create a file, or replace its content (missing folders are created).

    Args:
        path: The file to write, e.g. /workspace/notes.md.
        content: The complete new content.
    """
    existed = _exists(fs, path)
    before = _current(fs, path, for_hash=True)
    after = content.encode("utf-8")
    fs.write_bytes(path, after)
    where = fs.canonical(path)
    verb = "replaced" if existed else "created"
    return _changed(where, before, after, f"{verb} {where} ({len(after)} bytes)")


@tool(paths={"path": "write"})
def edit_file(
    path: str, old_text: str, new_text: str, fs: VirtualFS, replace_all: bool = False
) -> ToolOutput:
    """Replace an exact piece of text in a file.

    Args:
        path: The file to edit.
        old_text: The exact text to find (whitespace and line breaks included).
        new_text: What to put in its place.
        replace_all: Replace every occurrence; otherwise old_text must occur exactly once.
    """
    if not old_text:
        raise ValueError("old_text is empty; give the exact text to replace")
    before = fs.read_bytes(path)
    text = _decode(before, fs.canonical(path))
    count = text.count(old_text)
    if count == 0:
        raise ValueError(
            f"old_text was not found in {fs.canonical(path)}; read the file and copy the text "
            "exactly, whitespace included"
        )
    if count > 1 and not replace_all:
        raise ValueError(
            f"old_text occurs {count} times in {fs.canonical(path)}; include more surrounding "
            "text to make it unique, or set replace_all"
        )
    after = text.replace(old_text, new_text).encode("utf-8")
    fs.write_bytes(path, after)
    changed = count if replace_all else 1
    return _changed(
        fs.canonical(path),
        before,
        after,
        f"replaced {changed} occurrence{'s' if changed != 1 else ''} in {fs.canonical(path)}",
    )


@tool(paths={"path": "write"})
def insert_text(path: str, line: int, text: str, fs: VirtualFS) -> ToolOutput:
    """Insert text before a line of a file (the file is created if missing and line is 1).

    Args:
        path: The file.
        line: Insert before this line (1-based); one past the last line, or -1, appends.
        text: The text to insert; a line break is added at its end if it has none.
    """
    before = _current(fs, path)
    current = "" if before is None else _decode(before, fs.canonical(path))
    lines = _lines(current)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    position = len(lines) if line == -1 else line - 1
    if not 0 <= position <= len(lines):
        raise ValueError(
            f"line {line} is outside the file, which has {len(lines)} lines; use 1 to "
            f"{len(lines) + 1}, or -1 to append"
        )
    lines.insert(position, text if text.endswith("\n") else text + "\n")
    after = "".join(lines).encode("utf-8")
    fs.write_bytes(path, after)
    return _changed(
        fs.canonical(path),
        before,
        after,
        f"inserted at line {position + 1} of {fs.canonical(path)}",
    )


@tool(paths={"path": "delete"}, destructive=True)
def delete_file(path: str, fs: VirtualFS) -> ToolOutput:
    """Delete a file (or an empty folder).

    Args:
        path: What to delete.
    """
    canonical = fs.canonical(path, follow_last=False)  # a link is deleted as itself
    try:
        info = fs.lstat(path)
    except PathDeniedError:  # the delete is judged as a delete, below
        size, before = 0, None
    else:
        size = info.size
        before = _current(fs, path, for_hash=True) if info.kind == "file" else None
    fs.delete(path)
    return ToolOutput(f"deleted {canonical}", file=FileReport(canonical, size, _sha(before), None))


@tool(paths={"source": "delete", "destination": "write"})
def move_file(source: str, destination: str, fs: VirtualFS, overwrite: bool = False) -> ToolOutput:
    """Move or rename a file or folder.

    Args:
        source: What to move.
        destination: Where to; missing folders are created.
        overwrite: Replace an existing destination; otherwise that is an error.
    """
    src = fs.canonical(source, follow_last=False)  # a link moves as itself
    fs.move(source, destination, overwrite=overwrite)
    dst = fs.canonical(destination, follow_last=False)
    return ToolOutput(f"moved {src} to {dst}", {"source": src, "destination": dst})


@tool(read_only=True, paths={"path": "read"})
def list_directory(fs: VirtualFS, path: str = "/workspace") -> ToolOutput:
    """List a folder: each entry with its kind and size.

    Args:
        path: The folder; default /workspace.
    """
    folder = fs.canonical(path)
    names = fs.list_dir(path)
    lines = []
    left_out = _LeftOut()
    for name in names[:MAX_LIST]:
        child = f"{folder.rstrip('/')}/{name}"
        try:
            info = fs.stat(child)  # judged as a read, where a link leads
            lines.append(f"{name}/" if info.kind == "dir" else f"{name}  ({info.size} bytes)")
        except PathDeniedError as exc:  # not even its name is shown
            left_out.add(exc)
        except SandboxError as exc:  # a link out of the mount: show it, never follow it
            lines.append(f"{name}  (unavailable: {type(exc).__name__})")
    if len(names) > MAX_LIST:
        lines.append(f"[... {len(names) - MAX_LIST} more entries]")
    empty = "(no entry shown)" if left_out.count else "(empty folder)"
    text = left_out.after("\n".join(lines) or empty)
    return ToolOutput(
        text, left_out.metadata({"path": folder, "entries": len(names) - left_out.count})
    )


def _exists(fs: VirtualFS, path: str) -> bool:
    """Whether something is at ``path`` (for a file the call may not read: yes)."""
    try:
        return fs.exists(path)
    except PathDeniedError:
        return True


def _walk(fs: VirtualFS, root: str, left_out: _LeftOut) -> Iterator[str]:
    """Files under ``root`` (logical paths), without following links out or in circles. Every
    folder listed and every entry reached is judged as a read (through a guarded view, where a
    link leads); what is refused is counted in ``left_out`` and not gone into."""
    seen: set[str] = set()
    stack = [root]
    visited = 0
    while stack:
        folder = stack.pop()
        try:
            canonical = fs.canonical(folder)
        except SandboxError:
            continue
        if canonical in seen:
            continue
        seen.add(canonical)
        try:
            names = fs.list_dir(folder)
        except PathDeniedError as exc:
            if folder == root:
                raise  # the folder asked for: a refusal, not a gap in the results
            left_out.add(exc)
            continue
        except SandboxError:
            continue
        for name in names:
            visited += 1
            if visited > MAX_WALK:
                raise ValueError(
                    f"more than {MAX_WALK} entries under {root}; search a smaller folder"
                )
            child = f"{folder.rstrip('/')}/{name}"
            try:
                kind = fs.stat(child).kind
            except PathDeniedError as exc:
                left_out.add(exc)
                continue
            except SandboxError:
                continue  # links out of the mount are skipped, never followed
            if kind == "dir":
                stack.append(child)
            elif kind == "file":
                yield child


@tool(read_only=True, paths={"path": "read"})
def glob_files(pattern: str, fs: VirtualFS, path: str = "/workspace") -> ToolOutput:
    """Find files by name pattern.

    Args:
        pattern: A glob relative to path, e.g. "**/*.py" or "src/*.{js,ts}".
        path: The folder to search; default /workspace.
    """
    root = fs.canonical(path)
    found = []
    left_out = _LeftOut()
    for file in _walk(fs, root, left_out):
        relative = file[len(root.rstrip("/")) + 1 :]
        if wcglob.globmatch(relative, pattern, flags=_GLOB_FLAGS):
            found.append(file)
            if len(found) > MAX_LIST:
                break
    found.sort()
    shown = found[:MAX_LIST]
    more = "\n[... more matches: narrow the pattern]" if len(found) > MAX_LIST else ""
    text = "\n".join(shown) + more if shown else f"no file under {root} matches {pattern!r}"
    return ToolOutput(
        left_out.after(text), left_out.metadata({"path": root, "matches": len(shown)})
    )


@tool(read_only=True, paths={"path": "read"})
def grep(
    pattern: str,
    fs: VirtualFS,
    path: str = "/workspace",
    include: str = "**/*",
    ignore_case: bool = False,
    max_matches: Annotated[int, Field(ge=1, le=MAX_GREP_MATCHES)] = 50,
) -> ToolOutput:
    """Search text files for a regular expression.

    Args:
        pattern: A Python regular expression.
        path: The folder (or file) to search; default /workspace.
        include: Only files whose path relative to the folder matches this glob.
        ignore_case: Match regardless of case.
        max_matches: Stop after this many matching lines.
    """
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ValueError(f"pattern is not a valid regular expression: {exc}") from None
    root = fs.canonical(path)
    left_out = _LeftOut()
    files: Callable[[], Iterator[str]]
    if fs.stat(root).kind == "file":
        files = lambda: iter([root])  # noqa: E731
        base = root.rsplit("/", 1)[0]
    else:
        files = lambda: _walk(fs, root, left_out)  # noqa: E731
        base = root
    matches: list[str] = []
    skipped = 0
    for file in files():
        relative = file[len(base.rstrip("/")) + 1 :]
        if not wcglob.globmatch(relative, include, flags=_GLOB_FLAGS):
            continue
        try:
            text = _decode(fs.read_bytes(file), file)
        except PathDeniedError as exc:  # judged where it really is: a link, at its target
            left_out.add(exc)
            continue
        except (NotTextError, SandboxError):
            skipped += 1
            continue
        for number, line in enumerate(text.split("\n"), 1):
            if len(line) > MAX_GREP_LINE:
                continue  # huge lines (minified code, data) make regexes slow and say little
            if regex.search(line):
                matches.append(f"{file}:{number}: {line.strip()[:300]}")
                if len(matches) > max_matches:  # one more than shown: proof that some were cut
                    break
        if len(matches) > max_matches:
            break
    cut = len(matches) > max_matches
    matches = matches[:max_matches]
    text = "\n".join(matches) if matches else f"no line under {root} matches {pattern!r}"
    if cut:
        text += f"\n[stopped at {max_matches} matches]"
    metadata = {"path": root, "matches": len(matches), "skipped_files": skipped}
    return ToolOutput(left_out.after(text), left_out.metadata(metadata))


@tool(read_only=True, paths={"path": "read"})
def file_info(path: str, fs: VirtualFS) -> ToolOutput:
    """Kind, size, modification time and sha256 of a file or folder.

    Args:
        path: The file or folder.
    """
    info = fs.stat(path)
    canonical = fs.canonical(path)
    metadata: dict[str, Any] = {
        "path": canonical,
        "kind": info.kind,
        "bytes": info.size,
        "modified": info.modified,
        "mode": oct(info.mode),
    }
    if info.kind == "file":
        metadata["sha256"] = _sha(fs.read_bytes(path))
    lines = [f"{key}: {value}" for key, value in metadata.items()]
    return ToolOutput("\n".join(lines), metadata)


FILE_TOOLS: tuple[Callable[..., Any], ...] = (
    read_text_file,
    write_file,
    edit_file,
    insert_text,
    delete_file,
    move_file,
    list_directory,
    glob_files,
    grep,
    file_info,
)


def add_file_tools(toolkit: ToolCatalog, *, group: str = BASIC) -> list[RegisteredTool]:
    """Register every file tool in ``toolkit`` (the engine must be given a VirtualFS)."""
    return [toolkit.add(fn, group=group) for fn in FILE_TOOLS]
