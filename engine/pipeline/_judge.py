"""The moment of use: a call's file work judged again where it really lands, as it lands.

A call is decided on the paths it names when it arrives (step 4), and may then wait for a slot;
by the time it runs, a link may have been made or swapped, and a walking tool (grep, glob_files,
list_directory) reaches files nobody named. So a tool that takes a `VirtualFS` gets a guarded
view of it (`VirtualFS.guarded`) instead, whose every operation asks this call's `CallJudge`
about the final target it reaches, under the descriptor or lock that then uses it.

The judge asks the engine's policy what it would have decided had the call named that path:
the call's own request (its subject, tool, command, read-only claim, the tool's dangerous
paths) with that one path and how it is used. Then:

* allow and warn go on (a warning about the path itself is noted once per path);
* deny refuses, naming the rule and its reason;
* ask goes on only where an approval already covers it: a lasting one (``[[approvals]]``, or
  answered "session"), or the call's own: the call was asked and
  approved, and the path is one the call named, for that use (for a read: named for any use,
  since a call approved to change a file reads it, as an edit does). An approver cannot be
  asked from inside a running tool (a sync tool runs in a worker thread, its caller waiting),
  so any other path that needs approval is refused, saying so; a rule that asks about every
  path of a tool therefore leaves a walk with only what the call named. In shadow mode nothing
  is refused: the would-be refusal is noted as a warning.

The call's admission is here too (`admit_call`), and what becomes of a call stopped before it
runs: `verdict` (a deny decision) and `refused` (arguments that never reached a decision). A
call of a tool on host paths (the raw text tools) is marked ``dangerous_io`` however it ends,
refused or not, so that a search of results or audit records for the marker finds every attempt
at host files.
"""

from __future__ import annotations

from typing import Any, Final

from stockade.engine.errors import PermissionDeniedError
from stockade.engine.injection import ContextLevel, ToolContext
from stockade.engine.messages import CallNotes, ErrorInfo, ToolCall, ToolResult
from stockade.engine.pipeline import _results as results
from stockade.engine.pipeline._decide import warned
from stockade.engine.pipeline._lasting import Lasting
from stockade.engine.pipeline._state import Admitted
from stockade.engine.pipeline._validate import ignored_warning
from stockade.engine.tools import RegisteredTool, ToolBase
from stockade.policies import Decision, Effect, Request
from stockade.policies.request import Access
from stockade.policies.store_feed import PolicyFeed
from stockade.sandbox import VirtualFS

_MAX_REMEMBERED: Final = 65_536  # verdicts kept per call (a walk judges each file, often twice)


class CallJudge:
    """The guard of one admitted call's file systems (`stockade.sandbox.Guard`)."""

    __slots__ = ("_admitted", "_lasting", "_named", "_noted", "_policy", "_verdicts")

    def __init__(self, lasting: Lasting, admitted: Admitted) -> None:
        self._policy = lasting.policy
        self._lasting = lasting
        self._admitted = admitted
        # the paths the call named, and how: what its decision (and any approval) was about
        self._named: dict[str, set[str]] = {}
        for path, access in admitted.request.paths:
            self._named.setdefault(path, set()).add(access)
        self._verdicts: dict[tuple[str, str], str | None] = {}
        self._noted: set[str] = set()

    def __call__(self, path: str, access: Access) -> str | None:
        """None when the call may go on with ``path``, else why not (a sentence naming the
        rule). The same path and use are decided once per call."""
        key = (path, access)
        if key in self._verdicts:
            return self._verdicts[key]
        verdict = self._verdict(path, access)
        if len(self._verdicts) < _MAX_REMEMBERED:
            self._verdicts[key] = verdict
        return verdict

    def _verdict(self, path: str, access: Access) -> str | None:
        admitted = self._admitted
        request = admitted.request._replace(paths=((path, access),))
        decision = self._policy.decide(request)
        effect = decision.effect
        if effect is Effect.ALLOW:
            return None
        if effect is Effect.WARN:
            # the path's own warning, unless the call named it: then its arrival noted it
            if decision.target == path and access not in self._named.get(path, ()):
                self._note(path, f"{decision.reason} ({access} of {path}, reached at run time)")
            return None
        if effect is Effect.ASK:
            if decision.shadow:
                self._note(path, f"shadow mode: would refuse {access} of {path}: {_rule(decision)}")
                return None
            if self._approved(path, access) or self._lasting.approve(request, decision):
                return None
            return (
                f"{_rule(decision)} needs approval, which was not asked for this path: it was "
                "reached at run time, after the call was decided"
            )
        return _rule(decision)

    def _approved(self, path: str, access: Access) -> bool:
        """Whether the call's approval covers ``access`` of ``path``: the call was asked about
        and approved with that path named, for that use (or, for a read, for any: a call
        approved to change a file reads it, as an edit does, and to delete it hashes it)."""
        notes = self._admitted.notes
        if notes is None or notes.approval != "approved":
            return False
        named = self._named.get(path)
        return named is not None and (access in named or access == "read")

    def _note(self, path: str, warning: str) -> None:
        if path not in self._noted:
            self._noted.add(path)
            self._admitted.warn(warning)


def _rule(decision: Decision) -> str:
    rule = f"rule {decision.rule}" if decision.rule else "the policy's default"
    return f"{rule}: {decision.reason}"


def admit_call(
    call: ToolCall,
    tool: RegisteredTool,
    kwargs: dict[str, Any],
    ctx: ToolContext | None,
    decision: Decision,
    request: Request,
    ignored: list[str],
    lasting: Lasting,
    feed: PolicyFeed | None = None,
) -> Admitted:
    """Steps 1-4 done: the call as it goes on, its files to be judged where each lands (by
    ``lasting.policy``, an ask there allowed where the call's approval or a lasting one covers
    it). ``feed``: where the policy comes from, if from a store (a warning on the call when it
    cannot be reached)."""
    call_admitted = Admitted(call, tool, kwargs, ctx, decision, request)
    if ctx is not None:
        guard_files(call_admitted, lasting)
    if tool.spec.path_space == "host":
        call_admitted.note().dangerous_io = True
    if ignored:
        call_admitted.note().ignored_arguments = ignored
        call_admitted.warn(ignored_warning(ignored))
    if feed is not None and feed.problem is not None:  # its store cannot be reached
        call_admitted.warn(feed.problem)  # decided by the last good policy, which says so
    return call_admitted


def verdict(admitted: Admitted, started: float) -> ToolResult | None:
    """Deny stops the call here (its result, which keeps the call's notes: a refused call on host
    paths is still marked ``dangerous_io``); warn is noted and logged; allow passes."""
    effect = admitted.decision.effect
    if effect is Effect.ALLOW:
        return None
    if effect is Effect.DENY:
        error = ErrorInfo(PermissionDeniedError.__name__, admitted.decision.reason)
        return results.denied(admitted, started, error)
    warned(admitted)
    return None


def refused(
    call: ToolCall, tool: RegisteredTool | None, error: BaseException, started: float
) -> ToolResult:
    """The result of a call stopped before it was decided (arguments that fail validation, too
    large, or unreadable): an error, marked ``dangerous_io`` when the tool works on host paths,
    like every other call of it."""
    result = results.failure(call, tool, error, started)
    if tool is not None and tool.spec.path_space == "host":
        result.notes = CallNotes(dangerous_io=True)
        result.metadata = result.notes.as_metadata()
    return result


def guard_files(admitted: Admitted, lasting: Lasting) -> None:
    """Give the call's tool, in place of each `VirtualFS` it takes (as an argument, or from its
    `ToolContext`), a view that judges every path at the moment of use. Tools that take
    neither, and tools that run a command, are left as they are."""
    tool = admitted.tool
    if tool.spec.command is not None:
        # a command's files are reached by its process, in the box, and judged there; the file
        # system it is given only lays out its mounts (and a judge would refuse the workspace
        # itself to a policy that allows nothing but the command)
        return
    kwargs = admitted.kwargs
    judge: CallJudge | None = None
    views: dict[int, VirtualFS] = {}
    wants_context = isinstance(tool.source, ToolBase)
    for injection in tool.injections:
        if issubclass(injection.type, ToolContext):
            wants_context = True
        value = kwargs.get(injection.name)
        if isinstance(value, VirtualFS):
            judge = judge or CallJudge(lasting, admitted)
            view = views.get(id(value))
            if view is None:
                view = views[id(value)] = value.guarded(judge)
            kwargs[injection.name] = view
    ctx = admitted.ctx
    if wants_context and ctx is not None:
        fs = ctx.get(VirtualFS)
        if fs is not None:
            judge = judge or CallJudge(lasting, admitted)
            view = views.get(id(fs)) or fs.guarded(judge)
            # nearest first: ctx.get(VirtualFS) finds the view before the engine's own
            ctx.levels = (ContextLevel({VirtualFS: view}), *ctx.levels)
