"""Path and tool patterns, compiled for the decision hot path.

The dialect is wcmatch's glob with ``GLOBSTAR | DOTGLOB | NEGATE`` (the casbin reference path
matches with wcmatch itself): ``*`` and ``?`` stay within one path segment and match leading
dots, ``[...]`` is a character class, ``**`` as a whole segment matches any number of segments,
``\\`` escapes, and a leading ``!`` makes a pattern an exclusion. Stockade adds two
conveniences, applied before either matcher sees a pattern: a relative pattern is taken from
``/workspace``, and ``dir/**`` also matches ``dir`` itself.

wcmatch's own regexes are written for arbitrary paths (``..`` segments, repeated slashes) and
take 5-50 µs a match; policy paths are already canonical, so the translation here is the plain
one, anchored so that most rules are never even tried: by their literal leading folder
(``/workspace/src``) or, for ``**/name`` patterns, by the first literal segment (``name``).
The differential test holds the two matchers to identical answers.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Literal

from wcmatch import glob as wcglob

from stockade.errors import StockadeError
from stockade.policies.paths import WORKSPACE, fold

WCMATCH_FLAGS = wcglob.GLOBSTAR | wcglob.DOTGLOB | wcglob.NEGATE
_WILD = re.compile(r"(?<!\\)[*?\[]")

AnchorKind = Literal["prefix", "segment", "segment-start", "none"]
Shape = Literal["exact", "tree", "regex"]


class PatternError(StockadeError, ValueError):
    """A pattern that cannot be compiled."""


def escape(path: str) -> str:
    """``path`` as a pattern that matches exactly it: ``*``, ``?``, ``[`` and ``\\`` escaped
    with a backslash (a real file's name may hold any of them)."""
    return re.sub(r"([*?\[\\])", r"\\\1", path)


def expand(pattern: str) -> list[str]:
    """A user's pattern in the form both matchers see: absolute (relative ones are taken from
    /workspace; ``**/...`` stays anchored anywhere), and ``dir/**`` also naming ``dir``."""
    negated = pattern.startswith("!")
    body = pattern[1:] if negated else pattern
    if not body:
        raise PatternError("an empty pattern matches nothing; remove it")
    if "\x00" in body:
        raise PatternError(f"pattern {pattern!r} contains a NUL byte")
    segments = body.split("/")
    if ".." in segments:
        raise PatternError(
            f"pattern {pattern!r} contains '..'; paths are matched after '..' is resolved, "
            "so write the path it means"
        )
    folder = body.endswith("/") and body.strip("/") != ""
    body = "/".join(s for s in segments if s != ".") if "." in segments else body
    if not body.startswith(("/", "**")):
        body = f"{WORKSPACE}/{body}"
    body = re.sub(r"/{2,}", "/", body)
    if len(body) > 1:
        body = body.rstrip("/") or "/"
    if folder and not body.endswith("/**"):
        body = f"{body}/**"  # "name/" means the folder and everything in it
    forms = [body]
    if body.endswith("/**") and len(body) > 3:
        forms.insert(0, body[:-3])
    return [f"!{f}" if negated else f for f in forms]


def _class_regex(segment: str, start: int, pattern: str) -> tuple[str, int] | None:
    """The regex for the ``[...]`` class opening at ``start`` and the index after it, or None
    when the bracket is never closed (then it is a literal ``[``, as in wcmatch)."""
    i = start + 1
    negate = i < len(segment) and segment[i] in "!^"
    if negate:
        i += 1
    chars: list[str] = []
    first = True
    while i < len(segment):
        ch = segment[i]
        if ch == "]" and not first:
            break
        if ch == "[" and segment[i + 1 : i + 2] == ":":
            raise PatternError(
                f"pattern {pattern!r}: POSIX classes like [[:digit:]] are not supported; "
                "write the characters, e.g. [0-9]"
            )
        if ch == "\\" and i + 1 < len(segment):
            i += 1
            ch = segment[i]
            chars.append(re.escape(ch))
        elif ch == "/":
            pass  # a path separator never matches inside a class
        elif ch in "^[]\\":
            chars.append("\\" + ch)
        else:
            chars.append(ch)  # "-" keeps its meaning: a range
        first = False
        i += 1
    if i >= len(segment):
        return None
    body = "".join(chars)
    if negate:
        return f"[^/{body}]", i + 1  # and never a "/"
    return (f"[{body}]" if body else "(?!)"), i + 1


def _segment_regex(segment: str, pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "\\" and i + 1 < len(segment):
            out.append(re.escape(segment[i + 1]))
            i += 2
        elif ch == "*":
            out.append("[^/]*")
            i += 1
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            found = _class_regex(segment, i, pattern)
            if found is None:
                out.append(re.escape(ch))  # an unclosed bracket is a literal, as in wcmatch
                i += 1
            else:
                out.append(found[0])
                i = found[1]
        else:
            out.append(re.escape(ch))
            i += 1
    return "".join(out)


def _regex(pattern: str) -> str:
    segments = pattern.split("/")
    if segments[0] == "":  # absolute: "/a/b" -> ["", "a", "b"]
        segments = segments[1:]
    parts = []
    for segment in segments:
        if segment == "**":
            parts.append("(?:/[^/]+)*")
        elif segment:
            parts.append("/" + _segment_regex(segment, pattern))
    return "".join(parts) or "/"


@dataclass(frozen=True, slots=True)
class Glob:
    """One compiled path pattern (already expanded; without its ``!``).

    ``shape`` picks the cheapest test that is exact for the pattern: string equality for a
    pattern without wildcards, a prefix test for ``/literal/**``, the regex otherwise.
    ``anchor`` is what the index files the pattern under: its literal leading folder
    (``prefix``), the first literal segment after ``**`` (``segment``), or that segment's
    literal start when it has a wildcard, like ``.env.*`` (``segment-start``).
    """

    pattern: str
    folded: bool
    regex: re.Pattern[str]
    anchor_kind: AnchorKind
    anchor: str
    shape: Shape
    literal: str

    def match(self, path: str) -> bool:
        """Whether a canonical path (folded first when the pattern is) matches."""
        if self.shape == "exact":
            return path == self.literal
        if self.shape == "tree":
            literal = self.literal
            return path.startswith(literal) and (
                len(path) == len(literal) or literal == "/" or path[len(literal)] == "/"
            )
        if path == "/":  # the root has no segments: only patterns that allow none match it
            return self.pattern == "/" or self.regex.fullmatch("") is not None
        return self.regex.fullmatch(path) is not None


def compile_glob(pattern: str, *, folded: bool = False) -> Glob:
    """Compile an expanded pattern; ``folded`` patterns match `fold`-ed paths."""
    text = fold(pattern) if folded else pattern
    try:
        regex = re.compile(_regex(text), re.DOTALL)
    except re.error as exc:
        raise PatternError(f"pattern {pattern!r} is not a valid glob: {exc}") from None
    segments = [s for s in text.split("/") if s]
    if text.startswith("/"):
        literal = []
        for segment in segments:
            if _WILD.search(segment) or segment == "**" or "\\" in segment:
                break
            literal.append(segment)
        prefix = "/" + "/".join(literal)
        shape: Shape = "regex"
        if len(literal) == len(segments):
            shape = "exact"
        elif len(literal) == len(segments) - 1 and segments[-1] == "**":
            shape = "tree"
        return Glob(pattern, folded, regex, "prefix", prefix, shape, prefix)
    rest = segments[1:] if segments and segments[0] == "**" else segments
    if rest and rest[0] != "**" and "\\" not in rest[0]:
        wild = _WILD.search(rest[0])
        if wild is None:
            return Glob(pattern, folded, regex, "segment", rest[0], "regex", "")
        if wild.start() > 0:
            start = rest[0][: wild.start()]
            return Glob(pattern, folded, regex, "segment-start", start, "regex", "")
    return Glob(pattern, folded, regex, "none", "", "regex", "")


@dataclass(frozen=True, slots=True)
class PathSpec:
    """The path condition of a rule: any positive pattern matches and no exclusion does."""

    include: tuple[Glob, ...]
    exclude: tuple[Glob, ...]
    folded: bool

    def match(self, path: str, folded_path: str) -> bool:
        """Whether the canonical ``path`` (with its `fold` given) satisfies the condition."""
        subject = folded_path if self.folded else path
        if not any(g.match(subject) for g in self.include):
            return False
        return not any(g.match(subject) for g in self.exclude)


def path_spec(patterns: list[str], *, folded: bool = False) -> PathSpec:
    """Compile a rule's path patterns (user spelling; ``!`` for exclusions)."""
    include: list[Glob] = []
    exclude: list[Glob] = []
    for pattern in patterns:
        for form in expand(pattern):
            if form.startswith("!"):
                exclude.append(compile_glob(form[1:], folded=folded))
            else:
                include.append(compile_glob(form, folded=folded))
    if not include:
        raise PatternError(
            f"patterns {patterns!r} only exclude; add what they apply to, e.g. '/**' first"
        )
    return PathSpec(tuple(include), tuple(exclude), folded)


def wcmatch_paths(path: str, patterns: list[str], *, folded: bool) -> bool:
    """The reference answer, from wcmatch: used by the casbin path and the tests."""
    expanded = [form for p in patterns for form in expand(p)]
    if folded:
        path = fold(path)
        expanded = [fold(p) for p in expanded]
    if path == "/":
        return any(
            wcglob.globmatch(candidate, expanded, flags=WCMATCH_FLAGS) for candidate in ("/", "")
        )
    return bool(wcglob.globmatch(path, expanded, flags=WCMATCH_FLAGS))


class NamePattern:
    """A tool-name or command pattern: shell-style, whole string, case-sensitive (fnmatch)."""

    __slots__ = ("literal", "pattern", "regex")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.literal = not any(ch in pattern for ch in "*?[")
        self.regex = re.compile(fnmatch.translate(pattern))

    def match(self, value: str) -> bool:
        """Whether ``value`` matches."""
        if self.literal:
            return value == self.pattern
        return self.regex.match(value) is not None
