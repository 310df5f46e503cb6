"""Suggested rules: for a call that asks, the approvals that would allow it next time.

Narrowest first: this exact command (every command of the line that asks, as written); the
command with any arguments (``npm run test:unit *``); its program and subcommand with any
arguments (``npm run *``); for paths, these files, then everything in their folders; for a
call of a tool with nothing else to go by, calling the tool. Each suggestion is one or more
`ApprovalSpec` (a command part and a path part cannot share one), all limited to the call's
subject and tool, and each covers the call it was made for (checked: a suggestion that would
not is dropped).

Never suggested: anything for a call that asks about a protected path, a dangerous command, a
tool's own check or a command run unboxed (`approvals.asking_atoms` refuses those, so no
approval could answer them anyway), and no prefix shorter than the program and its
subcommand: a suggestion is never broader than the kind of call it was made for.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from stockade.policies.approvals import Approvals, asking_atoms
from stockade.policies.decision import Decision, Effect
from stockade.policies.globs import escape
from stockade.policies.paths import WORKSPACE
from stockade.policies.policy import Policy
from stockade.policies.policy_file import ApprovalSpec
from stockade.policies.request import Request

Kind = Literal["command", "prefix", "file", "folder", "tool"]


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A lasting approval offered for one asked call: ``kind`` (how broad), ``summary`` (one
    line for the person answering) and the ``approvals`` it adds (ids are given when kept)."""

    kind: Kind
    summary: str
    approvals: tuple[ApprovalSpec, ...]

    def toml(self, reason: str, comment: str) -> str:
        """The ``[[approvals]]`` tables to append to a policy file, after a ``# comment``."""
        lines = [f"# {line}" for line in comment.splitlines()]
        for spec in self.approvals:
            lines += ["[[approvals]]", f"id = {_quoted(spec.id)}"]
            lines.append(f"reason = {_quoted(reason)}")
            lines.append(f"subjects = {_listed(spec.subjects)}")
            lines.append(f"tools = {_listed(spec.tools)}")
            if spec.actions:
                lines.append(f"actions = {_listed(spec.actions)}")
            if spec.paths:
                lines.append(f"paths = {_listed(spec.paths)}")
            if spec.commands:
                lines.append(f"commands = {_listed(spec.commands)}")
        return "\n".join(lines) + "\n"

    def named(self, names: list[str]) -> Suggestion:
        """This suggestion with its approvals given ``names`` (one each, in order)."""
        specs = tuple(
            spec.model_copy(update={"id": name})
            for spec, name in zip(self.approvals, names, strict=True)
        )
        return Suggestion(self.kind, self.summary, specs)


def suggest(
    policy: Policy,
    request: Request,
    decision: Decision,
    *,
    is_folder: Callable[[str], bool] | None = None,
) -> tuple[Suggestion, ...]:
    """The suggestions for ``decision`` (an ask on ``request``), narrowest first; empty when no
    approval could answer it. ``is_folder`` says whether a path is a folder (then its "folder"
    suggestion is everything in it, not everything beside it); without it every path is taken
    for a file."""
    if decision.effect is not Effect.ASK or not _plain(request.subject):
        return ()
    file_rules = frozenset(rule.id for rule in policy.spec.rules)
    atoms = asking_atoms(policy, request, decision, file_rules)
    if not atoms:
        return ()
    commands = list(dict.fromkeys(a.command for a in atoms if a.command is not None))
    if commands and not _readable(policy, request, commands):
        return ()
    paths = list(dict.fromkeys((a.path, a.action) for a in atoms if a.path is not None))
    calls = [a for a in atoms if a.command is None and a.path is None]
    subjects, tools = [request.subject], [request.tool]
    found: list[Suggestion] = []
    for level in range(3):
        specs: list[ApprovalSpec] = []
        summary: list[str] = []
        kind: Kind = "tool"
        if commands:
            patterns = _command_level(commands, level)
            if patterns is None:
                continue
            kind = "command" if level == 0 else "prefix"
            specs.append(
                ApprovalSpec(
                    id="-", subjects=subjects, tools=tools, actions=["execute"], commands=patterns
                )
            )
            summary.append(_say_commands(patterns, level))
        if paths:
            if level > 1:
                continue
            kind = kind if commands else ("file" if level == 0 else "folder")
            levels = {
                access: _path_level([p for p, each in paths if each == access], level, is_folder)
                for access in dict.fromkeys(access for _, access in paths)
            }
            if any(patterns is None for patterns in levels.values()):
                continue
            for access, patterns in levels.items():
                assert patterns is not None
                specs.append(
                    ApprovalSpec(
                        id="-", subjects=subjects, tools=tools, actions=[access], paths=patterns
                    )
                )
                summary.append(f"{_verb(access)} {_say(patterns)}")
        if calls:  # the call itself asks too: calling the tool (its paths judged as ever)
            if level > 0 and not commands and not paths:
                break
            call = ApprovalSpec(id="-", subjects=subjects, tools=tools, actions=["call"])
            specs.append(call)
            if not commands and not paths:
                summary.append(f"calling {request.tool}")
        found.append(Suggestion(kind, "; ".join(summary), tuple(specs)))
    return tuple(_distinct(s for s in found if _covers(policy, request, decision, s)))


def _command_level(commands: list[str], level: int) -> list[str] | None:
    """The command patterns of one level: 0 each command exactly, 1 each with any arguments,
    2 each by its program and subcommand; None when a level says nothing new."""
    if level == 0:
        return [_literal(command) for command in commands]
    patterns = []
    for command in commands:
        words = command.split(" ")
        keep = len(words) if level == 1 else _head(words)
        if keep == 1 and _runs_code(words[0]):
            return None  # `python3 *`, `bash *`: any program at all
        patterns.append(" ".join(_literal(w) for w in words[:keep]) + " *")
    return patterns


_RUNS_CODE = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "ash", "fish", "node", "nodejs", "deno", "bun", "perl"}
    | {"ruby", "php", "lua", "Rscript", "pwsh", "powershell", "osascript", "tclsh", "awk"}
    | {"gawk", "env", "xargs", "npx", "bunx", "uvx", "pipx", "sudo", "doas", "timeout", "nice"}
    | {"nohup", "exec", "eval", "source", ".", "find", "make", "ssh", "docker", "kubectl"}
)


def _runs_code(program: str) -> bool:
    """Whether ``program`` runs whatever its arguments say (an interpreter, a wrapper)."""
    name = program.rsplit("/", 1)[-1]
    return name in _RUNS_CODE or name.startswith("python")


def _readable(policy: Policy, request: Request, commands: list[str]) -> bool:
    """Whether every command that asks can be told from others by its spelling: a word with
    a space in it (``python3 -c 'a b'``) is spelled like two words, and a pattern made from the
    spelling would also match what its words split differently say."""
    line = policy.command_line(request.command or "")
    asking = set(commands)
    for command in line.commands:
        if asking.isdisjoint(command.spellings()):
            continue
        texts = [*command.assignments, *(word.text for word in command.words)]
        if any(any(ch.isspace() for ch in text) for text in texts):
            return False
    return True


def _head(words: list[str]) -> int:
    """How many words name the command: the program and its subcommand when the second word
    is one (not an option, not a path), else the program alone."""
    if len(words) >= 2 and not words[1].startswith("-") and "/" not in words[1]:
        return 2
    return 1


def _path_level(
    paths: list[str], level: int, is_folder: Callable[[str], bool] | None
) -> list[str] | None:
    """The path patterns of one level: 0 the paths themselves, 1 everything in their folders
    (a folder's own contents; a file's siblings); None when a folder would be the root."""
    if level == 0:
        return [_shown(escape(path)) for path in paths]
    folders = dict.fromkeys(
        path if is_folder is not None and is_folder(path) else posixpath.dirname(path)
        for path in paths
    )
    if "/" in folders:
        return None  # everything everywhere is no folder to suggest
    return [_shown(escape(folder)) + "/**" for folder in folders]


def _shown(pattern: str) -> str:
    """A pattern under the workspace as people write it (``src/x.py``), others absolute (and
    one whose relative form would start with ``!``, which would make it an exclusion)."""
    if pattern.startswith(WORKSPACE + "/") and pattern[len(WORKSPACE) + 1 :][:1] != "!":
        return pattern[len(WORKSPACE) + 1 :]
    return pattern


def _plain(subject: str) -> bool:
    """Whether ``subject`` can be named by an approval as itself: not ``*`` (which means every
    subject), nor a name a rule could not hold."""
    try:
        return subject != "*" and bool(ApprovalSpec(id="-", subjects=[subject]).subjects)
    except ValueError:
        return False


def _literal(text: str) -> str:
    """``text`` as a command pattern that matches exactly it (wildcards in brackets)."""
    return "".join(f"[{ch}]" if ch in "*?[" else ch for ch in text)


def _say(patterns: list[str]) -> str:
    return ", ".join(f"`{p}`" for p in patterns)


def _say_commands(patterns: list[str], level: int) -> str:
    if level == 0:
        return ("the command " if len(patterns) == 1 else "the commands ") + _say(patterns)
    heads = [p.removesuffix(" *") for p in patterns]
    if level == 1:
        return _say(heads) + " with any arguments"
    return "any " + _say(heads) + " command"


def _verb(access: str) -> str:
    return {"read": "reading", "write": "writing", "delete": "deleting"}.get(access, access)


def _covers(policy: Policy, request: Request, decision: Decision, suggestion: Suggestion) -> bool:
    """Whether ``suggestion``, approved, would answer this very call (else it is not offered)."""
    approvals = Approvals(policy, suggestion.approvals)
    return approvals.approve(policy, request, decision) is not None


def _distinct(suggestions: Iterable[Suggestion]) -> list[Suggestion]:
    seen: set[tuple[str, ...]] = set()
    kept = []
    for suggestion in suggestions:
        key = tuple(spec.model_dump_json() for spec in suggestion.approvals)
        if key not in seen:
            seen.add(key)
            kept.append(suggestion)
    return kept


def _quoted(text: str) -> str:
    # TOML basic strings share JSON's escapes; a lone surrogate becomes an escape TOML refuses,
    # so the file is never written with it (the approval is kept for the session instead)
    return json.dumps(text)


def _listed(values: list[str]) -> str:
    return "[" + ", ".join(_quoted(v) for v in values) + "]"
