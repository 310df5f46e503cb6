"""Where things are in a policy file, so every error and lint finding can name its line.

Python's TOML reader gives values, not positions. Policy files are written by people in the
plain TOML style (``[table]``, ``[[rules]]``, ``key = value``), so one pass over the lines is
enough to know which line each table and key starts on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_.-]+)\s*=""")

Location = tuple[str | int, ...]


def _key_path(raw: str) -> tuple[str, ...]:
    if raw[:1] in ("'", '"'):
        return (raw[1:-1],)
    return tuple(part.strip().strip("\"'") for part in raw.split("."))


class SourceMap:
    """Line numbers (1-based) of the tables and keys of one TOML document."""

    def __init__(self, text: str) -> None:
        self._lines: dict[Location, int] = {}
        counts: dict[tuple[str, ...], int] = {}
        table: Location = ()
        for number, line in enumerate(text.splitlines(), 1):
            header = _HEADER.match(line)
            if header:
                path = _key_path(header.group(2))
                if header.group(1) == "[[":
                    index = counts.get(path, 0)
                    counts[path] = index + 1
                    table = (*path, index)
                else:
                    table = path
                self._lines.setdefault(table, number)
                continue
            key = _KEY.match(line)
            if key:
                self._lines.setdefault((*table, *_key_path(key.group(1))), number)

    def line(self, location: Sequence[str | int]) -> int | None:
        """The line of ``location`` (a key path such as ``("rules", 2, "effect")``), or of the
        nearest enclosing table or key found; None when nothing of it is in the file."""
        path = tuple(location)
        while path:
            if path in self._lines:
                return self._lines[path]
            path = path[:-1]
        return None
