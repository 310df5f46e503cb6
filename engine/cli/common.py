"""What the ``stockade`` commands share: failing with one clear line, choosing a policy, where
state is kept, and the options every command that runs calls takes (so each is spelled and
explained once).

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

from stockade.policies import Policy, PolicyError

USAGE = 2  # exit code of a command given wrong options or arguments (typer's own, too)


def fail(message: str, *, code: int = 1) -> NoReturn:
    """Print ``error: message`` on stderr (no traceback) and exit ``code`` (1: the command ran
    into a problem; `usage` for wrong options)."""
    from rich.console import Console

    # soft wrap: one line however long, so a script (or grep) sees the whole message
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def usage(message: str) -> NoReturn:
    """Wrong options or arguments: ``error: message`` on stderr and exit 2, as typer's own
    usage errors do."""
    fail(message, code=USAGE)


def load_policy(file: Path | None, preset: str | None) -> Policy:
    """The policy a command was given: a file, a preset, or the default preset."""
    if file is not None and preset is not None:
        fail("give --policy or --preset, not both")
    try:
        if file is not None:
            return Policy.load(file)
        return Policy.preset(preset or "default")
    except PolicyError as exc:
        fail(str(exc))


MountsOption = Annotated[
    list[str] | None,
    typer.Option("--mount", help="Another folder: PREFIX=DIR, or PREFIX=DIR:ro. Repeatable."),
]
PolicyOption = Annotated[
    Path | None, typer.Option("--policy", help="A policy file (default: the default preset).")
]
PresetOption = Annotated[str | None, typer.Option(help="A preset instead of a file.")]
StateOption = Annotated[
    Path | None,
    typer.Option(
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
