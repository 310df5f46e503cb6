"""``stockade policy push``: publish a checked policy to a policy store on PostgreSQL.

stockade policy push stockade.toml --store postgresql://stockade:...@db/stockade
STOCKADE_POLICY_STORE=postgresql://... stockade policy push stockade.toml --note "allow npm"

The file is linted first, as ``stockade policy check`` does: a policy with errors is refused and
nothing is published (exit 1). Every engine following the store (``--policy-store``,
`Policy.from_store`) then decides by the new policy within a second.
"""

from __future__ import annotations

import getpass
import socket
import tomllib
from pathlib import Path
from typing import Annotated

import typer

from stockade.engine.cli.common import STORE_ENV, fail, input_file
from stockade.errors import ConfigurationError
from stockade.policies import Policy, PolicyError, lint_text
from stockade.policies.policy_file import parse
from stockade.policies.store import PolicyStore


def policy_push(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="The policy file (TOML); - for stdin.")
    ],
    store: Annotated[
        str,
        typer.Option(
            "--store",
            metavar="URL",
            envvar=STORE_ENV,
            show_envvar=False,  # the URL holds a password: never echoed
            help=f"The PostgreSQL policy store (postgresql://user:password@host/db). Or set "
            f"{STORE_ENV}.",
        ),
    ],
    note: Annotated[
        str,
        typer.Option(
            metavar="TEXT", help="Why, stored with the policy (default: who, and the file)."
        ),
    ] = "",
) -> None:
    """Publish a policy to a policy store: refused (exit 1) when it has lint errors; every
    engine following the store decides by it within a second."""
    try:
        text = input_file(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read the policy {file}: {exc}")
    errors = [f for f in lint_text(text, source=str(file)) if f.severity == "error"]
    if errors:
        for finding in errors:
            typer.echo(f"{file}:{finding}", err=True)
        fail(f"{file} has {len(errors)} error(s); nothing was published (`stockade policy check`)")
    try:
        policy = Policy(parse(tomllib.loads(text), source=str(file)), source=str(file), text=text)
    except PolicyError as exc:  # lint passed it: only a loader stricter than lint gets here
        fail(str(exc))
    said = note or f"{getpass.getuser()}@{socket.gethostname()}: {file}"
    pushed = PolicyStore(store)
    try:
        version = pushed.push(policy, note=said)
    except ConfigurationError as exc:
        fail(str(exc))
    finally:
        pushed.close()
    typer.echo(f"published {file} to {pushed.where} as policy {version[:12]}")
