"""The ``stockade`` command: one module per command group, and the session they share.

The command is this room's interface: its modules are internal, and only `main` (the console
script's entry point) is public."""

from stockade.engine.cli.app import main

__all__ = ["main"]
