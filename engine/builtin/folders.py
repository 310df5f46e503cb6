"""The folder tools: make a folder, see a folder's tree, and list the folders there are.

`directory_tree` walks like the other walking tools: through the guarded view of the virtual
filesystem, each folder listed and each entry reached judged where it really is at the moment
of use; what the policy refuses is left out, counted and said, never named:

    directory_tree(fs, "/workspace", exclude_patterns=["node_modules", "**/*.pyc"])
    # [{"name": "src", "type": "directory", "children": [{"name": "app.py", "type": "file"}]}]
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field
from wcmatch import glob as wcglob

from stockade.engine.builtin.file_support import (
    GLOB_FLAGS,
    MAX_READ_CHARS,
    MAX_WALK,
    LeftOut,
    entries_once,
    kind_of,
)
from stockade.engine.builtin.file_support import exists as _exists
from stockade.engine.content import ToolOutput
from stockade.engine.tools import tool
from stockade.sandbox import VirtualFS

MAX_EXCLUDES = 100
MAX_PATTERN_CHARS = 1_000
# names looked at in one walk, shown or excluded: excluding must not make a walk unbounded
MAX_LOOKED = 5 * MAX_WALK


@tool(paths={"path": "write"}, idempotent=True)
def create_directory(path: str, fs: VirtualFS) -> ToolOutput:
    """Create a folder, and any missing folders above it; a folder already there is fine.

    Args:
        path: The folder, e.g. /workspace/src/utils.
    """
    canonical = fs.canonical(path)
    existed = _exists(fs, path)
    fs.mkdir(path)  # a file in the way is an error; each folder made is judged as a write
    verb = "already exists:" if existed else "created"
    return ToolOutput(f"{verb} {canonical}", {"path": canonical, "created": not existed})


class _Excludes:
    """The exclude patterns, compiled once for the whole walk (matching each entry pattern by
    pattern would compile nothing twice but still cost a hundred patterns' look-ups per entry):
    globs matched against an entry's path relative to the tree's root, and, for a pattern
    without "/", against its name at any depth."""

    def __init__(self, patterns: list[str]) -> None:
        for pattern in patterns:
            if len(pattern) > MAX_PATTERN_CHARS:
                raise ValueError(
                    f"an exclude_patterns entry is {len(pattern)} characters long, over the "
                    f"limit of {MAX_PATTERN_CHARS}; give shorter globs"
                )
        try:
            self.paths = wcglob.compile(patterns, flags=GLOB_FLAGS)
            self.names = wcglob.compile([p for p in patterns if "/" not in p], flags=GLOB_FLAGS)
        except Exception as exc:  # wcmatch's own (a brace expanding to too many patterns)
            raise ValueError(
                f"exclude_patterns cannot be used: {exc}; give simpler globs (a brace such as "
                "{a,b} expands to one pattern per choice)"
            ) from None

    def __call__(self, relative: str, name: str) -> bool:
        return bool(self.paths.match(relative) or self.names.match(name))


@tool(read_only=True, paths={"path": "read"})
def directory_tree(
    fs: VirtualFS,
    path: str = "/workspace",
    exclude_patterns: Annotated[list[str], Field(max_length=MAX_EXCLUDES)] | None = None,
) -> ToolOutput:
    """The files and folders under a folder, as a JSON tree: a list of
    {"name", "type": "file" | "directory", "children": [...]} (children for folders only).

    Args:
        path: The folder; default /workspace.
        exclude_patterns: Globs to leave out: a name at any depth ("node_modules"), or a path.
    """
    excluded = _Excludes(list(exclude_patterns or []))
    root = fs.canonical(path)
    left_out = LeftOut()
    top: list[dict[str, Any]] = []
    # (folder, its path under the root, the list its entries go in); folders are walked once
    # (a link back up is shown, not followed again), links out of the mount are skipped
    stack: list[tuple[str, str, list[dict[str, Any]]]] = [(root, "", top)]
    seen: set[str] = set()
    looked = entries = shown = 0  # names looked at, reached (judged), and shown
    while stack:
        folder, relative, children = stack.pop()
        for name in entries_once(fs, folder, root, seen, left_out):
            looked += 1
            if looked > MAX_LOOKED:
                raise ValueError(
                    f"more than {MAX_LOOKED} names under {root}, counting those exclude_patterns "
                    "leave out; ask for a smaller folder, or leave out folders (a folder left "
                    "out is not gone into)"
                )
            inner = f"{relative}/{name}" if relative else name
            if excluded(inner, name):
                continue
            entries += 1
            if entries > MAX_WALK:
                raise ValueError(
                    f"more than {MAX_WALK} entries under {root}; ask for a smaller folder, or "
                    "leave parts out with exclude_patterns"
                )
            child = f"{folder.rstrip('/')}/{name}"
            kind = kind_of(fs, child, left_out)
            if kind is None:
                continue
            shown += 1
            if kind == "dir":
                inside: list[dict[str, Any]] = []
                children.append({"name": name, "type": "directory", "children": inside})
                stack.append((child, inner, inside))
            else:
                children.append({"name": name, "type": "file"})
    text = json.dumps(top, ensure_ascii=False)
    if len(text) > MAX_READ_CHARS:
        raise ValueError(
            f"the tree under {root} ({entries} entries) is longer than {MAX_READ_CHARS} "
            "characters; ask for a smaller folder, or leave parts out with exclude_patterns"
        )
    metadata = left_out.metadata({"path": root, "entries": shown})
    return ToolOutput(left_out.after(text), metadata)


@tool(read_only=True)
def list_allowed_directories(fs: VirtualFS) -> ToolOutput:
    """The folders the file tools can reach (the mounts), and whether each is read-only.

    What the policy allows in them is decided per call; a write to a read-only folder always
    fails.
    """
    directories: list[dict[str, Any]] = []
    lines = []
    for mount in sorted(fs.mounts, key=lambda m: m.prefix):
        kind = "memory" if mount.memory else "overlay" if mount.overlay else "folder"
        what = "read-only" if mount.read_only else "read-write"
        if mount.overlay:
            what += ", changes staged until they are committed"
        elif mount.memory:
            what += ", in memory only"
        lines.append(f"{mount.prefix} ({what})")
        directories.append({"path": mount.prefix, "read_only": mount.read_only, "kind": kind})
    return ToolOutput("\n".join(lines), {"directories": directories})
