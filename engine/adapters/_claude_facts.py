"""What each Claude Code tool call is to Stockade's policy: the command, the host paths and how
each is used, what is known only when it runs, and where a web fetch goes.

    found = facts(hook)          # Facts(command=..., paths=(('/home/me/p/x', 'read'),), ...)
    web_decision(policy, url)    # what the policy says of the host, or None

``Bash`` names the folder it runs in (read) and every file of its line (`_claude_bash`);
``Read``/``Write``/``Edit``/``MultiEdit``/``NotebookEdit`` their file; ``Glob``, ``Grep``,
``LS`` their folder, a glob's fixed folders (each brace alternative's), and for ``Grep`` a
``glob`` that may reach hidden files (ripgrep then reads them: unknown); ``WebFetch`` its URL.
Tool names are matched without regard to case (``bash`` is judged as ``Bash``), so a spelling
Claude Code might accept never skips the judging of its paths.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import ValidationError

from stockade.engine.adapters._claude_bash import named_paths
from stockade.engine.adapters._claude_glob import alternatives, climbs, fixed_folder
from stockade.engine.adapters._claude_glob import may_reach_hidden as reaches_hidden
from stockade.engine.adapters._claude_web import is_internal, web_target
from stockade.engine.adapters._claude_wire import (
    SHAPES,
    CommandInput,
    FetchInput,
    FileInput,
    FolderInput,
    GlobInput,
    GrepInput,
    HookInput,
    NotebookInput,
    field_errors,
)
from stockade.engine.errors import FormatError
from stockade.policies import Decision, Effect, Policy, parse_command
from stockade.policies.request import Access

URL_RULE = "hook-url"  # a URL whose host cannot be read one way only
INTERNAL_RULE = "hook-internal-host"  # a fetch of this machine or a private network
_EXPANSION = re.compile(r"\$[A-Za-z_{(]")  # `$HOME`, `${X}`, `$(cmd)` in a path

FILE_ACCESS: dict[str, Access] = {
    "Read": "read",
    "NotebookRead": "read",
    "Write": "write",
    "Edit": "write",
    "MultiEdit": "write",
    "NotebookEdit": "write",
}
# Claude Code tools that change nothing and reach nothing (a subagent's own calls come through
# this hook too); the strict preset lets read-only tools run
READ_ONLY = frozenset(
    {"Read", "NotebookRead", "Glob", "Grep", "LS", "TodoWrite", "TodoRead", "BashOutput"}
    | {"ExitPlanMode", "AskUserQuestion", "Task"}
)
_BY_FOLDED = {name.casefold(): name for name in SHAPES}


@dataclass(frozen=True)
class Facts:
    """A Claude Code call as the policy's facts, on the host: the command, the paths and how
    each is used, what is known only when it runs, and a URL."""

    command: str | None = None
    paths: tuple[tuple[str, Access], ...] = ()
    unknown: tuple[str, ...] = ()
    url: str | None = None


def judged_as(name: str) -> str | None:
    """The Claude Code tool whose input ``name`` is judged as (case ignored), if any."""
    return _BY_FOLDED.get(name.casefold())


def facts(hook: HookInput) -> Facts:
    """The facts of a Claude Code call, by tool. Raises FormatError for an input of the wrong
    shape, naming the field."""
    name = judged_as(hook.tool_name)
    if name is None:
        return Facts()
    given, cwd = hook.tool_input, hook.cwd
    try:
        parsed = SHAPES[name].model_validate(given)
    except ValidationError as exc:
        raise FormatError(
            f"the {hook.tool_name} call's {field_errors(exc, 'tool_input')}"
        ) from None
    unknown: list[str] = []

    def at(path: str | None) -> str:
        if path and _EXPANSION.search(path):
            unknown.append(path)  # a `$` the hook does not expand; Claude Code might
        return posixpath.join(cwd, os.path.expanduser(path)) if path else cwd

    if isinstance(parsed, CommandInput):
        found = named_paths(parse_command(parsed.command), cwd)
        # the folder it runs in: `ls`, `git status`, `make` read it without naming it
        paths = ((cwd, "read"), *found.paths)
        return Facts(parsed.command, paths, tuple(found.unknown))
    if isinstance(parsed, FileInput | NotebookInput):
        path = parsed.file_path if isinstance(parsed, FileInput) else parsed.notebook_path
        return Facts(paths=((at(path), FILE_ACCESS[name]),), unknown=tuple(unknown))
    if isinstance(parsed, GlobInput):
        folder = at(parsed.path)
        return _glob_facts(folder, parsed.pattern, unknown)
    if isinstance(parsed, FolderInput):
        folder = at(parsed.path)
        glob = parsed.glob if isinstance(parsed, GrepInput) else None
        if glob is not None and reaches_hidden(glob):
            unknown.append(f"{glob} (a glob that makes Grep read hidden files, as .env)")
        return Facts(paths=((folder, "read"),), unknown=tuple(unknown))
    assert isinstance(parsed, FetchInput)
    return Facts(url=parsed.url)


def _glob_facts(folder: str, pattern: str, unknown: list[str]) -> Facts:
    """``Glob``: its folder, and each brace alternative's fixed folder (``{/etc,src}/*``
    reaches ``/etc``); a ``..`` after a wildcard leads where only the match knows."""
    paths: list[tuple[str, Access]] = [(folder, "read")]
    found = alternatives(pattern)
    if found is None:
        unknown.append(f"{pattern[:80]} (too many brace alternatives)")
    for alternative in found or ():
        fixed = fixed_folder(alternative)
        if fixed:
            paths.append((posixpath.join(folder, os.path.expanduser(fixed)), "read"))
        if climbs(alternative):
            unknown.append(alternative)
    return Facts(paths=tuple(dict.fromkeys(paths)), unknown=tuple(unknown))


def hard_links(paths: Iterable[tuple[str, Access]]) -> list[tuple[str, int]]:
    """The files among ``paths`` read or written that have other names (hard links): the
    hook sees one name, the file may be protected under another (``.git/config``,
    ``~/.ssh/id_rsa``)."""
    found: list[tuple[str, int]] = []
    for path, access in paths:
        if access == "delete":
            continue  # removing one name leaves the others as they were
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            found.append((path, info.st_nlink))
    return found


def web_decision(policy: Policy, url: str) -> Decision | None:
    """What the policy says of the host ``url`` reaches: its ``[network]`` table when it has
    one; without, a URL of this machine or a private network (or one whose host cannot be
    told) asks. None when nothing is to be said."""
    target = web_target(url)
    shown = url[:200]
    if policy.egress is not None:
        if target is None:
            reason = (
                f"the URL {shown!r} can be read as more than one host (a backslash, a space "
                "or a control character), so its host cannot be checked"
            )
            return Decision(Effect.DENY, URL_RULE, reason, "call", None)
        return policy.egress.decide(target.host, target.port)
    if target is None:
        what = "its host cannot be told"
    elif target.scheme not in ("http", "https"):
        what = f"a {target.scheme or 'schemeless'} URL, not the web"
    elif is_internal(target.host):
        what = f"{target.host} is this machine or a private network"
    else:
        return None
    reason = (
        f"{shown!r}: {what}; Claude Code fetches it with your access, and no [network] table "
        "names the hosts that may be reached"
    )
    return Decision(Effect.ASK, INTERNAL_RULE, reason, "call", None)
    return None


__all__ = [
    "FILE_ACCESS",
    "INTERNAL_RULE",
    "READ_ONLY",
    "URL_RULE",
    "Facts",
    "facts",
    "hard_links",
    "judged_as",
    "web_decision",
]
