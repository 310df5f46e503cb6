"""What every command runs calls through, built in one place: `Session` holds the toolkit, the
file system, the policy, the audit log, the traces and the engine over them.

``stockade demo``, ``run``, ``serve`` and ``policy explain`` all build their sessions here, from
the same options (``--workspace``, ``--mount``, ``--policy``/``--preset``, ``--state``), so the
same options give the same mounts and tools everywhere: what ``policy explain`` says of a call is
what ``run`` does with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from stockade.engine.builtin import add_file_tools, add_shell_tools
from stockade.engine.cli.common import default_state
from stockade.engine.observe import AuditLog, AuditStore
from stockade.engine.pipeline import Approver, Engine
from stockade.engine.toolkit import Toolkit
from stockade.errors import ConfigurationError
from stockade.policies import Policy
from stockade.sandbox import Mount, VirtualFS

if TYPE_CHECKING:  # the OpenTelemetry SDK loads only when a session keeps traces
    from opentelemetry.sdk.trace import TracerProvider

WORKSPACE = "/workspace"


def parse_mount(text: str) -> Mount:
    """``PREFIX=DIR`` or ``PREFIX=DIR:ro`` as a host mount; raises ValueError saying what is
    wrong."""
    prefix, sep, rest = text.partition("=")
    if not sep or not prefix or not rest:
        raise ConfigurationError(f"--mount {text!r}: write PREFIX=DIR or PREFIX=DIR:ro")
    read_only = rest.endswith(":ro")
    folder = Path(rest[:-3] if read_only else rest.removesuffix(":rw"))
    if not folder.is_dir():
        raise ConfigurationError(f"--mount {text!r}: {folder} does not exist or is not a folder")
    return Mount(prefix, folder.resolve(), read_only=read_only)


def mounts_of(
    workspace: Path | None, extra: Sequence[str] = (), *, overlay: bool = False
) -> list[Mount]:
    """The mounts of a command's options: ``workspace`` at /workspace (an empty one in memory
    when None: paths are then judged as spelled), kept aside in an overlay when asked, and each
    ``--mount`` given. Raises ValueError for a bad ``--mount``."""
    if workspace is None:
        first = Mount(WORKSPACE, memory=True)
    else:
        first = Mount(WORKSPACE, workspace.resolve(), overlay=overlay)
    return [first, *(parse_mount(text) for text in extra)]


def choose_state(
    state: Path | None, workspace: Path | None, mounts: Sequence[Mount], *, in_mount: bool = False
) -> Path:
    """The state folder of a command: ``state`` as given, else the workspace's default one
    (outside it: see ``common``). Raises ConfigurationError for a folder inside a writable
    mount, or holding one, where the agent could reach its audit log, unless ``in_mount``."""
    chosen = state if state is not None else default_state(workspace)
    if in_mount:
        return chosen
    where = chosen.resolve()
    for mount in mounts:
        if mount.root is None or mount.read_only:
            continue
        root = Path(mount.root).resolve()
        if where.is_relative_to(root) or root.is_relative_to(where):
            how = "lies inside" if where.is_relative_to(root) else "holds"
            raise ConfigurationError(
                f"--state {chosen} {how} the folder mounted at {mount.prefix} ({root}), which "
                "the agent can write: its audit log could be cut or rewritten there. Leave "
                f"--state out (the default, {default_state(workspace)}, is outside every "
                "mount), choose a folder outside the mounts, or add --state-in-mount to keep "
                "it there anyway"
            )
    return chosen


def state_error(state: Path, exc: OSError) -> ConfigurationError:
    """The error for a state folder that cannot be made or written: which folder, why, and
    what to do (``--state`` names it; the default one lies in the user's state folder)."""
    why = exc.strerror or str(exc)
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(state) else ""
    return ConfigurationError(
        f"--state {state}: the state folder (for the audit log and the traces) cannot be "
        f"created or written{where}: {why}. Give --state DIR, a folder you can write, or fix "
        "the permissions of that one"
    )


def standard_toolkit(*, shell: bool = True) -> Toolkit:
    """The tools the commands offer: the file tools, and the command tools unless ``shell`` is
    false."""
    toolkit = Toolkit()
    add_file_tools(toolkit)
    if shell:
        add_shell_tools(toolkit)
    return toolkit


class Session:
    """The toolkit, file system, policy, audit log and traces of one command, and the engine
    over them. With ``state``, the audit log and the traces go to ``state/audit.jsonl`` and
    ``state/traces.jsonl`` (and hosts approved "always" to ``state/approved-hosts.json``);
    without, nothing is recorded. Close it (``async with``, or
    `aclose`) to write what is waiting. Raises `SandboxError` or `AuditError` when a part
    cannot be opened, and `ConfigurationError` naming ``--state`` when the state folder cannot
    be made or written, having closed the parts opened before it."""

    def __init__(
        self,
        policy: Policy,
        mounts: Sequence[Mount],
        *,
        toolkit: Toolkit | None = None,
        state: Path | None = None,
        approver: Approver | None = None,
        audit_store: str | None = None,
    ) -> None:
        self.policy = policy
        self.audit_store = audit_store  # records shipped there from a spool in ``state``
        self.toolkit = toolkit if toolkit is not None else standard_toolkit()
        self.state = state
        self.audit: AuditLog | None = None
        self.provider: TracerProvider | None = None
        with contextlib.ExitStack() as opened:
            self.fs = VirtualFS(list(mounts))
            opened.callback(self.fs.close)
            if state is not None:
                try:
                    state.mkdir(mode=0o700, parents=True, exist_ok=True)  # the user's alone
                    if audit_store is not None:
                        self.audit = AuditStore(audit_store, folder=state)
                    else:
                        self.audit = AuditLog(state / "audit.jsonl")
                    opened.callback(self.audit.close)
                    from stockade.engine.observe.tracing import tracer_provider

                    self.provider = tracer_provider("jsonl", path=state / "traces.jsonl")
                    opened.callback(self.provider.shutdown)
                except OSError as exc:
                    raise state_error(state, exc) from exc
            self.engine = Engine(
                self.toolkit,
                policy=policy,
                fs=self.fs,
                audit=self.audit,
                tracer_provider=self.provider,
                approver=approver,
                approved_hosts=state / "approved-hosts.json" if state is not None else None,
            )
            opened.pop_all()  # everything opened: the session owns it now

    @property
    def audit_path(self) -> Path | None:
        """Where the audit log is written (None: not recorded)."""
        return self.audit.path if self.audit is not None else None

    @property
    def traces_path(self) -> Path | None:
        """Where the traces are written (None: not recorded)."""
        return self.state / "traces.jsonl" if self.state is not None else None

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the engine's calls, then close the file system (an overlay not committed is
        dropped), the audit log and the traces."""
        try:
            await self.engine.aclose()
        finally:
            self.close()

    def close(self) -> None:
        """Close the file system, the audit log and the traces, writing what waits. Safe to
        call twice."""
        provider, self.provider = self.provider, None
        if self.policy.feed is not None:  # a store's policy: stop following it
            self.policy.feed.close()
        try:
            self.fs.close()
        finally:
            try:
                if self.audit is not None:
                    self.audit.close()
            finally:
                if provider is not None:
                    provider.shutdown()


__all__ = [
    "Session",
    "choose_state",
    "mounts_of",
    "parse_mount",
    "standard_toolkit",
    "state_error",
]
