"""Where a lint finding points: the key's line, or a pattern's own line inside a list.

The lint modules each add findings to one `Report`; `stockade.policies.lint` turns them into
`Finding`s. A location ending in a list and an index (``("rules", 2, "paths", 1)``) names one
pattern, whose line is found inside the list, so a list written over many lines points at the
pattern itself.
"""

from __future__ import annotations

from typing import Literal

from stockade.policies.array_lines import array_item_line
from stockade.policies.source import SourceMap

Severity = Literal["error", "warning", "info"]
Found = tuple[Severity, int | None, str, str]
"""severity, line, key (dotted), message"""


class Report:
    """Findings on one policy text, each with its line."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = SourceMap(text)
        self.found: list[Found] = []

    def line(self, location: tuple[str | int, ...]) -> int | None:
        """The line of ``location``; for an item of a list, the item's own line."""
        line = self.lines.line(location)
        if len(location) < 2 or not isinstance(location[-1], int):
            return line
        outer = self.lines.line(location[:-1])
        if line != outer or outer is None:
            return line  # a table of an array of tables (``[[rules]]``) has its own line
        # a line that is not the list's own (its table's) holds no "=": no item is found there
        return array_item_line(self.text, outer, location[-1]) or outer

    def add(self, severity: Severity, location: tuple[str | int, ...], message: str) -> None:
        """A finding at ``location`` (a key path such as ``("rules", 0, "paths", 2)``)."""
        key = ".".join(str(part) for part in location) or "(file)"
        self.found.append((severity, self.line(location), key, message))
