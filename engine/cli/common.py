"""What the ``stockade`` commands share: failing with one clear line, choosing a policy, and the
options every command that runs calls takes (so each is spelled and explained once)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from stockade.policies import Policy, PolicyError


def fail(message: str) -> NoReturn:
    """Print ``error: message`` on stderr (no traceback) and exit 1."""
    # soft wrap: one line however long, so a script (or grep) sees the whole message
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {message}")
    raise typer.Exit(1)


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
    Path, typer.Option(help="Folder for the audit log and the traces.", file_okay=False)
]
DEFAULT_STATE = Path(".stockade")
