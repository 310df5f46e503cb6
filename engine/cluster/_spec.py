"""What a cluster session is asked for and what it reports: `SessionSpec` (the workspace, the
policy, the resources, where to place it) and `SessionInfo` (one row of
`ClusterSessions.list`). Both are pydantic models: they cross from the driver to the Ray actor
and back, so they are validated where they are built.

    spec = SessionSpec(workspace="/srv/agents/a1", policy="default", cores=1, memory_mb=512)
    spec = SessionSpec(workspace="/data/w", policy=Path("team.toml").read_text(), node_id=node)
"""

from __future__ import annotations

import tomllib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from stockade.errors import ConfigurationError
from stockade.policies import PRESETS, Policy

SessionState = Literal["open", "draining", "closed", "dead"]
PolicyKind = Literal["preset", "toml", "store"]

_STORE_SCHEMES = ("postgresql://", "postgresql+psycopg2://", "postgres://")


class SessionSpec(BaseModel):
    """One session: an engine in one Ray actor on one worker node.

    ``workspace`` is a folder on the worker node, mounted at /workspace. ``policy`` is a preset
    name (``default``, ``strict`` ...), the text of a TOML policy, or a policy store URL
    (``postgresql://...``, loaded on the node by `Policy.from_store`). ``cores`` and
    ``memory_mb`` are what Ray reserves for the session on its node (Ray places the actor by
    them); ``resources`` are Ray custom resources to ask for too, and ``node_id`` pins the
    session to one node (hex id, as `ray.nodes()` gives). ``state`` is a folder on the node for
    the audit log (``audit.jsonl``; none when left out), outside the workspace. ``shell`` adds
    the command tools (boxed by bubblewrap where the node has it) to the file tools;
    ``tools`` adds tools of your own, each named ``package.module:name`` (a function or a
    `ToolBase`), imported on the node (so installed there). ``default_timeout`` is the
    engine's per-call timeout; ``open_timeout`` bounds the wait for a node to take the session.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    workspace: str = Field(min_length=1)
    policy: str = Field(default="default", min_length=1)
    cores: float = Field(default=1.0, ge=0)
    memory_mb: int = Field(default=256, ge=0)
    resources: dict[str, float] = Field(default_factory=dict)
    node_id: str | None = None
    state: str | None = None
    shell: bool = True
    tools: tuple[str, ...] = ()
    default_timeout: float = Field(default=30.0, gt=0)
    open_timeout: float = Field(default=120.0, gt=0)

    @field_validator("workspace", "state")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        # a relative folder would be read against the worker process's own directory
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path on the worker node")
        return value

    @field_validator("tools")
    @classmethod
    def _importable_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            module, sep, attribute = name.partition(":")
            if not sep or not module or not attribute:
                raise ValueError(f"tool {name!r}: write package.module:name")
        return value

    @field_validator("resources")
    @classmethod
    def _no_builtin(cls, value: dict[str, float]) -> dict[str, float]:
        for name, amount in value.items():
            if name in ("CPU", "GPU", "memory", "object_store_memory"):
                raise ValueError(f"ask for {name!r} with cores / memory_mb, not resources")
            if amount <= 0:
                raise ValueError(f"resource {name!r}: the amount must be positive, got {amount}")
        return value

    @property
    def policy_kind(self) -> PolicyKind:
        """How ``policy`` is read: a store URL, a preset name, or TOML text."""
        if self.policy.startswith(_STORE_SCHEMES):
            return "store"
        if self.policy in PRESETS:
            return "preset"
        return "toml"

    def load_policy(self) -> Policy:
        """The policy this spec names. A store URL is loaded from the store (on the node).
        Raises `PolicyError` (a ConfigurationError-like ValueError) for a bad preset or TOML."""
        kind = self.policy_kind
        if kind == "store":
            return Policy.from_store(self.policy)
        if kind == "preset":
            return Policy.preset(self.policy)
        if "\n" not in self.policy and "=" not in self.policy and "[" not in self.policy:
            raise ConfigurationError(
                f"policy {self.policy!r} is neither a preset ({', '.join(PRESETS)}), nor TOML "
                "text, nor a postgresql:// store URL; give one of those"
            )
        try:
            data = tomllib.loads(self.policy)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigurationError(f"the session's policy is not valid TOML: {exc}") from exc
        return Policy.from_dict(data, source="<session policy>")


class SessionInfo(BaseModel):
    """One session as `ClusterSessions.list` shows it: its id, where it runs (Ray node id and
    IP), its state, the calls in flight and the calls done (every result delivered, refusals
    included)."""

    model_config = ConfigDict(frozen=True)

    id: str
    node_id: str
    node_ip: str
    state: SessionState
    in_flight: int
    done: int
    workspace: str
    reason: str | None = None  # why a dead session died


__all__ = ["PolicyKind", "SessionInfo", "SessionSpec", "SessionState"]
