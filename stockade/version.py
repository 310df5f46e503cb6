"""Stockade's version, in one place for the package metadata readers, the CLI and the MCP
server (a module of its own so that reading it loads nothing else)."""

__version__ = "0.1.0"
