"""``stockade run``: replay a transcript's tool calls through the engine.

    stockade run calls.jsonl --workspace ./project --overlay        # review the diff, then apply
    stockade run reply.json --preset permissive --approve yes --json
    model-output | stockade run - --approve no -v                   # calls on stdin, whole results

Each call goes through the whole pipeline (policy, sandbox, audit log, traces). ``ask``
decisions are put to the person at the terminal (``--approve ask``, the default; the answer is
read from standard input, so a script can pipe it in), or answered ``yes`` or ``no`` for all.
The person may also approve for longer than the call: for the rest of the replay, or always
(added to the policy file), choosing among the suggested approvals (`answers`). With
``--overlay`` nothing reaches the workspace until the changes, shown as a diff, are confirmed
(or ``--apply`` is given). Ctrl-C stops the replay: what ran is in the audit log, which stays
intact, and an overlay's changes are dropped. Pressed at a question, it refuses the call asked
about (recorded as refused, saying so) and no later call runs (`terminal`).

A line is printed per call, its result cut to the terminal's width where long (saying so:
"… (-v for all)"); ``-v`` prints each result whole, with its metadata (`run_output`). Wrong or
contradictory options exit 2 before anything runs (``--apply`` without ``--overlay``; ``-`` for
the calls or the policy with ``--approve ask``, whose answers would come from the same stdin).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from stockade.engine.cli.answers import ask_call, ask_host, confirm, offered
from stockade.engine.cli.common import (
    INTERRUPTED,
    STDIN,
    MountsOption,
    PolicyOrStdinOption,
    PolicyStoreOption,
    PresetOption,
    StateInMountOption,
    StateOption,
    fail,
    input_file,
    load_policy,
    usage,
)
from stockade.engine.cli.run_output import progress
from stockade.engine.cli.session import Session, choose_state, mounts_of, standard_toolkit
from stockade.engine.cli.terminal import Interrupted, Terminal
from stockade.engine.errors import PermissionDeniedError
from stockade.engine.formats.transcripts import TranscriptError, load_transcript
from stockade.engine.messages import ToolCall, ToolResult
from stockade.engine.observe import AuditError
from stockade.engine.pipeline import Approve
from stockade.engine.toolkit import Toolkit
from stockade.errors import ConfigurationError
from stockade.policies import Decision, Policy
from stockade.sandbox import Mount, SandboxError, VirtualFS

if TYPE_CHECKING:  # rich loads only when a command prints with it, not at start-up
    from rich.console import Console

_APPROVE = ("ask", "yes", "no")


def run(
    transcript: Annotated[
        Path,
        typer.Argument(
            metavar="TRANSCRIPT", help="The recorded tool calls (a file, or - for stdin)."
        ),
    ],
    workspace: Annotated[
        Path,
        typer.Option(
            metavar="DIR", help="The folder the calls work in, as /workspace.", file_okay=False
        ),
    ] = Path("."),
    mounts: MountsOption = None,
    policy_file: PolicyOrStdinOption = None,
    preset: PresetOption = None,
    policy_store: PolicyStoreOption = None,
    overlay: Annotated[
        bool, typer.Option(help="Keep changes aside; apply them only once confirmed.")
    ] = False,
    apply: Annotated[
        bool, typer.Option("--apply", help="With --overlay: apply the changes without asking.")
    ] = False,
    approve: Annotated[
        str,
        typer.Option(
            metavar="ask|yes|no",
            help="Answer 'ask' decisions: ask (the person, on stdin), yes or no for all.",
        ),
    ] = "ask",
    state: StateOption = None,
    state_in_mount: StateInMountOption = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "-v",
            "--verbose",
            help="Show each call's whole result and its metadata (by default: a line per call, "
            "cut where long, saying so).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Replay recorded tool calls (OpenAI, Anthropic, JSONL of calls, or XML) through the engine.

    Exit 0 when every call succeeded, 1 when some did not (or the input was bad), 2 for wrong
    options, 130 on Ctrl-C.
    """
    from rich.console import Console

    _check_options(transcript, policy_file, approve, overlay=overlay, apply=apply)
    if not workspace.is_dir():
        usage(
            f"--workspace {workspace} does not exist or is not a folder; create it first, or "
            "give another"
        )
    policy = load_policy(policy_file, preset, stdin=True, store=policy_store)
    if not overlay and not os.access(workspace, os.W_OK):
        fail(f"the workspace {workspace} is not writable; use --overlay to only look")
    toolkit = standard_toolkit()
    try:
        chosen = mounts_of(workspace, mounts or [], overlay=overlay)
    except ConfigurationError as exc:
        usage(str(exc))
    try:
        calls = load_transcript(input_file(transcript), toolkit=toolkit)
        folder = choose_state(state, workspace, chosen, in_mount=state_in_mount)
    except (TranscriptError, ValueError) as exc:
        fail(str(exc))
    console = Console(stderr=as_json, highlight=False)
    replay = _Replay(toolkit, policy, workspace, chosen, overlay, approve, folder, console)
    replay.apply_without_asking = apply
    replay.verbose = verbose
    try:
        results = asyncio.run(replay.run(calls, transcript))
    except KeyboardInterrupt:
        _interrupted(replay, len(calls), at_question=False)
    except (SandboxError, AuditError, ConfigurationError, OSError) as exc:
        fail(str(exc))
    if replay.terminal.interrupted:
        _interrupted(replay, len(calls), at_question=True)
    applied = replay.applied
    if as_json:
        payload = {
            "calls": len(calls),
            "results": [r.to_dict() for r in results],
            "overlay": {"changes": replay.changes, "applied": applied} if overlay else None,
            "audit": str(replay.audit_path),
            "traces": str(replay.traces_path),
        }
        sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    failed = [r for r in results if r.status != "ok"]
    console.print(
        f"{len(results)} calls: {len(results) - len(failed)} ok, {len(failed)} not "
        f"({', '.join(sorted({r.status for r in failed})) or 'none'}). "
        f"Audit log: {replay.audit_path}; traces: {replay.traces_path}.",
        markup=False,
        soft_wrap=True,  # one line, for a script (or grep)
    )
    raise typer.Exit(1 if failed else 0)


def _check_options(
    transcript: Path, policy_file: Path | None, approve: str, *, overlay: bool, apply: bool
) -> None:
    """Exit 2 for options that contradict each other, before anything is read or run."""
    if approve not in _APPROVE:
        usage(f"--approve must be ask, yes or no, not {approve!r}")
    if apply and not overlay:
        usage(
            "--apply applies an overlay's changes without asking: give it with --overlay "
            "(without --overlay, each change is made as its call runs)"
        )
    readers = [
        name
        for name, reads in (
            ("TRANSCRIPT -", transcript == STDIN),
            ("--policy -", policy_file == STDIN),
        )
        if reads
    ]
    if len(readers) > 1:
        usage("TRANSCRIPT - and --policy - both read standard input: give one of them as a file")
    if readers and approve == "ask":
        usage(
            f"{readers[0]} reads standard input, where the answers to the questions would come "
            "from: give --approve yes or --approve no"
        )


def _interrupted(replay: _Replay, total: int, *, at_question: bool) -> NoReturn:
    """Say how far the replay got when Ctrl-C stopped it, and exit 130."""
    done = len(replay.results)
    if not at_question:
        what = f"[bold yellow]interrupted[/]: {done} of {total} calls ran; "
    elif replay.reviewing:
        what = "[bold yellow]interrupted[/] at the question (Ctrl-C): nothing was applied; "
    else:
        what = (
            "[bold yellow]interrupted[/] at the question (Ctrl-C): that call was refused and "
            f"no later one ran ({done} of {total} calls done); "
        )
    from rich.markup import escape

    replay.console.print(
        what
        + ("the overlay's changes were dropped; " if replay.overlay else "")
        + f"the audit log {escape(str(replay.audit_path))} is intact"
    )
    raise typer.Exit(INTERRUPTED)


class _Replay:
    """One replay: the engine, its file system and state, and what the person answered."""

    def __init__(
        self,
        toolkit: Toolkit,
        policy: Policy,
        workspace: Path,
        mounts: list[Mount],
        overlay: bool,
        approve: str,
        state: Path,
        console: Console,
    ) -> None:
        self.toolkit = toolkit
        self.policy = policy
        self.mounts = mounts
        self.workspace = workspace
        self.overlay = overlay
        self.approve = approve
        self.state = state
        self.console = console
        self.results: list[ToolResult] = []
        self.changes: list[dict[str, Any]] = []
        self.applied = False
        self.audit_path = state / "audit.jsonl"
        self.traces_path = state / "traces.jsonl"
        self.apply_without_asking = False
        self.verbose = False  # each call's whole result and metadata, not a line cut to fit
        self.terminal = Terminal()
        self.reviewing = False  # the overlay's changes are being shown (no call is running)

    async def run(self, calls: list[ToolCall], transcript: Path) -> list[ToolResult]:
        session = Session(
            self.policy,
            self.mounts,
            toolkit=self.toolkit,
            state=self.state,
            approver=self._answer,
        )
        async with session:  # an overlay not committed is dropped when it closes
            engine = session.engine
            with engine.run_span("replay", transcript=str(transcript), calls=len(calls)):
                for number, call in enumerate(calls, start=1):
                    result = await engine.call(call)
                    self.results.append(result)
                    self._progress(number, len(calls), result)
                    if self.terminal.interrupted:
                        break  # Ctrl-C at a question: that call was refused, stop here
            if self.overlay and not self.terminal.interrupted:
                await self._review(session.fs)
        return self.results

    def _progress(self, number: int, total: int, result: ToolResult) -> None:
        for line in progress(number, total, result, self.console.width, verbose=self.verbose):
            self.console.print(line)

    async def _answer(self, call: ToolCall, decision: Decision) -> Approve | bool | str:
        if self.approve != "ask":
            return self.approve == "yes"
        try:
            return await self._ask(call, decision)
        except Interrupted as exc:
            # a refusal the audit log records as such; the replay stops before its next call
            raise PermissionDeniedError(str(exc)) from None

    async def _ask(self, call: ToolCall, decision: Decision) -> Approve | bool | str:
        from rich.markup import escape

        if (decision.rule or "").startswith("network."):
            # a host the command wants to reach, asked about while it runs
            self.console.print(
                f"[bold]{escape(call.name)}[/] wants to reach {escape(decision.target or '?')}"
            )
            self.console.print(f"  asks because: {escape(decision.reason)}")
            return await ask_host(self.terminal)
        # escaped: a path or command spelled as markup ("[conceal]") must not hide what is asked
        self.console.print(f"[bold]{escape(call.name)}[/] {escape(_describe(call))}")
        if decision.asks:
            # one line per part that asked: a yes approves every one of them
            self.console.print(f"  asks about {len(decision.asks)} things, one answer for all:")
            for part in decision.asks:
                self.console.print(f"  - {escape(part.brief())}")
        else:
            self.console.print(f"  asks because: {escape(decision.reason)}")
        for line in offered(decision.suggestions):
            self.console.print(escape(line))
        return await ask_call(self.terminal, decision.suggestions, self.policy.file)

    async def _review(self, fs: VirtualFS) -> None:
        from rich.markup import escape

        changes = fs.changes()
        self.changes = [{"path": c.path, "kind": c.kind} for c in changes]
        if not changes:
            self.console.print("The calls changed nothing in the workspace.")
            return
        for change in changes:
            self.console.print(f"[bold]{change.kind}[/] {escape(change.path)}")
            if change.diff:
                self.console.print(change.diff.rstrip("\n"), markup=False)
        question = f"Apply these {len(changes)} change(s) to {self.workspace}?"
        self.reviewing = True
        try:
            apply = self.apply_without_asking or await confirm(self.terminal, question)
        except Interrupted:
            return  # nothing applied; the caller says the replay was interrupted
        if apply:
            fs.commit()
            self.applied = True
            self.console.print(
                f"Applied {len(changes)} change(s) to {self.workspace}.", markup=False
            )
        else:
            self.console.print("Not applied: the workspace is unchanged.")


def _describe(call: ToolCall) -> str:
    arguments = call.arguments
    if isinstance(arguments, str):
        return arguments[:200]
    shown = {k: (v if len(str(v)) <= 80 else f"{str(v)[:80]}...") for k, v in arguments.items()}
    return json.dumps(shown, ensure_ascii=False, default=str)
