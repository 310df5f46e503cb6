"""Lint findings that need the project's folder: a relative pattern that names a folder or file
at the top of /workspace when the project has it only deeper.

A relative pattern is taken from /workspace: ``migrations/**`` means /workspace/migrations and
nothing below ``src/``. When the project has ``src/migrations/`` and no top-level
``migrations``, the writer almost surely meant ``**/migrations/**``. The folder is walked once,
breadth first, at most `MAX_ENTRIES` entries, without ``.git`` and ``node_modules`` and without
following links, so a huge tree costs a bounded moment.
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path

from stockade.policies.lint_report import Report
from stockade.policies.paths import WORKSPACE
from stockade.policies.policy_file import RuleSpec

MAX_ENTRIES = 20_000
SKIPPED = frozenset({".git", "node_modules"})
_SHOWN = 2  # deeper places named in one finding
_WILD = "*?[\\"


def depth_findings(rules: list[RuleSpec], report: Report, workspace: Path) -> None:
    """Add a finding for each relative path pattern of ``rules`` whose literal start is not at
    the top of ``workspace`` but is deeper in it."""
    wanted: dict[tuple[str, ...], list[tuple[int, int, str]]] = {}
    for index, rule in enumerate(rules):
        for number, pattern in enumerate(rule.paths):
            start = literal_start(pattern)
            if start and not os.path.lexists(workspace.joinpath(*start)):
                wanted.setdefault(start, []).append((index, number, pattern))
    if not wanted:
        return
    found = find_deeper(workspace, set(wanted))
    for start, places in wanted.items():
        deeper = found.get(start)
        if not deeper:
            continue
        shown = " and ".join(deeper[:_SHOWN]) + (" and more" if len(deeper) > _SHOWN else "")
        for index, number, pattern in places:
            negated = pattern.startswith("!")
            body = pattern.removeprefix("!").removeprefix("./")
            top = f"{WORKSPACE}/{'/'.join(start)}"
            whole = body.rstrip("/") in ("/".join(start), "/".join(start) + "/**")
            meant = ("!" if negated else "") + "**/" + body
            report.add(
                "warning",
                ("rules", index, "paths", number),
                f"{pattern!r} matches only {top if whole else 'below ' + top}; the workspace "
                f"has {shown}: write {meant!r} to match at any depth",
            )


def literal_start(pattern: str) -> tuple[str, ...]:
    """The names a relative pattern starts with before any wildcard (``src/app/*.py``: src,
    app); none for an absolute pattern or one that starts with ``**``."""
    body = pattern.removeprefix("!")
    if body.startswith(("/", "**")):
        return ()
    names: list[str] = []
    for segment in body.split("/"):
        if segment in ("", "."):
            continue
        if segment == ".." or any(ch in segment for ch in _WILD):
            break
        names.append(segment)
    return tuple(names)


def find_deeper(workspace: Path, starts: set[tuple[str, ...]]) -> dict[tuple[str, ...], list[str]]:
    """For each run of names in ``starts``, the places below the top of ``workspace`` that end
    with it (``src/migrations/`` for a folder, ``pkg/setup.cfg`` for a file), shallowest
    first."""
    found: dict[tuple[str, ...], list[str]] = {}
    last = {start[-1] for start in starts}
    queue: deque[tuple[Path, tuple[str, ...]]] = deque([(workspace, ())])
    seen = 0
    while queue and seen < MAX_ENTRIES:
        folder, parts = queue.popleft()
        try:
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError:
            continue  # unreadable: nothing to learn there
        for entry in listed:
            seen += 1
            if seen > MAX_ENTRIES:
                break
            here = (*parts, entry.name)
            is_dir = _is_dir(entry)
            if entry.name in last:
                for start in starts:
                    if len(here) > len(start) and here[-len(start) :] == start:
                        found.setdefault(start, []).append("/".join(here) + ("/" if is_dir else ""))
            if is_dir and entry.name not in SKIPPED:
                queue.append((Path(entry.path), here))
    return found


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False
