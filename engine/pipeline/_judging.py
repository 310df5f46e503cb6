"""What an engine judges calls by, as one unit: its policy and the steps built on it.

A policy from a store changes while the engine runs (`Policy.feed`). What is built on the policy
(the classifier, the command step, the lasting approvals) is built again for a new one, as one
`Judging`, and the engine takes the newest at the start of each call and hands it down through
every step of that call, to settling what its command changed: a call is judged by the old
policy or the new, never a mix. Approvals answered "for this session" belong to the policy they
were given under; a new policy asks again. Paths the engine's caller protected on the policy it
gave (`Policy.protect`) stay protected under every newer one.

While the feed cannot reach its store it keeps the last good policy, and every call decided
then carries a warning saying so (`stale`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stockade.engine.injection import ContextLevel
from stockade.engine.observe.own_files import own_patterns
from stockade.engine.pipeline._classify import Classifier
from stockade.engine.pipeline._commands import Commands
from stockade.engine.pipeline._egress import HostApprovals
from stockade.engine.pipeline._lasting import Lasting
from stockade.policies import Policy, ProcessSpec

if TYPE_CHECKING:
    from stockade.engine.observe.audit_log import AuditLog
    from stockade.sandbox import VirtualFS


class Judging:
    """One policy (the engine's own files protected) and the steps built on it."""

    __slots__ = (
        "_own",
        "chain",
        "classifier",
        "commands",
        "feed",
        "fs",
        "has_limits",
        "lasting",
        "policy",
        "process",
        "source",
    )

    def __init__(
        self,
        source: Policy,
        own: list[str],
        fs: VirtualFS | None,
        hosts: HostApprovals,
        layers_problem: str | None = None,
    ) -> None:
        self.source = source  # as given, or as its feed handed it over
        self._own = own
        self.fs = fs
        self.policy = source.protect(own)
        self.commands = Commands(self.policy, fs, hosts)
        self.commands.layers_problem = layers_problem  # a machine's answer, not a policy's
        self.classifier = Classifier(self.policy, fs, self.commands.stages)
        self.lasting = Lasting(self.policy, fs)
        self.feed = source.feed  # where a newer policy comes from (None: nowhere)
        self.has_limits = self.policy.has_limits  # read by every call: kept at hand
        # how its calls' commands run (the policy's [process] table), injected by type first in
        # the context chain of every call it judges; `chain` is the engine's whole chain after it
        self.process = ContextLevel()
        self.process.put(self.policy.process, ProcessSpec)
        self.chain: tuple[ContextLevel, ...] = (self.process,)

    @classmethod
    def first(
        cls,
        policy: Policy | None,
        fs: VirtualFS | None,
        audit: AuditLog | None,
        tracer_provider: object,
        hosts: HostApprovals,
    ) -> Judging:
        """The judging an engine starts with: ``policy`` (the default preset when None)."""
        chosen = policy if policy is not None else Policy.preset("default")
        return cls(chosen, own_patterns(chosen, fs, audit, tracer_provider), fs, hosts)

    def newest(self) -> Judging:
        """This judging, or one built for the newer policy its feed holds."""
        feed = self.feed
        if feed is None:
            return self
        current = feed.current  # read once: the feed's thread may swap it meanwhile
        if current.spec is self.source.spec:  # the same (`protect` keeps the spec it narrows)
            return self
        # the paths its caller protected (`Policy.protect`) stay protected under the new one
        source = current.protect(self.source.protected)
        problem = self.commands.layers_problem
        return Judging(source, self._own, self.fs, self.commands.approvals, problem)

    @property
    def stale(self) -> str | None:
        """Why this policy may be out of date (its store is unreachable), or None."""
        return None if self.feed is None else self.feed.problem
