"""Stockade: a sandboxed execution engine for AI-agent tool calls.

The names most programs need, in one place::

    from stockade import Engine, Mount, Policy, ToolCall, Toolkit, VirtualFS, add_file_tools, tool

The code lives in three packages: `stockade.engine` (tools, the call pipeline, audit, tracing,
the command line), `stockade.policies` (decisions) and `stockade.sandbox` (the virtual
filesystem and the process sandbox); this module holds their shared exception root
(`stockade.errors`) and version. A name below is loaded from its package when first used, so
``import stockade.policies`` loads the policy engine alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from stockade.errors import ConfigurationError, StockadeError
from stockade.version import __version__

if TYPE_CHECKING:
    from stockade.engine import (
        AuditLog,
        Engine,
        ToolBase,
        ToolCall,
        Toolkit,
        ToolOutput,
        ToolResult,
        add_file_tools,
        add_shell_tools,
        read_audit,
        tool,
        verify_audit,
    )
    from stockade.policies import Decision, Effect, Policy, PolicyError
    from stockade.sandbox import Limits, Mount, SandboxError, VirtualFS, run_process

# where each name lives (a test holds this to __all__)
_HOMES = {
    "stockade.engine": (
        "AuditLog",
        "Engine",
        "ToolBase",
        "ToolCall",
        "ToolOutput",
        "ToolResult",
        "Toolkit",
        "add_file_tools",
        "add_shell_tools",
        "read_audit",
        "tool",
        "verify_audit",
    ),
    "stockade.policies": ("Decision", "Effect", "Policy", "PolicyError"),
    "stockade.sandbox": ("Limits", "Mount", "SandboxError", "VirtualFS", "run_process"),
}
_HOME_OF = {name: home for home, names in _HOMES.items() for name in names}

__all__ = [
    "AuditLog",
    "ConfigurationError",
    "Decision",
    "Effect",
    "Engine",
    "Limits",
    "Mount",
    "Policy",
    "PolicyError",
    "SandboxError",
    "StockadeError",
    "ToolBase",
    "ToolCall",
    "ToolOutput",
    "ToolResult",
    "Toolkit",
    "VirtualFS",
    "__version__",
    "add_file_tools",
    "add_shell_tools",
    "read_audit",
    "run_process",
    "tool",
    "verify_audit",
]


def __getattr__(name: str) -> object:
    """A public name, loaded from its package on first use."""
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module 'stockade' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next use is an ordinary attribute
    return value
