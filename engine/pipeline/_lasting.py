"""Approvals that outlast the call: "yes for this session" and "yes, always".

The engine keeps one `Lasting` per instance: the policy file's ``[[approvals]]`` and those
answered "session" (in memory only: a new engine forgets them). An ask they fully cover is
allowed without asking anyone (`stockade.policies.approvals`). An "always" answer appends the
chosen suggestion to the policy file the engine was loaded from (`_approval_file`), and holds
from then on in this engine too; an engine whose policy came from no file keeps it for the
session and says so.
"""

from __future__ import annotations

import datetime
import logging
import threading
from pathlib import Path
from typing import Literal

from stockade.engine.messages import ToolCall, printable
from stockade.engine.pipeline._approval import Answer
from stockade.engine.pipeline._approval_file import append_approvals
from stockade.policies import Decision, Effect, Policy, Request, suggest
from stockade.policies.approvals import Approvals, Scope
from stockade.policies.suggestions import Suggestion
from stockade.sandbox import SandboxError, VirtualFS

log = logging.getLogger("stockade.engine")

Kept = Literal["once", "session", "always"]


class Lasting:
    """The approvals of one engine (and the ``policy`` they answer asks of), and how an answer
    adds to them."""

    def __init__(self, policy: Policy, fs: VirtualFS | None = None) -> None:
        self.policy = policy
        self._fs = fs
        self._approvals = Approvals(policy)
        self._file: Path | None = policy.file
        self._lock = threading.Lock()  # ids and the file: one "always" at a time

    def approve(self, request: Request, decision: Decision) -> Decision | None:
        """``decision`` (an ask) allowed by approvals covering every part that asks, or None."""
        if not len(self._approvals):
            return None
        return self._approvals.approve(self.policy, request, decision)

    def question(self, request: Request, decision: Decision) -> Decision:
        """``decision`` as an approver would meet it: allowed when approvals cover it, an ask
        with its suggestions (`stockade.policies.suggest`), anything else as it is."""
        if decision.effect is not Effect.ASK:
            return decision
        covered = self.approve(request, decision)
        if covered is not None:
            return covered
        try:
            offered = suggest(self.policy, request, decision, is_folder=self._is_folder)
        except Exception:  # a suggestion that cannot be made: the question still stands
            log.warning("no lasting approval can be suggested for %s", request, exc_info=True)
            offered = ()
        return decision._replace(suggestions=offered)

    def _is_folder(self, path: str) -> bool:
        if self._fs is None:
            return False
        try:
            return self._fs.stat(path).kind == "dir"
        except (OSError, SandboxError):
            return False

    def scope_of(self, decision: Decision) -> Kept:
        """How lasting the approval named by an approved ``decision`` is."""
        return next((a.scope for a in self._approvals if a.spec.id == decision.rule), "always")

    def keep(self, call: ToolCall, question: Decision, answer: Answer) -> tuple[Kept, str | None]:
        """Keep the approval ``answer`` chose (scope session or always) for ``question``, the
        ask put about ``call``. Returns the scope it was kept for ("once" when it could not be
        kept longer) and a warning saying why not, if one."""
        scope = answer.scope
        chosen = answer.rule if answer.rule is not None else next(iter(question.suggestions), None)
        if chosen is None:
            return "once", (
                f"approved for this call only: nothing it asks about may be approved "
                f"{'for the session' if scope == 'session' else 'always'} (a protected path, a "
                "dangerous command or a tool's own check is asked every time)"
            )
        if chosen not in question.suggestions:
            return "once", (
                "approved for this call only: the approver chose a rule that was not one of "
                "the suggestions"
            )
        with self._lock:
            named = chosen.named(self._new_ids(len(chosen.approvals)))
            if scope == "always" and self._file is not None:
                reason = f"approved always for call {call.id} ({call.name}): {named.summary}"
                stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
                comment = f"Approved always on {stamp} for call {call.id} ({call.name}, " + (
                    f"subject {call.subject}): {named.summary}"
                )
                try:
                    append_approvals(self._file, named, reason, comment)
                except Exception as exc:  # whatever failed, the yes holds for the session
                    self._add(named, "session")
                    return "session", (
                        f"approved for this session only: the approval could not be written to "
                        f"{self._file} ({printable(exc)})"
                    )
                self._add(named, "always", reason)
                return "always", None
            self._add(named, "session")
            if scope == "always":
                return "session", (
                    "approved for this session only: the engine's policy was not loaded from a "
                    "file, so there is no file to keep it in"
                )
            return "session", None

    def _add(self, suggestion: Suggestion, scope: Scope, reason: str = "") -> None:
        for spec in suggestion.approvals:
            self._approvals.add(spec.model_copy(update={"reason": reason or spec.reason}), scope)

    def _new_ids(self, count: int) -> list[str]:
        names: list[str] = []
        number = len(self._approvals)
        while len(names) < count:
            number += 1
            if not self._approvals.taken(f"approved-{number}"):
                names.append(f"approved-{number}")
        return names
