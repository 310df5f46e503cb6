"""The file tools: everything an agent does to files, through the virtual filesystem.

Each tool receives the engine's `VirtualFS` by injection (``Engine(fs=...)``) and never opens a
host path. Paths are logical (``/workspace/...``, ``/userinput/...``; relative ones are under
``/workspace``) and declared to the policy with how they are used, so a call is judged on its
canonical paths before it runs. Under the engine the file system a tool gets is a guarded view
that judges again, at the moment of use, what each operation really reaches: the walking tools
(grep, glob_files, list_directory, directory_tree) leave out what the policy would not let
the call read, and say how many entries and why, never what they hold. Results say how many
bytes moved and, for changes, the sha256 of the file before and after.

This module holds the tools that write, move, delete, list and search; the reading tools are
in `file_reads`, `edit_file` in `edits`, the folder tools in `folders`; `add_file_tools`
registers them all.

    toolkit = Toolkit()
    add_file_tools(toolkit)
    engine = Engine(toolkit, fs=VirtualFS([Mount("/workspace", "project")]))
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Annotated, Any

from pydantic import Field
from wcmatch import glob as wcglob

from stockade.engine.builtin.edits import edit_file
from stockade.engine.builtin.file_reads import (
    read_media_file,
    read_multiple_files,
    read_text_file,
)
from stockade.engine.builtin.file_support import (
    GLOB_FLAGS,
    MAX_LIST,
    MAX_READ_CHARS,
    LeftOut,
    changed,
    current,
    exists,
    lines_of,
    sha,
    walk,
)
from stockade.engine.builtin.folders import (
    create_directory,
    directory_tree,
    list_allowed_directories,
)
from stockade.engine.content import FileReport, ToolOutput
from stockade.engine.tools import RegisteredTool, tool
from stockade.engine.tools.catalog import BASIC, ToolCatalog
from stockade.sandbox import NotTextError, PathDeniedError, SandboxError, VirtualFS
from stockade.sandbox.text import decode_text

MAX_GREP_MATCHES = 200
MAX_GREP_LINE = 2_000


@tool(paths={"path": "write"}, idempotent=True)
def write_file(path: str, content: str, fs: VirtualFS) -> ToolOutput:
    """Create a file, or replace its content (missing folders are created).

    Args:
        path: The file to write, e.g. /workspace/notes.md.
        content: The complete new content.
    """
    existed = exists(fs, path)
    before = current(fs, path, for_hash=True)
    after = content.encode("utf-8")
    fs.write_bytes(path, after)
    where = fs.canonical(path)
    verb = "replaced" if existed else "created"
    return changed(where, before, after, f"{verb} {where} ({_bytes(len(after))})")


@tool(paths={"path": "write"})
def insert_text(path: str, line: int, text: str, fs: VirtualFS) -> ToolOutput:
    """Insert text before a line of a file (the file is created if missing and line is 1).

    Args:
        path: The file.
        line: Insert before this line (1-based); one past the last line, or -1, appends.
        text: The text to insert; a line break is added at its end if it has none.
    """
    before = current(fs, path)
    old = "" if before is None else decode_text(before, fs.canonical(path))
    lines = lines_of(old)
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
    return changed(
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
        before = current(fs, path, for_hash=True) if info.kind == "file" else None
    fs.delete(path)
    return ToolOutput(f"deleted {canonical}", file=FileReport(canonical, size, sha(before), None))


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
    left_out = LeftOut()
    for name in names[:MAX_LIST]:
        child = f"{folder.rstrip('/')}/{name}"
        try:
            info = fs.stat(child)  # judged as a read, where a link leads
            lines.append(f"{name}/" if info.kind == "dir" else f"{name}  ({_bytes(info.size)})")
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


@tool(read_only=True, paths={"path": "read"})
def glob_files(pattern: str, fs: VirtualFS, path: str = "/workspace") -> ToolOutput:
    """Find files by name pattern.

    Args:
        pattern: A glob relative to path, e.g. "**/*.py" or "src/*.{js,ts}".
        path: The folder to search; default /workspace.
    """
    root = fs.canonical(path)
    found = []
    left_out = LeftOut()
    for file in walk(fs, root, left_out):
        relative = file[len(root.rstrip("/")) + 1 :]
        if wcglob.globmatch(relative, pattern, flags=GLOB_FLAGS):
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
    left_out = LeftOut()
    files: Callable[[], Iterator[str]]
    if fs.stat(root).kind == "file":
        files = lambda: iter([root])  # noqa: E731
        base = root.rsplit("/", 1)[0]
    else:
        files = lambda: walk(fs, root, left_out)  # noqa: E731
        base = root
    matches: list[str] = []
    skipped = 0
    for file in files():
        relative = file[len(base.rstrip("/")) + 1 :]
        if not wcglob.globmatch(relative, include, flags=GLOB_FLAGS):
            continue
        try:
            text = decode_text(fs.read_bytes(file), file)
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
        metadata["sha256"] = sha(fs.read_bytes(path))
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
    read_media_file,
    read_multiple_files,
    create_directory,
    directory_tree,
    list_allowed_directories,
)


__all__ = [
    "FILE_TOOLS",
    "MAX_READ_CHARS",
    "add_file_tools",
    "create_directory",
    "delete_file",
    "directory_tree",
    "edit_file",
    "file_info",
    "glob_files",
    "grep",
    "insert_text",
    "list_allowed_directories",
    "list_directory",
    "move_file",
    "read_media_file",
    "read_multiple_files",
    "read_text_file",
    "write_file",
]


def add_file_tools(toolkit: ToolCatalog, *, group: str = BASIC) -> list[RegisteredTool]:
    """Register every file tool in ``toolkit`` (the engine must be given a VirtualFS)."""
    return [toolkit.add(fn, group=group) for fn in FILE_TOOLS]


def _bytes(count: int) -> str:
    """``count`` bytes in words: "1 byte", "2 bytes"."""
    return f"{count} byte" + "s" * (count != 1)
