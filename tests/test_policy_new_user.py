"""The policy a new user writes from the README works as meant.

The walkthrough's policy: reads in the workspace allowed, ``git push`` asked, writes to
``migrations/`` denied, ``npm install`` warned about. Each trap found by trying it is a test
here: the call atom that the default decided although a rule allowed every path, prefixes that
missed the bare command, global options and aliases that slipped past, dangerous commands that
only asked in a custom file, and an ask that led with "no rule matched" instead of the danger.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stockade.policies import Decision, Effect, Policy, Request, lint_policy

WALKTHROUGH = """\
version = 1
default = "{default}"

[[rules]]
id = "read-workspace"
effect = "allow"
actions = ["read"]
paths = ["**"]

[[rules]]
id = "ask-push"
effect = "ask"
commands = ["git push *"]

[[rules]]
id = "no-migrations"
effect = "deny"
actions = ["write", "delete"]
paths = ["**/migrations/**"]

[[rules]]
id = "warn-npm-install"
effect = "warn"
commands = ["npm install *"]
"""


def walkthrough(default: str) -> Policy:
    import tomllib

    return Policy.from_dict(tomllib.loads(WALKTHROUGH.format(default=default)))


def read(path: str) -> Request:
    return Request("agent", "read_text_file", paths=[(path, "read")], read_only=True)


def write(path: str) -> Request:
    return Request("agent", "write_file", paths=[(path, "write")])


def run(command: str) -> Request:
    return Request("agent", "run_shell", "execute", command=command, isolated=True)


def both(policy: Policy, request: Request) -> Decision:
    """The compiled decision, checked against casbin's on the same request."""
    decision = policy.decide(request)
    reference = policy.decide_with_casbin(request)
    assert (decision.effect, decision.rule) == (reference.effect, reference.rule)
    return decision


@pytest.mark.parametrize("default", ["allow", "ask", "deny"])
def test_reads_in_the_workspace_are_allowed_whatever_the_default(default: str) -> None:
    decision = both(walkthrough(default), read("/workspace/src/app.py"))
    assert (decision.effect, decision.rule) == (Effect.ALLOW, "read-workspace")


@pytest.mark.parametrize("default", ["ask", "deny"])
def test_a_call_no_rule_speaks_of_gets_the_default(default: str) -> None:
    # the call gives way to its paths only when a rule of the file speaks about one of them
    policy = walkthrough(default)
    assert both(policy, write("/workspace/src/app.py")).effect is Effect(default)
    assert both(policy, Request("agent", "deploy")).effect is Effect(default)


def test_a_rule_about_the_call_itself_still_decides() -> None:
    policy = Policy.from_dict(
        {
            "default": "ask",
            "rules": [
                {"id": "reads", "effect": "allow", "actions": ["read"], "paths": ["**"]},
                {"id": "no-grep", "effect": "deny", "tools": ["grep"], "actions": ["call"]},
            ],
        }
    )
    grep = Request("agent", "grep", paths=[("/workspace/src", "read")], read_only=True)
    assert (both(policy, grep).effect, both(policy, grep).rule) == (Effect.DENY, "no-grep")


def test_protected_paths_allowed_by_their_effect_grant_no_call() -> None:
    policy = Policy.from_dict({"default": "ask", "dangerous_paths": {"effect": "allow"}})
    assert both(policy, write("/workspace/.env")).effect is Effect.ASK


@pytest.mark.parametrize(
    "command",
    ["git push", "git push origin main", "git -C . push origin main", "git -c a=b push"],
)
def test_git_push_is_asked_however_it_is_spelled(command: str) -> None:
    decision = both(walkthrough("allow"), run(command))
    assert (decision.effect, decision.rule) == (Effect.ASK, "ask-push")


@pytest.mark.parametrize("command", ["npm install", "npm install lodash", "npm i lodash", "npm ci"])
def test_npm_install_is_warned_about_however_it_is_spelled(command: str) -> None:
    decision = both(walkthrough("allow"), run(command))
    assert (decision.effect, decision.rule) == (Effect.WARN, "warn-npm-install")


def test_a_prefix_does_not_reach_other_words() -> None:
    assert both(walkthrough("allow"), run("git pushy")).effect is Effect.ALLOW


@pytest.mark.parametrize("path", ["/workspace/migrations/001.sql", "/workspace/db/migrations/x"])
def test_writes_to_migrations_are_denied_at_any_depth(path: str) -> None:
    assert both(walkthrough("allow"), write(path)).rule == "no-migrations"


def test_a_custom_file_denies_dangerous_commands_unless_it_says_otherwise() -> None:
    decision = both(walkthrough("allow"), run("rm -rf /"))
    assert decision.effect is Effect.DENY
    assert str(decision.rule).startswith("dangerous-command:")
    asked = Policy.from_dict({"dangerous_commands": {"effect": "ask"}})
    assert both(asked, run("rm -rf /")).effect is Effect.ASK


def test_an_ask_leads_with_the_dangerous_command_and_names_every_rule() -> None:
    policy = Policy.from_dict({"default": "ask", "dangerous_commands": {"effect": "ask"}})
    decision = policy.decide(run("rm -rf /"))
    assert decision.effect is Effect.ASK
    assert str(decision.rule).startswith("dangerous-command:")
    assert decision.reason.startswith("a dangerous command")
    assert [part.rule for part in decision.asks][1:] == [None]
    assert "no rule matched" in decision.reason  # the default's ask is named too, after it


def test_the_readme_walkthrough_policy_does_what_the_readme_says(tmp_path: Path) -> None:
    """The "Writing a policy" walkthrough: its file loads (its examples hold), lint points at
    ``migrations/**`` while the project has only ``db/migrations/``, and the fix is quiet."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Writing a policy", 1)[1]
    text = section.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "db" / "migrations").mkdir(parents=True)
    policy_file = tmp_path / "stockade.toml"
    policy_file.write_text(text)
    policy = Policy.load(policy_file)  # raises if an example does not hold
    findings = [f for f in lint_policy(policy_file, workspace=tmp_path) if f.severity != "info"]
    assert [(f.line, f.key) for f in findings] == [(23, "rules.2.paths.0")]
    assert "'**/migrations/**'" in findings[0].message
    policy_file.write_text(text.replace('"migrations/**"', '"**/migrations/**"'))
    assert not [f for f in lint_policy(policy_file, workspace=tmp_path) if f.severity != "info"]
    fixed = Policy.load(policy_file)
    assert fixed.decide(write("/workspace/db/migrations/001.sql")).rule == "no-migrations"
    assert policy.decide(run("git -C . push origin main")).rule == "ask-push"


def test_the_strict_preset_still_runs_only_read_only_tools() -> None:
    """The call gives way to its paths, so strict's reads are for read-only tools only: a
    tool not marked read-only that only reads (an upload) is still denied."""
    strict = Policy.preset("strict")
    upload = Request("agent", "upload_file", paths=[("/workspace/src/a.py", "read")])
    assert both(strict, upload).effect is Effect.DENY
    assert both(strict, read("/workspace/src/a.py")).effect is Effect.ALLOW


@pytest.mark.parametrize(
    ("command", "rules", "effect"),
    [
        ("git -c alias.p=push p origin", [{"commands": ["git push *"], "effect": "ask"}], "ask"),
        ("git -c 'alias.x=!git push' x", [{"commands": ["git push *"], "effect": "ask"}], "ask"),
        ("git -c 'alias.x=!rm -rf /' x", [], "deny"),
        ("npm --cafile /dev/null install evil", [{"commands": ["npm install *"]}], "deny"),
        ("docker container run -it img", [{"commands": ["docker run *"]}], "deny"),
        ("cargo +nightly r", [{"commands": ["cargo run *"]}], "deny"),
    ],
)
def test_what_a_command_runs_does_not_slip_past_a_rule_by_its_spelling(
    command: str, rules: list[dict[str, object]], effect: str
) -> None:
    listed = [{"id": f"r{i}", "effect": "deny", **rule} for i, rule in enumerate(rules)]
    policy = Policy.from_dict({"default": "allow", "rules": listed})
    assert both(policy, run(command)).effect is Effect(effect)
