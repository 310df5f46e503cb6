"""Lines of a file too big to read whole: found by reading it in bounded chunks.

A line ends at "\\n" (and keeps it); a last piece without one is a line too; so a file of
``"a\\nb"`` has two lines, as `file_support.lines_of` counts them. Each function takes ``read``
(``read(offset, length) -> bytes``, e.g. ``lambda o, n: fs.read_range(path, o, n)``) and the
file's size, and answers with a `Span`: where in the file the lines asked for are, and what
the scan learned of their numbers. Forward scans stop once enough lines are found; `tail`
reads backwards from the end; no scan reads more than `MAX_SCAN` bytes.

    span = head(read, size, 3)             # the first three lines
    data = read_span(read, span.start, span.end)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stockade.sandbox.text import decode_text

Reader = Callable[[int, int], bytes]
CHUNK = 1 << 20
MAX_SCAN = 1 << 30  # bytes one request may scan: a line past them is asked for by tail


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes ``start`` to ``end`` of the file hold the lines asked for; ``first_line`` and
    ``last_line`` are their numbers (1-based; None where the scan cannot tell), ``total_lines``
    the file's count when the scan reached both ends."""

    start: int
    end: int
    first_line: int | None
    last_line: int | None
    total_lines: int | None


class _Forward:
    """A scan from the start of the file: where it is, and how many lines it has passed."""

    def __init__(self, read: Reader, size: int, chunk: int) -> None:
        self.read, self.size, self.chunk = read, size, chunk
        self.pos = 0
        self.newlines = 0
        self.line_start = 0  # where the line the scan is in began

    def skip(self, count: int) -> bool:
        """Go past ``count`` more line breaks; False when the file ends first (then ``pos`` is
        its end)."""
        while count > 0 and self.pos < self.size:
            if self.pos >= MAX_SCAN:
                raise ValueError(
                    f"the lines asked for lie beyond the first {MAX_SCAN} bytes of the file; "
                    "read the end with tail, or a smaller file"
                )
            data = self.read(self.pos, min(self.chunk, self.size - self.pos))
            if not data:  # the file shrank meanwhile: it ends here
                self.size = self.pos
                break
            found = data.count(b"\n")
            if found < count:
                if found:
                    self.line_start = self.pos + data.rindex(b"\n") + 1
                self.newlines += found
                self.pos += len(data)
                count -= found
                continue
            # the last line break wanted is in this chunk: what follows it is the last piece
            rest = data.split(b"\n", count)[-1]
            self.pos += len(data) - len(rest)
            self.newlines += count
            self.line_start = self.pos
            return True
        return count <= 0

    def total(self) -> int:
        """The file's line count, once the scan is at its end."""
        return self.newlines + (1 if self.pos > self.line_start else 0)


def lines(read: Reader, size: int, first: int, last: int | None, chunk: int = CHUNK) -> Span:
    """Lines ``first`` to ``last`` (inclusive; None: to the end). ValueError when ``first`` is
    past the last line (the file's count is then known, and said)."""
    scan = _Forward(read, size, chunk)
    found = scan.skip(first - 1)
    if first > 1 and (not found or scan.pos >= scan.size):
        total = scan.total() if not found else first - 1
        raise ValueError(f"start_line {first} is past the end: the file has {total} lines")
    start = scan.pos
    if last is None:
        return Span(start, scan.size, first, None, None)
    if scan.skip(last - first + 1):
        at_end = scan.pos >= scan.size
        return Span(start, scan.pos, first, last, last if at_end else None)
    total = scan.total()
    return Span(start, scan.size, first, total, total)


def head(read: Reader, size: int, count: int, chunk: int = CHUNK) -> Span:
    """The first ``count`` lines."""
    return lines(read, size, 1, count, chunk)


def tail(read: Reader, size: int, count: int, chunk: int = CHUNK) -> Span:
    """The last ``count`` lines, found reading backwards from the end."""
    if size == 0:
        return Span(0, 0, None, None, 0)
    # a final line break ends the last line; the lines before it are told by the breaks before
    end = size - 1 if read(size - 1, 1) == b"\n" else size
    pos, found = end, 0
    while pos > 0:
        if size - pos >= MAX_SCAN:
            raise ValueError(
                f"the last {count} lines take more than {MAX_SCAN} bytes; ask for fewer"
            )
        low = max(0, pos - chunk)
        data = read(low, pos - low)
        breaks = data.count(b"\n")
        if found + breaks >= count:
            # the line break before the first line wanted: what precedes it is the first piece
            before = data.rsplit(b"\n", count - found)[0]
            return Span(low + len(before) + 1, size, None, None, None)
        found += breaks
        pos = low
    # the whole file is fewer lines than asked for: every one of them
    return Span(0, size, 1, found + 1, found + 1)


def read_span(read: Reader, start: int, end: int, chunk: int = CHUNK) -> bytes:
    """Bytes ``start`` to ``end`` of the file, read in chunks of at most ``chunk``."""
    parts = []
    while start < end:
        data = read(start, min(chunk, end - start))
        if not data:
            break
        parts.append(data)
        start += len(data)
    return b"".join(parts)


def decode_part(data: bytes, path: str, offset: int, *, whole: bool) -> str:
    """Bytes read from ``offset`` of a file as text (`NotTextError` naming the file's byte
    that cannot be decoded). Unless ``whole`` (they end where a line does), they were cut at a
    limit, maybe inside a character: its first bytes are dropped."""
    if not whole:
        for back in range(1, min(4, len(data)) + 1):
            byte = data[-back]
            if byte & 0xC0 == 0x80:
                continue  # a continuation byte: the character began further back
            if byte >= 0xC0:
                needs = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
                if needs > back:
                    data = data[:-back]
            break
    return decode_text(data, path, offset=offset)
