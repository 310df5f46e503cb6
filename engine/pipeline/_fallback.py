"""A command where overlays cannot be mounted (an older kernel, a container that forbids them):
the fallback view, and the check after the run.

The command writes its mounts directly; before it runs, what it may not read is masked and the
protected paths that exist are bound read-only, as are files with other hard links
(`stockade.sandbox.views.Rebinds`). What the kernel cannot stop is a protected path *created*
(a new ``.envrc``, a ``.vscode/tasks.json`` where there was no ``.vscode``): after the run,
however it ended, the protected paths are listed again and each new one is judged as a write
by the call; what the policy does not allow (an ask nobody approves) is removed, and named in
the result, the audit outcome and the span. What this cannot protect: a protected path created
and used within the run itself, and what an ordinary path the command wrote contains (there is
no record of it to judge before it lands). The result's ``isolation`` says
``bubblewrap+rebinds``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from stockade.engine.messages import ChangeNote
from stockade.engine.pipeline._masks import ReadMasks, linked_files
from stockade.engine.pipeline._settle import ask_about, judge, kept
from stockade.engine.pipeline._state import Admitted, Approver
from stockade.policies import Effect, Policy
from stockade.sandbox import SandboxError, VirtualFS
from stockade.sandbox.layers import StagedChange
from stockade.sandbox.views import Rebinds


def fallback_view(admitted: Admitted, fs: VirtualFS, masks: ReadMasks) -> Rebinds:
    """The view of a command run without overlays (blocking: walks the mounts)."""
    request = admitted.request
    hidden = masks.masks(request, fs.mounts)
    protected = masks.masks(request, fs.mounts, "write")
    skip = {*hidden, *protected}
    return Rebinds(
        fs.mounts, masks=hidden, protected=protected, linked=linked_files(fs.mounts, skip)
    )


async def check_after(
    admitted: Admitted,
    view: Rebinds,
    fs: VirtualFS,
    policy: Policy,
    masks: ReadMasks,
    approver: Approver | None,
    *,
    can_ask: bool = True,
) -> list[ChangeNote]:
    """Judge each protected path the command created; remove what is not allowed."""
    after = masks.masks(admitted.request, fs.mounts, "write")
    notes: list[ChangeNote] = []
    for path in view.created(view.protected, after):
        change = _created(fs, path)
        decision = judge(admitted, policy, change)
        if decision.effect is Effect.ASK:
            asked = approver if can_ask else None
            decision = await ask_about(admitted, policy, asked, fs, change, decision)
        kept_it, reason = decision.allowed, ""
        if not kept_it:
            try:
                if can_ask:
                    await asyncio.to_thread(fs.delete, path, recursive=True)
                else:
                    fs.delete(path, recursive=True)
            except (SandboxError, OSError) as exc:
                reason = f"{decision.reason}; it could NOT be removed ({exc}): remove it by hand"
            else:
                reason = f"{decision.reason}; removed after the run"
        notes.append(
            ChangeNote(
                path,
                change.kind,
                change.size,
                None,
                change.sha256_after,
                kept_it,
                decision.rule,
                reason,
            )
        )
    return kept(admitted, notes)


def _created(fs: VirtualFS, path: str) -> StagedChange:
    """What the command left at ``path``, as a change (its content for the question)."""
    try:
        host = fs.host_path(path)
        info = os.lstat(host)
    except (SandboxError, OSError):
        return StagedChange(path, "added")
    if os.path.isdir(host) and not os.path.islink(host):
        return StagedChange(path, "created_dir")
    return StagedChange(path, "added", info.st_size, source=Path(host))
