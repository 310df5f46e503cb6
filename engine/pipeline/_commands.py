"""Steps 5-7 for a tool that runs a command: its mounts staged copy-on-write, what it may not
read masked, the run, and then what it changed settled (judged, asked about, applied).

A command's words say little of what it does (a script it wrote, a variable naming the file, a
program on a ``PATH`` it changed), so the policy is held at the facts instead: before the run,
every path the call may not read is masked in its view (`ReadMasks`); during it, nothing it
does reaches the mounts (`stockade.sandbox.layers`); after it, however it ended (exit, timeout,
limit, cancellation), each change is judged as a write or a delete of its path by the call's
subject and tool, and only what the policy allows is applied (`_settle`). The approver is
asked here, after the run and outside the tool's timeout, so a person taking their time to
answer does not kill the command; a cancelled call asks nobody (its asks are unanswered).

Memory and overlay mounts are shown to the command too, written out beneath its layers
(`stockade.sandbox.shown`): what it changes there is applied through the virtual filesystem,
so in an overlay mount it joins the staged changes, for review with the rest.

Under a read-only policy the command still runs, on its view, and everything it changed is
discarded: the result says so. A command tool of one's own gets its view by declaring a
``staging: View | None = None`` parameter and handing it to `run_process`; one that does not
runs on the mounts as they are.

Under a policy with a ``[network]`` table, a command tool that declares an ``egress: Egress |
None = None`` parameter gets the call's filtered network (`_egress`), to hand to `run_process`
as its ``network``; every connection is judged when it is made and noted. A tool that does not
declare it gets no network at all (the table's ``[process] network`` is off), so a policy's
list of hosts is never silently not applied.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from stockade.engine.content import ToolOutput
from stockade.engine.messages import ChangeNote
from stockade.engine.pipeline._egress import HostApprovals, HostJudge
from stockade.engine.pipeline._fallback import check_after, fallback_view
from stockade.engine.pipeline._masks import ReadMasks
from stockade.engine.pipeline._settle import settle, summary
from stockade.engine.pipeline._state import Admitted, RunFailed
from stockade.engine.tools import RegisteredTool
from stockade.errors import StockadeError
from stockade.policies import Policy
from stockade.sandbox import Bubblewrap, VirtualFS
from stockade.sandbox.egress import Egress
from stockade.sandbox.layers import Staging, layers_available
from stockade.sandbox.shown import show
from stockade.sandbox.views import Rebinds, View


class Commands:
    """The engine's command step: one per engine, holding what outlives a call (the folder
    listings the masks were made from, whether layers work here)."""

    __slots__ = ("_masks", "approvals", "fs", "layers_problem", "policy")

    def __init__(
        self, policy: Policy, fs: VirtualFS | None, approvals: HostApprovals | None = None
    ) -> None:
        self.policy = policy
        self.fs = fs
        self.approvals = approvals if approvals is not None else HostApprovals()
        self._masks = ReadMasks(policy)
        # None: not probed yet; "": layers work; else why not
        self.layers_problem: str | None = None

    def probe(self) -> str:
        """Whether commands can run on copy-on-write layers here ("" if so, else why not).
        Blocking: mounts an overlay in a throwaway namespace once (a few ms)."""
        if self.layers_problem is None:
            self.layers_problem = layers_available() or ""
        return self.layers_problem

    def probe_with(self, probe: Callable[[], Bubblewrap]) -> Bubblewrap:
        """``probe`` for bubblewrap, then (where it works) for the layers: both answers at
        once, so a call is judged knowing how it will run. Blocking."""
        found = probe()
        if found.available:
            self.probe()
        return found

    def stages(self, tool: RegisteredTool) -> bool:
        """Whether a boxed call of ``tool`` runs on a staged view (probing once, if not yet)."""
        if self.fs is None or not any(issubclass(i.type, View) for i in tool.injections):
            return False
        return self.probe() == ""

    async def run(
        self, admitted: Admitted, attempt: Coroutine[Any, Any, tuple[Any, int]]
    ) -> tuple[Any, int]:
        """Run ``attempt`` (the call's attempts, boxed) on a view of its mounts, then settle
        what it changed: on copy-on-write layers where they work, else on the fallback view."""
        self._give_network(admitted)
        name = _parameter(admitted, View)
        fs = self.fs
        if name is None or fs is None:
            return await attempt
        if self.layers_problem is None:
            await asyncio.to_thread(self.probe)
        staged = self.layers_problem == ""
        try:
            if staged:
                view: View = await _made(partial(self._stage, admitted, fs))
            else:
                view = await _made(partial(fallback_view, admitted, fs, self._masks))
        except (StockadeError, OSError) as exc:
            attempt.close()  # never started
            raise RunFailed(exc, 0, "error") from None
        except asyncio.CancelledError:
            attempt.close()
            raise
        admitted.kwargs[name] = view
        try:
            try:
                value, attempts = await attempt
            except asyncio.CancelledError:
                # nobody can answer now; nothing here waits, so the cancellation cannot cut the
                # settling short
                await self._settle(admitted, view, fs, can_ask=False)
                raise
            except RunFailed:
                await self._settle(admitted, view, fs, can_ask=True)
                raise
            notes = await self._settle(admitted, view, fs, can_ask=True)
            return _with_summary(value, notes), attempts
        finally:
            view.close()

    async def _settle(
        self, admitted: Admitted, view: View, fs: VirtualFS, *, can_ask: bool
    ) -> list[ChangeNote]:
        policy, approver = self.policy, admitted.approver if can_ask else None
        if isinstance(view, Staging):
            discard = policy.read_only
            return await settle(
                admitted, view, fs, policy, approver, can_ask=can_ask, discard=discard
            )
        assert isinstance(view, Rebinds)
        return await check_after(admitted, view, fs, policy, self._masks, approver, can_ask=can_ask)

    def _give_network(self, admitted: Admitted) -> None:
        """The call's filtered network, to a tool that takes one, under a ``[network]`` table."""
        rules = self.policy.egress
        name = _parameter(admitted, Egress)
        if rules is None or name is None:
            return
        loop = asyncio.get_running_loop()
        judge = HostJudge(rules, admitted, self.approvals, loop, shadow=self.policy.shadow)
        admitted.kwargs[name] = judge.egress()

    def _stage(self, admitted: Admitted, fs: VirtualFS) -> Staging:
        masks = self._masks.masks(admitted.request, fs.mounts, fs=fs)
        if admitted.notes is not None and admitted.notes.approval == "approved":
            # what the call named (a redirection's file), a person saw asked about and allowed:
            # masked, it could be neither read nor written, and a write is judged again after
            named = {path for path, _ in admitted.request.paths}
            masks = [path for path in masks if path not in named]
        return Staging(fs.mounts, masks=masks, shown=partial(show, fs))


async def _made(make: Callable[[], View]) -> View:
    """``make()`` in a worker thread. A thread cannot be stopped: when the call is cancelled
    while it works, the view it still makes is closed as soon as it is made (its folders
    removed), not left behind."""
    future = asyncio.ensure_future(asyncio.to_thread(make))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(_close_made)
        raise


def _close_made(future: asyncio.Future[View]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()


def _parameter(admitted: Admitted, wanted: type) -> str | None:
    for injection in admitted.tool.injections:
        if issubclass(injection.type, wanted):
            return injection.name
    return None


def _with_summary(value: Any, notes: list[ChangeNote]) -> Any:
    """The tool's output with a line saying what became of the command's changes."""
    line = summary(notes)
    if not line:
        return value
    if isinstance(value, ToolOutput) and isinstance(value.content, str):
        value.content = f"{value.content}\n{line}"
    elif isinstance(value, str):
        value = f"{value}\n{line}"
    return value


__all__ = ["Commands"]
