"""What the ``stockade`` commands share: failing with one clear line, choosing a policy, where
state is kept, ``-`` for standard input, and the options every command that runs calls takes
(so each is spelled and explained once).

    policy = load_policy(policy_file, preset, stdin=True)   # --policy -: read from stdin
    calls = load_transcript(input_file(transcript))          # TRANSCRIPT -: likewise
    usage("--apply needs --overlay")                         # error: ..., exit 2

State (the audit log, its seal, the traces) is kept outside every workspace by default: in the
user's state folder (``$XDG_STATE_HOME``, else ``~/.local/state``), under ``stockade/``, in a
folder per workspace named after it and a hash of its full path (``project-3f2a9c1d0b7e4a55``),
so that sessions on one project share a log and different projects never do. Why there: an
agent can write its workspace, so a log kept in it could be cut or rewritten by any command that
runs without the box (and the policy only guards what passes through it); a user's state
folder is never mounted, is not in the box's view, and is where logs and history belong.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from stockade.errors import ConfigurationError
from stockade.policies import PRESETS, Policy, PolicyError
from stockade.policies.policy_file import read

USAGE = 2  # exit code of a command given wrong options or arguments (typer's own, too)
INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C
STDIN = Path("-")  # a file argument spelled "-": standard input
STDIN_FILE = Path("/dev/stdin")  # what is read for it (and named in messages)


def fail(message: str, *, code: int = 1) -> NoReturn:
    """Print ``error: message`` on stderr (no traceback) and exit ``code`` (1: the command ran
    into a problem; `usage` for wrong options)."""
    from rich.console import Console
    from rich.text import Text

    # soft wrap: one line however long, so a script (or grep) sees the whole message; Text, not
    # markup: a message quoting a path or a command may hold [brackets]
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        Text.assemble(("error:", "bold red"), " ", message)
    )
    raise typer.Exit(code)


def usage(message: str) -> NoReturn:
    """Wrong options or arguments: ``error: message`` on stderr and exit 2, as typer's own
    usage errors do."""
    fail(message, code=USAGE)


def input_file(path: Path) -> Path:
    """The file a command reads for a file argument: standard input for ``-``."""
    return STDIN_FILE if path == STDIN else path


def load_policy(
    file: Path | None, preset: str | None, *, stdin: bool = False, store: str | None = None
) -> Policy:
    """The policy a command was given: a file (``-``: standard input, where ``stdin`` allows
    it), a preset, the policy store at ``store`` (kept current: `Policy.from_store`), or the
    default preset. Exits 2 for contradictory or unknown options, 1 for a file or a store that
    cannot be used."""
    if store is not None:
        if file is not None or preset is not None:
            usage("give --policy-store or --policy/--preset, not both")
        try:
            return Policy.from_store(store)
        except (ConfigurationError, PolicyError) as exc:
            fail(str(exc))
    if file is not None and preset is not None:
        usage("give --policy or --preset, not both")
    if preset is not None and preset not in PRESETS:
        usage(f"--preset {preset}: no such preset; the presets are {', '.join(PRESETS)}")
    try:
        if file == STDIN:
            if not stdin:
                usage(
                    "--policy -: this command cannot read its policy from standard input; "
                    "give the policy file's path"
                )
            # no `file`: a policy read from a pipe has nowhere to keep approvals "always"
            spec, text = read(STDIN_FILE)
            if not text.strip():  # a pipe from a file that was missing: not "no rules at all"
                fail(
                    "--policy -: standard input held no policy (it was empty); pipe the policy "
                    "file in, or give its path"
                )
            return Policy(spec, source=str(STDIN_FILE), text=text)
        if file is not None:
            return Policy.load(file)
        return Policy.preset(preset or "default")
    except PolicyError as exc:
        fail(str(exc))


MountsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--mount",
        metavar="PREFIX=DIR[:ro]",
        help="Another folder: PREFIX=DIR, or PREFIX=DIR:ro. Repeatable.",
    ),
]
PolicyOption = Annotated[
    Path | None,
    typer.Option("--policy", metavar="FILE", help="A policy file (default: the default preset)."),
]
PolicyOrStdinOption = Annotated[
    Path | None,
    typer.Option(
        "--policy",
        metavar="FILE",
        help="A policy file, - for standard input (default: the default preset).",
    ),
]
STORE_ENV = "STOCKADE_POLICY_STORE"
PolicyStoreOption = Annotated[
    str | None,
    typer.Option(
        "--policy-store",
        metavar="URL",
        envvar=STORE_ENV,
        show_envvar=False,  # named in the help: the URL holds a password, never shown
        help="Decide by the policy published to this PostgreSQL store (`stockade policy push`), "
        f"following every new push within a second. Or set {STORE_ENV}.",
    ),
]
AUDIT_STORE_ENV = "STOCKADE_AUDIT_STORE"
AuditStoreOption = Annotated[
    str | None,
    typer.Option(
        "--audit-store",
        metavar="URL",
        envvar=AUDIT_STORE_ENV,
        show_envvar=False,  # the URL holds a password: never shown
        help="Also ship the audit records to this PostgreSQL audit store (one trail for many "
        "hosts), from a spool in --state that keeps them while it is down. Or set "
        f"{AUDIT_STORE_ENV}.",
    ),
]
PresetOption = Annotated[
    str | None,
    typer.Option(metavar="NAME", help=f"A preset instead of a file: {', '.join(PRESETS)}."),
]
StateOption = Annotated[
    Path | None,
    typer.Option(
        metavar="DIR",
        help="Folder for the audit log and the traces (default: one of the user's state folder "
        "for this workspace, outside it).",
        file_okay=False,
    ),
]
StateInMountOption = Annotated[
    bool,
    typer.Option(
        "--state-in-mount",
        help="Keep --state even inside the workspace or another writable mount, where the agent "
        "could reach it (Stockade's policy still denies it to every tool).",
    ),
]
# read by `stockade.engine.cli.main` before the command is parsed (see warm.py); here, so that
# the command accepts it, lists it in --help, and runs cold the same with it
WarmOption = Annotated[
    bool,
    typer.Option(
        "--warm",
        help="Start in a few milliseconds, forked from a warm Stockade kept for this user (the "
        "first start runs cold and starts it; it exits after STOCKADE_WARM_IDLE seconds, 900 "
        "by default, without a client).",
    ),
]


def state_home() -> Path:
    """Where Stockade keeps state for this user: ``$XDG_STATE_HOME/stockade`` (when set to an
    absolute path), else ``~/.local/state/stockade``."""
    base = os.environ.get("XDG_STATE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "stockade"


def default_state(workspace: Path | None) -> Path:
    """The state folder of the commands run on ``workspace`` (the demo's own, ``demo``, for a
    temporary one): ``<state home>/<name>-<hash of the full path>``."""
    if workspace is None:
        return state_home() / "demo"
    full = workspace.resolve()
    digest = hashlib.sha256(str(full).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return state_home() / f"{full.name or 'root'}-{digest}"
