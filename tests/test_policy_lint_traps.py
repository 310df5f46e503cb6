"""`stockade policy check` catches policies that load but do not do what was meant: a rule a
stronger one always beats, an allow over a protected path or a dangerous command, a host path,
a pattern that cannot match as written, a folder the project has only deeper, a misspelt key;
each on the pattern's own line, and the corrected file quiet."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stockade.policies
from stockade.policies import PRESETS, Finding, Policy, PolicyError, lint_policy, lint_text
from stockade.policies.command_patterns import CommandPattern
from stockade.policies.globs import path_spec
from stockade.policies.paths import canonical, fold
from stockade.policies.rule_coverage import command_covers, paths_cover

PRESET_DIR = Path(stockade.policies.__file__).parent / "presets"


def rules_text(*rules: dict[str, object], head: str = "") -> str:
    """A policy file with ``rules``, one key per line and every list one item per line (so a
    finding's line says which item it points at)."""
    out = ["version = 1", head]
    for rule in rules:
        out += ["", "[[rules]]"]
        for key, value in rule.items():
            if isinstance(value, list):
                out.append(f"{key} = [")
                out += [f"  {json.dumps(item)}," for item in value]
                out.append("]")
            else:
                out.append(f"{key} = {json.dumps(value)}")
    return "\n".join(out) + "\n"


def line_of(text: str, needle: str) -> int:
    """The line (1-based) of the only line holding ``needle``."""
    found = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(found) == 1, (needle, found)
    return found[0]


def warnings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity != "info"]


def only(findings: list[Finding], key: str) -> Finding:
    matching = [f for f in findings if f.key == key]
    assert len(matching) == 1, (key, findings)
    return matching[0]


# -- 1. a rule a stronger or earlier one always beats -------------------------------------------

DENY_SRC = {"id": "deny-src", "effect": "deny", "paths": ["src/**"]}
ALLOW_X = {"id": "allow-x", "effect": "allow", "paths": ["src/x.py"]}


def test_an_allow_under_a_denied_tree_names_both_rules_and_the_winners_line() -> None:
    text = rules_text(DENY_SRC, ALLOW_X)
    finding = only(lint_text(text), "rules.1")
    assert (finding.severity, finding.line) == ("warning", line_of(text, '"allow-x"') - 1)
    deny_line = line_of(text, '"deny-src"') - 1
    assert finding.message == (
        f"rule 'allow-x' never decides: rule 'deny-src' (deny, line {deny_line}) matches "
        "everything it matches and is stronger"
    )
    # not also the misleading note that it allows what the default allows
    assert not [f for f in lint_text(text) if f.key == "rules.1.effect"]
    # corrected (the exception carved out of the deny), it is quiet
    fixed = dict(DENY_SRC, paths=["src/**", "!src/x.py"])
    assert warnings(lint_text(rules_text(fixed, ALLOW_X))) == []


@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        (["/**"], ["/etc/passwd"]),
        (["src/**"], ["src/a/*.py"]),
        (["src/**"], ["/workspace/src"]),
        (["/workspace/*/**"], ["/workspace/lib/x/**"]),
        (["src/x.py", "docs/**"], ["docs/a.md", "src/x.py"]),
        (["**/migrations/**"], ["/workspace/app/migrations/0001.py"]),
    ],
)
def test_path_coverage_is_found_beyond_equal_strings(earlier: list[str], later: list[str]) -> None:
    text = rules_text(
        {"id": "first", "effect": "deny", "paths": earlier},
        {"id": "second", "effect": "ask", "paths": later},
    )
    assert "rule 'first'" in only(lint_text(text), "rules.1").message


@pytest.mark.parametrize(
    ("earlier", "later"),
    [
        (["src/**", "!src/gen/**"], ["src/x.py"]),  # exclusions break coverage
        (["src/**"], ["**/src/**"]),  # anywhere is more than the workspace's src
        (["src/*"], ["src/a/b.py"]),  # one level only
        (["/workspace/src"], ["/workspace/src/**"]),  # the folder, not what is in it
        (["*.py"], ["**/*.py"]),
    ],
)
def test_path_coverage_is_not_claimed_when_unsure(earlier: list[str], later: list[str]) -> None:
    text = rules_text(
        {"id": "first", "effect": "deny", "paths": earlier},
        {"id": "second", "effect": "ask", "paths": later},
    )
    assert not [f for f in lint_text(text) if f.key == "rules.1"]


@pytest.mark.parametrize(
    ("earlier", "later", "covered"),
    [
        ("git *", "git push *", True),
        ("git *", "git", True),
        ("git *", "git push --force", True),
        ("*", "rm -r build", True),
        ("rm*", "rm -r *", True),
        ("git push *", "git push", True),
        ("git *", "gitk", False),
        ("git *", "g*", False),
        ("git push *", "git *", False),
        ("git * main", "git push main", False),  # wildcards inside: not worked out
    ],
)
def test_command_coverage_knows_the_prefix_form(earlier: str, later: str, covered: bool) -> None:
    text = rules_text(
        {"id": "first", "effect": "deny", "commands": [earlier]},
        {"id": "second", "effect": "ask", "commands": [later]},
    )
    shadowed = [f for f in lint_text(text) if f.key == "rules.1"]
    assert bool(shadowed) is covered, shadowed


def test_an_earlier_rule_of_the_same_effect_comes_first() -> None:
    text = rules_text(
        {"id": "a", "effect": "ask", "commands": ["git *"]},
        {"id": "b", "effect": "ask", "commands": ["git push *"]},
    )
    assert only(lint_text(text), "rules.1").message.endswith("and comes first")


def test_a_rule_limited_to_fewer_subjects_or_actions_is_still_beaten() -> None:
    no_writes = {"id": "no-writes", "effect": "deny", "actions": ["write", "delete"]}
    no_writes["paths"] = ["/**"]
    bob = {"id": "bob-src", "effect": "allow", "subjects": ["bob"], "actions": ["write"]}
    bob["paths"] = ["src/**"]
    assert "'no-writes'" in only(lint_text(rules_text(no_writes, bob)), "rules.1").message
    # reading is not something the deny covers
    reads = rules_text(no_writes, dict(bob, actions=["read"]))
    assert not [f for f in lint_text(reads) if f.key == "rules.1"]


# -- 2. an allow over what Stockade's own checks decide first ----------------------------------


def test_an_allow_over_a_protected_path_says_it_cannot_and_how_to_unprotect() -> None:
    text = rules_text({"id": "allow-env", "effect": "allow", "paths": ["docs/**", ".env"]})
    finding = only(lint_text(text), "rules.0.paths.1")
    assert (finding.severity, finding.line) == ("warning", line_of(text, '".env"'))
    assert finding.message == (
        "rule 'allow-env' tries to allow /workspace/.env, a protected path: the dangerous-path "
        "check (effect ask) decides first, so this rule cannot allow it; to allow it, remove "
        "'.env' from protected paths: [dangerous_paths] remove = ['.env']"
    )
    # one finding on it: not also "never decides", nor the default-allows note
    assert [f.key for f in lint_text(text)] == ["rules.0.paths.1"]
    # corrected: the entry removed from the list, the rule allows it and lint is quiet
    fixed = rules_text(
        {"id": "allow-env", "effect": "allow", "paths": ["docs/**", ".env"]},
        head='[dangerous_paths]\nremove = [".env"]',
    )
    assert warnings(lint_text(fixed)) == []


@pytest.mark.parametrize(
    ("pattern", "path", "entry"),
    [
        (".ssh/**", "/workspace/.ssh", ".ssh/"),
        ("**/.env.*", "/workspace/.env.x", ".env.*"),
        (".git/hooks/pre-commit", "/workspace/.git/hooks/pre-commit", ".git/hooks/"),
        ("/workspace/.VSCODE/settings.json", "/workspace/.VSCODE/settings.json", ".vscode/"),
    ],
)
def test_protected_paths_are_found_in_trees_wildcards_and_any_case(
    pattern: str, path: str, entry: str
) -> None:
    text = rules_text({"id": "w", "effect": "warn", "paths": [pattern]})
    message = only(lint_text(text), "rules.0.paths.0").message
    assert f"tries to allow (with a warning) {path}, a protected path" in message
    assert f"remove {entry!r}" in message


def test_a_protected_path_is_quiet_where_the_rule_cannot_reach_it() -> None:
    quiet = [
        # reading a .git folder is not protected (only changing it is)
        {"id": "r", "effect": "allow", "actions": ["read"], "paths": [".git/**"]},
        # an exclusion takes the protected path out of the rule
        {"id": "x", "effect": "allow", "paths": ["/workspace/**", "!**/.env"]},
        # a deny is stronger than the check: it decides
        {"id": "d", "effect": "deny", "paths": [".env"]},
    ]
    findings = lint_text(rules_text(*quiet))
    assert [f for f in findings if ".paths." in f.key] == []
    # and a policy that allows protected paths anyway has nothing to say about the rule
    allowed = rules_text(quiet[1], head='[dangerous_paths]\neffect = "allow"')
    assert [f for f in warnings(lint_text(allowed)) if f.key.startswith("rules")] == []


def test_a_deny_the_protected_list_already_makes_is_only_a_note() -> None:
    text = rules_text(
        {"id": "deny-env", "effect": "deny", "paths": [".env"]},
        head='[dangerous_paths]\neffect = "deny"',
    )
    finding = only(lint_text(text), "rules.0")
    assert finding.severity == "info"
    assert "the dangerous-path check (deny, line 3)" in finding.message


def test_an_allow_over_a_dangerous_command_names_its_id() -> None:
    text = rules_text({"id": "allow-rm", "effect": "allow", "commands": ["ls *", "rm -rf *"]})
    finding = only(lint_text(text), "rules.0.commands.1")
    assert (finding.severity, finding.line) == ("warning", line_of(text, '"rm -rf *"'))
    assert "a dangerous command (id rm-recursive-force)" in finding.message
    assert "[dangerous_commands] remove = ['rm-recursive-force'] to allow it" in finding.message
    fixed = rules_text(
        {"id": "allow-rm", "effect": "allow", "commands": ["ls *", "rm -rf *"]},
        head='[dangerous_commands]\nremove = ["rm-recursive-force"]',
    )
    assert warnings(lint_text(fixed)) == []


def test_dangerous_commands_are_found_in_the_prefix_forms_words_and_extended_lists() -> None:
    text = rules_text(
        {"id": "root", "effect": "allow", "commands": ["sudo *"]},
        {"id": "mine", "effect": "allow", "commands": ["deploy prod"]},
        head='[dangerous_commands]\nextend = ["deploy *"]',
    )
    findings = lint_text(text)
    assert "'sudo'" in only(findings, "rules.0.commands.0").message
    assert "take the pattern 'deploy *' out of [dangerous_commands] extend" in (
        only(findings, "rules.1.commands.0").message
    )
    for harmless in ("*", "git *", "rm *", "curl *", "[ *"):  # "[": the test command
        plain = rules_text({"id": "ok", "effect": "allow", "commands": [harmless]})
        assert warnings(lint_text(plain)) == [], harmless


# -- 3. host paths ------------------------------------------------------------------------------


def test_a_host_path_is_named_with_the_pattern_meant() -> None:
    text = rules_text(
        {"id": "mig", "effect": "ask", "paths": ["src/**", "/home/me/project/migrations/**"]}
    )
    finding = only(lint_text(text), "rules.0.paths.1")
    assert finding.line == line_of(text, "/home/me/project")
    assert finding.message == (
        "'/home/me/project/migrations/**' is a host path; tools see the project at /workspace, "
        "so this pattern never matches a file tool's path; write 'migrations/**'"
    )
    corrected = {"id": "mig", "effect": "ask", "paths": ["src/**", "migrations/**"]}
    assert not warnings(lint_text(rules_text(corrected)))


def test_a_host_path_is_cut_after_the_workspace_folders_name(tmp_path: Path) -> None:
    workspace = tmp_path / "shop"
    workspace.mkdir()
    text = rules_text({"id": "h", "effect": "deny", "paths": ["/srv/build/shop/api/keys/**"]})
    message = only(lint_text(text, workspace=workspace), "rules.0.paths.0").message
    assert message.endswith("write 'api/keys/**'")


NOT_HOST = ("/**", "/workspace/a/b/c/**", "/userinput/x/y/z", "/tmp/a/b/c", "/dev/null")
NOT_HOST += ("/etc/ssh/sshd_config", "/*/secrets/**", "/opt", "/home/**", "/data/x")


@pytest.mark.parametrize("pattern", NOT_HOST)
def test_namespaces_system_folders_and_wildcards_are_not_host_paths(pattern: str) -> None:
    text = rules_text({"id": "r", "effect": "deny", "paths": [pattern, "!/workspace/**"]})
    assert not [f for f in lint_text(text) if f.key.startswith("rules.0.paths")]


def test_a_rule_for_the_host_file_tools_may_name_host_paths() -> None:
    rule = {"id": "notes", "effect": "allow", "tools": ["view_text_file"]}
    rule["paths"] = ["/home/me/notes/**"]
    assert not warnings(lint_text(rules_text(rule)))
    assert warnings(lint_text(rules_text(dict(rule, tools=["*"]))))


# -- 4-6. patterns that cannot match as written --------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "pattern", "words", "fixed"),
    [
        ("paths", "src/[abc", "unclosed '[' in 'src/[abc'", "src/[abc]"),
        ("paths", "migrations\\*", "here '*' becomes a literal star", "migrations/*"),
        ("paths", "src\\main.py", "'m' stays 'm' and the backslash is dropped", "src/main.py"),
        ("commands", "git push:*", "did you mean 'git push *'", "git push *"),
        ("commands", " ls -l", "space at its start or end", "ls -l"),
        ("commands", "ls -l ", "write 'ls -l'", "ls -l"),
        ("commands", "make [z-a]*", "empty class", "make [a-z]*"),
        ("commands", "echo [abc", "unclosed '['", "echo [abc]"),
    ],
)
def test_a_pattern_that_cannot_match_as_written_is_named_on_its_line(
    kind: str, pattern: str, words: str, fixed: str
) -> None:
    text = rules_text({"id": "r", "effect": "deny", kind: ["first", pattern]})
    finding = only(lint_text(text), f"rules.0.{kind}.1")
    assert finding.severity == "warning"
    assert finding.line == line_of(text, json.dumps(pattern))
    assert words in finding.message
    corrected = rules_text({"id": "r", "effect": "deny", kind: ["first", fixed]})
    assert warnings(lint_text(corrected)) == []


def test_a_pattern_with_a_nul_is_an_error_on_its_own_line() -> None:
    text = rules_text({"id": "r", "effect": "deny", "paths": ["a", "b\x00c"]})
    (finding,) = lint_text(text)
    assert (finding.severity, finding.key) == ("error", "rules.0.paths.1")
    assert finding.line == line_of(text, "b\\u0000c")
    assert "NUL" in finding.message


# -- 7. depth ---------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src" / "migrations").mkdir(parents=True)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "setup.cfg").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "node_modules" / "x" / "vendor").mkdir(parents=True)
    return tmp_path


def test_a_folder_the_project_has_only_deeper_is_named(project: Path) -> None:
    text = rules_text({"id": "m", "effect": "ask", "paths": ["docs/**", "migrations/**"]})
    finding = only(lint_text(text, workspace=project), "rules.0.paths.1")
    assert finding.line == line_of(text, '"migrations/**"')
    assert finding.message == (
        "'migrations/**' matches only /workspace/migrations; the workspace has src/migrations/: "
        "write '**/migrations/**' to match at any depth"
    )
    assert not lint_text(text)  # without a workspace, nothing is looked into
    fixed = text.replace('"migrations/**"', '"**/migrations/**"')
    assert warnings(lint_text(fixed, workspace=project)) == []


def test_depth_is_checked_for_files_and_exclusions_and_skips_vendored_trees(project: Path) -> None:
    text = rules_text(
        {"id": "f", "effect": "deny", "paths": ["/**", "!setup.cfg", "vendor/**", "docs/*.md"]}
    )
    findings = lint_text(text, workspace=project)
    assert "write '!**/setup.cfg'" in only(findings, "rules.0.paths.1").message
    assert not [f for f in findings if f.key in ("rules.0.paths.2", "rules.0.paths.3")]


def test_lint_policy_takes_the_workspace(project: Path) -> None:
    path = project / "stockade.toml"
    path.write_text(rules_text({"id": "m", "effect": "ask", "paths": ["migrations/**"]}))
    assert [f.key for f in lint_policy(path, workspace=project)] == ["rules.0.paths.0"]
    missing = lint_policy(path, workspace=project / "absent")
    assert [f.key for f in missing] == ["(workspace)"]


# -- 8. unknown keys ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "meant"),
    [
        ('[[rules]]\nid = "a"\neffect = "deny"\npath = ["x"]', "rules.0.path", "'paths'"),
        ('[[rules]]\nid = "a"\nefect = "deny"', "rules.0.efect", "'effect'"),
        ('defualt = "deny"', "defualt", "'default'"),
        ("[dangerous_paths]\nremov = []", "dangerous_paths.remov", "'remove'"),
        ("[process]\nrequire_isolaton = true", "process.require_isolaton", "'require_isolation'"),
        ('[[approvals]]\nid = "a"\ncomands = ["x"]', "approvals.0.comands", "'commands'"),
        ("[limits]\nper_tools = {}", "limits.per_tools", "'per_tool'"),
    ],
)
def test_an_unknown_key_says_which_key_was_meant(text: str, key: str, meant: str) -> None:
    found = only(lint_text(f"version = 1\n{text}\n"), key)
    assert found.severity == "error"
    assert found.message == f"unknown key; did you mean {meant}?"


def test_an_example_calls_unknown_key_is_matched_against_the_calls_keys() -> None:
    data = {"rules": [{"id": "a", "effect": "deny", "examples": {"deny": [{"tol": "x"}]}}]}
    with pytest.raises(PolicyError) as caught:
        Policy.from_dict(data)
    messages = [p.message for p in caught.value.problems if p.key.endswith(".tol")]
    assert messages == ["unknown key; did you mean 'tool'?"]


def test_an_unknown_key_nothing_resembles_keeps_the_plain_message() -> None:
    found = only(lint_text("version = 1\n[process]\nxyzzy = 1\n"), "process.xyzzy")
    assert found.message.startswith("unknown key; check the spelling")


# -- presets and robustness ---------------------------------------------------------------------


@pytest.mark.parametrize("name", PRESETS)
def test_presets_give_no_warnings(name: str) -> None:
    findings = lint_policy(PRESET_DIR / f"{name}.toml", workspace=Path(__file__).parents[1])
    assert [f for f in findings if f.severity != "info"] == []


_PIECES = ["src", "a", ".env", ".ssh", "*", "**", "?", "[ab]", "[a", "\\*", "x.py", "..", ".git"]
_PATH = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4).map("/".join)
_PATTERN = st.one_of(
    _PATH,
    _PATH.map(lambda p: "/" + p),
    _PATH.map(lambda p: "!" + p),
    st.text(alphabet="ab/*?[]!\\. :", min_size=1, max_size=10),
)
_COMMAND = st.one_of(
    st.text(alphabet="rmgitsudo -*?[]:/", min_size=1, max_size=12),
    st.sampled_from(["rm -rf *", "git *", "git push:*", "*", "sudo *", " ls", "[ *"]),
)
_RULE = st.fixed_dictionaries(
    {"id": st.just(""), "effect": st.sampled_from(["allow", "warn", "ask", "deny"])},
    optional={
        "actions": st.lists(
            st.sampled_from(["read", "write", "delete", "execute", "call"]), min_size=1, max_size=3
        ),
        "subjects": st.sampled_from([["*"], ["bob"]]),
        "tools": st.sampled_from([["*"], ["view_text_file"], ["shell"]]),
        "read_only_tools": st.booleans(),
        "paths": st.lists(_PATTERN, min_size=1, max_size=3),
        "commands": st.lists(_COMMAND, min_size=1, max_size=3),
    },
).map(lambda rule: {k: v for k, v in rule.items() if k != "commands" or "paths" not in rule})


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rules=st.lists(_RULE, max_size=5), default=st.sampled_from(["allow", "deny"]))
def test_lint_never_raises_on_any_policy_that_loads(
    project: Path, rules: list[dict[str, object]], default: str
) -> None:
    for number, rule in enumerate(rules):
        rule["id"] = f"r{number}"
    text = rules_text(*rules, head=f'default = "{default}"')
    findings = lint_text(text, workspace=project)
    try:
        Policy(stockade.policies.policy_file.parse(tomllib.loads(text), source="t", text=text))
    except PolicyError:
        assert [f.severity for f in findings][:1] == ["error"]
    else:
        assert "error" not in {f.severity for f in findings}
    for finding in findings:
        assert finding.severity in ("error", "warning", "info")
        assert finding.line is None or 1 <= finding.line <= len(text.splitlines())


_PATHS = st.lists(st.sampled_from(["src", "a", "b", ".env", "x.py", "migrations"]), max_size=4)


@settings(max_examples=400, deadline=None)
@given(
    first=st.lists(_PATTERN.filter(lambda p: not p.startswith("!")), min_size=1, max_size=2),
    later=st.lists(_PATTERN.filter(lambda p: not p.startswith("!")), min_size=1, max_size=2),
    paths=st.lists(_PATHS.map(lambda parts: "/workspace/" + "/".join(parts)), max_size=8),
    folded=st.booleans(),
)
def test_path_coverage_is_never_claimed_wrongly(
    first: list[str], later: list[str], paths: list[str], folded: bool
) -> None:
    try:
        mine, theirs = path_spec(first, folded=folded), path_spec(later)
    except ValueError:
        return
    if not paths_cover(mine, theirs):
        return
    for written in [*paths, *(p.replace("*", "x") for p in later if p.strip())]:
        path = canonical(written)  # the policy matches canonical paths only
        if theirs.match(path, fold(path)):
            assert mine.match(path, fold(path)), (first, later, path)


_WORDS = st.lists(
    st.sampled_from(["git", "push", "rm", "-rf", "x", "gitk", "*", "?"]), min_size=1, max_size=3
).map(" ".join)


@settings(max_examples=400, deadline=None)
@given(mine=_WORDS, theirs=_WORDS, commands=st.lists(_WORDS, max_size=8))
def test_command_coverage_is_never_claimed_wrongly(
    mine: str, theirs: str, commands: list[str]
) -> None:
    if not command_covers(mine, theirs):
        return
    samples = [*commands, theirs.replace("*", "x").replace("?", "y"), theirs.removesuffix(" *")]
    for command in samples:
        if CommandPattern(theirs).match(command):
            assert CommandPattern(mine).match(command), (mine, theirs, command)
