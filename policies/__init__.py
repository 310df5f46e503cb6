"""Stockade's policy engine: may this tool call run, and under what limits?

This package imports nothing from ``engine`` or ``sandbox``. A `Policy` (from a TOML file, a
preset, a dict, or a casbin enforcer) decides `Request`s with `Decision`s: allow, warn, ask or
deny, naming the rule and the reason. casbin is the engine of record; a compiled path gives the
same answers in microseconds.
"""

from stockade.policies.decision import Decision, Effect, strictest
from stockade.policies.egress import EgressRules, NetworkMode
from stockade.policies.lint import Finding, lint_policy, lint_text
from stockade.policies.paths import PathSpellingError, canonical, fold
from stockade.policies.policy import PRESETS, CallLimits, Policy
from stockade.policies.policy_file import NetworkSpec, PolicyError, Problem, ProcessSpec
from stockade.policies.request import Request
from stockade.policies.shell import CommandLine, SimpleCommand, parse_command
from stockade.policies.suggestions import Suggestion, suggest

__all__ = [
    "PRESETS",
    "CallLimits",
    "CommandLine",
    "Decision",
    "Effect",
    "EgressRules",
    "Finding",
    "NetworkMode",
    "NetworkSpec",
    "PathSpellingError",
    "Policy",
    "PolicyError",
    "Problem",
    "ProcessSpec",
    "Request",
    "SimpleCommand",
    "Suggestion",
    "canonical",
    "fold",
    "lint_policy",
    "lint_text",
    "parse_command",
    "strictest",
    "suggest",
]
