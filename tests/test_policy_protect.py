"""What the policy itself guarantees about Stockade's own files and about commands run without the
box: `Policy.protect` denies Stockade's own files to every tool, before any rule and in shadow
mode too; the new protected names; and an ask on a command that would run unboxed says so, while
no preset runs such a command without asking.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.policies import PRESETS, Decision, Effect, Policy, PolicyError, Request
from stockade.policies.globs import escape
from stockade.policies.policy import UNBOXED_NOTE

STATE = "/workspace/.stockade"
POLICY_FILE = "/workspace/stockade.toml"


def touch(path: str, access: str = "write", tool: str = "write_file") -> Request:
    return Request("agent", tool, paths=[(path, access)])  # type: ignore[list-item]


def decide(policy: Policy, request: Request) -> Decision:
    """The compiled decision, held to casbin's."""
    decision = policy.decide(request)
    assert policy.decide_with_casbin(request) == decision, request
    return decision


# -- Policy.protect ------------------------------------------------------------------------------

ALLOW_ALL = {"default": "allow", "rules": [{"id": "everything", "effect": "allow"}]}


@pytest.mark.parametrize(
    "path",
    [
        STATE,
        f"{STATE}/audit.jsonl",
        f"{STATE}/audit.jsonl.000001",
        f"{STATE}/audit.jsonl.seal",
        "/workspace/.STOCKADE/Audit.jsonl",  # matched like the protected paths: case folded
        POLICY_FILE,
    ],
)
@pytest.mark.parametrize("access", ["read", "write", "delete"])
def test_protected_files_are_denied_to_every_tool_and_access(path: str, access: str) -> None:
    policy = Policy.from_dict(ALLOW_ALL).protect([STATE, POLICY_FILE])
    decision = decide(policy, touch(path, access))
    assert (decision.effect, decision.rule) == (Effect.DENY, "stockade-state")
    assert "Stockade's own files" in decision.reason
    assert decision.target == path


def test_protect_leaves_everything_else_and_the_original_alone() -> None:
    original = Policy.from_dict(ALLOW_ALL)
    policy = original.protect([STATE])
    assert decide(policy, touch("/workspace/src/a.py")).rule == "everything"
    assert decide(policy, touch("/workspace/.stockade-notes")).rule == "everything"
    assert decide(original, touch(f"{STATE}/audit.jsonl")).rule == "dangerous-path"  # ask
    assert (policy.spec, policy.source, policy.default) == (
        original.spec,
        original.source,
        original.default,
    )
    assert policy.protect([STATE]) is policy  # nothing new
    assert original.protect([]) is original
    assert policy.protected == (STATE,)


def test_protect_beats_every_rule_and_the_dangerous_path_list() -> None:
    policy = Policy.preset("default").protect([STATE])
    # .stockade/ is also on the protected list (ask): Stockade's own rule denies first
    decision = decide(policy, touch(f"{STATE}/audit.jsonl", "delete", tool="delete_file"))
    assert (decision.effect, decision.rule) == (Effect.DENY, "stockade-state")
    unprotected = decide(Policy.preset("default"), touch(f"{STATE}/audit.jsonl"))
    assert (unprotected.effect, unprotected.rule) == (Effect.ASK, "dangerous-path")


def test_shadow_mode_does_not_soften_it() -> None:
    """Shadow mode trials the rules; it does not let an agent erase the record of the trial."""
    policy = Policy.from_dict({**ALLOW_ALL, "shadow": True}).protect([STATE])
    decision = decide(policy, touch(f"{STATE}/audit.jsonl"))
    assert (decision.effect, decision.rule) == (Effect.DENY, "stockade-state")


def test_a_literal_path_with_glob_characters_is_protected_exactly() -> None:
    odd = "/workspace/a*[b]?/state"
    policy = Policy.from_dict(ALLOW_ALL).protect([escape(odd)])
    assert decide(policy, touch(f"{odd}/audit.jsonl")).rule == "stockade-state"
    assert decide(policy, touch("/workspace/aXb!/state/audit.jsonl")).rule == "everything"


@pytest.mark.parametrize("bad", ["relative/state", "!/workspace/x", ""])
def test_protect_wants_absolute_paths(bad: str) -> None:
    with pytest.raises(PolicyError, match="absolute path"):
        Policy.from_dict(ALLOW_ALL).protect([bad])


def test_no_rule_in_a_file_may_take_the_reserved_id() -> None:
    with pytest.raises(PolicyError, match="reserved"):
        Policy.from_dict({"rules": [{"id": "stockade-state", "effect": "allow"}]})


def test_the_protection_survives_the_casbin_round_trip() -> None:
    policy = Policy.preset("default").protect([STATE, escape("/host/st[1]/audit.jsonl")])
    loaded = Policy.from_enforcer(policy.casbin().enforcer, default="allow")
    assert loaded.casbin_lines() == policy.casbin_lines()
    assert loaded.protected == policy.protected
    request = touch(f"{STATE}/x")
    assert loaded.decide(request) == policy.decide(request)
    assert loaded.decide(request).rule == "stockade-state"


def test_a_loaded_policy_knows_its_file(tmp_path: Path) -> None:
    path = tmp_path / "stockade.toml"
    path.write_text('version = 1\ndefault = "allow"\n', encoding="utf-8")
    assert Policy.load(path).file == path.resolve()
    assert Policy.load(path).protect([STATE]).file == path.resolve()
    assert Policy.preset("default").file is None


# -- commands without the box ---------------------------------------------------------------------


def command(*, isolated: bool, text: str = "pytest -q") -> Request:
    return Request("agent", "run_shell", action="execute", command=text, isolated=isolated)


def test_the_default_preset_says_plainly_when_a_command_would_run_unboxed() -> None:
    policy = Policy.preset("default")
    unboxed = decide(policy, command(isolated=False))
    assert (unboxed.effect, unboxed.rule) == (Effect.ASK, "commands-ask")
    assert "WITHOUT isolation" in unboxed.reason
    assert "rights" in unboxed.reason
    boxed = decide(policy, command(isolated=True))
    assert (boxed.effect, boxed.rule) == (Effect.ASK, "commands-ask")
    assert "WITHOUT isolation" not in boxed.reason
    assert unboxed.reason == boxed.reason + UNBOXED_NOTE
    # nobody to answer: the refusal still says what was asked
    assert "WITHOUT isolation" in policy.unanswered(unboxed).reason


def test_only_an_ask_says_so() -> None:
    allow = Policy.from_dict({"default": "allow"})
    assert "WITHOUT" not in decide(allow, command(isolated=False)).reason
    ask_all = Policy.from_dict({"default": "ask"})
    assert "WITHOUT isolation" in decide(ask_all, command(isolated=False)).reason
    assert "WITHOUT" not in decide(ask_all, touch("/workspace/a")).reason


@pytest.mark.parametrize("name", PRESETS)
def test_no_preset_runs_an_unboxed_command_without_asking(name: str) -> None:
    """No isolation means asking or refusing, never silently running: a preset that lets a
    command run unasked must require isolation."""
    policy = Policy.preset(name)
    for text in ("pytest -q", "ls", "git status", "python3 -c 'print(1)'"):
        decision = decide(policy, command(isolated=False, text=text))
        assert decision.effect in (Effect.ASK, Effect.DENY), (name, text, decision)
        if decision.effect is Effect.ASK:
            assert "WITHOUT isolation" in decision.reason
    boxed = decide(policy, command(isolated=True))
    if boxed.effect in (Effect.ALLOW, Effect.WARN):
        assert policy.process.require_isolation, name


def test_the_permissive_preset_runs_boxed_commands_and_refuses_unboxed_ones() -> None:
    policy = Policy.preset("permissive")
    assert policy.process.require_isolation is True
    assert decide(policy, command(isolated=True)).effect is Effect.ALLOW
    refused = decide(policy, command(isolated=False))
    assert (refused.effect, refused.rule) == (Effect.DENY, "require-isolation")
