"""The policy engine, rule by rule: every rule kind, precedence, the presets, shadow and read-only
modes, protected paths, bad policy files, limits, explanations, caching, casbin as the engine of
record, and the linter.

Every policy here is a real `Policy` (from a dict, a file in tmp_path, or a preset). Where a
decision is checked, the casbin reference (`decide_with_casbin`) is held to the same answer.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import casbin
import pytest

import stockade.policies
import stockade.policies.casbin_enforcer
from stockade.errors import StockadeError
from stockade.policies import (
    PRESETS,
    CallLimits,
    Decision,
    Effect,
    Policy,
    PolicyError,
    Problem,
    Request,
    lint_policy,
    lint_text,
)
from stockade.policies.casbin_enforcer import MODEL_TEXT, register_functions
from stockade.policies.dangerous import DEFAULT_DANGEROUS
from stockade.policies.globs import PatternError
from stockade.policies.paths import PathSpellingError
from stockade.policies.rules import RuleError

ROLES = {"admins": ["alice", "ops"], "ops": ["carol"], "readers": ["bob"]}
PRESET_DIR = Path(stockade.policies.__file__).parent / "presets"


# -- helpers ---------------------------------------------------------------------------------


def make_policy(*rules: dict[str, Any], **top: Any) -> Policy:
    """A policy with the given rules and no protected paths (unless ``top`` says otherwise)."""
    data: dict[str, Any] = {"roles": ROLES, "dangerous_paths": {"replace": []}}
    data.update(top)
    data["rules"] = list(rules)
    return Policy.from_dict(data)


def call(tool: str = "tool", subject: str = "agent", *, read_only: bool = False) -> Request:
    return Request(subject, tool, read_only=read_only)


def execute(command: str, tool: str = "shell", subject: str = "agent") -> Request:
    return Request(subject, tool, action="execute", command=command)


def touch(
    path: str,
    access: str = "write",
    tool: str = "tool",
    subject: str = "agent",
    *,
    read_only: bool = False,
) -> Request:
    return Request(subject, tool, paths=[(path, access)], read_only=read_only)


def decide(policy: Policy, request: Request) -> Decision:
    """The compiled decision, checked against casbin's (the engine of record)."""
    decision = policy.decide(request)
    reference = policy.decide_with_casbin(request)
    assert decision == reference, f"compiled {decision} != casbin {reference} for {request}"
    return decision


def effect_rule(decision: Decision) -> tuple[str, str | None]:
    return decision.effect.value, decision.rule


def write_policy(tmp_path: Path, text: str, name: str = "policy.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# -- 1. every rule kind ------------------------------------------------------------------------

# (id, the rule's conditions, the request, whether the rule matches). The rule is a deny in a
# default-allow policy: a match decides (deny, "r"), no match leaves (allow, None).
RULE_KIND_CASES: list[tuple[str, dict[str, Any], Request, bool]] = [
    # subjects, by name
    ("subject-name-matches", {"subjects": ["alice"]}, call(subject="alice"), True),
    ("subject-name-other", {"subjects": ["alice"]}, call(subject="bob"), False),
    ("subject-name-is-exact", {"subjects": ["alice"]}, call(subject="alice2"), False),
    ("subject-list-any", {"subjects": ["dave", "bob"]}, call(subject="bob"), True),
    # roles: membership, nested membership, the role name itself
    ("role-member", {"subjects": ["admins"]}, call(subject="alice"), True),
    ("role-nested-member", {"subjects": ["admins"]}, call(subject="carol"), True),
    ("role-inner-role", {"subjects": ["admins"]}, call(subject="ops"), True),
    ("role-non-member", {"subjects": ["admins"]}, call(subject="bob"), False),
    ("role-not-upwards", {"subjects": ["ops"]}, call(subject="alice"), False),
    # tools, exact and glob (case-sensitive)
    ("tool-exact", {"tools": ["write_file"]}, call("write_file"), True),
    ("tool-exact-other", {"tools": ["write_file"]}, call("write_files"), False),
    ("tool-exact-case", {"tools": ["write_file"]}, call("Write_file"), False),
    ("tool-glob-star", {"tools": ["db_*"]}, call("db_query"), True),
    ("tool-glob-star-prefix", {"tools": ["db_*"]}, call("mydb_query"), False),
    ("tool-glob-star-empty", {"tools": ["db_*"]}, call("db"), False),
    ("tool-glob-question", {"tools": ["tool?"]}, call("tool1"), True),
    ("tool-glob-question-one", {"tools": ["tool?"]}, call("tool12"), False),
    ("tool-glob-class", {"tools": ["[rw]_file"]}, call("w_file"), True),
    ("tool-glob-class-other", {"tools": ["[rw]_file"]}, call("x_file"), False),
    # paths: absolute
    ("path-abs-tree", {"paths": ["/workspace/src/**"]}, touch("/workspace/src/a/b.py"), True),
    ("path-abs-tree-other", {"paths": ["/workspace/src/**"]}, touch("/workspace/docs/a"), False),
    ("path-abs-prefix-only", {"paths": ["/workspace/src/**"]}, touch("/workspace/srcx/a"), False),
    ("path-abs-exact", {"paths": ["/workspace/a.txt"]}, touch("/workspace/a.txt"), True),
    ("path-abs-exact-child", {"paths": ["/workspace/a.txt"]}, touch("/workspace/a.txt/b"), False),
    # paths: relative patterns are under /workspace
    ("path-relative", {"paths": ["src/*.py"]}, touch("/workspace/src/a.py"), True),
    ("path-relative-not-root", {"paths": ["src/*.py"]}, touch("/src/a.py"), False),
    ("path-relative-request", {"paths": ["src/*.py"]}, touch("src/a.py"), True),
    # `dir/**` also matches dir itself
    ("path-tree-itself", {"paths": ["/workspace/build/**"]}, touch("/workspace/build"), True),
    ("path-tree-rel-itself", {"paths": ["build/**"]}, touch("/workspace/build"), True),
    ("path-tree-sibling", {"paths": ["build/**"]}, touch("/workspace/buildx"), False),
    # `**/name` anywhere
    ("path-any-root-level", {"paths": ["**/secret.txt"]}, touch("/secret.txt"), True),
    ("path-any-ws-level", {"paths": ["**/secret.txt"]}, touch("/workspace/secret.txt"), True),
    ("path-any-deep", {"paths": ["**/secret.txt"]}, touch("/workspace/a/b/c/secret.txt"), True),
    ("path-any-suffix", {"paths": ["**/secret.txt"]}, touch("/workspace/secret.txt.bak"), False),
    ("path-any-prefix", {"paths": ["**/secret.txt"]}, touch("/workspace/my-secret.txt"), False),
    ("path-mid-globstar", {"paths": ["/workspace/**/out"]}, touch("/workspace/a/b/out"), True),
    ("path-mid-globstar-zero", {"paths": ["/workspace/**/out"]}, touch("/workspace/out"), True),
    # `*` stays within one segment (and matches leading dots)
    ("path-star", {"paths": ["/workspace/*.py"]}, touch("/workspace/main.py"), True),
    ("path-star-no-slash", {"paths": ["/workspace/*.py"]}, touch("/workspace/src/main.py"), False),
    ("path-star-dotfile", {"paths": ["/workspace/*"]}, touch("/workspace/.hidden"), True),
    ("path-star-one-level", {"paths": ["/workspace/*"]}, touch("/workspace/a/b"), False),
    # `?` is one character, never `/`
    ("path-question", {"paths": ["/workspace/file?.txt"]}, touch("/workspace/file1.txt"), True),
    (
        "path-question-two",
        {"paths": ["/workspace/file?.txt"]},
        touch("/workspace/file12.txt"),
        False,
    ),
    ("path-question-slash", {"paths": ["/workspace/a?b"]}, touch("/workspace/a/b"), False),
    # `[...]` classes, negated classes; never `/`
    ("path-class", {"paths": ["/workspace/[ab].txt"]}, touch("/workspace/a.txt"), True),
    ("path-class-other", {"paths": ["/workspace/[ab].txt"]}, touch("/workspace/c.txt"), False),
    ("path-class-range", {"paths": ["/workspace/v[0-9]"]}, touch("/workspace/v7"), True),
    ("path-class-neg", {"paths": ["/workspace/[!ab].txt"]}, touch("/workspace/c.txt"), True),
    ("path-class-neg-other", {"paths": ["/workspace/[!ab].txt"]}, touch("/workspace/a.txt"), False),
    ("path-class-neg-slash", {"paths": ["/workspace/x[!a]y"]}, touch("/workspace/x/y"), False),
    ("path-class-caret-slash", {"paths": ["/workspace/x[^a]y"]}, touch("/workspace/x/y"), False),
    # exclusions with `!`
    (
        "path-exclusion-kept",
        {"paths": ["/workspace/**", "!/workspace/tests/**"]},
        touch("/workspace/src/a.py"),
        True,
    ),
    (
        "path-exclusion-excluded",
        {"paths": ["/workspace/**", "!/workspace/tests/**"]},
        touch("/workspace/tests/test_a.py"),
        False,
    ),
    (
        "path-exclusion-dir-itself",
        {"paths": ["/workspace/**", "!/workspace/tests/**"]},
        touch("/workspace/tests"),
        False,
    ),
    (
        "path-exclusion-relative",
        {"paths": ["**/*.py", "!gen/**"]},
        touch("/workspace/gen/x.py"),
        False,
    ),
    # commands: a glob over the whole command line, for execute atoms only
    ("command-glob", {"commands": ["git *"]}, execute("git push origin main"), True),
    ("command-glob-other", {"commands": ["git *"]}, execute("ls -la"), False),
    ("command-prefix-covers-bare", {"commands": ["git *"]}, execute("git"), True),
    ("command-prefix-not-longer-word", {"commands": ["git *"]}, execute("gitk"), False),
    ("command-exact", {"commands": ["make"]}, execute("make"), True),
    ("command-exact-more", {"commands": ["make"]}, execute("make all"), False),
    ("command-star-crosses-slash", {"commands": ["* /etc/*"]}, execute("cat /etc/x/y"), True),
    (
        "command-not-on-call",
        {"commands": ["git *"]},
        Request("agent", "shell", action="call", command="git status"),
        False,
    ),
    ("command-not-on-path", {"commands": ["*"]}, touch("/workspace/a"), False),
    # read_only_tools
    ("read-only-true-ro", {"read_only_tools": True}, call(read_only=True), True),
    ("read-only-true-rw", {"read_only_tools": True}, call(read_only=False), False),
    ("read-only-false-rw", {"read_only_tools": False}, call(read_only=False), True),
    ("read-only-false-ro", {"read_only_tools": False}, call(read_only=True), False),
    # no conditions: everything
    ("no-conditions-call", {}, call(), True),
    ("no-conditions-execute", {}, execute("ls"), True),
    ("no-conditions-path", {}, touch("/elsewhere/x", "delete"), True),
    # a path rule never matches the call atom
    ("path-rule-not-call", {"paths": ["/**"]}, call(), False),
    ("path-rule-not-execute", {"paths": ["/**"]}, execute("ls /workspace"), False),
    (
        "path-rule-call-action",
        {"paths": ["/**"], "actions": ["call"]},
        touch("/workspace/a"),
        False,
    ),
    # several conditions: all must hold
    (
        "all-conditions-hold",
        {"subjects": ["admins"], "tools": ["db_*"], "actions": ["write"], "paths": ["data/**"]},
        touch("/workspace/data/x", "write", "db_admin", "carol"),
        True,
    ),
    (
        "all-conditions-one-fails",
        {"subjects": ["admins"], "tools": ["db_*"], "actions": ["write"], "paths": ["data/**"]},
        touch("/workspace/data/x", "read", "db_admin", "carol"),
        False,
    ),
]


@pytest.mark.parametrize(
    ("conditions", "request_", "matches"),
    [case[1:] for case in RULE_KIND_CASES],
    ids=[case[0] for case in RULE_KIND_CASES],
)
def test_rule_kind(conditions: dict[str, Any], request_: Request, matches: bool) -> None:
    policy = make_policy({"id": "r", "effect": "deny", **conditions})
    expected = ("deny", "r") if matches else ("allow", None)
    assert effect_rule(policy.decide(request_)) == expected
    assert effect_rule(policy.decide_with_casbin(request_)) == expected


# Glob corners where the compiled matcher must give wcmatch's (casbin's) answer: the globs
# module promises "the differential test holds the two matchers to identical answers".
# (id, pattern, path, wcmatch's answer)
GLOB_DIALECT_CASES = [
    ("bracket-first-in-class", "/workspace/[]a]", "/workspace/]", True),
    ("bracket-first-in-neg-class", "/workspace/[!]]", "/workspace/a", True),
    ("escaped-bracket-in-class", "/workspace/[\\]]", "/workspace/]", True),
    ("star-is-not-the-root", "/*", "/", False),
    ("globstar-star-is-not-the-root", "**/*", "/", False),
    ("escaped-star", "/workspace/a\\*b", "/workspace/a*b", True),
    ("escaped-star-literal", "/workspace/a\\*b", "/workspace/axb", False),
    ("unclosed-bracket-literal", "/workspace/x[", "/workspace/x[", True),
    ("double-globstar", "/workspace/a/**/**/b", "/workspace/a/b", True),
]


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [case[1:] for case in GLOB_DIALECT_CASES],
    ids=[case[0] for case in GLOB_DIALECT_CASES],
)
def test_glob_dialect_matches_casbins(pattern: str, path: str, matches: bool) -> None:
    policy = make_policy({"id": "r", "effect": "deny", "paths": [pattern]})
    request = touch(path)
    expected = ("deny", "r") if matches else ("allow", None)
    assert effect_rule(policy.decide_with_casbin(request)) == expected  # the reference
    assert effect_rule(policy.decide(request)) == expected


def test_posix_character_classes_are_refused_at_load_not_misread() -> None:
    # the compiled matcher does not implement [[:digit:]]; refusing beats a silent mismatch
    with pytest.raises(PolicyError, match=r"POSIX classes.*\[0-9\]"):
        make_policy({"id": "r", "effect": "deny", "paths": ["/workspace/v[[:digit:]]"]})


@pytest.mark.parametrize(
    "pattern", ["./secrets/**", "src/../secrets/**", "/workspace/./secrets/**"], ids=str
)
def test_dot_segments_in_a_pattern_are_not_a_silently_dead_rule(pattern: str) -> None:
    # Paths are canonicalised so that spelling cannot matter; a pattern spelt with `.` or `..`
    # must then either mean the canonical folder or be refused when the policy loads. Today it
    # loads and never matches, so this deny protects nothing (and lint says nothing).
    try:
        policy = make_policy({"id": "no-secrets", "effect": "deny", "paths": [pattern]})
    except PolicyError:
        return
    assert effect_rule(decide(policy, touch("/workspace/secrets/key"))) == ("deny", "no-secrets")


ATOM_REQUESTS = {
    "call": call(),
    "execute": execute("ls"),
    "read": touch("/workspace/a", "read"),
    "write": touch("/workspace/a", "write"),
    "delete": touch("/workspace/a", "delete"),
}


@pytest.mark.parametrize("rule_action", sorted(ATOM_REQUESTS))
@pytest.mark.parametrize("request_kind", sorted(ATOM_REQUESTS))
def test_rule_action_matches_only_its_own_atom(rule_action: str, request_kind: str) -> None:
    policy = make_policy({"id": "r", "effect": "deny", "actions": [rule_action]})
    decision = decide(policy, ATOM_REQUESTS[request_kind])
    # every request but an execute has a call atom: a "call" rule matches it too
    call_atom = rule_action == "call" and request_kind != "execute"
    if rule_action == request_kind or call_atom:
        assert effect_rule(decision) == ("deny", "r")
        assert decision.action == rule_action
    else:
        assert effect_rule(decision) == ("allow", None)


# -- 2. precedence ---------------------------------------------------------------------------

# (id, rules as "effect:id" in file order, default, expected (effect, rule))
PRECEDENCE_CASES = [
    ("deny-beats-allow-after", ["allow:a", "deny:d"], "allow", ("deny", "d")),
    ("deny-beats-allow-before", ["deny:d", "allow:a"], "allow", ("deny", "d")),
    ("deny-beats-ask", ["ask:k", "deny:d"], "allow", ("deny", "d")),
    ("deny-beats-warn", ["warn:w", "deny:d"], "allow", ("deny", "d")),
    ("ask-beats-warn", ["warn:w", "ask:k"], "allow", ("ask", "k")),
    ("ask-beats-allow", ["allow:a", "ask:k"], "deny", ("ask", "k")),
    ("warn-beats-allow", ["allow:a", "warn:w"], "deny", ("warn", "w")),
    ("all-four-reversed", ["allow:a", "warn:w", "ask:k", "deny:d"], "allow", ("deny", "d")),
    ("all-four-shuffled", ["warn:w", "allow:a", "deny:d", "ask:k"], "allow", ("deny", "d")),
    ("same-effect-allow-first", ["allow:a1", "allow:a2"], "deny", ("allow", "a1")),
    ("same-effect-warn-first", ["warn:w1", "warn:w2"], "allow", ("warn", "w1")),
    ("same-effect-ask-first", ["ask:k2", "ask:k1"], "allow", ("ask", "k2")),
    ("same-effect-deny-first", ["deny:d2", "deny:d1", "allow:a"], "allow", ("deny", "d2")),
    ("a-rule-beats-default-deny", ["allow:a"], "deny", ("allow", "a")),
    ("no-rules-default-allow", [], "allow", ("allow", None)),
    ("no-rules-default-warn", [], "warn", ("warn", None)),
    ("no-rules-default-ask", [], "ask", ("ask", None)),
    ("no-rules-default-deny", [], "deny", ("deny", None)),
]


@pytest.mark.parametrize(
    ("rules", "default", "expected"),
    [case[1:] for case in PRECEDENCE_CASES],
    ids=[case[0] for case in PRECEDENCE_CASES],
)
def test_precedence(rules: list[str], default: str, expected: tuple[str, str | None]) -> None:
    specs = [{"id": r.split(":")[1], "effect": r.split(":")[0]} for r in rules]
    policy = make_policy(*specs, default=default)
    decision = decide(policy, call())
    assert effect_rule(decision) == expected
    if expected[1] is None:
        assert "default" in decision.reason
        assert default in decision.reason
    else:
        assert decision.reason == f"rule {expected[1]}"


PATH_RULES = {
    "a": {"id": "a", "effect": "allow", "paths": ["/workspace/**"]},
    "w": {"id": "w", "effect": "warn", "paths": ["/workspace/src/**"]},
    "k": {"id": "k", "effect": "ask", "paths": ["**/*.py"]},
    "d": {"id": "d", "effect": "deny", "paths": ["/workspace/src/secret/**"]},
}

# (path written, expected rule) for every file order of PATH_RULES
PATH_PRECEDENCE = [
    ("/workspace/src/secret/x.py", "d"),
    ("/workspace/src/x.py", "k"),
    ("/workspace/src/x.txt", "w"),
    ("/workspace/x.txt", "a"),
]


@pytest.mark.parametrize("order", ["awkd", "dkwa", "kadw", "wdak"])
@pytest.mark.parametrize(("path", "rule"), PATH_PRECEDENCE, ids=[p[0] for p in PATH_PRECEDENCE])
def test_precedence_among_path_rules(order: str, path: str, rule: str) -> None:
    policy = make_policy(*(PATH_RULES[r] for r in order))
    decision = decide(policy, touch(path))
    assert decision.rule == rule
    assert decision.effect.value == PATH_RULES[rule]["effect"]


@pytest.mark.parametrize(("first", "second"), [("by-glob", "by-prefix"), ("by-prefix", "by-glob")])
def test_same_effect_path_rules_keep_file_order_across_pattern_kinds(
    first: str, second: str
) -> None:
    rules = {
        "by-glob": {"id": "by-glob", "effect": "allow", "paths": ["**/*.py"]},
        "by-prefix": {"id": "by-prefix", "effect": "allow", "paths": ["/workspace/src/**"]},
    }
    policy = make_policy(rules[first], rules[second])
    assert decide(policy, touch("/workspace/src/x.py")).rule == first


def test_rule_reason_is_reported() -> None:
    policy = make_policy({"id": "r", "effect": "warn", "reason": "because I said so"})
    assert decide(policy, call()).reason == "because I said so"


def test_a_rule_that_does_not_match_is_skipped_for_a_weaker_one_that_does() -> None:
    policy = make_policy(
        {"id": "deny-db", "effect": "deny", "tools": ["db_*"]},
        {"id": "warn-all", "effect": "warn"},
    )
    assert effect_rule(decide(policy, call("search"))) == ("warn", "warn-all")
    assert effect_rule(decide(policy, call("db_query"))) == ("deny", "deny-db")


def test_system_rules_come_first_among_equal_effects() -> None:
    read_only = make_policy({"id": "user-deny", "effect": "deny"}, read_only=True)
    assert decide(read_only, call()).rule == "read-only-mode"
    assert decide(read_only, call(read_only=True)).rule == "user-deny"
    protected = Policy.from_dict(
        {"rules": [{"id": "user-ask", "effect": "ask", "paths": ["**/.env"]}]}
    )
    assert effect_rule(decide(protected, touch("/workspace/.env"))) == ("ask", "dangerous-path")


def test_a_user_deny_beats_the_dangerous_path_ask() -> None:
    policy = Policy.from_dict({"rules": [{"id": "no-env", "effect": "deny", "paths": ["**/.env"]}]})
    assert effect_rule(decide(policy, touch("/workspace/.env"))) == ("deny", "no-env")


MULTI_ATOM_RULES = [
    {"id": "warn-a", "effect": "warn", "paths": ["/workspace/a"]},
    {"id": "ask-b", "effect": "ask", "paths": ["/workspace/b"]},
    {"id": "deny-c-delete", "effect": "deny", "actions": ["delete"], "paths": ["/workspace/c"]},
    {"id": "ask-rm", "effect": "ask", "commands": ["rm *"]},
    {"id": "warn-x", "effect": "warn", "paths": ["/workspace/x"]},
]

# (id, paths, action, command, expected (effect, rule, action, target))
MULTI_ATOM_CASES = [
    (
        "path-atom-stricter-than-call",
        [("/workspace/a", "write")],
        "call",
        None,
        ("warn", "warn-a", "write", "/workspace/a"),
    ),
    (
        "strictest-path-wins",
        [("/workspace/a", "read"), ("/workspace/b", "write"), ("/workspace/z", "read")],
        "call",
        None,
        ("ask", "ask-b", "write", "/workspace/b"),
    ),
    (
        "deny-on-third-atom",
        [("/workspace/a", "read"), ("/workspace/b", "read"), ("/workspace/c", "delete")],
        "call",
        None,
        ("deny", "deny-c-delete", "delete", "/workspace/c"),
    ),
    (
        "access-matters",
        [("/workspace/c", "write")],
        "call",
        None,
        ("allow", None, "call", None),
    ),
    (
        "tie-between-paths-keeps-first",
        [("/workspace/x", "read"), ("/workspace/a", "read")],
        "call",
        None,
        ("warn", "warn-x", "read", "/workspace/x"),
    ),
    (
        "command-atom-names-the-command",
        [("/workspace/a", "read")],
        "execute",
        "rm -r build",
        ("ask", "ask-rm", "execute", "rm -r build"),
    ),
    (
        "path-beats-command",
        [("/workspace/c", "delete")],
        "execute",
        "rm -r build",
        ("deny", "deny-c-delete", "delete", "/workspace/c"),
    ),
    (
        "no-match-is-the-call",
        [("/workspace/z", "write")],
        "call",
        None,
        ("allow", None, "call", None),
    ),
]


@pytest.mark.parametrize(
    ("paths", "action", "command", "expected"),
    [case[1:] for case in MULTI_ATOM_CASES],
    ids=[case[0] for case in MULTI_ATOM_CASES],
)
def test_multi_atom_strictest_atom_decides(
    paths: list[tuple[str, str]],
    action: str,
    command: str | None,
    expected: tuple[str, str | None, str, str | None],
) -> None:
    policy = make_policy(*MULTI_ATOM_RULES)
    request = Request("agent", "tool", action, paths, command)
    decision = decide(policy, request)
    assert (decision.effect.value, decision.rule, decision.action, decision.target) == expected


def test_ties_keep_the_call_atom_when_a_rule_decided_it() -> None:
    policy = make_policy(
        {"id": "warn-calls", "effect": "warn", "actions": ["call"]},
        {"id": "warn-a", "effect": "warn", "paths": ["/workspace/a"]},
    )
    decision = decide(policy, touch("/workspace/a"))
    assert (decision.effect, decision.rule, decision.action, decision.target) == (
        Effect.WARN,
        "warn-calls",
        "call",
        None,
    )


def test_ties_with_a_default_call_atom_name_the_rule() -> None:
    # the call atom got the default (warn), the path atom an equally strict rule: the decision
    # names the rule and its atom (policy.py: "among equally strict ones, the first a rule
    # decided, else the call itself")
    policy = make_policy(
        {"id": "warn-a", "effect": "warn", "paths": ["/workspace/a"]},
        {"id": "warn-b", "effect": "warn", "paths": ["/workspace/b"]},
        default="warn",
    )
    decision = decide(
        policy,
        Request(
            "agent",
            "t",
            paths=[("/workspace/z", "read"), ("/workspace/b", "read"), ("/workspace/a", "read")],
        ),
    )
    assert (decision.effect, decision.rule, decision.action, decision.target) == (
        Effect.WARN,
        "warn-b",
        "read",
        "/workspace/b",
    )
    nothing = decide(policy, touch("/workspace/z"))
    assert (nothing.rule, nothing.action, nothing.target) == (None, "call", None)


def test_default_applies_per_atom() -> None:
    # default deny: the call is allowed by a rule, the path is not covered by any -> the path
    # atom's default decides
    policy = make_policy({"id": "calls", "effect": "allow", "actions": ["call"]}, default="deny")
    decision = decide(policy, touch("/workspace/a", "read"))
    assert (decision.effect, decision.rule, decision.action, decision.target) == (
        Effect.DENY,
        None,
        "read",
        "/workspace/a",
    )


# -- 3. presets ------------------------------------------------------------------------------

PRESET_REQUESTS = {
    "pathless-call": Request("agent", "search"),
    "ro-read-src": Request(
        "agent", "read_file", paths=[("/workspace/src/a.py", "read")], read_only=True
    ),
    "write-src": Request("agent", "write_file", paths=[("/workspace/src/a.py", "write")]),
    "write-env": Request("agent", "write_file", paths=[("/workspace/.env", "write")]),
    "ro-read-ssh-key": Request(
        "agent", "read_file", paths=[("/workspace/.ssh/id_rsa", "read")], read_only=True
    ),
    "write-userinput": Request("agent", "write_file", paths=[("/userinput/x", "write")]),
    "write-etc-passwd": Request("agent", "write_file", paths=[("/etc/passwd", "write")]),
    "execute": Request("agent", "shell", action="execute", command="pytest -q"),
    "execute-isolated": Request(
        "agent", "shell", action="execute", command="pytest -q", isolated=True
    ),
    "delete-workspace": Request("agent", "delete_file", paths=[("/workspace/old.txt", "delete")]),
    "ro-write-src": Request(
        "agent", "read_file", paths=[("/workspace/src/a.py", "write")], read_only=True
    ),
    "ro-read-etc": Request("agent", "read_file", paths=[("/etc/hosts", "read")], read_only=True),
    "ro-read-userinput": Request(
        "agent", "read_file", paths=[("/userinput/brief.md", "read")], read_only=True
    ),
}

# Derived from policies/presets/*.toml. "-" means no rule: the preset's default decided. Where
# atoms are equally strict, the first one a rule decided is reported (the call atom when a rule
# decided it), e.g. default's write-src names workspace-files, strict's write-env names
# dangerous-path although the default already denies the call.
PRESET_TABLE = {
    "default": [
        # request             effect   rule
        ("pathless-call", "allow", "-"),
        ("ro-read-src", "allow", "workspace-files"),
        ("write-src", "allow", "workspace-files"),
        ("write-env", "ask", "dangerous-path"),
        ("ro-read-ssh-key", "ask", "dangerous-path"),
        ("write-userinput", "deny", "userinput-read-only"),
        ("write-etc-passwd", "deny", "outside-namespaces"),
        ("execute", "ask", "commands-ask"),
        ("execute-isolated", "ask", "commands-ask"),
        ("delete-workspace", "allow", "workspace-files"),
        ("ro-write-src", "allow", "workspace-files"),
        ("ro-read-etc", "deny", "outside-namespaces"),
        ("ro-read-userinput", "allow", "workspace-files"),
    ],
    "read-only": [
        ("pathless-call", "deny", "read-only-mode"),
        ("ro-read-src", "allow", "-"),
        ("write-src", "deny", "read-only-mode"),
        ("write-env", "deny", "read-only-mode"),
        ("ro-read-ssh-key", "ask", "dangerous-path"),
        ("write-userinput", "deny", "read-only-mode"),
        ("write-etc-passwd", "deny", "read-only-mode"),
        ("execute", "deny", "read-only-mode"),
        ("execute-isolated", "deny", "read-only-mode"),
        ("delete-workspace", "deny", "read-only-mode"),
        ("ro-write-src", "deny", "no-changes"),
        ("ro-read-etc", "deny", "outside-namespaces"),
        ("ro-read-userinput", "allow", "-"),
    ],
    "strict": [
        ("pathless-call", "deny", "-"),
        ("ro-read-src", "allow", "read-only-tools"),
        ("write-src", "deny", "-"),
        ("write-env", "deny", "dangerous-path"),
        ("ro-read-ssh-key", "deny", "dangerous-path"),
        ("write-userinput", "deny", "-"),
        ("write-etc-passwd", "deny", "-"),
        ("execute", "deny", "-"),
        ("execute-isolated", "deny", "-"),
        ("delete-workspace", "deny", "-"),
        ("ro-write-src", "deny", "-"),
        ("ro-read-etc", "deny", "-"),
        ("ro-read-userinput", "allow", "read-only-tools"),
    ],
    "permissive": [
        ("pathless-call", "allow", "-"),
        ("ro-read-src", "allow", "-"),
        ("write-src", "allow", "-"),
        ("write-env", "deny", "dangerous-path"),
        ("ro-read-ssh-key", "deny", "dangerous-path"),
        ("write-userinput", "allow", "-"),
        ("write-etc-passwd", "allow", "-"),
        # commands run unasked here, so only boxed: without bubblewrap they are refused
        ("execute", "deny", "require-isolation"),
        ("execute-isolated", "allow", "-"),
        ("delete-workspace", "allow", "-"),
        ("ro-write-src", "allow", "-"),
        ("ro-read-etc", "allow", "-"),
        ("ro-read-userinput", "allow", "-"),
    ],
}

PRESET_CASES = [
    pytest.param(preset, request, effect, rule, id=f"{preset}:{request}")
    for preset, rows in PRESET_TABLE.items()
    for request, effect, rule in rows
]


@pytest.fixture(scope="module")
def presets() -> dict[str, Policy]:
    return {name: Policy.preset(name) for name in PRESETS}


def test_preset_table_covers_every_preset_and_request() -> None:
    assert set(PRESET_TABLE) == set(PRESETS)
    for rows in PRESET_TABLE.values():
        assert [row[0] for row in rows] == list(PRESET_REQUESTS)


@pytest.mark.parametrize(("preset", "request_name", "effect", "rule"), PRESET_CASES)
def test_preset_decides(
    presets: dict[str, Policy], preset: str, request_name: str, effect: str, rule: str
) -> None:
    decision = decide(presets[preset], PRESET_REQUESTS[request_name])
    assert effect_rule(decision) == (effect, None if rule == "-" else rule)
    assert decision.shadow is False


def test_preset_default_is_what_the_engine_gets_without_a_policy(
    presets: dict[str, Policy],
) -> None:
    assert presets["default"].default is Effect.ALLOW
    assert presets["strict"].default is Effect.DENY
    assert presets["read-only"].read_only is True
    assert repr(presets["default"]).startswith("<Policy preset:default")


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.preset("nope")
    message = str(caught.value)
    assert "'nope'" in message
    for name in PRESETS:
        assert name in message


# -- 4. shadow mode --------------------------------------------------------------------------

SHADOW_RULES = [
    {"id": "deny-etc", "effect": "deny", "paths": ["/etc/**"], "reason": "not outside"},
    {"id": "ask-rm", "effect": "ask", "commands": ["rm *"]},
    {"id": "warn-tmp", "effect": "warn", "paths": ["/workspace/tmp/**"]},
    {"id": "allow-src", "effect": "allow", "paths": ["/workspace/src/**"]},
]

SHADOW_CASES = [
    ("deny-becomes-warn", touch("/etc/passwd"), ("deny", "deny-etc")),
    ("ask-stays", execute("rm -r x"), ("ask", "ask-rm")),
    ("warn-stays", touch("/workspace/tmp/x"), ("warn", "warn-tmp")),
    ("allow-stays", touch("/workspace/src/a.py"), ("allow", "allow-src")),
    ("default-stays", call(), ("allow", None)),
]


@pytest.mark.parametrize(
    ("request_", "unshadowed"),
    [case[1:] for case in SHADOW_CASES],
    ids=[case[0] for case in SHADOW_CASES],
)
def test_shadow_mode(request_: Request, unshadowed: tuple[str, str | None]) -> None:
    enforced = make_policy(*SHADOW_RULES)
    shadowed = make_policy(*SHADOW_RULES, shadow=True)
    plain = decide(enforced, request_)
    shadow = decide(shadowed, request_)
    assert effect_rule(plain) == unshadowed
    assert plain.shadow is False
    assert shadow.shadow is True
    assert (shadow.rule, shadow.action, shadow.target) == (plain.rule, plain.action, plain.target)
    if plain.effect is Effect.DENY:
        assert shadow.effect is Effect.WARN
        assert shadow.reason.startswith("shadow mode: would be denied")
        assert plain.reason in shadow.reason
        assert shadow.allowed
    else:
        assert shadow.effect is plain.effect
        assert shadow.reason == plain.reason


def test_shadow_mode_also_covers_the_default_deny_and_bad_spellings() -> None:
    policy = make_policy(default="deny", shadow=True)
    decision = decide(policy, call())
    assert (decision.effect, decision.rule, decision.shadow) == (Effect.WARN, None, True)
    assert decision.reason.startswith("shadow mode: would be denied")
    nul = decide(policy, touch("/workspace/a\x00b"))
    assert (nul.effect, nul.rule, nul.shadow) == (Effect.WARN, "path-spelling", True)


@pytest.mark.parametrize("name", PRESETS)
def test_presets_are_not_in_shadow_mode(presets: dict[str, Policy], name: str) -> None:
    for request in PRESET_REQUESTS.values():
        assert presets[name].decide(request).shadow is False


# -- 5. the read_only switch -----------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        call(),
        execute("ls"),
        touch("/workspace/a", "read"),
        touch("/workspace/a", "write"),
        touch("/workspace/a", "delete"),
    ],
    ids=["call", "execute", "read", "write", "delete"],
)
def test_read_only_switch_denies_tools_not_marked_read_only(request_: Request) -> None:
    policy = make_policy({"id": "allow-all", "effect": "allow"}, read_only=True)
    decision = decide(policy, request_)
    assert effect_rule(decision) == ("deny", "read-only-mode")
    assert "read-only" in decision.reason


def test_read_only_switch_leaves_read_only_tools_alone() -> None:
    policy = make_policy(
        {"id": "allow-all", "effect": "allow"},
        {"id": "no-etc", "effect": "deny", "paths": ["/etc/**"]},
        read_only=True,
    )
    assert effect_rule(decide(policy, call(read_only=True))) == ("allow", "allow-all")
    ro_read = touch("/workspace/a", "read", read_only=True)
    assert effect_rule(decide(policy, ro_read)) == ("allow", "allow-all")
    ro_etc = touch("/etc/x", "read", read_only=True)
    assert effect_rule(decide(policy, ro_etc)) == ("deny", "no-etc")


def test_read_only_off_by_default() -> None:
    policy = make_policy()
    assert policy.read_only is False
    assert effect_rule(decide(policy, call())) == ("allow", None)


# -- 6. dangerous paths ----------------------------------------------------------------------

# One path per entry of the built-in list (relative to a folder).
DANGEROUS_NAMES = [
    # what makes git run code or reach credentials, in a repository and in its submodules
    ".git/hooks/pre-commit",
    ".git/config",
    ".git/config.worktree",
    ".git/commondir",
    ".git/info/exclude",
    ".git/info/attributes",
    ".git/objects/info/alternates",
    ".git/objects/info/http-alternates",
    ".git/worktrees/wt/config.worktree",
    ".git/worktrees/wt/commondir",
    ".git/rebase-merge/git-rebase-todo",
    ".git/modules/sub/config",
    ".git/modules/sub/config.worktree",
    ".git/modules/sub/commondir",
    ".git/modules/a/b/hooks/post-checkout",
    ".git/modules/sub/info/attributes",
    ".git/modules/sub/rebase-merge/git-rebase-todo",
    ".ssh/config",
    ".ssh/id_rsa",
    ".gnupg/x",
    ".aws/credentials",
    ".kube/config",
    ".docker/config.json",
    ".git-credentials",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".yarnrc.yml",
    ".env",
    ".env.production",
    ".env.local",
    ".envrc",
    ".bashrc",
    ".bash_profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".profile",
    ".gitconfig",
    ".gitmodules",
    ".vscode/settings.json",
    ".idea/workspace.xml",
    ".husky/pre-push",
    ".devcontainer/devcontainer.json",
    ".mcp.json",
    ".claude/settings.json",
    ".codex/config.toml",
    ".agents/x",
    ".cursor/mcp.json",
    ".gemini/settings.json",
    ".stockade/audit.jsonl",
    "stockade.toml",
    # the folders themselves
    ".git/hooks",
    ".git/info",
    ".ssh",
    ".vscode",
    ".devcontainer",
    ".cursor",
    ".gemini",
    ".stockade",
]

DANGEROUS_CASES = [
    pytest.param(f"{folder}/{name}", access, id=f"{where}:{access}:{name}")
    for name in DANGEROUS_NAMES
    for where, folder in (("root", "/workspace"), ("nested", "/workspace/pkg/sub"))
    for access in ("read", "write")
]


@pytest.fixture(scope="module")
def protected() -> Policy:
    return Policy.from_dict({})


def test_the_builtin_list_is_the_design_list() -> None:
    assert set(DEFAULT_DANGEROUS) == {
        ".git", ".git/config", ".git/config.worktree", ".git/commondir", ".git/hooks/",
        ".git/info/", ".git/objects/info/alternates", ".git/objects/info/http-alternates",
        ".git/worktrees/*/config*", ".git/worktrees/*/commondir",
        ".git/rebase-merge/git-rebase-todo",
        ".git/modules/**/config", ".git/modules/**/config.worktree",
        ".git/modules/**/commondir", ".git/modules/**/hooks/", ".git/modules/**/info/",
        ".git/modules/**/rebase-merge/git-rebase-todo",
        ".ssh/", ".gnupg/", ".aws/", ".kube/", ".docker/config.json",
        ".git-credentials", ".netrc", ".npmrc", ".pypirc", ".yarnrc.yml", ".env", ".env.*",
        ".envrc", ".bashrc", ".bash_profile", ".zshrc", ".zshenv", ".zprofile", ".profile",
        ".gitconfig", ".gitmodules", ".vscode/", ".idea/", ".husky/", ".devcontainer/",
        ".mcp.json", ".claude/", ".codex/", ".agents/", ".cursor/", ".gemini/",
        ".stockade/", "stockade.toml",
    }  # fmt: skip


@pytest.mark.parametrize(("path", "access"), DANGEROUS_CASES)
def test_dangerous_path_is_protected(protected: Policy, path: str, access: str) -> None:
    decision = decide(protected, touch(path, access))
    assert effect_rule(decision) == ("ask", "dangerous-path")
    assert (decision.action, decision.target) == (access, path)


@pytest.mark.parametrize("path", ["/.env", "/home/u/.ssh/id_rsa", "/userinput/.aws/credentials"])
def test_dangerous_paths_are_matched_on_full_paths_anywhere(protected: Policy, path: str) -> None:
    assert effect_rule(decide(protected, touch(path, "read"))) == ("ask", "dangerous-path")


def test_dangerous_path_delete_is_protected_too(protected: Policy) -> None:
    assert decide(protected, touch("/workspace/.git/hooks/x", "delete")).rule == "dangerous-path"
    assert decide(protected, touch("/workspace/.zshenv", "delete")).rule == "dangerous-path"


@pytest.mark.parametrize("folder", ["/workspace", "/workspace/vendor/lib", "/workspace/.GIT/.."])
def test_a_path_named_git_is_protected_against_changes_but_readable(
    protected: Policy, folder: str
) -> None:
    """A `.git` file (``gitdir: ...``, in worktrees and submodules) sends git elsewhere: writing
    or deleting it is protected. Reading it, or the folder of that name, is what git does."""
    path = f"{folder}/.git"
    for access in ("write", "delete"):
        assert effect_rule(decide(protected, touch(path, access))) == ("ask", "dangerous-path")
    assert decide(protected, touch(path, "read")).rule is None
    assert decide(protected, touch(path.upper(), "write")).rule == "dangerous-path"


# What ordinary git work writes: never run by git, so never protected (any access).
GIT_DATA = [
    ".git/HEAD", ".git/ORIG_HEAD", ".git/FETCH_HEAD", ".git/MERGE_HEAD", ".git/index",
    ".git/index.lock", ".git/packed-refs", ".git/COMMIT_EDITMSG", ".git/description",
    ".git/objects/ab/cdef0123", ".git/objects/pack/pack-1.pack", ".git/objects/info/packs",
    ".git/refs/heads/main", ".git/refs/stash", ".git/logs/HEAD", ".git/logs/refs/stash",
    ".git/refs/heads/hooks/x",  # a branch named hooks/x
    ".git/refs/heads/config",  # a branch named config
    ".git/refs/heads/info/y", ".git/sequencer/todo", ".git/rebase-merge/done",
    ".git/modules/sub/HEAD", ".git/modules/sub/index", ".git/modules/sub/objects/ab/cd",
    ".git/worktrees/wt/HEAD", ".git/worktrees/wt/index",
]  # fmt: skip


@pytest.mark.parametrize("name", GIT_DATA)
def test_what_ordinary_git_writes_is_not_protected(protected: Policy, name: str) -> None:
    for access in ("read", "write", "delete"):
        decision = decide(protected, touch(f"/workspace/pkg/{name}", access))
        assert decision.rule is None, (access, decision)


def test_removing_git_takes_out_every_git_entry_as_it_did_when_the_list_held_it_whole() -> None:
    policy = Policy.from_dict({"dangerous_paths": {"remove": [".git/"]}})
    for name in (".git/hooks/pre-commit", ".git/config", ".git/modules/s/config", ".git"):
        assert decide(policy, touch(f"/workspace/{name}", "write")).rule is None, name
    assert decide(policy, touch("/workspace/.env", "write")).rule == "dangerous-path"
    # in extend (or replace), ".git/" is a folder like any other: all of it
    whole = Policy.from_dict({"dangerous_paths": {"replace": [".git/"]}})
    assert decide(whole, touch("/workspace/.git/HEAD", "write")).rule == "dangerous-path"


# Legitimate names that look like protected ones: flagging them would be over-blocking.
LOOKALIKES = [
    ("environment.py", "not .env: a different name"),
    (".envy", "'.env.*' needs a dot after .env"),
    ("my.env.example", "'**/.env.*' matches a whole segment starting '.env.'"),
    (".envrc.example", "neither .envrc nor .env.*"),
    ("env", "no leading dot"),
    ("dotenv/config.py", "a folder named dotenv"),
    ("git/hooks/pre-commit", "git without the dot"),
    ("a.git/hooks/x", "a.git is not .git"),
    ("ssh_keys.md", "mentions ssh, is not .ssh/"),
    (".github/workflows/ci.yml", ".github is not .git"),
    (".gitignore", "not in the list"),
    (".gitattributes", "not in the list"),
    (".git-blame-ignore-revs", "only .git-credentials is listed"),
    (".profile.d/x.sh", ".profile is a file entry: only the exact name is protected"),
    (".bashrc.bak", "the rc file's exact name only"),
    (".docker/daemon.json", "only .docker/config.json is listed"),
    (".vscode-test/x", ".vscode-test is not .vscode"),
    ("src/.hidden/x", "an ordinary dot folder"),
    ("docs/.env.md/../readme.md", "resolves to docs/readme.md"),
]


@pytest.mark.parametrize(
    "path", [case[0] for case in LOOKALIKES], ids=[case[0] for case in LOOKALIKES]
)
def test_lookalikes_are_not_protected(protected: Policy, path: str) -> None:
    for access in ("read", "write"):
        assert effect_rule(decide(protected, touch(path, access))) == ("allow", None)


@pytest.mark.parametrize(
    "path", [".env.example", "config/.env.test", ".env.local.bak"], ids=lambda p: p
)
def test_env_dot_anything_is_protected(protected: Policy, path: str) -> None:
    # `.env.*` is in the list: `.env.example` is protected (only a `.env.` segment start counts)
    assert decide(protected, touch(path)).rule == "dangerous-path"


def test_dangerous_paths_extend() -> None:
    policy = Policy.from_dict({"dangerous_paths": {"extend": ["secrets/", "*.key", "/opt/x"]}})
    assert decide(policy, touch("/workspace/secrets")).rule == "dangerous-path"
    assert decide(policy, touch("/workspace/a/secrets/db.txt")).rule == "dangerous-path"
    assert decide(policy, touch("/workspace/deploy/prod.KEY")).rule == "dangerous-path"
    assert decide(policy, touch("/opt/x", "read")).rule == "dangerous-path"
    assert decide(policy, touch("/workspace/.env")).rule == "dangerous-path"  # still there
    assert decide(policy, touch("/workspace/keys.txt")).rule is None


def test_dangerous_paths_remove() -> None:
    policy = Policy.from_dict({"dangerous_paths": {"remove": [".vscode/"]}})
    assert effect_rule(decide(policy, touch("/workspace/.vscode/settings.json"))) == (
        "allow",
        None,
    )
    assert decide(policy, touch("/workspace/.idea/workspace.xml")).rule == "dangerous-path"


def test_dangerous_paths_replace() -> None:
    policy = Policy.from_dict({"dangerous_paths": {"replace": ["only-this/"]}})
    assert decide(policy, touch("/workspace/only-this/x")).rule == "dangerous-path"
    assert effect_rule(decide(policy, touch("/workspace/.env"))) == ("allow", None)
    nothing = Policy.from_dict({"dangerous_paths": {"replace": []}})
    assert effect_rule(decide(nothing, touch("/workspace/.ssh/id_rsa"))) == ("allow", None)


@pytest.mark.parametrize("effect", ["warn", "ask", "deny"])
def test_dangerous_paths_effect(effect: str) -> None:
    policy = Policy.from_dict({"dangerous_paths": {"effect": effect}})
    assert effect_rule(decide(policy, touch("/workspace/.env"))) == (effect, "dangerous-path")


def test_dangerous_paths_effect_allow_switches_protection_off() -> None:
    policy = Policy.from_dict({"dangerous_paths": {"effect": "allow"}})
    decision = decide(policy, touch("/workspace/.env"))
    assert effect_rule(decision) == ("allow", "dangerous-path")
    # and it loosens nothing else: a stricter default still decides the call
    strict = Policy.from_dict({"dangerous_paths": {"effect": "allow"}, "default": "ask"})
    assert effect_rule(decide(strict, touch("/workspace/.env"))) == ("ask", None)


def test_dangerous_paths_default_effect_is_ask() -> None:
    assert Policy.from_dict({}).decide(touch("/workspace/.env")).effect is Effect.ASK


@pytest.mark.parametrize("entry", [".nope", ".vscode", "vscode/"])
def test_removing_an_entry_not_in_the_list_is_an_error(entry: str) -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.from_dict({"dangerous_paths": {"remove": [entry]}})
    assert repr(entry) in str(caught.value)
    assert caught.value.problems[0].key.startswith("dangerous_paths")


def test_removing_an_entry_not_in_the_list_names_the_file(tmp_path: Path) -> None:
    path = write_policy(tmp_path, 'version = 1\n\n[dangerous_paths]\nremove = [".nope"]\n')
    with pytest.raises(PolicyError) as caught:
        Policy.load(path)
    assert str(path) in str(caught.value)
    assert "'.nope'" in str(caught.value)


def tool_danger(path: str, patterns: list[str], access: str = "write") -> Request:
    return Request(
        "agent",
        "deploy",
        paths=[(path, access)],
        dangerous_paths=patterns,
    )


def test_tool_declared_dangerous_paths_tighten() -> None:
    policy = Policy.from_dict({})
    assert effect_rule(decide(policy, touch("/workspace/data/x"))) == ("allow", None)
    decision = decide(policy, tool_danger("/workspace/data/x", ["data/"]))
    assert effect_rule(decision) == ("ask", "dangerous-path:deploy")
    assert (decision.action, decision.target) == ("write", "/workspace/data/x")
    assert "deploy" in decision.reason
    # case and look-alikes are folded for tool patterns too
    assert decide(policy, tool_danger("/workspace/DATA/x", ["data/"])).rule == (
        "dangerous-path:deploy"
    )
    # paths outside the tool's list are unaffected
    assert decide(policy, tool_danger("/workspace/other", ["data/"])).rule is None


def test_tool_declared_dangerous_paths_use_the_policys_effect() -> None:
    policy = Policy.from_dict({"dangerous_paths": {"effect": "deny"}})
    assert effect_rule(decide(policy, tool_danger("/workspace/db.sqlite", ["*.sqlite"]))) == (
        "deny",
        "dangerous-path:deploy",
    )


def test_tool_declared_dangerous_paths_never_loosen() -> None:
    policy = Policy.from_dict(
        {
            "dangerous_paths": {"effect": "ask"},
            "rules": [{"id": "no-data", "effect": "deny", "paths": ["data/**"]}],
        }
    )
    assert effect_rule(decide(policy, tool_danger("/workspace/data/x", ["data/"]))) == (
        "deny",
        "no-data",
    )
    # under an "allow" dangerous effect the tool's list cannot loosen an ask default either
    lax = Policy.from_dict({"dangerous_paths": {"effect": "allow"}, "default": "ask"})
    assert decide(lax, tool_danger("/workspace/data/x", ["data/"])).effect is Effect.ASK
    # already protected by the policy: the policy's own rule is kept
    assert decide(policy, tool_danger("/workspace/.env", [".env"])).rule == "dangerous-path"


# -- 7. bad policy files ---------------------------------------------------------------------

# (id, file text, line, key). Line numbers are counted by hand.
BAD_FILES = [
    (
        "toml-syntax",
        'version = 1\ndefault = "allow"\n\n[[rules]]\nid = "a"\neffect = allow\n',
        6,
        "(file)",
    ),
    ("unknown-top-level-key", 'version = 1\ndefalt = "deny"\n', 2, "defalt"),
    (
        "unknown-key-in-rule",
        'version = 1\n\n[[rules]]\nid = "a"\neffect = "deny"\n\n'
        '[[rules]]\nid = "b"\nefect = "deny"\n',
        9,
        "rules.1.efect",
    ),
    (
        "unknown-effect",
        'version = 1\n\n[[rules]]\nid = "a"\nreason = "x"\neffect = "block"\n',
        6,
        "rules.0.effect",
    ),
    ("unknown-default", 'version = 1\n\ndefault = "maybe"\n', 3, "default"),
    (
        "unknown-action",
        'version = 1\n\n[[rules]]\nid = "a"\neffect = "deny"\nactions = ["read", "exec"]\n',
        6,
        "rules.0.actions",
    ),
    (
        "negative-global-limit",
        "version = 1\n\n[limits]\nmax_in_flight = -1\n",
        4,
        "limits.max_in_flight",
    ),
    (
        "negative-tool-limit",
        "version = 1\n\n[limits]\nmax_in_flight = 4\nper_tool = { shell = -1 }\n",
        5,
        "limits.per_tool",
    ),
    (
        "zero-subject-limit",
        "version = 1\n\n[limits.per_subject]\nalice = 0\n",
        3,
        "limits.per_subject",
    ),
    (
        "duplicate-rule-id",
        'version = 1\n\n[[rules]]\nid = "a"\neffect = "deny"\n\n[[rules]]\nid = "a"\n'
        'effect = "allow"\n',
        8,
        "rules.1.id",
    ),
    (
        "paths-and-commands",
        'version = 1\n\n[[rules]]\nid = "a"\neffect = "deny"\n\n[[rules]]\nid = "b"\n'
        'effect = "deny"\npaths = ["/x"]\ncommands = ["ls"]\n',
        7,
        "rules.1",
    ),
    (
        "paths-only-exclude",
        'version = 1\n\n[[rules]]\nid = "a"\neffect = "deny"\npaths = ["!/workspace/**"]\n',
        6,
        "rules.0.paths",
    ),
    (
        "empty-pattern",
        'version = 1\n\n[[rules]]\nid = "a"\neffect = "deny"\npaths = ["/a", ""]\n',
        6,
        "rules.0.paths",
    ),
    (
        "empty-exclusion",
        'version = 1\n\n[[rules]]\nid = "a"\neffect = "deny"\n\npaths = ["/a", "!"]\n',
        7,
        "rules.0.paths",
    ),
    ("wrong-version", "# a comment\nversion = 2\n", 2, "version"),
    (
        "empty-tools",
        'version = 1\n\n[[rules]]\nid = "a"\neffect = "deny"\ntools = []\n',
        6,
        "rules.0.tools",
    ),
    (
        "dangerous-effect",
        'version = 1\n\n[dangerous_paths]\nextend = ["x"]\neffect = "nope"\n',
        5,
        "dangerous_paths.effect",
    ),
]


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [case[1:] for case in BAD_FILES],
    ids=[case[0] for case in BAD_FILES],
)
def test_bad_policy_file_is_refused_naming_file_line_and_key(
    tmp_path: Path, text: str, line: int, key: str
) -> None:
    path = write_policy(tmp_path, text)
    with pytest.raises(PolicyError) as caught:
        Policy.load(path)
    message = str(caught.value)
    assert f"{path}:{line}: {key}:" in message, message
    problems = caught.value.problems
    assert problems, "PolicyError.problems is empty"
    assert all(isinstance(p, Problem) for p in problems)
    assert (str(path), line, key) in {(p.source, p.line, p.key) for p in problems}


def test_toml_syntax_error_reports_the_line_in_the_message(tmp_path: Path) -> None:
    path = write_policy(tmp_path, 'version = 1\n\n\n[[rules]\nid = "a"\n')
    with pytest.raises(PolicyError) as caught:
        Policy.load(path)
    assert f"{path}:4:" in str(caught.value)
    assert "TOML" in str(caught.value)


def test_unknown_key_message_says_what_to_do(tmp_path: Path) -> None:
    path = write_policy(tmp_path, 'version = 1\n\n[[rules]]\nid = "a"\nefect = "deny"\n')
    with pytest.raises(PolicyError) as caught:
        Policy.load(path)
    problems = {p.key: p for p in caught.value.problems}
    assert "unknown key" in problems["rules.0.efect"].message
    # the misspelt effect also leaves the rule without one
    assert "rules.0.effect" in problems


def test_errors_in_a_dict_name_the_key_without_a_line() -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.from_dict({"rules": [{"id": "a", "effect": "deny", "actions": ["run"]}]})
    [problem] = caught.value.problems
    assert (problem.source, problem.line, problem.key) == ("<dict>", None, "rules.0.actions")
    assert "'run'" in problem.message


def test_missing_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(PolicyError) as caught:
        Policy.load(path)
    assert str(path) in str(caught.value)
    assert "does not exist" in str(caught.value)


def test_non_utf8_policy_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('description = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(PolicyError) as caught:
        Policy.load(path)
    assert str(path) in str(caught.value)
    assert "UTF-8" in str(caught.value)


def test_a_directory_is_not_a_policy_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.load(tmp_path)
    assert str(tmp_path) in str(caught.value)


def test_a_bad_policy_never_falls_back_to_allow(tmp_path: Path) -> None:
    path = write_policy(tmp_path, 'version = 1\ndefault = "deny"\n[[rules]]\nid = "x"\n')
    policy: Policy | None = None
    with pytest.raises(PolicyError):
        policy = Policy.load(path)
    assert policy is None
    # a PolicyError is a ValueError, so callers that catch ValueError also refuse
    assert issubclass(PolicyError, ValueError)


@pytest.mark.parametrize(
    ("reserved", "read_only", "expected"),
    [("dangerous-path", False, Effect.ASK), ("read-only-mode", True, Effect.DENY)],
    ids=["dangerous-path", "read-only-mode"],
)
def test_a_user_rule_cannot_take_a_system_rules_id(
    reserved: str, read_only: bool, expected: Effect
) -> None:
    # A user rule sharing a system rule's id makes "rule" ambiguous in decisions, and the
    # casbin form (which maps a matched line back to a rule by id) then answers differently
    # from the compiled path. Either refusing the id or keeping the two apart is correct.
    data = {
        "read_only": read_only,
        "rules": [{"id": reserved, "effect": "allow", "paths": ["/workspace/**"]}],
    }
    try:
        policy = Policy.from_dict(data)
    except PolicyError:
        return
    for request in [touch("/workspace/.env"), touch("/workspace/a"), call()]:
        assert policy.decide(request) == policy.decide_with_casbin(request), request
    # the system rule still protects (.env asks; read-only mode denies a writing tool)
    assert policy.decide(touch("/workspace/.env")).effect is expected


# -- 8. limits -------------------------------------------------------------------------------

LIMITS = {
    "max_in_flight": 8,
    "per_tool": {"db_*": 4, "db_admin": 1, "*": 16, "shell": 2},
    "per_subject": {"alice": 3, "admins": 2, "ops": 6, "*": 10, "bob": 5},
    "exclusive": ["migrate_*", "shell"],
}

# (id, tool, subject, expected limits)
LIMIT_CASES = [
    ("smallest-tool-glob", "db_admin", "bob", CallLimits(8, 1, 5, False)),
    ("tool-glob", "db_query", "dave", CallLimits(8, 4, 10, False)),
    ("tool-star-only", "search", "dave", CallLimits(8, 16, 10, False)),
    ("subject-by-role-smaller", "search", "alice", CallLimits(8, 16, 2, False)),
    ("subject-nested-role", "search", "carol", CallLimits(8, 16, 2, False)),
    ("subject-name", "search", "bob", CallLimits(8, 16, 5, False)),
    ("exclusive-glob", "migrate_up", "dave", CallLimits(8, 16, 10, True)),
    ("exclusive-exact", "shell", "dave", CallLimits(8, 2, 10, True)),
    ("exclusive-not-prefix", "migrate", "dave", CallLimits(8, 16, 10, False)),
]


@pytest.mark.parametrize(
    ("tool", "subject", "expected"),
    [case[1:] for case in LIMIT_CASES],
    ids=[case[0] for case in LIMIT_CASES],
)
def test_limits_for(tool: str, subject: str, expected: CallLimits) -> None:
    policy = Policy.from_dict({"roles": ROLES, "limits": LIMITS})
    assert policy.limits_for(tool, subject) == expected
    assert policy.limits_for(tool, subject) == expected  # cached answer is the same
    assert policy.has_limits


def test_no_limits() -> None:
    policy = Policy.from_dict({})
    assert not policy.has_limits
    assert policy.limits_for("any", "one") == CallLimits(None, None, None, False)


@pytest.mark.parametrize(
    "limits",
    [
        {"max_in_flight": 1},
        {"per_tool": {"x": 1}},
        {"per_subject": {"*": 1}},
        {"exclusive": ["x"]},
    ],
    ids=["global", "per-tool", "per-subject", "exclusive"],
)
def test_has_limits(limits: dict[str, Any]) -> None:
    assert Policy.from_dict({"limits": limits}).has_limits


def test_subject_limits_without_a_star_do_not_apply_to_others() -> None:
    policy = Policy.from_dict({"limits": {"per_subject": {"alice": 1}}})
    assert policy.limits_for("t", "alice").subject_cap == 1
    assert policy.limits_for("t", "bob").subject_cap is None


def test_limits_load_from_a_file(tmp_path: Path) -> None:
    path = write_policy(
        tmp_path,
        "version = 1\n\n[limits]\nmax_in_flight = 3\nexclusive = ['git_*']\n\n"
        "[limits.per_tool]\n'db_*' = 2\n",
    )
    policy = Policy.load(path)
    assert policy.limits_for("db_x", "a") == CallLimits(3, 2, None, False)
    assert policy.limits_for("git_push", "a").exclusive


# -- 9. explain ------------------------------------------------------------------------------


def test_explain_a_path_decision() -> None:
    decision = Policy.preset("default").decide(touch("/workspace/.env"))
    text = decision.explain()
    assert text.splitlines()[0] == f"ASK: {decision.reason}"
    assert "write /workspace/.env" in text
    assert "rule: dangerous-path" in text
    assert "shadow" not in text


def test_explain_a_default_decision() -> None:
    decision = make_policy(default="warn").decide(call())
    text = decision.explain()
    assert text.startswith("WARN: ")
    assert decision.reason in text
    assert "none matched" in text
    assert "call of the tool" in text


def test_explain_a_command_decision() -> None:
    text = Policy.preset("default").decide(execute("make test")).explain()
    assert text.startswith("ASK: running a command needs approval")
    assert "execute make test" in text
    assert "rule: commands-ask" in text


def test_explain_in_shadow_mode() -> None:
    policy = make_policy({"id": "no", "effect": "deny", "reason": "nope"}, shadow=True)
    text = policy.decide(call()).explain()
    assert text.startswith("WARN: shadow mode: would be denied (nope)")
    assert "rule: no" in text
    assert "shadow mode: denials are reported as warnings" in text


@pytest.mark.parametrize("effect", ["allow", "warn", "ask", "deny"])
def test_explain_names_the_effect_in_upper_case(effect: str) -> None:
    text = make_policy({"id": "r", "effect": effect}).decide(call()).explain()
    assert text.startswith(f"{effect.upper()}: rule r")
    assert "rule: r" in text


# -- 10. requests and caching ----------------------------------------------------------------


def test_equal_requests_get_equal_decisions() -> None:
    policy = Policy.preset("default")
    first = policy.decide(touch("/workspace/.env"))
    second = policy.decide(touch("/workspace/.env"))
    assert first == second
    assert first is second  # served from the cache
    other = policy.decide(touch("/workspace/a.py"))
    assert other != first


def test_request_lists_become_tuples_and_requests_hash() -> None:
    from_lists = Request(
        "agent",
        "t",
        paths=[["/workspace/a", "read"]],
        dangerous_paths=["x/"],
    )
    from_tuples = Request("agent", "t", paths=(("/workspace/a", "read"),), dangerous_paths=("x/",))
    assert from_lists == from_tuples
    assert hash(from_lists) == hash(from_tuples)
    assert type(from_lists.paths) is tuple
    assert type(from_lists.paths[0]) is tuple
    assert type(from_lists.dangerous_paths) is tuple
    assert {from_lists: 1}[from_tuples] == 1


def test_request_paths_may_be_path_objects() -> None:
    request = Request("agent", "t", paths=[(Path("/workspace/a"), "read")])
    assert request.paths == (("/workspace/a", "read"),)


def test_request_given_a_tuple_of_lists_is_still_hashable() -> None:
    # "lists given for paths become tuples": a tuple of [path, access] lists must too, or the
    # decision cache fails with "unhashable type: 'list'"
    request = Request("agent", "t", paths=(["/workspace/a", "read"],))
    hash(request)
    assert Policy.from_dict({}).decide(request).effect is Effect.ALLOW


def test_request_defaults() -> None:
    request = Request("agent", "t")
    assert (request.action, request.paths, request.command, request.read_only) == (
        "call",
        (),
        None,
        False,
    )
    assert request.dangerous_paths == ()


def test_a_request_is_not_isolated_and_has_no_private_folders_unless_told() -> None:
    request = Request("agent", "t")
    assert (request.isolated, request.private_paths) == (False, ())
    told = Request("agent", "t", isolated=True, private_paths=["/tmp"])
    assert (told.isolated, told.private_paths) == (True, ("/tmp",))


def test_private_paths_become_a_tuple_of_canonical_folders() -> None:
    from_list = Request("agent", "t", private_paths=["/tmp/", "/run//x/../y"])
    from_tuple = Request("agent", "t", private_paths=("/tmp", "/run/y"))
    assert from_list.private_paths == ("/tmp", "/run/y")
    assert type(from_list.private_paths) is tuple
    assert from_list == from_tuple
    assert hash(from_list) == hash(from_tuple)


@pytest.mark.parametrize("folder", ["tmp", "", "./tmp"])
def test_a_relative_private_path_is_refused(folder: str) -> None:
    with pytest.raises(ValueError, match="is not absolute; give the folder's full path"):
        Request("agent", "t", private_paths=[folder])


def test_unknown_action_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown action 'run'"):
        Request("agent", "t", action="run")


def test_unknown_access_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown access 'modify'"):
        Request("agent", "t", paths=[("/workspace/a", "modify")])


def test_decision_allowed() -> None:
    assert Decision(Effect.ALLOW, None, "").allowed
    assert Decision(Effect.WARN, None, "").allowed
    assert not Decision(Effect.ASK, None, "").allowed
    assert not Decision(Effect.DENY, None, "").allowed


def test_effect_severity_order() -> None:
    ordered = sorted(Effect, key=lambda e: e.severity)
    assert ordered == [Effect.ALLOW, Effect.WARN, Effect.ASK, Effect.DENY]


# -- 11. casbin as the engine of record ------------------------------------------------------

CASBIN_POLICY = {
    "default": "allow",
    "read_only": True,
    "roles": ROLES,
    "dangerous_paths": {"effect": "ask", "extend": ["secrets/"]},
    "rules": [
        {"id": "allow-src", "effect": "allow", "paths": ["src/**", "!src/gen/**"]},
        {"id": "warn-db", "effect": "warn", "tools": ["db_*"], "subjects": ["admins", "bob"]},
        {"id": "deny-etc", "effect": "deny", "paths": ["/etc/**"], "actions": ["read", "write"]},
        {"id": "ask-git", "effect": "ask", "commands": ["git push *"]},
        {"id": "deny-rm", "effect": "deny", "commands": ["rm -rf *"], "actions": ["execute"]},
        {"id": "allow-ro", "effect": "allow", "read_only_tools": True},
    ],
}


def test_casbin_lines_are_in_first_match_order() -> None:
    policy = Policy.from_dict(CASBIN_POLICY)
    *lines, dangers = policy.casbin_lines()
    # the last line carries the dangerous-command list, checked beside casbin on whole lines
    assert dangers[4].startswith("danger:")
    assert (dangers[5], dangers[6]) == ("deny", "dangerous-command")  # denied unless a file says
    ids = list(dict.fromkeys(line[6] for line in lines))
    assert ids == [
        "read-only-mode",
        "deny-etc",
        "deny-rm",
        "dangerous-path",
        "ask-git",
        "warn-db",
        "allow-src",
        "allow-ro",
    ]
    effects = [line[5] for line in lines]
    assert effects == sorted(effects, key=lambda e: -Effect(e).severity)
    assert all(len(line) == 8 for line in lines)
    # one line per (subject, tool, action)
    assert len([line for line in lines if line[6] == "warn-db"]) == 2
    assert len([line for line in lines if line[6] == "deny-etc"]) == 2


def casbin_round_trip_requests() -> list[Request]:
    return [
        call(),
        call(read_only=True),
        call("db_query", "alice", read_only=True),
        call("db_query", "carol", read_only=True),
        touch("/workspace/src/a.py", read_only=True),
        touch("/workspace/src/gen/a.py", "read", read_only=True),
        touch("/etc/passwd", "read", read_only=True),
        touch("/etc/passwd", "delete", read_only=True),
        touch("/workspace/.env", "read", read_only=True),
        touch("/workspace/secrets/k", "read", read_only=True),
        touch("/userinput/x", "write"),
        touch("/workspace/a b/ünï.txt", "write", read_only=True),
        Request("agent", "shell", action="execute", command="git push origin", read_only=True),
        Request("agent", "shell", action="execute", command="rm -rf /", read_only=True),
        Request("agent", "shell", action="execute", command="ls"),
    ]


def casbin_file_enforcer(tmp_path: Path, policy: Policy) -> casbin.Enforcer:
    model = tmp_path / "model.conf"
    model.write_text(MODEL_TEXT, encoding="utf-8")
    csv = tmp_path / "policy.csv"
    csv.write_text(policy.casbin_csv(), encoding="utf-8")
    enforcer = casbin.Enforcer(str(model), str(csv))
    register_functions(enforcer)
    return enforcer


ROUND_TRIP_POLICIES = {
    "custom": lambda: Policy.from_dict(CASBIN_POLICY),
    **{name: (lambda name=name: Policy.preset(name)) for name in PRESETS},
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP_POLICIES))
def test_casbin_csv_loads_through_casbins_file_adapter(tmp_path: Path, name: str) -> None:
    policy = ROUND_TRIP_POLICIES[name]()
    enforcer = casbin_file_enforcer(tmp_path, policy)
    assert [list(p) for p in enforcer.get_policy()] == policy.casbin_lines()
    assert sorted(map(list, enforcer.get_grouping_policy())) == sorted(
        [member, role] for role, members in policy.spec.roles.items() for member in members
    )


@pytest.mark.parametrize("name", sorted(ROUND_TRIP_POLICIES))
def test_casbin_csv_round_trip_decides_like_the_original(tmp_path: Path, name: str) -> None:
    policy = ROUND_TRIP_POLICIES[name]()
    enforcer = casbin_file_enforcer(tmp_path, policy)
    # what lines cannot hold (the default, the [process] table) is given beside them
    process = policy.process.model_dump()
    loaded = Policy.from_enforcer(enforcer, default=policy.default.value, process=process)
    for request in casbin_round_trip_requests():
        assert loaded.decide(request) == policy.decide(request), request


@pytest.mark.parametrize("name", sorted(ROUND_TRIP_POLICIES))
def test_from_enforcer_round_trip_in_memory(name: str) -> None:
    # the same round trip without the CSV file: the lines themselves hold the whole policy
    policy = ROUND_TRIP_POLICIES[name]()
    process = policy.process.model_dump()
    loaded = Policy.from_enforcer(
        policy.casbin().enforcer, default=policy.default.value, process=process
    )
    assert loaded.casbin_lines() == policy.casbin_lines()
    for request in casbin_round_trip_requests():
        assert loaded.decide(request) == policy.decide(request), request
        assert loaded.decide_with_casbin(request) == policy.decide(request), request


def test_from_enforcer_takes_shadow_and_limits() -> None:
    policy = Policy.preset("permissive")
    loaded = Policy.from_enforcer(
        policy.casbin().enforcer, shadow=True, limits={"max_in_flight": 2}
    )
    decision = loaded.decide(touch("/workspace/.env"))
    assert (decision.effect, decision.rule, decision.shadow) == (
        Effect.WARN,
        "dangerous-path",
        True,
    )
    assert loaded.limits_for("t", "s").global_cap == 2


@pytest.mark.parametrize("name", sorted(ROUND_TRIP_POLICIES))
def test_compiled_and_casbin_agree(name: str) -> None:
    policy = ROUND_TRIP_POLICIES[name]()
    for request in [*casbin_round_trip_requests(), *PRESET_REQUESTS.values()]:
        assert policy.decide(request) == policy.decide_with_casbin(request), request


def test_from_enforcer_takes_the_process_table() -> None:
    policy = Policy.preset("permissive")
    loaded = Policy.from_enforcer(policy.casbin().enforcer, process={"require_isolation": True})
    assert loaded.process.require_isolation is True
    assert decide(loaded, execute("ls")).rule == "require-isolation"
    assert Policy.from_enforcer(policy.casbin().enforcer).process.require_isolation is False


def test_deciding_never_imports_casbin_and_building_an_enforcer_does() -> None:
    # casbin takes tens of milliseconds to import; a program that decides through the compiled
    # path must not pay for it. Checked in a fresh interpreter that loads the policies package
    # alone (the stockade package's own __init__ loads the engine too, which is not this test's)
    root = Path(stockade.policies.casbin_enforcer.__file__).parent.parent
    code = (
        "import sys, types\n"
        "package = types.ModuleType('stockade')\n"
        f"package.__path__ = [{str(root)!r}]\n"
        "sys.modules['stockade'] = package\n"
        "from stockade.policies import Policy, Request\n"
        "policy = Policy.preset('default')\n"
        "policy.decide(Request('agent', 'shell', action='execute', command='ls > out.txt'))\n"
        "policy.casbin_csv()\n"
        "assert 'casbin' not in sys.modules, 'imported while deciding'\n"
        "policy.decide_with_casbin(Request('agent', 'shell'))\n"
        "assert 'casbin' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# -- 12. lint --------------------------------------------------------------------------------

LINT_TEXT = """\
version = 1
default = "allow"
shadow = true

[roles]
admins = ["alice", "admins"]

[dangerous_paths]
effect = "allow"

[[rules]]
id = "paths-on-call"
effect = "deny"
actions = ["call", "execute"]
paths = ["/workspace/**"]

[[rules]]
id = "cmd-no-exec"
effect = "ask"
actions = ["call"]
commands = ["rm *"]

[[rules]]
id = "deny-secrets"
effect = "deny"
paths = ["/workspace/secrets/**"]

[[rules]]
id = "ask-secrets"
effect = "ask"
actions = ["read"]
paths = ["/workspace/secrets/**"]

[[rules]]
id = "deny-all"
effect = "deny"

[[rules]]
id = "allow-src"
effect = "allow"
paths = ["/workspace/src/**"]
"""

# (severity, line, key, words in the message); lines counted by hand in LINT_TEXT
LINT_EXPECTED = [
    ("warning", 3, "shadow", "shadow mode"),
    ("warning", 6, "roles.admins", "lists itself"),
    ("warning", 9, "dangerous_paths.effect", "not protected"),
    ("warning", 14, "rules.0.actions", "never matches"),
    # rule 1 matches nothing at all: that is said, not that deny-all beats it
    ("warning", 20, "rules.1.actions", "execute"),
    ("warning", 28, "rules.3", "'deny-secrets' (deny, line 23)"),
    ("warning", 34, "rules.4", "denies every call"),
    # never deciding, allow-src gets no note that it allows what the default allows
    ("warning", 38, "rules.5", "'deny-all' (deny, line 34)"),
]


@pytest.fixture(scope="module")
def lint_findings() -> list[stockade.policies.Finding]:
    return lint_text(LINT_TEXT)


@pytest.mark.parametrize(
    ("severity", "line", "key", "words"),
    LINT_EXPECTED,
    ids=[f"{e[2]}@{e[1]}" for e in LINT_EXPECTED],
)
def test_lint_finding(
    lint_findings: list[stockade.policies.Finding], severity: str, line: int, key: str, words: str
) -> None:
    found = [f for f in lint_findings if (f.severity, f.line, f.key) == (severity, line, key)]
    assert found, f"no {severity} at line {line} for {key}: {lint_findings}"
    assert any(words in f.message for f in found)


def test_lint_findings_are_exactly_these_in_order(
    lint_findings: list[stockade.policies.Finding],
) -> None:
    assert [(f.severity, f.line, f.key) for f in lint_findings] == [e[:3] for e in LINT_EXPECTED]
    assert str(lint_findings[0]).startswith("line 3: warning: shadow: ")


def test_lint_unknown_key_is_an_error() -> None:
    findings = lint_text('version = 1\n\n[[rules]]\nid = "a"\nefect = "deny"\n')
    errors = [(f.line, f.key) for f in findings if f.severity == "error"]
    assert (5, "rules.0.efect") in errors


def test_lint_invalid_rule_is_an_error_with_its_line() -> None:
    findings = lint_text('version = 1\n\n[[rules]]\nid = "a"\neffect = "deny"\npaths = ["!x"]\n')
    assert [f.severity for f in findings] == ["error"]
    assert findings[0].key.startswith("rules.0")
    assert "only exclude" in findings[0].message


def test_lint_toml_syntax_error_has_a_line() -> None:
    findings = lint_text('version = 1\n\n\ndefault = "allow\n')
    assert [(f.severity, f.key) for f in findings] == [("error", "(file)")]
    assert findings[0].line == 4


def test_lint_read_only_policy_with_a_non_read_only_allow() -> None:
    text = (
        'version = 1\nread_only = true\n\n[[rules]]\nid = "writers"\neffect = "allow"\n'
        "read_only_tools = false\n"
    )
    findings = lint_text(text)
    assert ("warning", 7, "rules.0.read_only_tools") in {
        (f.severity, f.line, f.key) for f in findings
    }


def test_lint_does_not_report_a_deny_narrowed_by_exclusions() -> None:
    text = (
        'version = 1\n\n[[rules]]\nid = "outside"\neffect = "deny"\n'
        'paths = ["/**", "!/workspace/**"]\n\n'
        '[[rules]]\nid = "etc"\neffect = "ask"\npaths = ["/**"]\n'
    )
    keys = [f.key for f in lint_text(text) if f.severity != "info"]
    assert "rules.1" not in keys


def test_lint_a_clean_policy_has_no_findings() -> None:
    text = (
        'version = 1\ndefault = "deny"\n\n[[rules]]\nid = "reads"\neffect = "allow"\n'
        'actions = ["read"]\npaths = ["/workspace/**"]\n'
    )
    assert lint_text(text) == []


def test_lint_policy_reads_a_file(tmp_path: Path) -> None:
    path = write_policy(tmp_path, "version = 1\nshadow = true\n")
    assert [(f.severity, f.line, f.key) for f in lint_policy(path)] == [("warning", 2, "shadow")]
    missing = lint_policy(tmp_path / "absent.toml")
    assert [(f.severity, f.key) for f in missing] == [("error", "(file)")]
    assert "absent.toml" in missing[0].message


# Presets: no errors and no warnings. The notes are documented: the default preset's
# "workspace-files" allow rule (line 38, its effect) under default allow only names the rule,
# and the permissive preset requires isolation (line 17), which denies commands without bubblewrap.
PRESET_LINT = {
    "default": [("info", 38, "rules.3.effect")],
    "read-only": [],
    "strict": [],
    "permissive": [("info", 17, "process.require_isolation")],
}


@pytest.mark.parametrize("name", PRESETS)
def test_presets_lint_clean(name: str) -> None:
    findings = lint_policy(PRESET_DIR / f"{name}.toml")
    assert [(f.severity, f.line, f.key) for f in findings] == PRESET_LINT[name]


def test_lint_dangerous_commands_allowed_and_network_without_isolation() -> None:
    text = 'version = 1\n[dangerous_commands]\neffect = "allow"\n[process]\nnetwork = true\n'
    found = [(f.severity, f.line, f.key) for f in lint_text(text)]
    assert found == [
        ("warning", 3, "dangerous_commands.effect"),
        ("warning", 5, "process.network"),  # every host: no [network] table lists some
        ("info", 5, "process.network"),
    ]
    # with isolation required the network note goes, and the note on what requiring it costs
    # takes its place
    isolated = text + "require_isolation = true\n"
    assert [f.key for f in lint_text(isolated)] == [
        "dangerous_commands.effect",
        "process.network",
        "process.require_isolation",
    ]


def test_lint_warns_when_host_files_are_allowed() -> None:
    text = 'version = 1\ndefault = "allow"\n\n[host_files]\nmode = "allow"\n'
    findings = lint_text(text)
    assert [(f.severity, f.line, f.key) for f in findings] == [("warning", 5, "host_files.mode")]
    message = findings[0].message
    assert "without a warning" in message
    assert 'keep mode = "warn"' in message
    assert "deny their paths by rules" in message
    assert str(findings[0]).startswith("line 5: warning: host_files.mode: ")
    # spelt as a dotted key or an inline table, the line is still found
    dotted = lint_text('version = 1\n\nhost_files.mode = "allow"\n')
    assert [(f.line, f.key) for f in dotted] == [(3, "host_files.mode")]
    inline = lint_text('version = 1\nhost_files = { mode = "allow" }\n')
    assert [(f.line, f.key) for f in inline] == [(2, "host_files.mode")]
    # warn (the default) and deny say nothing; a mode that is no mode is an error
    for mode in ("warn", "deny"):
        assert lint_text(f'version = 1\n[host_files]\nmode = "{mode}"\n') == []
    wrong = lint_text('version = 1\n[host_files]\nmode = "yes"\n')
    assert [(f.severity, f.line, f.key) for f in wrong] == [("error", 3, "host_files.mode")]


def test_lint_notes_that_require_isolation_denies_commands_without_bubblewrap() -> None:
    text = "version = 1\n[process]\nrequire_isolation = true\n"
    findings = lint_text(text)
    assert [(f.severity, f.line, f.key) for f in findings] == [
        ("info", 3, "process.require_isolation")
    ]
    assert "denied on machines without bubblewrap" in findings[0].message
    assert "shadow" not in findings[0].message
    shadowed = lint_text("version = 1\nshadow = true\n[process]\nrequire_isolation = true\n")
    note = [f for f in shadowed if f.key == "process.require_isolation"]
    assert len(note) == 1
    assert "shadow mode does not soften this" in note[0].message
    assert lint_text("version = 1\n[process]\nrequire_isolation = false\n") == []


# -- 13. isolation required ------------------------------------------------------------------

ISOLATION_REASON = (
    "the policy requires isolation for commands, and bubblewrap is not available here: "
    "install the 'bubblewrap' package (and allow unprivileged user namespaces)"
)
ANY_COMMAND = {"id": "any-command", "effect": "allow", "commands": ["*"]}
NO_RM = {"id": "no-rm", "effect": "deny", "commands": ["rm *"]}


def run(command: str | None, *, isolated: bool) -> Request:
    return Request("agent", "shell", action="execute", command=command, isolated=isolated)


# (require_isolation, isolated, command, expected effect and rule)
ISOLATION_CASES = [
    (True, False, "ls", ("deny", "require-isolation")),
    (True, False, "rm -rf /", ("deny", "require-isolation")),
    (True, False, None, ("deny", "require-isolation")),
    (True, True, "ls", ("allow", "any-command")),
    (True, True, "rm x", ("deny", "no-rm")),
    (False, False, "ls", ("allow", "any-command")),
    (False, False, "rm x", ("deny", "no-rm")),
    (False, True, "ls", ("allow", "any-command")),
]


@pytest.mark.parametrize(
    ("required", "isolated", "command", "expected"),
    ISOLATION_CASES,
    ids=[f"required={c[0]}-isolated={c[1]}-{c[2]}" for c in ISOLATION_CASES],
)
def test_require_isolation(
    required: bool, isolated: bool, command: str | None, expected: tuple[str, str | None]
) -> None:
    policy = make_policy(NO_RM, ANY_COMMAND, process={"require_isolation": required})
    request = run(command, isolated=isolated)
    decision = decide(policy, request)  # compiled and casbin agree
    assert decision == policy.decide_uncached(request)
    assert effect_rule(decision) == expected


def test_a_command_refused_for_isolation_names_the_rule_the_command_and_the_fix() -> None:
    policy = make_policy(ANY_COMMAND, process={"require_isolation": True})
    decision = decide(policy, run("git status", isolated=False))
    assert decision == Decision(
        Effect.DENY, "require-isolation", ISOLATION_REASON, "execute", "git status"
    )


def test_require_isolation_wins_over_an_allow_all_rule_and_the_default() -> None:
    allow_everything = {"id": "everything", "effect": "allow"}
    policy = make_policy(allow_everything, process={"require_isolation": True})
    assert effect_rule(decide(policy, run("ls", isolated=False))) == ("deny", "require-isolation")


def test_require_isolation_is_about_commands_only() -> None:
    policy = make_policy(process={"require_isolation": True})
    assert effect_rule(decide(policy, touch("/workspace/a.txt"))) == ("allow", None)
    assert effect_rule(decide(policy, call())) == ("allow", None)


def test_require_isolation_holds_in_shadow_mode() -> None:
    """Shadow mode trials the rules; it never lets a command run without the box the policy
    requires (a command run unboxed could do anything, warning or not)."""
    policy = make_policy(ANY_COMMAND, shadow=True, process={"require_isolation": True})
    for decide_ in (policy.decide, policy.decide_with_casbin):
        decision = decide_(run("ls", isolated=False))
        assert (decision.effect, decision.rule) == (Effect.DENY, "require-isolation")
        assert decision.reason == ISOLATION_REASON


def test_a_hand_made_request_is_not_isolated() -> None:
    policy = make_policy(ANY_COMMAND, process={"require_isolation": True})
    assert decide(policy, execute("ls")).rule == "require-isolation"


# -- 14. private folders ---------------------------------------------------------------------

NO_TMP = {"id": "no-tmp", "effect": "deny", "paths": ["/tmp/**"]}


def in_private(path: str, *folders: str, dangerous: tuple[str, ...] = ()) -> Request:
    return Request(
        "agent", "tool", paths=[(path, "write")], dangerous_paths=dangerous, private_paths=folders
    )


@pytest.mark.parametrize(
    ("path", "judged"),
    [
        ("/tmp/x", False),
        ("/tmp", False),
        ("/tmp/a/b/c", False),
        ("/tmp/./x", False),  # not plainly canonical: the general route skips it too
        ("/tmpx/y", True),
        ("/tmp/../tmpx/y", True),
        ("/TMP/x", True),  # folders are compared as spelt: case makes another folder
    ],
)
def test_a_path_in_a_private_folder_is_not_judged(path: str, judged: bool) -> None:
    policy = make_policy(NO_TMP, {"id": "no-tmpx", "effect": "deny", "paths": ["/tmpx/**"]})
    decision = decide(policy, in_private(path, "/tmp"))
    without = decide(policy, in_private(path))
    if judged:
        assert decision == without
    else:
        assert effect_rule(decision) == ("allow", None)


def test_without_private_folders_tmp_is_judged_like_any_path() -> None:
    policy = make_policy(NO_TMP)
    assert effect_rule(decide(policy, in_private("/tmp/x"))) == ("deny", "no-tmp")


def test_private_folders_leave_the_other_paths_judged() -> None:
    policy = make_policy(NO_TMP, {"id": "no-etc", "effect": "deny", "paths": ["/etc/**"]})
    request = Request(
        "agent",
        "copy",
        paths=[("/tmp/a", "read"), ("/etc/passwd", "write")],
        private_paths=["/tmp"],
    )
    decision = decide(policy, request)
    assert (decision.effect, decision.rule, decision.target) == (
        Effect.DENY,
        "no-etc",
        "/etc/passwd",
    )


def test_the_root_as_a_private_folder_covers_every_path() -> None:
    policy = make_policy(NO_TMP)
    assert effect_rule(decide(policy, in_private("/tmp/x", "/"))) == ("allow", None)


def test_a_tools_dangerous_paths_are_not_checked_in_a_private_folder() -> None:
    policy = make_policy()
    assert decide(policy, in_private("/tmp/k.pem", dangerous=("*.pem",))).effect is Effect.ASK
    private = in_private("/tmp/k.pem", "/tmp", dangerous=("*.pem",))
    assert decide(policy, private).effect is Effect.ALLOW


# -- 15. asks nobody answers, and answers ----------------------------------------------------

ASKED = Decision(Effect.ASK, "ask-rm", "removing files", "execute", "rm x")


def test_an_ask_nobody_can_answer_is_denied() -> None:
    policy = make_policy()
    assert policy.unanswered(ASKED) == Decision(
        Effect.DENY,
        "ask-rm",
        "removing files — approval needed, and no approver is configured",
        "execute",
        "rm x",
        False,
    )


def test_an_ask_nobody_can_answer_in_shadow_mode_is_a_warning() -> None:
    policy = make_policy(shadow=True)
    asked = ASKED._replace(shadow=True)
    assert policy.unanswered(asked) == Decision(
        Effect.WARN,
        "ask-rm",
        "shadow mode: would ask for approval (removing files); none configured",
        "execute",
        "rm x",
        True,
    )


@pytest.mark.parametrize("effect", [Effect.ALLOW, Effect.WARN, Effect.DENY])
@pytest.mark.parametrize("shadow", [False, True])
def test_unanswered_leaves_a_decision_that_does_not_ask_alone(effect: Effect, shadow: bool) -> None:
    decision = ASKED._replace(effect=effect, shadow=shadow)
    assert make_policy().unanswered(decision) is decision


def test_unanswered_on_a_real_ask_from_the_policy() -> None:
    policy = make_policy({"id": "ask-rm", "effect": "ask", "commands": ["rm *"]})
    decision = policy.unanswered(decide(policy, execute("rm x")))
    assert (decision.effect, decision.rule, decision.target) == (Effect.DENY, "ask-rm", "rm x")
    shadowed = make_policy({"id": "ask-rm", "effect": "ask", "commands": ["rm *"]}, shadow=True)
    warned = shadowed.unanswered(decide(shadowed, execute("rm x")))
    assert (warned.effect, warned.rule, warned.shadow) == (Effect.WARN, "ask-rm", True)


@pytest.mark.parametrize(("approved", "effect"), [(True, Effect.ALLOW), (False, Effect.DENY)])
@pytest.mark.parametrize("shadow", [False, True])
def test_an_answered_ask_keeps_what_it_was_about(
    approved: bool, effect: Effect, shadow: bool
) -> None:
    asked = ASKED._replace(shadow=shadow)
    answered = asked.answered(approved, "answered by alice")
    assert answered == Decision(
        effect, "ask-rm", "removing files — answered by alice", "execute", "rm x", shadow
    )


# -- 16. errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (PolicyError, ValueError),
        (RuleError, ValueError),
        (PathSpellingError, ValueError),
        (PatternError, ValueError),
    ],
)
def test_policy_errors_are_stockade_errors_and_keep_their_builtin_base(
    error: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, StockadeError)
    assert issubclass(error, builtin)


def test_every_exception_class_in_policies_is_a_stockade_error() -> None:
    found = []
    for module in pkgutil.iter_modules(stockade.policies.__path__, "stockade.policies."):
        loaded = importlib.import_module(module.name)
        for value in vars(loaded).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == loaded.__name__
            ):
                found.append(value)
    assert {PolicyError, RuleError, PathSpellingError, PatternError} <= set(found)
    assert [e for e in found if not issubclass(e, StockadeError)] == []


def test_a_bad_policy_is_caught_as_a_stockade_error() -> None:
    with pytest.raises(StockadeError, match="unknown effect"):
        Policy.from_dict({"rules": [{"id": "x", "effect": "maybe"}]})
