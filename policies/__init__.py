"""Stockade's policy layer: decisions about whether a tool call may run.

This package imports nothing from ``engine`` or ``sandbox``. For now it holds the decision
types the engine's decide step speaks in; rule files, presets and the casbin-backed decision
path are built on top of them.
"""

from policies.decision import Decision, Effect, strictest

__all__ = ["Decision", "Effect", "strictest"]
