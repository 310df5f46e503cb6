"""The ``stockade`` command: one module per command group, and the session they share."""

from stockade.engine.cli.app import main

__all__ = ["main"]
