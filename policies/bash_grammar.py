"""The tree-sitter bash grammar, and the guards that keep it from hanging or crashing.

The grammar is a real parser, but it has two weaknesses a hostile line can reach: its error
recovery is quadratic on a long broken pipeline (1.4 s for 10,000 stages, and a parse cannot be
interrupted), and its scanner crashes the process on some non-ASCII code points. `too_complex`
refuses the first before parsing; `ascii_stand_in` hides the second.
"""

from __future__ import annotations

import subprocess
import sys
from functools import lru_cache

import tree_sitter_bash
from tree_sitter import Language, Parser

MAX_LINE_CHARS = 256 * 1024  # longer lines are not parsed (so never allowed)
MAX_PIPES = 500  # more, and the line is test-parsed in a child process first
PARSE_PROBE_S = 1.0

_PARSE_PROBE = (
    "import sys, tree_sitter, tree_sitter_bash\n"
    "parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))\n"
    "parser.parse(sys.stdin.buffer.read())\n"
)


@lru_cache(maxsize=1)
def parser() -> Parser:
    """The bash parser (built once: loading the grammar is not free)."""
    return Parser(Language(tree_sitter_bash.language()))


def too_complex(text: str, parsed: bytes) -> str | None:
    """Why ``text`` is too big to judge, if it is (then it is not parsed, so never allowed).

    A line with many ``|`` (rare: a heredoc or a string full of them, or an attack) is first
    parsed in a child process with a time limit, since the parse itself cannot be stopped."""
    if len(text) > MAX_LINE_CHARS:
        return f"the command line is longer than {MAX_LINE_CHARS:,} characters; split it"
    if text.count("|") - 2 * text.count("||") <= MAX_PIPES:
        return None
    try:
        subprocess.run(
            [sys.executable, "-c", _PARSE_PROBE],
            input=parsed,
            timeout=PARSE_PROBE_S,
            check=True,
            capture_output=True,
        )
    except (subprocess.SubprocessError, OSError):
        return (
            f"the command line has more than {MAX_PIPES} pipes and takes too long to read; split it"
        )
    return None


def ascii_stand_in(text: str, source: bytes) -> bytes:
    """What the grammar parses: ``source`` with every non-ASCII character replaced by as many
    ``%`` as its UTF-8 bytes. The tree-sitter bash scanner crashes the process on some code
    points (``{\\U000FFFFF``, found by the property tests); to bash they are plain word
    characters, as ``%`` is, and byte offsets stay those of ``source``."""
    if text.isascii():
        return source
    return b"".join(
        ch.encode() if ch.isascii() else b"%" * len(ch.encode("utf-8", "surrogatepass"))
        for ch in text
    )
