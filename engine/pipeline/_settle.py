"""After a command: what it changed is judged where it happened, and only then applied.

A command ran on a copy-on-write view of its mounts (`stockade.sandbox.layers`). Each thing it
created, changed, deleted, renamed, chmod-ed or linked is judged by the policy that judged the
call, as a write (or a delete) of that path by the call's subject and tool
(`Policy.decide_path`): whatever the command line said, this is what it did. An ``ask`` goes to
the approver, one change at a time, with what the command did and its diff in the question.

What is allowed is applied through the virtual filesystem, judged once more where it lands
(a folder swapped for a link since is refused), in two phases: every new file is first put
beside its target under a name of Stockade's own (hard-linked from the layer where both are on
one file system, else copied), all of them are flushed to disk together, and only then is each
renamed into place (then the renames are flushed). A crash therefore leaves
each file either as it was or as the command left it, never half written; what it can leave
between files is a partial apply (some files new, later ones old) and, beside a file not yet
renamed, its ``.stockade-*.tmp``. Deletions, new folders, modes and links are applied as they
come, in order, before the files are renamed into place. What is refused, or cannot be applied,
is dropped and named in the result, the audit outcome and the span.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
from collections.abc import Callable
from dataclasses import dataclass

from stockade.engine.messages import ChangeNote
from stockade.engine.pipeline._approval import put
from stockade.engine.pipeline._state import Admitted, Approver
from stockade.policies import Decision, Effect, Policy
from stockade.policies.request import Access
from stockade.sandbox import SandboxError, VirtualFS
from stockade.sandbox.layers import StagedChange, Staging
from stockade.sandbox.logical import within
from stockade.sandbox.overlay import unified_diff

_SHOWN = 5  # refused changes named in the warning
_DIFF_CHARS = 4_000  # of a change's diff put in the question
_DROPPED = "the policy is read-only: a command's changes are discarded"


@dataclass(slots=True)
class _Pending:
    """A file written aside, waiting to be renamed into place."""

    index: int
    finish: Callable[[bool], None]


async def settle(
    admitted: Admitted,
    staging: Staging,
    fs: VirtualFS,
    policy: Policy,
    approver: Approver | None,
    *,
    can_ask: bool = True,
    discard: bool = False,
) -> list[ChangeNote]:
    """Judge and apply what the command changed; the notes (one per change) are also kept in
    the call's notes, with a warning naming what was not applied. Without ``can_ask`` (the call
    was cancelled) an ask is unanswered, and nothing waits: reading the layers and applying
    happen on the event loop; otherwise in a worker thread. With ``discard`` (a read-only
    policy) nothing is applied, and the notes say so."""
    changes = await asyncio.to_thread(staging.changes) if can_ask else staging.changes()
    if discard:
        notes = [_note(c, False, "read-only-mode", _DROPPED) for c in changes]
        return kept(admitted, notes)
    verdicts: list[Decision] = []
    for change in changes:
        decision = judge(admitted, policy, change)
        if decision.effect is Effect.ASK:
            asked = approver if can_ask else None
            decision = await ask_about(admitted, policy, asked, fs, change, decision)
        verdicts.append(decision)
    if can_ask:
        applied = await asyncio.to_thread(_apply_all, fs, policy, admitted, changes, verdicts)
    else:
        applied = _apply_all(fs, policy, admitted, changes, verdicts)
    return kept(admitted, applied)


def kept(admitted: Admitted, notes: list[ChangeNote]) -> list[ChangeNote]:
    if notes:
        admitted.note().changes = notes
    dropped = [n for n in notes if not n.applied]
    if dropped:
        shown = "; ".join(f"{n.path} ({n.rule or 'default'}: {n.reason})" for n in dropped[:_SHOWN])
        more = f" and {len(dropped) - _SHOWN} more" if len(dropped) > _SHOWN else ""
        admitted.warn(f"{len(dropped)} change(s) by the command were not applied: {shown}{more}")
    return notes


def summary(notes: list[ChangeNote]) -> str:
    """One line for the agent: how many changes reached the workspace, and which did not."""
    if not notes:
        return ""
    applied = sum(1 for n in notes if n.applied)
    line = f"changes: {applied} of {len(notes)} applied"
    dropped = [n.path for n in notes if not n.applied]
    if dropped:
        more = f" and {len(dropped) - _SHOWN} more" if len(dropped) > _SHOWN else ""
        line += f"; not applied (see the warnings): {', '.join(dropped[:_SHOWN])}{more}"
    return line


def judge(admitted: Admitted, policy: Policy, change: StagedChange) -> Decision:
    access: Access = "delete" if change.kind == "deleted" else "write"
    decision = policy.decide_path(admitted.request, change.path, access)
    if decision.effect is Effect.ASK and _approved_with_the_call(admitted, change.path, access):
        return decision.answered(True, "approved with the call, which named it")
    return decision


def _approved_with_the_call(admitted: Admitted, path: str, access: Access) -> bool:
    """Whether the call named ``path`` for ``access`` (a redirection's file) and a person
    approved the call, having been asked about it."""
    notes = admitted.notes
    return (
        notes is not None
        and notes.approval == "approved"
        and (path, access) in (admitted.request.paths)
    )


async def ask_about(
    admitted: Admitted,
    policy: Policy,
    approver: Approver | None,
    fs: VirtualFS,
    change: StagedChange,
    decision: Decision,
) -> Decision:
    """Put one change to the approver: what the command did to which path, its diff; its
    answer decides that change alone."""
    if approver is None:
        return policy.unanswered(decision)
    question = decision._replace(
        reason=f"{decision.reason} — the command {_described(change)}{_diff_of(fs, change)}"
    )
    answer = await put(approver, admitted.call, question, admitted.approval_timeout)
    if answer.warning is not None:
        admitted.warn(answer.warning)
    approved = answer.approved
    if answer.verdict:
        verdict = answer.verdict
    elif answer.warning is not None:
        verdict = "the approver failed"
    else:
        verdict = "approved by the approver" if approved else "refused by the approver"
    return decision.answered(approved, verdict)


def _described(change: StagedChange) -> str:
    kind, path = change.kind, change.path
    if kind == "deleted":
        return f"deleted {path}"
    if kind == "link":
        return f"made {path} a link to {change.target}"
    if kind == "created_dir":
        return f"created the folder {path}"
    if kind == "mode":
        return f"changed the mode of {path} to {oct(change.mode or 0)}"
    if kind == "special":
        return f"made a device, pipe or socket at {path}"
    verb = "created" if kind == "added" else "changed"
    before = change.sha256_before or "no file"
    return f"{verb} {path} ({change.size} bytes, sha256 {change.sha256_after}; before: {before})"


def _diff_of(fs: VirtualFS, change: StagedChange) -> str:
    """The change as a unified diff (files of a few KiB; the host's file is the old side)."""
    if change.kind not in ("added", "modified", "deleted") or (change.size or 0) > _DIFF_CHARS:
        return ""
    try:
        new = None if change.source is None else change.source.read_bytes()
        old = None if change.kind == "added" else fs.read_bytes(change.path)
    except (SandboxError, OSError):
        return ""
    if old is not None and len(old) > _DIFF_CHARS:
        return ""
    return "\n" + unified_diff(change.path, old, new)[:_DIFF_CHARS]


def _apply_all(
    fs: VirtualFS,
    policy: Policy,
    admitted: Admitted,
    changes: list[StagedChange],
    verdicts: list[Decision],
) -> list[ChangeNote]:
    """Apply the changes allowed, in order; files in two phases (see the module docstring)."""
    approved = {
        (c.path, "delete" if c.kind == "deleted" else "write")
        for c, d in zip(changes, verdicts, strict=True)
        if d.allowed
    }

    def guard(path: str, access: Access) -> str | None:
        # what was judged (and perhaps approved) goes on; anything else the apply reaches (a
        # folder made on the way, a folder's contents deleted with it) is judged now
        if (path, access) in approved:
            return None
        decision = policy.decide_path(admitted.request, path, access)
        return None if decision.allowed else f"rule {decision.rule}: {decision.reason}"

    view = fs.guarded(guard)
    results: list[tuple[bool, str]] = []
    refused_folders: list[str] = []
    pending: list[_Pending] = []
    for change, decision in zip(changes, verdicts, strict=True):
        done, reason = False, decision.reason
        if any(within(change.path, folder) for folder in refused_folders):
            reason = "its folder was not created"
        elif change.kind == "special":
            reason = "a device, a pipe or a socket is never applied"
        elif decision.allowed:
            try:
                finish = _apply(view, change)
            except (SandboxError, OSError) as exc:
                reason = f"could not be applied: {exc}"
            else:
                done, reason = True, ""
                if finish is not None:
                    pending.append(_Pending(len(results), finish))
        if not done and change.kind == "created_dir":
            refused_folders.append(change.path)
        results.append((done, reason))
    if pending:
        _place(view, pending, results)
    return [
        _note(change, done, decision.rule, reason)
        for change, decision, (done, reason) in zip(changes, verdicts, results, strict=True)
    ]


def _place(view: VirtualFS, pending: list[_Pending], results: list[tuple[bool, str]]) -> None:
    """Flush every file written aside, rename each into place, flush the renames."""
    try:
        view.sync()
    except (SandboxError, OSError) as exc:
        for item in pending:
            item.finish(False)
            results[item.index] = (False, f"could not be flushed to disk: {exc}")
        return
    for item in pending:
        try:
            item.finish(True)
        except (SandboxError, OSError) as exc:
            results[item.index] = (False, f"could not be put in place: {exc}")
    # in place already: a failure here puts only their durability across a crash in doubt
    with contextlib.suppress(SandboxError, OSError):
        view.sync()


def _apply(fs: VirtualFS, change: StagedChange) -> Callable[[bool], None] | None:
    """One change through the VFS; a file is only written aside (its finish returned)."""
    kind, path = change.kind, change.path
    if kind in ("added", "modified"):
        assert change.source is not None
        if change.size is not None and change.size > fs.max_file_bytes:
            raise SandboxError(
                f"{path} is {change.size:,} bytes, over the {fs.max_file_bytes:,}-byte limit for "
                "one file",
                path,
            )
        # the layer's file itself, hard-linked into place where it can be (not copied)
        return fs.write_aside(path, change.source, mode=change.mode, replace_link=True)
    if kind == "deleted":
        if _present(fs, path):
            fs.delete(path, recursive=True)
    elif kind == "created_dir":
        fs.mkdir(path)
        if change.mode is not None and change.mode != 0o755:
            fs.chmod(path, change.mode)
    elif kind == "mode":
        assert change.mode is not None
        fs.chmod(path, change.mode)
    elif kind == "link":
        assert change.target is not None
        fs.symlink(path, _host_target(fs, path, change.target))
    return None


def _host_target(fs: VirtualFS, path: str, target: str) -> str:
    """A link's target as the host must store it: one the command wrote as an absolute path
    into the link's own mount is made relative (on the host the mount is elsewhere); an
    absolute path into another mount cannot be made to mean the same there."""
    if not target.startswith("/"):
        return target
    for mount in sorted(fs.mounts, key=lambda m: len(m.prefix), reverse=True):
        if within(target, mount.prefix):
            if not within(path, mount.prefix):
                raise SandboxError(
                    f"{path} links to {target}, in another mount: such a link cannot be made on "
                    "the host",
                    path,
                )
            return posixpath.relpath(posixpath.normpath(target), posixpath.dirname(path))
    return target  # a system path (/usr/bin/python3): the same inside the box and out


def _present(fs: VirtualFS, path: str) -> bool:
    try:
        fs.lstat(path)
    except (SandboxError, OSError):
        return False
    return True


def _note(change: StagedChange, applied: bool, rule: str | None, reason: str) -> ChangeNote:
    return ChangeNote(
        change.path,
        change.kind,
        change.size,
        change.sha256_before,
        change.sha256_after,
        applied,
        rule,
        reason,
    )


__all__ = ["ask_about", "judge", "kept", "settle", "summary"]
