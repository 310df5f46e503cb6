"""The policy as casbin sees it: a casbin model, policy lines, and an enforcer.

casbin is the engine of record. A policy compiles into the model below plus one policy line per
(subject, tool pattern, action) of each rule, ordered strongest effect first, and one grouping
line per role membership, so any casbin adapter (a CSV file, a database) can hold it and
`spec_from_lines` reads it back (`Policy.from_enforcer`). casbin's
``some(where (p.eft == allow))`` effect stops at the first line that matches, and
``enforce_ex`` names it: first-match over ranked lines, the same semantics as the compiled
path, which exists only because casbin's evaluation is too slow for the hot path. The two must
agree on every request (tests/test_policy_differential.py).

casbin itself is imported only where an enforcer is built: it takes tens of milliseconds to
import, and a program that only decides through the compiled path never needs it.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from stockade.errors import ConfigurationError
from stockade.policies.command_patterns import command_match
from stockade.policies.dangerous_commands import BUILT_IN_IDS
from stockade.policies.globs import wcmatch_paths
from stockade.policies.policy_file import DangerousSpec
from stockade.policies.rules import Atom, Rule
from stockade.policies.ruleset import DANGEROUS_RULE, READ_ONLY_RULE, STATE_RULE

if TYPE_CHECKING:
    import casbin

MODEL_TEXT = """
[request_definition]
r = sub, tool, act, ro, target

[policy_definition]
p = sub, tool, act, ro, target, effect, id, reason

[role_definition]
g = _, _

[policy_effect]
e = some(where (p.eft == allow))

[matchers]
m = (p.sub == "*" || g(r.sub, p.sub)) && toolMatch(r.tool, p.tool) \
&& (p.act == "*" || r.act == p.act) && (p.ro == "*" || r.ro == p.ro) \
&& targetMatch(r.target, p.target)
"""


# casbin's adapters split a line on commas outside brackets and parentheses and strip the
# pieces, so free text (patterns, reasons) is stored with those characters percent-encoded.
_SPECIAL = {"%": "%25", ",": "%2C", "[": "%5B", "]": "%5D", "(": "%28", ")": "%29"}


def encode_field(text: str) -> str:
    """A value safe to store as one field of a casbin line."""
    out = "".join(_SPECIAL.get(ch, ch) for ch in text)
    if out != out.strip():  # keep edge whitespace, which adapters strip
        out = out.replace(" ", "%20").replace("\t", "%09")
    return out


@lru_cache(maxsize=8192)
def decode_field(field: str) -> str:
    """Inverse of `encode_field`."""
    return unquote(field) if "%" in field else field


def _encode(patterns: Iterable[str]) -> str:
    return encode_field(json.dumps(list(patterns), ensure_ascii=False))


@lru_cache(maxsize=4096)
def _decode(encoded: str) -> tuple[str, ...]:
    return tuple(json.loads(decode_field(encoded)))


def target_of(rule: Rule) -> str:
    """The ``target`` field of a rule's casbin lines."""
    if rule.paths is not None:
        kind = "ipath" if rule.paths.folded else "path"
        return f"{kind}:{_encode(rule.path_patterns)}"
    if rule.commands is not None:
        return f"cmd:{_encode(rule.command_patterns)}"
    return "*"


def target_match(request_target: str, rule_target: str) -> bool:
    """casbin matcher function: does an atom's target satisfy a rule's target condition."""
    if rule_target == "*":
        return True
    kind, _, encoded = rule_target.partition(":")
    patterns = list(_decode(encoded))
    if kind in ("path", "ipath"):
        return request_target.startswith("path:") and wcmatch_paths(
            request_target[5:], patterns, folded=kind == "ipath"
        )
    if kind in ("danger", "settings"):
        return False  # the dangerous-command list is checked beside casbin, on the whole line
    if kind == "cmd":
        command = request_target[4:]
        return request_target.startswith("cmd:") and command_match(command, patterns)
    raise ConfigurationError(f"unknown target kind in policy line: {rule_target!r}")


def tool_match(tool: str, pattern: str) -> bool:
    """casbin matcher function for tool-name patterns."""
    return pattern == "*" or fnmatch.fnmatchcase(tool, decode_field(pattern))


def policy_lines(ranked: Iterable[Rule]) -> list[list[str]]:
    """One casbin policy line per (subject, tool, action) of each rule, in first-match order."""
    lines = []
    for rule in ranked:
        ro = "*" if rule.read_only is None else str(rule.read_only).lower()
        target = target_of(rule)
        actions = sorted(rule.actions) if rule.actions is not None else ["*"]
        for subject in rule.subject_names if rule.subjects is not None else ("*",):
            for tool in rule.tool_patterns if rule.tools is not None else ("*",):
                for action in actions:
                    lines.append(
                        [
                            subject,
                            encode_field(tool),
                            action,
                            ro,
                            target,
                            rule.effect.value,
                            encode_field(rule.id),
                            encode_field(rule.reason),
                        ]
                    )
    return lines


def dangerous_commands_line(effect: str, remove: list[str], extend: list[str]) -> list[str]:
    """The line that carries the dangerous-command list (it never matches an atom: the list is
    checked on the whole command line, beside casbin)."""
    target = f"danger:{encode_field(json.dumps({'remove': remove, 'extend': extend}))}"
    return ["*", "*", "execute", "*", target, effect, "dangerous-command", "dangerous commands"]


# What a policy holds beside its rules, which casbin lines cannot say (the default, shadow mode,
# the tables): carried as JSON in one more line that never matches, so a store holding the lines
# holds the whole policy and one read of them is one consistent policy
SETTINGS_ID = "stockade-settings"
SETTING_KEYS = frozenset(
    {"description", "default", "shadow", "limits", "network", "process", "mcp", "host_files"}
    | {"approvals"}
)


def settings_line(settings: Mapping[str, Any], note: str) -> list[str]:
    """The line that carries a policy's settings (``note``: who published it, when)."""
    target = f"settings:{encode_field(json.dumps(dict(settings), sort_keys=True))}"
    return ["*", "*", "*", "*", target, "allow", SETTINGS_ID, encode_field(note)]


def csv_text(lines: Iterable[list[str]], groups: Iterable[list[str]]) -> str:
    """Policy (``p``) and grouping (``g``) lines as casbin's file adapter reads them."""
    rows = [["p", *line] for line in lines] + [["g", *line] for line in groups]
    return "".join(", ".join(row) + "\n" for row in rows)


def grouping_lines(roles: dict[str, list[str]]) -> list[list[str]]:
    """casbin ``g`` lines: member, role."""
    return [[member, role] for role, members in roles.items() for member in members]


def new_enforcer(lines: list[list[str]], groups: list[list[str]]) -> casbin.Enforcer:
    """A casbin enforcer holding a compiled policy."""
    import casbin  # here, not at the top: importing casbin is slow, and only this needs it

    enforcer = casbin.Enforcer(casbin.Enforcer.new_model(text=MODEL_TEXT))
    register_functions(enforcer)
    if lines:
        enforcer.add_policies(lines)
    if groups:
        enforcer.add_grouping_policies(groups)
    return enforcer


def register_functions(enforcer: casbin.Enforcer) -> None:
    """Give an enforcer (for example one loaded through an adapter) Stockade's matchers."""
    enforcer.add_function("toolMatch", tool_match)
    enforcer.add_function("targetMatch", target_match)


def request_target(atom: Atom) -> str:
    """The ``target`` value of an atom's casbin request."""
    if atom.path is not None:
        return f"path:{atom.path}"
    if atom.command is not None:
        return f"cmd:{atom.command}"
    return ""


class CasbinMatcher:
    """First match through casbin itself (the reference; slow)."""

    def __init__(self, enforcer: casbin.Enforcer, rules: Iterable[Rule]) -> None:
        self.enforcer = enforcer
        # by id and target: the dangerous-path id names two rules (see ruleset)
        self._by_line = {(r.id, target_of(r)): r for r in rules}

    def first_match(self, atom: Atom) -> Rule | None:
        """The rule of the first casbin line that matches ``atom``, or None."""
        matched, explain = self.enforcer.enforce_ex(
            atom.subject, atom.tool, atom.action, str(atom.read_only).lower(), request_target(atom)
        )
        if not matched:
            return None
        return self._by_line[(decode_field(explain[6]), explain[4])]


def lines_from_enforcer(enforcer: casbin.Enforcer) -> tuple[list[list[str]], list[list[str]]]:
    """The policy and grouping lines an enforcer holds (as an adapter loaded them)."""
    policy: Any = enforcer.get_policy()
    groups: Any = enforcer.get_grouping_policy()
    return [list(p) for p in policy], [list(g) for g in groups]


def spec_from_lines(
    lines: Iterable[list[str]],
    groups: Iterable[list[str]],
    default: str,
    shadow: bool,
    given: Mapping[str, Mapping[str, Any] | None],
) -> tuple[dict[str, Any], list[str]]:
    """Policy data (shaped like the TOML file) from casbin policy and grouping lines, and the
    patterns of Stockade's own files the lines protect (`Policy.protect`; not a part of a
    file). What lines cannot hold is given: the default, shadow mode, and the ``limits``,
    ``process`` and ``host_files`` tables (``given``, by name)."""
    rules: dict[str, dict[str, Any]] = {}
    data: dict[str, Any] = {
        "default": default,
        "shadow": shadow,
        **{table: dict(given.get(table) or {}) for table in ("limits", "process", "host_files")},
    }
    for sub, tool, act, ro, target, effect, rule_id, reason in (line[:8] for line in lines):
        if target.startswith("danger:"):
            data["dangerous_commands"] = {"effect": effect, **json.loads(decode_field(target[7:]))}
            continue
        if target.startswith("settings:"):  # given tables give way to the policy's own
            settings = json.loads(decode_field(target[9:]))
            data.update((k, v) for k, v in settings.items() if k in SETTING_KEYS)
            continue
        tool, rule_id, reason = decode_field(tool), decode_field(rule_id), decode_field(reason)
        rule = rules.setdefault(
            rule_id,
            {
                "id": rule_id,
                "effect": effect,
                "reason": reason,
                "subjects": [],
                "tools": [],
                "actions": [],
            },
        )
        for key, value in (("subjects", sub), ("tools", tool), ("actions", act)):
            if value not in rule[key]:
                rule[key].append(value)
        if ro != "*":
            rule["read_only_tools"] = ro == "true"
        kind, _, encoded = target.partition(":")
        if kind in ("path", "ipath"):
            # the dangerous-path id names two rules (all access, changes only): one list back
            paths = rule.setdefault("paths", [])
            paths += [p for p in json.loads(decode_field(encoded)) if p not in paths]
        elif kind == "cmd":
            rule["commands"] = json.loads(decode_field(encoded))
    roles: dict[str, list[str]] = {}
    for member, role in (g[:2] for g in groups):
        roles.setdefault(role, []).append(member)
    data["roles"] = roles
    user_rules = []
    protected: list[str] = []
    for rule in rules.values():
        if rule["actions"] == ["*"]:
            rule["actions"] = []
        if rule["id"] == STATE_RULE:
            # each protected path was written as itself and itself/**: keep the first form
            protected = [p for p in rule["paths"] if not p.endswith("/**")]
        elif rule["id"] == READ_ONLY_RULE:
            data["read_only"] = True
        elif rule["id"] == DANGEROUS_RULE:
            data["dangerous_paths"] = DangerousSpec(
                effect=rule["effect"], replace=rule["paths"]
            ).model_dump(exclude_defaults=False)
        else:
            user_rules.append(rule)
    data.setdefault("dangerous_paths", {"replace": []})
    # lines without the list (written by hand, or by an older Stockade) check no commands
    data.setdefault("dangerous_commands", {"remove": list(BUILT_IN_IDS)})
    data["rules"] = user_rules
    return data, protected
