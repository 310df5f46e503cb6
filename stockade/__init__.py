"""Stockade: a sandboxed execution engine for AI-agent tool calls.

The names most programs need, in one place::

    from stockade import Engine, Mount, Policy, ToolCall, Toolkit, VirtualFS, tool

The code lives in three packages: `stockade.engine` (tools, the call pipeline, audit, tracing,
the command line), `stockade.policies` (decisions) and `stockade.sandbox` (the virtual
filesystem and the process sandbox).
"""

from stockade.engine import *  # noqa: F403
from stockade.engine import __all__ as _engine_names
from stockade.engine import __version__
from stockade.errors import StockadeError
from stockade.policies import Decision, Effect, Policy, PolicyError, Request
from stockade.sandbox import Mount, SandboxError, VirtualFS

__all__ = [
    *_engine_names,
    "Decision",
    "Effect",
    "Mount",
    "Policy",
    "PolicyError",
    "Request",
    "SandboxError",
    "StockadeError",
    "VirtualFS",
    "__version__",
]
