"""The line of each item of a TOML array of strings, so an error about one host pattern of a
list written over many lines names that pattern's line, not the list's first.

`SourceMap` knows where each key starts; from there this reads the array itself: its strings,
commas and comments, up to the closing bracket.
"""

from __future__ import annotations


def array_item_line(text: str, key_line: int, index: int) -> int | None:
    """The line (1-based) where item ``index`` of the array of strings whose key is on
    ``key_line`` starts; None when the value there is not a plain array of strings (an inline
    table, a multi-line string) or has fewer items."""
    lines = text.splitlines()[key_line - 1 :]
    if not lines or "=" not in lines[0]:
        return None
    lines[0] = lines[0].split("=", 1)[1]
    opened = False
    found = 0
    for offset, line in enumerate(lines):
        position = 0
        while position < len(line):
            char = line[position]
            if char in " \t,":
                position += 1
            elif char == "#":
                break
            elif char == "[" and not opened:
                opened = True
                position += 1
            elif char == "]" and opened:
                return None
            elif char in "\"'" and opened and not line.startswith(char * 3, position):
                if found == index:
                    return key_line + offset
                found += 1
                position = _string_end(line, position)
                if position < 0:
                    return None
            else:
                return None
    return None


def _string_end(line: str, start: int) -> int:
    """Just past the string that opens at ``start`` (basic strings have backslash escapes,
    literal ones none); -1 when it does not close on this line."""
    quote = line[start]
    position = start + 1
    while position < len(line):
        char = line[position]
        if char == "\\" and quote == '"':
            position += 2
            continue
        if char == quote:
            return position + 1
        position += 1
    return -1
