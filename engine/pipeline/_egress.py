"""A command's connections judged when they are made: the policy's ``[network]`` table asked
about each host and port its proxy sees (`stockade.sandbox.egress`), and each one noted.

A command line says little of where it will connect (``pip install`` reaches an index, then a
file host; a script reaches what it computes), so nothing is decided from its words: the box
has no way out but a proxy on this side, which calls the `HostJudge` of the call when a
connection is asked for. Then:

* allow goes on, deny refuses (naming the rule);
* ask goes to the call's approver, from the proxy's thread and on the engine's loop, while the
  command waits on its connection. The answer holds for the host and port for the rest of the
  call (``True`` or ``"call"``), for the engine's life (``"session"``), or from then on
  (``"always"``: kept in the engine's approved-hosts file, when it has one, else for the
  session, saying so). A refusal holds for the rest of the call: it is not asked again. One
  question at a time per call, so ten connections to one host ask once. Without an approver
  the ask refuses; in shadow mode it goes on, noted as a warning.

Every connection, allowed or not, is noted in the call's notes (its audit record and span).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Final

from stockade.engine.messages import ConnectionNote
from stockade.engine.pipeline._approval import put
from stockade.engine.pipeline._state import Admitted
from stockade.policies import Decision, Effect
from stockade.sandbox.egress import Connection, Egress, Verdict

if TYPE_CHECKING:
    from stockade.policies.egress import EgressRules

_MAX_NOTED: Final = 1000  # connections noted per call (the proxy counts the rest)


class HostApprovals:
    """Hosts approved beyond one call: for the engine's life, and with ``path`` from then on
    (a JSON file of ``host:port`` keys, written whole and renamed into place)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._session: set[str] = set()
        self._always: set[str] = set()
        if self.path is not None and self.path.exists():
            try:
                kept = json.loads(self.path.read_text(encoding="utf-8"))
                self._always = {str(key) for key in kept.get("always", [])}
            except (OSError, ValueError, AttributeError) as exc:
                raise ValueError(
                    f"the approved-hosts file {self.path} cannot be read ({exc}); fix or remove it"
                ) from None

    def covers(self, key: str) -> str | None:
        """How ``key`` (``host:port``) was approved beyond a call, if it was."""
        with self._lock:
            if key in self._always:
                return "always"
            return "session" if key in self._session else None

    def grant(self, key: str, scope: str) -> str | None:
        """Remember an approval for the session or always; a warning when "always" cannot be
        kept (no file, or writing it failed)."""
        with self._lock:
            self._session.add(key)
            if scope != "always":
                return None
            if self.path is None:
                return (
                    f"{key} was approved always, but this engine keeps no approved-hosts file: "
                    "it is approved for this session only"
                )
            self._always.add(key)
            try:
                self._write(sorted(self._always))
            except OSError as exc:
                return f"{key} could not be kept in {self.path} ({exc}): approved for this session"
            return None

    def _write(self, keys: list[str]) -> None:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".approved-hosts-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"always": keys}, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


class HostJudge:
    """One call's judge of its command's connections (`stockade.sandbox.egress.Judge`)."""

    def __init__(
        self,
        rules: EgressRules,
        admitted: Admitted,
        approvals: HostApprovals,
        loop: asyncio.AbstractEventLoop,
        *,
        shadow: bool = False,
    ) -> None:
        self._rules = rules
        self._admitted = admitted
        self._approvals = approvals
        self._loop = loop
        self._shadow = shadow
        self._asking = threading.Lock()
        self._answered: dict[str, bool] = {}
        admitted.note()  # made now: threads of the proxy append to it

    def egress(self) -> Egress:
        """The command's network: this judge, and the table's names, networks and ports."""
        rules = self._rules
        return Egress(
            judge=self,
            hosts=dict(rules.hosts),
            reach_private=tuple(rules.reach_private),
            ports=tuple(sorted(rules.ports)),
            on_connection=self.noted,
        )

    def __call__(self, host: str, port: int) -> Verdict:
        decision = self._rules.decide(host, port)
        if decision.effect is Effect.ALLOW or decision.effect is Effect.WARN:
            return Verdict(True, _rule(decision))
        if decision.effect is Effect.DENY:
            return Verdict(False, _rule(decision))
        if self._shadow:
            self._admitted.warn(f"shadow mode: would ask about {host}:{port}: {_rule(decision)}")
            return Verdict(True, f"shadow mode: {_rule(decision)}")
        with self._asking:
            return self._asked(f"{host}:{port}", decision)

    def _asked(self, key: str, question: Decision) -> Verdict:
        if key in self._answered:
            approved = self._answered[key]
            return Verdict(
                approved, f"{'approved' if approved else 'refused'} earlier in this call"
            )
        scope = self._approvals.covers(key)
        if scope is not None:
            return Verdict(True, f"approved for the {scope}")
        admitted = self._admitted
        if admitted.approver is None:
            return Verdict(False, f"{_rule(question)}; it needs approval and nobody can answer")
        asking = put(admitted.approver, admitted.call, question, admitted.approval_timeout)
        try:
            future = asyncio.run_coroutine_threadsafe(asking, self._loop)
        except RuntimeError:  # the loop is closed: the engine is gone
            asking.close()
            return Verdict(False, f"{_rule(question)}; nobody could be asked")
        limit = admitted.approval_timeout
        try:
            answer = future.result(None if limit is None else limit + 5.0)
        except Exception as exc:  # the call was cancelled, or the loop stopped
            future.cancel()
            return Verdict(False, f"not asked: {type(exc).__name__}")
        if answer.warning:
            admitted.warn(answer.warning)
        self._answered[key] = answer.approved
        if not answer.approved:
            return Verdict(False, answer.verdict or f"{key} was not approved")
        if answer.scope in ("session", "always"):
            warning = self._approvals.grant(key, answer.scope)
            if warning:
                admitted.warn(warning)
        return Verdict(True, f"approved ({answer.scope or 'call'})")

    def noted(self, connection: Connection) -> None:
        """Note ``connection`` in the call's notes (the first thousand of a call)."""
        notes = self._admitted.note()
        if len(notes.connections) < _MAX_NOTED:
            fields = connection.model_dump(exclude={"duration_s"})
            notes.connections.append(ConnectionNote(**fields))


def _rule(decision: Decision) -> str:
    rule = f"rule {decision.rule}" if decision.rule else "the policy's default"
    return f"{rule}: {decision.reason}"
