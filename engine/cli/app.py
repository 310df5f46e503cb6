"""The ``stockade`` command.

    stockade --version
    stockade --debug run calls.jsonl

Exit codes scripts can rely on: 0 success, 1 the command ran but found a problem (a demo step
that misbehaved, a bad file, a log that does not verify), 2 bad usage (typer's own, and
`common.usage`), 130 interrupted (typer turns Ctrl-C into it). An error is one line on stderr;
``stockade --debug ...`` (or ``STOCKADE_DEBUG=1``) shows the traceback of an unexpected one and
logs at debug level.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from stockade.engine.cli.audit import audit_app
from stockade.engine.cli.common import fail
from stockade.engine.cli.demo import demo
from stockade.engine.cli.hook import hook_app
from stockade.engine.cli.policy import policy_app
from stockade.engine.cli.run import run
from stockade.engine.cli.serve import serve
from stockade.version import __version__

BROKEN_PIPE = 141  # 128 + SIGPIPE


class _Commands(TyperGroup):
    """The command group, which turns an unexpected exception into one line on stderr and exit
    code 1, unless ``--debug`` asked for the traceback; and whose help shows no type for a flag
    (typer's rich help would write ``<bool>`` beside ``--json``, as if it took a value)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _plain_flags(self, ctx)  # before any help is printed, this command's or another's
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, TyperException, KeyboardInterrupt):
            raise  # exit codes, usage errors and Ctrl-C keep their own handling
        except BrokenPipeError:
            # the reader of the output went away (`| head`): nothing more to say, and no
            # flush at exit may fail again; 141 is what a shell reports for SIGPIPE
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(BROKEN_PIPE) from None
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            fail(
                f"unexpected {type(exc).__name__}: {exc}. This is a bug in Stockade: rerun "
                "with `stockade --debug ...` for the traceback and report it"
            )


def _plain_flags(command: Any, ctx: Any) -> None:
    """Give every flag of ``command`` and of the commands under it (``--help`` too) an empty
    metavar, which typer's help shows instead of ``<bool>``; an option that takes a value keeps
    its own. (The objects are this run's: typer builds them anew for each.)"""
    help_option = command.get_help_option(ctx)
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _plain_flags(sub, ctx)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


app = typer.Typer(
    name="stockade",
    help="A sandboxed execution engine for AI-agent tool calls.",
    cls=_Commands,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals can hold file contents and secrets
)
app.add_typer(audit_app)
app.add_typer(hook_app)
app.add_typer(policy_app)
app.command()(demo)
app.command()(run)
app.command()(serve)


@app.callback()
def _options(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            envvar="STOCKADE_DEBUG",
            help="Show the traceback of an unexpected error, and log at debug level.",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            expose_value=False,
            callback=_print_version,
            help="Print Stockade's version and exit (as `stockade version`).",
        ),
    ] = False,
) -> None:
    """A sandboxed execution engine for AI-agent tool calls."""
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")


@app.command()
def version(
    as_json: Annotated[bool, typer.Option("--json", help="Print it as JSON.")] = False,
) -> None:
    """Print Stockade's version."""
    typer.echo(json.dumps({"version": __version__}) if as_json else __version__)


def main() -> None:
    """Console-script entry point."""
    app()
