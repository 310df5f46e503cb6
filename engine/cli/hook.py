"""``stockade hook claude-code``: Stockade's policy as Claude Code's PreToolUse hook.

    stockade hook claude-code --policy stockade.toml < hook-input.json

Claude Code runs the command before each tool call, with the call as JSON on stdin, and reads
the decision from stdout (exit 0): ``{"hookSpecificOutput": {"hookEventName": "PreToolUse",
"permissionDecision": "allow" | "ask" | "deny", "permissionDecisionReason": "..."}}``. Every
call leaves an ``intent`` record (tool ``claude_code:<tool>``, the decision, its rule) in the
audit log of ``--state`` (by default the user's state folder for the workspace, as for
``stockade serve``); a decision that cannot be recorded is not given.

Anything that keeps Stockade from deciding (input that is not a PreToolUse call, a policy that
does not load, an audit log that cannot be written, a bug) exits 2 with one line on stderr,
recorded where a log can be opened. Why 2 and not a "deny" on stdout: Claude Code blocks the
call on exit code 2 whatever it makes of stdout, and feeds stderr to Claude; any other failure
(exit 1, a traceback) is a *non-blocking* error there, after which the call runs. So no error
may leave this command any other way: a hook that cannot decide must never mean "allow".

The workspace (``/workspace``) is ``--workspace``, else ``$CLAUDE_PROJECT_DIR`` (which Claude Code
sets for its hooks), else the input's ``cwd``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stockade.engine.cli.common import (
    MountsOption,
    PolicyOption,
    PolicyStoreOption,
    PresetOption,
    StateInMountOption,
    StateOption,
    WarmOption,
)
from stockade.engine.cli.session import WORKSPACE, choose_state, mounts_of
from stockade.engine.observe import AuditLog
from stockade.errors import ConfigurationError, StockadeError
from stockade.policies import Policy

if TYPE_CHECKING:  # loaded by the hook's own command only, not by every `stockade` command
    from stockade.engine.adapters.claude_code import ClaudeCodeJudge, HookInput

BLOCK = 2  # Claude Code's "blocking error": the call does not run, stderr goes to Claude
_MAX_ERROR = 1000  # characters of an error shown to Claude

hook_app = typer.Typer(
    name="hook",
    help="Decide an agent host's tool calls by Stockade's policy (Claude Code's PreToolUse).",
    no_args_is_help=True,
)


@dataclass(frozen=True)
class HookOptions:
    """The command's options, as given (nothing checked yet)."""

    workspace: Path | None = None
    mounts: Sequence[str] = ()
    policy_file: Path | None = None
    preset: str | None = None
    state: Path | None = None
    state_in_mount: bool = False
    policy_store: str | None = None


@dataclass(frozen=True)
class HookReply:
    """What the command prints and how it exits."""

    code: int
    stdout: str = ""
    stderr: str = ""


@dataclass
class _Run:
    """What one hook call has opened, closed whatever happens."""

    judge: ClaudeCodeJudge | None = None
    audit: AuditLog | None = None
    notes: list[str] = field(default_factory=list)

    def close(self) -> None:
        for close in (
            self.judge.close if self.judge is not None else None,
            self.audit.close if self.audit is not None else None,
        ):
            if close is None:
                continue
            try:
                close()
            except Exception as exc:  # closing never turns a decision into a crash
                self.notes.append(f"closing: {type(exc).__name__}: {exc}")


def answer(
    data: str | bytes, options: HookOptions, environ: Mapping[str, str] | None = None
) -> HookReply:
    """The reply to one hook call whose stdin was ``data``. Never raises (but for Ctrl-C): what
    goes wrong is a blocking error (exit 2) saying what."""
    env = os.environ if environ is None else environ
    hook: HookInput | None = None
    run = _Run()
    try:
        # inside the try: even a failure to load the judge blocks the call (exit 2)
        from stockade.engine.adapters.claude_code import ClaudeCodeJudge, parse_hook_input

        hook = parse_hook_input(data)
        workspace = _workspace(options, env, hook)
        policy = _policy(options)
        mounts = mounts_of(workspace, list(options.mounts))
        state = choose_state(options.state, workspace, mounts, in_mount=options.state_in_mount)
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        # fsync: the decision is on disk before Claude Code acts on it
        run.audit = AuditLog(state / "audit.jsonl", durability="fsync")
        spelled = {str(workspace): WORKSPACE}
        run.judge = ClaudeCodeJudge(policy, mounts, audit=run.audit, spelled=spelled)
        verdict = run.judge.judge(hook)
        # the reply is made first: one that cannot be made leaves no "allow" in the log
        said = verdict.output().model_dump_json(by_alias=True) + "\n"
        run.audit.append(verdict.record())
        reply = HookReply(0, said)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from a library too: it must not mean "allow"
        reply = _refuse(exc, hook, options, env, run)
    finally:
        run.close()
    return reply


def _refuse(
    exc: BaseException,
    hook: HookInput | None,
    options: HookOptions,
    env: Mapping[str, str],
    run: _Run,
) -> HookReply:
    """Exit 2 with one line saying why, recorded in the audit log when one can be opened."""
    problem = str(exc) or type(exc).__name__
    if not isinstance(exc, (StockadeError, OSError)):
        problem = f"unexpected {type(exc).__name__}: {problem} (a bug in Stockade: report it)"
    problem = problem.replace("\n", " ")[:_MAX_ERROR]
    tool = hook.tool_name if hook is not None else None
    line = f"Stockade blocked this {tool or 'tool'} call: {problem}"
    try:
        from stockade.engine.adapters.claude_code import refusal_record

        audit = run.audit
        if audit is None or audit.closed:
            workspace = _workspace(options, env, hook)
            mounts = mounts_of(workspace, list(options.mounts))
            state = choose_state(options.state, workspace, mounts, in_mount=options.state_in_mount)
            state.mkdir(mode=0o700, parents=True, exist_ok=True)
            audit = run.audit = AuditLog(state / "audit.jsonl", durability="fsync")
        audit.append(refusal_record(tool, hook.tool_use_id if hook else None, problem))
    except Exception as again:  # the refusal stands; say that it is not recorded
        line += f" (not recorded in the audit log: {str(again)[:200]})"
    return HookReply(BLOCK, "", line + "\n")


def _workspace(options: HookOptions, env: Mapping[str, str], hook: HookInput | None) -> Path:
    """--workspace, else $CLAUDE_PROJECT_DIR, else the call's cwd, else this process's."""
    given = options.workspace
    if given is None and env.get("CLAUDE_PROJECT_DIR"):
        given = Path(env["CLAUDE_PROJECT_DIR"])
    if given is None:
        given = Path(hook.cwd) if hook is not None else Path.cwd()
    if not given.is_dir():
        raise NotADirectoryError(f"the workspace {given} does not exist or is not a folder")
    return Path(os.path.abspath(given))


def _policy(options: HookOptions) -> Policy:
    if options.policy_store is not None:
        if options.policy_file is not None or options.preset is not None:
            raise ConfigurationError("give --policy-store or --policy/--preset, not both")
        return Policy.from_store(options.policy_store, follow=False)  # one call: read it now
    if options.policy_file is not None and options.preset is not None:
        raise ConfigurationError("give --policy or --preset, not both")
    if options.policy_file is not None:
        return Policy.load(options.policy_file)
    return Policy.preset(options.preset or "default")


@hook_app.command("claude-code")
def claude_code(
    workspace: Annotated[
        Path | None,
        typer.Option(
            help="The project folder, /workspace (default: $CLAUDE_PROJECT_DIR, else the "
            "call's cwd).",
            file_okay=False,
        ),
    ] = None,
    mounts: MountsOption = None,
    policy_file: PolicyOption = None,
    preset: PresetOption = None,
    policy_store: PolicyStoreOption = None,
    state: StateOption = None,
    state_in_mount: StateInMountOption = False,
    warm: WarmOption = False,  # taken before parsing: see stockade.engine.cli.warm
) -> None:
    """Decide one Claude Code tool call (PreToolUse hook JSON on stdin) by the policy: prints
    Claude Code's decision (exit 0), or exits 2 saying why it could not decide."""
    options = HookOptions(
        workspace, tuple(mounts or ()), policy_file, preset, state, state_in_mount, policy_store
    )
    try:
        data = sys.stdin.buffer.read()
    except Exception as exc:  # still a blocking error, never a crash (which would allow)
        reply = HookReply(BLOCK, "", f"Stockade blocked this tool call: stdin: {exc}\n")
    else:
        reply = answer(data, options)
    raise typer.Exit(_send(reply))


def _send(reply: HookReply) -> int:
    """Write the reply as bytes, whatever the terminal's encoding (a reply that cannot be
    encoded must not crash: Claude Code would run the call); the exit code to use."""
    try:
        # stdout is JSON, which is UTF-8; stderr is read by Claude, so UTF-8 too
        sys.stdout.buffer.write(reply.stdout.encode("utf-8", "backslashreplace"))
        sys.stdout.buffer.flush()
        sys.stderr.buffer.write(reply.stderr.encode("utf-8", "backslashreplace"))
        sys.stderr.buffer.flush()
    except Exception:  # stdout gone: nothing was said, so nothing may be allowed
        return BLOCK
    return reply.code
