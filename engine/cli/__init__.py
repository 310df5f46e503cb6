"""The ``stockade`` command: one module per command group, and the session they share.

The command is this room's interface: its modules are internal, and only `main` (the console
script's entry point) is public. `main` loads the commands only when it runs them cold: a
``--warm`` start (see ``warm``) hands its command line to a warm server without loading them."""

from __future__ import annotations

import sys


def main() -> None:
    """Console-script entry point."""
    from stockade.engine.cli.warm import run_warm, wants_warm

    if wants_warm(sys.argv):
        code = run_warm(sys.argv)
        if code is not None:
            sys.exit(code)
    from stockade.engine.cli.app import main as run_cold

    run_cold()


__all__ = ["main"]
