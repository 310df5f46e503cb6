"""Claude Code's PreToolUse hook, decided by Stockade's policy: what Claude Code sends, what
each of its tools is to the policy, and the decision it reads back.

    judge = ClaudeCodeJudge(Policy.preset("default"), [Mount("/workspace", "/home/me/project")])
    hook = parse_hook_input(sys.stdin.buffer.read())    # FormatError naming the field
    verdict = judge.judge(hook)
    print(verdict.output().model_dump_json(by_alias=True))  # {"hookSpecificOutput": {...}}

Each Claude Code tool is judged as the Stockade tool it resembles, through the engine's own
judging path (`Engine.preview`: classification through the virtual filesystem, the policy with
Stockade's own files protected, the policy file's lasting approvals), so the rules decide it as
they decide Stockade's tools:

* ``Bash``: an ``execute`` of its command line, judged like ``run_shell`` (every command in it,
  the dangerous-command list), run WITHOUT isolation (Claude Code runs it, not the box: a
  policy requiring isolation denies it, the default preset asks saying so), with the folder it
  runs in and every file the line names judged as a read, write or delete (`_claude_bash`);
* ``Read``, ``NotebookRead``: a read of ``file_path`` / ``notebook_path``; ``Write``,
  ``Edit``, ``MultiEdit``, ``NotebookEdit``: a write of it; ``Glob``, ``Grep``, ``LS``: a read
  of ``path`` (the ``cwd`` when left out), and of a glob's fixed folders;
* ``WebFetch``: by its name, and its URL's host and port by the policy's ``[network]`` table
  when it has one; without, a URL of this machine or a private network asks (rule
  ``hook-internal-host``), and a URL that could go to two hosts is refused (``hook-url``);
* ``mcp__*`` and every other tool: by its name (`_claude_facts`).

Three more checks can only make a decision stricter: what is known only when the call runs
(``$HOME``, ``$(cmd)``, ``PATH=.; ls``, a glob that makes ``Grep`` read hidden files) makes an
allowed call ask (rule ``hook-unknown-path``); so does a file with other names (hard links,
rule ``hook-hard-link``), which may be a protected file under another name.

Host paths: the workspace is ``/workspace`` and each ``--mount`` its prefix; a path is mapped
as spelled, then resolved through the virtual filesystem (``..`` and links followed: a link in
the project to ``~/.ssh`` is judged as where it leads, and refused). A path outside every mount
is denied (rule ``sandbox``): nothing confines Claude Code's tools to the workspace but this.
"""

from __future__ import annotations

import os
import posixpath
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from stockade.engine.adapters._claude_facts import (
    INTERNAL_RULE,
    READ_ONLY,
    URL_RULE,
    Facts,
    facts,
    hard_links,
    web_decision,
)
from stockade.engine.adapters._claude_wire import (
    HookInput,
    HookOutput,
    PreToolUseDecision,
    parse_hook_input,
)
from stockade.engine.errors import CallError
from stockade.engine.messages import ToolCall, new_call_id
from stockade.engine.observe import AuditLog
from stockade.engine.observe.records import intent_record
from stockade.engine.pipeline import Engine
from stockade.engine.toolkit import Toolkit
from stockade.engine.tools import tool
from stockade.policies import Decision, Effect, Policy, Request, strictest
from stockade.policies.checks import UNBOXED_NOTE
from stockade.policies.request import Access
from stockade.sandbox import Bubblewrap, Mount, VirtualFS

TOOL_PREFIX = "claude_code:"  # how the audit log names Claude Code's tools
INPUT_RULE = "hook-input"  # a hook input that could not be read
UNKNOWN_RULE = "hook-unknown-path"  # what the call does is known only when it runs
LINK_RULE = "hook-hard-link"  # a file with other names, which may be protected
OUTSIDE_RULE = "sandbox"  # a path outside every mount, as for Stockade's own tools
WORKSPACE = "/workspace"
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what the toolkit accepts
_NOT_BOXED = Bubblewrap(None, "Claude Code runs its commands itself, outside Stockade's box")
_UNBOXED = (
    "; Claude Code runs it itself, WITHOUT Stockade's box, with your user's rights: it could "
    "read, change or send anything you can"
)
_VERBS = {
    Effect.ALLOW: "allowed",
    Effect.WARN: "allowed with a warning",
    Effect.ASK: "approval needed",
    Effect.DENY: "denied",
}

# -- the judgement -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """One hook call decided: the call as Stockade judged it, the request the policy saw, its
    decision, and what to tell Claude Code."""

    call: ToolCall
    label: str  # the tool as the audit log names it: claude_code:Bash
    request: Request
    decision: Decision
    reason: str

    def output(self) -> HookOutput:
        """The reply: allow and warn allow (a warning said in the reason), ask asks, deny
        denies."""
        effect = self.decision.effect
        answer: Literal["allow", "deny", "ask"] = (
            "deny" if effect is Effect.DENY else "ask" if effect is Effect.ASK else "allow"
        )
        return HookOutput(
            hookSpecificOutput=PreToolUseDecision(
                hookEventName="PreToolUse",
                permissionDecision=answer,
                permissionDecisionReason=self.reason,
            )
        )

    def record(self) -> dict[str, Any]:
        """The audit log's ``intent`` record of this call (Stockade's own shape, its tool named
        ``claude_code:<tool>``)."""
        record: dict[str, Any] = dict(intent_record(self.call, self.request, self.decision))
        record["tool"] = self.label
        return record


def refusal_record(tool_name: str | None, call_id: str | None, reason: str) -> dict[str, Any]:
    """The audit record of a hook call refused before it could be judged (its input could not
    be read, or Stockade could not start): an ``intent`` denied by rule ``hook-input``."""
    return {
        "kind": "intent",
        "time": time.time(),
        "call_id": call_id or new_call_id(),
        "subject": "agent",
        "tool": TOOL_PREFIX + (tool_name if tool_name else "?"),
        "action": "call",
        "effect": Effect.DENY,
        "rule": INPUT_RULE,
        "reason": reason,
    }


class ClaudeCodeJudge:
    """Decides Claude Code's tool calls by ``policy`` over ``mounts`` (the first the workspace,
    ``/workspace``; host folders). ``spelled`` are other spellings of the mounts' folders (the
    project folder as Claude Code names it, when a link leads to it). With ``audit``, the
    policy protects the log like an engine's. Close it to release the file system."""

    def __init__(
        self,
        policy: Policy,
        mounts: Sequence[Mount],
        *,
        audit: AuditLog | None = None,
        spelled: dict[str, str] | None = None,
        subject: str = "agent",
    ) -> None:
        self.subject = subject
        self.fs = VirtualFS(list(mounts))
        # host folder spellings (as given, and resolved) -> the mount's prefix, longest first
        roots: dict[str, str] = {}
        for mount in mounts:
            if mount.root is not None:
                roots[str(mount.root)] = mount.prefix
                roots[os.path.realpath(mount.root)] = mount.prefix
        for folder, prefix in (spelled or {}).items():
            roots[os.path.abspath(folder)] = prefix
        self._roots = sorted(roots.items(), key=lambda item: -len(item[0]))
        self._toolkit = Toolkit()
        self.engine = Engine(
            self._toolkit, policy=policy, fs=self.fs, audit=audit, bubblewrap=_NOT_BOXED
        )

    @property
    def policy(self) -> Policy:
        """The engine's policy now: Stockade's own files protected, the newest of a store's."""
        return self.engine.policy

    def close(self) -> None:
        """Release the file system."""
        self.fs.close()

    def judge(self, hook: HookInput) -> Verdict:
        """The decision on one hook call. Raises FormatError for a tool input of the wrong
        shape (the field named)."""
        name = hook.tool_name
        call_id = hook.tool_use_id or new_call_id()
        named = facts(hook)
        logical: list[tuple[str, Access]] = []
        outside: list[tuple[str, Access]] = []
        for path, access in named.paths:
            mapped = self.logical(path)
            if mapped is not None:
                logical.append((mapped, access))
            else:
                outside.append((posixpath.normpath(path), access))
        arguments: dict[str, Any] = {
            "reads": [p for p, a in logical if a == "read"],
            "writes": [p for p, a in logical if a == "write"],
            "deletes": [p for p, a in logical if a == "delete"],
        }
        if named.command is not None:
            arguments["command"] = named.command
        call = ToolCall(name=name, arguments=arguments, id=call_id, subject=self.subject)
        request, decision = self._decide(name, call, named)
        if logical and not request.paths:
            # a path refused before classifying (a link out of a mount): the record still
            # names the paths as they were given
            request = request._replace(paths=tuple(logical))
        if outside:
            # denied whatever the rules say; a rule's own denial (a dangerous command) is
            # still the one named, as the more telling
            path, access = outside[0]
            request = request._replace(paths=(*request.paths, *outside))
            reason = (
                f"{path} is outside the workspace ({self.host(WORKSPACE)}) and every --mount: "
                "only files inside them may be used"
            )
            decision = strictest(
                decision, Decision(Effect.DENY, OUTSIDE_RULE, reason, access, path)
            )
        decision = _unknown(decision, named.unknown)
        decision = _hard_linked(decision, named.paths)
        if named.url is not None and (said := web_decision(self.policy, named.url)) is not None:
            decision = _both(decision, said)
        return Verdict(call, TOOL_PREFIX + name, request, decision, self.reason(decision))

    def _decide(self, name: str, call: ToolCall, named: Facts) -> tuple[Request, Decision]:
        """Stockade's own judgement (`Engine.preview`) of the call's stand-in tool."""
        if not _TOOL_NAME.match(name):
            # not a name the toolkit takes (nor a model API): judged by the policy alone
            request = Request(self.subject, name, "call")
            return request, self.policy.decide(request)
        if self._toolkit.resolve(name) is None:
            self._toolkit.add(_stand_in(name, command=named.command is not None))
        try:
            request, decision = self.engine.preview(call)
        except CallError as exc:  # the stand-in's own arguments: a bug, and still a denial
            request = Request(self.subject, name, "call")
            return request, Decision(Effect.DENY, INPUT_RULE, str(exc), "call", None)
        if named.command is not None and request.command is None:
            # a path refused before classifying (a link out of the workspace): the record still
            # says which command it was
            request = request._replace(action="execute", command=named.command)
        return request, decision

    def logical(self, host: str) -> str | None:
        """Where host path ``host`` (absolute) is in the mounts: as spelled under a mount's
        folder (``..`` and links left to the file system), else resolved on the host; None
        when it is outside every mount."""
        found = self._under(host)
        if found is not None:
            if "/../" in f"{host}/" and self._under(posixpath.normpath(host)) is None:
                return None  # it climbs out of the mount's folder as written
            return found
        try:
            return self._under(os.path.realpath(host))
        except (OSError, ValueError):
            return None

    def _under(self, host: str) -> str | None:
        for root, prefix in self._roots:
            if host == root or host.startswith(root.rstrip("/") + "/"):
                rest = host[len(root) :].lstrip("/")
                return f"{prefix.rstrip('/')}/{rest}" if rest else prefix
        return None

    def host(self, logical: str) -> str:
        """Where a logical path of a host mount is on the host (itself, elsewhere)."""
        for mount in self.fs.mounts:
            prefix = mount.prefix
            if mount.root is not None and (logical == prefix or logical.startswith(prefix + "/")):
                return str(mount.root) + logical[len(prefix) :]
        return logical

    def reason(self, decision: Decision) -> str:
        """What Claude Code shows: the verdict, the rule and why, what it was about (as a host
        path), and the policy."""
        rule = f"rule {decision.rule}" if decision.rule else "the policy's default"
        why = decision.reason.replace(UNBOXED_NOTE, _UNBOXED)
        text = f"Stockade: {_VERBS[decision.effect]} by {rule}: {why}"
        target = decision.target
        if target is not None and target not in decision.reason and decision.action:
            shown = self.host(target) if decision.action != "execute" else target
            text += f" ({decision.action} {shown})"
        if "/workspace" in text:
            text += f" [/workspace is {self.host(WORKSPACE)}]"
        return f"{text} [policy {self.policy.source}]"


def _stand_in(name: str, *, command: bool) -> Callable[..., None]:
    """A tool that never runs, shaped for the policy like the Stockade tool ``name``
    resembles: its paths by how they are used, its command line, whether it is read-only."""

    def judged(
        command: str | None = None,
        reads: list[str] | None = None,
        writes: list[str] | None = None,
        deletes: list[str] | None = None,
    ) -> None:
        pass  # never run: no docstring either, which would be parsed for nothing

    spec: dict[str, Any] = {
        "name": name,
        "description": f"Claude Code's {name}",
        "paths": {"reads": "read", "writes": "write", "deletes": "delete"},
    }
    if command:
        spec["command"] = "command"
    if name in READ_ONLY:
        spec["read_only"] = True
    if name.startswith("mcp__") or name in ("WebFetch", "WebSearch"):
        spec["open_world"] = True
    return tool(**spec)(judged)


def _unknown(decision: Decision, notes: Sequence[str]) -> Decision:
    """A call with parts known only when it runs may not run unasked: nothing boxes it."""
    if not notes or decision.effect is Effect.DENY:
        return decision
    shown = ", ".join(repr(note[:120]) for note in notes[:5])
    asking = Decision(
        Effect.ASK,
        UNKNOWN_RULE,
        f"what it does is known only when it runs ({shown}); Claude Code runs it outside "
        "Stockade's box, so it cannot be judged before",
        "read",
        notes[0],
    )
    return _both(decision, asking)


def _hard_linked(decision: Decision, paths: Sequence[tuple[str, Access]]) -> Decision:
    """A file with other names (hard links) may be a protected file under another name."""
    if decision.effect is Effect.DENY or not (found := hard_links(paths)):
        return decision
    path, count = found[0]
    asking = Decision(
        Effect.ASK,
        LINK_RULE,
        f"{path} is one of {count} names of the same file (hard links): using it uses the "
        "file under its other names too, which may be protected, and they cannot be found",
        "read",
        path,
    )
    return _both(decision, asking)


def _both(decision: Decision, other: Decision) -> Decision:
    """The stricter of two decisions on one call; two asks name each other."""
    if decision.effect is Effect.ASK and other.effect is Effect.ASK:
        return decision.with_asks((other,))
    return strictest(decision, other)


__all__ = [
    "INPUT_RULE",
    "INTERNAL_RULE",
    "LINK_RULE",
    "OUTSIDE_RULE",
    "TOOL_PREFIX",
    "UNKNOWN_RULE",
    "URL_RULE",
    "ClaudeCodeJudge",
    "HookInput",
    "HookOutput",
    "PreToolUseDecision",
    "Verdict",
    "parse_hook_input",
    "refusal_record",
]
