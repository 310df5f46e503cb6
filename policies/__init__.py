"""Stockade's policy engine: may this tool call run, and under what limits?

This package imports nothing from ``engine`` or ``sandbox``. A `Policy` (from a TOML file, a
preset, a dict, or a casbin enforcer) decides `Request`s with `Decision`s: allow, warn, ask or
deny, naming the rule and the reason. casbin is the engine of record; a compiled path gives the
same answers in microseconds.
"""

from policies.decision import Decision, Effect, strictest
from policies.lint import Finding, lint_policy, lint_text
from policies.paths import PathSpellingError, canonical, fold
from policies.policy import PRESETS, CallLimits, Policy
from policies.request import Request
from policies.shell import CommandLine, SimpleCommand, parse_command
from policies.spec import PolicyError, Problem, ProcessSpec

__all__ = [
    "PRESETS",
    "CallLimits",
    "CommandLine",
    "Decision",
    "Effect",
    "Finding",
    "PathSpellingError",
    "Policy",
    "PolicyError",
    "Problem",
    "ProcessSpec",
    "Request",
    "SimpleCommand",
    "canonical",
    "fold",
    "lint_policy",
    "lint_text",
    "parse_command",
    "strictest",
]
