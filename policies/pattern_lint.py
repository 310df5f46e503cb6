"""Lint findings on single patterns of a policy's rules: written so they never match what the
writer meant, though the policy loads.

Each of these was a real mistake: a host path (``/home/me/project/src/**``) where tools see
``/workspace``; an unclosed ``[`` (a literal bracket, silently); a backslash where a slash was
meant (``migrations\\*`` is one name with a literal star); a class that holds no character; a
command pattern with a space at its edge (a command's words are joined by single spaces, so it
never matches); Claude's ``git push:*`` spelling, which here is the word ``push:`` and more.
"""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath

from stockade.policies.globs import compile_glob, expand
from stockade.policies.lint_report import Report
from stockade.policies.policy_file import RuleSpec

NAMESPACES = frozenset({"workspace", "userinput"})
# where a user's home, a project or a mounted disk lives on a host, never inside the box
HOST_ROOTS = frozenset({"home", "Users", "root", "mnt", "opt", "srv", "var", "media", "Volumes"})
# folders a command in the box may well reach (its own /tmp, /dev/null, a read-only /usr or
# /etc list): rules over them are meant, however deep
SYSTEM_ROOTS = frozenset({"tmp", "dev", "proc", "sys", "etc", "usr", "bin", "sbin", "lib", "run"})
# the raw host-file tools take host paths: rules limited to them name host paths on purpose
HOST_TOOLS = frozenset({"view_text_file", "write_text_file", "insert_text_file"})
_WILD = "*?["
_LITERAL_NAMES = {"*": "a literal star", "?": "a literal question mark", "[": "a literal '['"}


def pattern_findings(rules: list[RuleSpec], report: Report, workspace_name: str | None) -> None:
    """Add to ``report`` what is wrong with each path and command pattern of ``rules``;
    ``workspace_name`` is the name of the project's folder on the host, when known (a host path
    is then cut after it to suggest the pattern meant)."""
    for index, rule in enumerate(rules):
        host_tools = all(_host_tool(tool) for tool in rule.tools)
        for number, pattern in enumerate(rule.paths):
            where = ("rules", index, "paths", number)
            for message in path_problems(pattern):
                report.add("warning", where, message)
            host = None if host_tools else host_path_problem(pattern, workspace_name)
            if host is not None:
                report.add("warning", where, host)
        for number, pattern in enumerate(rule.commands):
            for message in command_problems(pattern):
                report.add("warning", ("rules", index, "commands", number), message)


def path_problems(pattern: str) -> list[str]:
    """What makes a path pattern match other than it seems: a backslash, an unclosed class."""
    body = pattern.removeprefix("!")
    problems: list[str] = []
    slash = body.find("\\")
    if slash >= 0:
        following = body[slash + 1 : slash + 2]
        if not following:
            what = "here the pattern ends with it: a literal backslash"
        elif following in _LITERAL_NAMES:
            what = f"here {following!r} becomes {_LITERAL_NAMES[following]}"
        else:
            what = f"here {following!r} stays {following!r} and the backslash is dropped"
        meant = pattern.replace("\\", "/")
        problems.append(
            f"{pattern!r}: a backslash escapes the next character ({what}); paths use '/': "
            f"did you mean {meant!r}?"
        )
    for segment in body.split("/"):
        start = _unclosed_class(segment, escapes=True)
        if start is not None:
            problems.append(_unclosed_message(pattern, segment[start:], "escape it as '\\['"))
            break
    return problems


def command_problems(pattern: str) -> list[str]:
    """What makes a command pattern never match, or match other than meant."""
    problems: list[str] = []
    if pattern != pattern.strip():
        problems.append(
            f"{pattern!r} has a space at its start or end: a command is matched as its words "
            f"joined by single spaces, so this never matches; write {pattern.strip()!r}"
        )
    stripped = pattern.strip()
    if stripped.endswith(":*") and stripped[:-2].strip():
        words = stripped[:-2].rstrip()
        problems.append(
            f"{pattern!r}: ':' is an ordinary character here, so this matches only commands "
            f"that go on with {words + ':'!r}; did you mean {words + ' *'!r} (a pattern ending "
            "in ' *' matches the command with any arguments or none)?"
        )
    start = _unclosed_class(pattern, escapes=False)
    if start is not None and pattern[start + 1 : start + 2] not in ("", " "):
        problems.append(_unclosed_message(pattern, pattern[start:], "write it as '[[]'"))
    for text in _classes(pattern):
        if "(?!)" in fnmatch.translate(text):
            problems.append(
                f"{text!r} in {pattern!r} is an empty class (its ranges run backwards): it "
                "matches no character, so the pattern never matches; write each range low to "
                "high, e.g. '[a-z]'"
            )
    return problems


def host_path_problem(pattern: str, workspace_name: str | None) -> str | None:
    """Why ``pattern`` looks like a path on the host, which no file tool's path ever is, with
    the pattern probably meant; None when it does not."""
    if not pattern.startswith("/"):
        return None
    segments = [s for s in pattern.split("/") if s]
    if not segments or any(ch in segments[0] for ch in (*_WILD, "\\")):
        return None
    first = segments[0]
    if first in NAMESPACES or first in SYSTEM_ROOTS:
        return None
    depth = len(segments) - (segments[-1] == "**")
    if depth <= (1 if first in HOST_ROOTS else 2):
        return None  # "/home" alone, "/data/x": nobody's project, said nothing about
    return (
        f"{pattern!r} is a host path; tools see the project at /workspace, so this pattern "
        f"never matches a file tool's path; write {_meant(segments, workspace_name)!r}"
    )


def _meant(segments: list[str], workspace_name: str | None) -> str:
    """The workspace pattern a host pattern probably means: what follows the project's folder
    (by the workspace's name when known, else after /home/<user>/<project>, /root/<project>,
    or the last name before any wildcard)."""
    literal = next(
        (i for i, s in enumerate(segments) if any(ch in s for ch in _WILD)), len(segments)
    )
    if workspace_name is not None and workspace_name in segments[:literal]:
        cut = literal - segments[:literal][::-1].index(workspace_name)
    elif segments[0] in ("home", "Users"):
        cut = min(3, literal)
    elif segments[0] == "root":
        cut = min(2, literal)
    else:
        cut = max(literal - 1, 1)
    tail = segments[cut:]
    if not tail or tail == ["**"]:
        return "/workspace/**" if tail else "/workspace"
    return str(PurePosixPath(*tail))


def _host_tool(tool: str) -> bool:
    return tool in HOST_TOOLS or "host" in tool.lower()


def _unclosed_class(text: str, *, escapes: bool) -> int | None:
    """Where an unclosed ``[`` opens in ``text`` (a path segment, with backslash escapes, or
    a command pattern, without), if one does: such a bracket is matched literally."""
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and escapes:
            index += 2
            continue
        if char == "[":
            end = _class_end(text, index, escapes=escapes)
            if end is None:
                return index
            index = end
        index += 1
    return None


def _class_end(text: str, start: int, *, escapes: bool) -> int | None:
    """The index of the ``]`` closing the class opened at ``start``; None when none does (a
    ``]`` right after the opening, or after its ``!``, is a member, as in both matchers)."""
    index = start + 1
    if index < len(text) and text[index] in ("!^" if escapes else "!"):
        index += 1
    if index < len(text) and text[index] == "]":
        index += 1
    while index < len(text):
        if text[index] == "\\" and escapes:
            index += 2
            continue
        if text[index] == "]":
            return index
        index += 1
    return None


def _classes(pattern: str) -> list[str]:
    """The closed classes of a command pattern, as written."""
    found: list[str] = []
    index = 0
    while index < len(pattern):
        if pattern[index] == "[":
            end = _class_end(pattern, index, escapes=False)
            if end is not None:
                found.append(pattern[index : end + 1])
                index = end
        index += 1
    return found


def _unclosed_message(pattern: str, rest: str, literal: str) -> str:
    return (
        f"unclosed '[' in {pattern!r} (at {rest!r}): it matches a literal '['; close the "
        f"class, or {literal} to say so"
    )


def failing_pattern(data: object, key: str) -> tuple[str | int, ...] | None:
    """For a load error on a rule's whole ``paths`` list (``rules.2.paths``), the location of
    the first pattern in it that cannot be compiled on its own (a NUL byte, a '..'), so the
    error can point at that pattern's line; None when no single pattern is to blame."""
    parts = key.split(".")
    if len(parts) != 3 or parts[0] != "rules" or not parts[1].isdigit() or parts[2] != "paths":
        return None
    rules = data.get("rules") if isinstance(data, dict) else None
    index = int(parts[1])
    if not isinstance(rules, list) or index >= len(rules) or not isinstance(rules[index], dict):
        return None
    patterns = rules[index].get("paths")
    if not isinstance(patterns, list):
        return None
    for number, pattern in enumerate(patterns):
        try:
            for form in expand(str(pattern)):
                compile_glob(form.removeprefix("!"))
        except ValueError:
            return ("rules", index, "paths", number)
    return None
