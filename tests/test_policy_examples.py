"""Policy tests: the examples a rule carries, cases files, and ``stockade policy test``.

A user writes examples and cases to pin what the policy decides; what these tests hold is that
a case passes exactly when the whole policy decides its call as stated, that a failure names
the line and key to fix, and that an unusable policy or cases file is refused with exit 2,
never mistaken for a passing (or failing) run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from stockade.engine.cli.app import app
from stockade.engine.cli.policy_test import load_for_test
from stockade.policies import Effect, Policy, PolicyError, Problem, Request
from stockade.policies.policy_examples import (
    Case,
    CasesError,
    ExampleError,
    check_examples,
    example_cases,
    example_request,
    load_cases,
    run_cases,
)
from stockade.policies.policy_file import ExampleCall

POLICY = """\
default = "allow"

[[rules]]
id = "ask-push"
effect = "ask"
reason = "pushing publishes work"
commands = ["git push *"]
examples.ask = [
  "git push origin main",
  "git push --force origin main",  # a comment between items
]
examples.allow = ["git status"]

[[rules]]
id = "deny-env"
effect = "deny"
reason = "secrets stay put"
paths = ["**/.env"]
[rules.examples]
deny = [{ tool = "write_file", write = ".env" }, "cat < .env"]
allow = [{ tool = "read_file", read = "README.md" }]

[[rules]]
id = "warn-tmp"
effect = "warn"
paths = ["/workspace/tmp/**"]
[[rules.examples.warn]]
tool = "write_file"
write = "tmp/a"
"""

CASES = """\
[[case]]
name = "pushing asks"
call = "git push origin main"
expect = "ask"
rule = "ask-push"

[[case]]
call = { tool = "write_file", write = "config/.env" }
expect = "deny"

[[case]]
name = "reading is fine"
expect = "allow"
[case.call]
tool = "read_file"
read = ["src/a.py", "src/b.py"]
"""


DEFAULT = Policy.preset("default")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def line_of(text: str, needle: str, occurrence: int = 0) -> int:
    found = [n for n, line in enumerate(text.splitlines(), 1) if needle in line]
    return found[occurrence]


# -- the call an example stands for ------------------------------------------------------------


def test_a_command_line_is_a_boxed_run_of_run_shell() -> None:
    assert example_request("git push") == Request(
        "agent", "run_shell", "execute", (), "git push", False, (), True
    )


def test_a_call_canonicalises_its_paths_from_the_workspace() -> None:
    call = ExampleCall(tool="write_file", write=["a/../.env"], read=["/etc//hosts"])
    request = example_request(call)
    assert request.action == "call"
    assert request.paths == (("/etc/hosts", "read"), ("/workspace/.env", "write"))
    assert request.read_only is False


@pytest.mark.parametrize(
    ("call", "read_only"),
    [
        (ExampleCall(tool="read_file", read=["a"]), True),  # only reads: a read-only tool's call
        (ExampleCall(tool="edit", read=["a"], write=["a"]), False),
        (ExampleCall(tool="grep", read=["a"], command="grep x a"), False),
        (ExampleCall(tool="ping"), False),  # reads nothing: not a read-only call by default
        (ExampleCall(tool="edit", write=["a"], read_only=True), True),  # as written
    ],
    ids=["reads", "reads-and-writes", "command", "nothing", "given"],
)
def test_read_only_defaults_to_a_call_that_only_reads(call: ExampleCall, read_only: bool) -> None:
    assert example_request(call).read_only is read_only


@pytest.mark.parametrize(
    ("example", "field"),
    [
        ("   ", "command"),
        (ExampleCall(command=""), "command"),
        (ExampleCall(tool="write_file", write=["a\x00b"]), "write"),
        (ExampleCall(tool="rm", delete=[" "]), "delete"),
    ],
    ids=["blank-line", "blank-command", "nul-path", "blank-path"],
)
def test_a_call_that_cannot_be_made_is_a_clear_error(example: object, field: str) -> None:
    with pytest.raises(ExampleError) as raised:
        example_request(example)  # type: ignore[arg-type]
    assert raised.value.field == field


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_command_line_gives_a_request_or_a_clear_error(line: str) -> None:
    if not line.strip():
        with pytest.raises(ExampleError, match="the command line is empty"):
            example_request(line)
        return
    assert example_request(line).command == line
    # and the policy decides it without raising, NULs and lone surrogates included
    result = run_cases(DEFAULT, [Case(line, Effect.ALLOW)])[0]
    assert result.decision is not None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(), max_size=3),
    st.lists(st.text(), max_size=3),
    st.one_of(st.none(), st.text()),
)
def test_any_call_gives_a_request_or_a_clear_error(
    read: list[str], write: list[str], command: str | None
) -> None:
    call = ExampleCall(tool="t", read=read, write=write, command=command)
    unusable = [p for p in (*read, *write) if "\x00" in p or not p.strip()]
    if unusable or (command is not None and not command.strip()):
        with pytest.raises(ExampleError) as raised:
            example_request(call)
        assert raised.value.field in ("read", "write", "command")
        return
    request = example_request(call)
    assert all(path.startswith("/") for path, _ in request.paths)
    assert len(request.paths) == len(read) + len(write)
    assert run_cases(DEFAULT, [Case(call, Effect.ALLOW)])[0].decision


# -- examples in a policy's rules --------------------------------------------------------------


def example_problems(load: Callable[[], Policy]) -> list[Problem]:
    """What is reported about a policy's examples: by loading it, where loading checks them,
    else by `check_examples` on the loaded policy."""
    try:
        policy = load()
    except PolicyError as exc:
        return exc.problems
    return check_examples(policy)


def test_examples_that_hold_load_fine_and_report_nothing(tmp_path: Path) -> None:
    policy = Policy.load(write(tmp_path, "p.toml", POLICY))
    assert check_examples(policy) == []
    cases = example_cases(policy)
    assert [c.key for c in cases] == [
        "rules.0.examples.allow.0",
        "rules.0.examples.ask.0",
        "rules.0.examples.ask.1",
        "rules.1.examples.allow.0",
        "rules.1.examples.deny.0",
        "rules.1.examples.deny.1",
        "rules.2.examples.warn.0",
    ]
    assert all(r.passed for r in run_cases(policy, cases))


def test_a_policy_without_examples_has_nothing_to_check() -> None:
    assert check_examples(Policy.preset("default")) == []
    assert example_cases(Policy.preset("strict")) == []


FAILING = [
    (
        'examples.allow = ["git status"]',
        'examples.allow = ["git status", "git push origin main"]',
        "rules.0.examples.allow.1",
        ("examples.allow", 0),
        "'git push origin main' is asked (rule 'ask-push': pushing publishes work), expected allow",
    ),
    (
        '"git push --force origin main",  # a comment between items',
        '"git push --force origin main",  # a comment between items\n  "git pull",',
        "rules.0.examples.ask.2",
        ('"git pull"', 0),
        "'git pull' is allowed (no rule matched; the policy's default is allow), expected ask",
    ),
    (
        '"cat < .env"]',
        '"cat < .env", "cat README.md"]',
        "rules.1.examples.deny.2",
        ("cat < .env", 0),
        "'cat README.md' is allowed (no rule matched; the policy's default is allow), "
        "expected deny",
    ),
    (
        'write = "tmp/a"',
        'write = "tmp/a"\n[[rules.examples.warn]]\ntool = "write_file"\nwrite = "src/a"',
        "rules.2.examples.warn.1",
        ("[[rules.examples.warn]]", 1),
        "write_file write src/a is allowed (no rule matched; the policy's default is allow), "
        "expected warn",
    ),
    (
        'write = "tmp/a"',
        'write = "tmp/a"\n\n[[rules]]\nid = "x"\neffect = "allow"\nexamples = { deny = ["ls"] }',
        "rules.3.examples.deny.0",
        ("examples = {", 0),
        "'ls' is allowed (rule 'x'), expected deny",
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "key", "where", "message"),
    FAILING,
    ids=["array", "multi-line-array", "examples-table", "array-of-tables", "inline-table"],
)
def test_a_failing_example_is_reported_with_its_own_line_and_key(
    tmp_path: Path, old: str, new: str, key: str, where: tuple[str, int], message: str
) -> None:
    text = POLICY.replace(old, new)
    assert text != POLICY
    path = write(tmp_path, "p.toml", text)
    [problem] = example_problems(lambda: Policy.load(path))
    assert (problem.key, problem.message) == (key, message)
    assert problem.line == line_of(text, *where)
    assert problem.source == str(path)


def test_examples_of_a_policy_without_text_are_reported_without_lines() -> None:
    examples = {"allow": ["rm x"], "deny": ["rm y"]}
    data = {"rules": [{"id": "a", "effect": "deny", "commands": ["rm *"], "examples": examples}]}
    [problem] = example_problems(lambda: Policy.from_dict(data, source="mine"))
    assert (problem.source, problem.line, problem.key) == ("mine", None, "rules.0.examples.allow.0")
    assert problem.message == "'rm x' is denied (rule 'a'), expected allow"


def test_an_example_with_no_call_is_a_problem_not_a_crash() -> None:
    data = {"rules": [{"id": "a", "effect": "deny", "examples": {"deny": ["  "]}}]}
    [problem] = example_problems(lambda: Policy.from_dict(data))
    assert problem.key == "rules.0.examples.deny.0"
    assert "empty" in problem.message


def test_examples_judge_the_whole_policy_not_their_own_rule_alone() -> None:
    # an allow rule's example of a dangerous command is still denied by the built-in check
    data = {"rules": [{"id": "all", "effect": "allow", "examples": {"allow": ["rm -rf /"]}}]}
    [problem] = example_problems(lambda: Policy.from_dict(data))
    assert "is denied (rule 'dangerous-command:" in problem.message


def test_a_test_load_reports_failing_examples_where_a_load_refuses_them(tmp_path: Path) -> None:
    old, new, key, _, message = FAILING[0]
    path = write(tmp_path, "p.toml", POLICY.replace(old, new))
    with pytest.raises(PolicyError):
        Policy.load(path)
    policy, cases = load_for_test(path)
    failed = [r for r in run_cases(policy, cases) if not r.passed]
    assert [(r.case.key, r.message) for r in failed] == [(key, message)]
    # anything else wrong with the file is still refused
    broken = write(tmp_path, "broken.toml", POLICY.replace('effect = "warn"', 'effect = "wrn"'))
    with pytest.raises(PolicyError, match="unknown effect"):
        load_for_test(broken)


# -- cases files ---------------------------------------------------------------------------------


def test_a_cases_file_loads_and_its_cases_pass(tmp_path: Path) -> None:
    cases = load_cases(write(tmp_path, "cases.toml", CASES))
    assert [(c.label, c.line, c.key) for c in cases] == [
        ("pushing asks", 1, "case.0"),
        ("case.1", 7, "case.1"),
        ("reading is fine", 11, "case.2"),
    ]
    assert cases[0].rule == "ask-push"
    assert cases[2].call == ExampleCall(tool="read_file", read=["src/a.py", "src/b.py"])
    policy = Policy.load(write(tmp_path, "p.toml", POLICY))
    results = run_cases(policy, cases)
    assert [(r.passed, r.message) for r in results] == [(True, "")] * 3
    assert results[0].decision is not None
    assert results[0].decision.rule == "ask-push"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            Case("git push origin main", Effect.DENY),
            "'git push origin main' is asked (rule 'ask-push': pushing publishes work), "
            "expected deny",
        ),
        (
            Case("cat < .env", Effect.DENY, rule="ask-push"),
            "'cat < .env' is denied by rule 'deny-env', expected rule 'ask-push'",
        ),
        (
            Case("ls", Effect.ALLOW, rule="allow-ls"),
            "'ls' is allowed by the default, expected rule 'allow-ls'; "
            "the policy has no rule 'allow-ls'",
        ),
        (
            Case(ExampleCall(tool="write_file", write=["tmp/x"]), Effect.ALLOW, rule="deny-env"),
            "write_file write tmp/x is warned about (rule 'warn-tmp'), expected allow "
            "by rule 'deny-env'",
        ),
        (
            Case(ExampleCall(tool="x", read=["\x00"]), Effect.ALLOW),
            "read path '\\x00': path '\\x00' contains a NUL byte, which no file name can hold",
        ),
    ],
    ids=["effect", "rule", "unknown-rule", "effect-and-rule", "no-call"],
)
def test_a_case_the_policy_decides_otherwise_fails_and_says_how(
    tmp_path: Path, case: Case, message: str
) -> None:
    policy = Policy.load(write(tmp_path, "p.toml", POLICY))
    [result] = run_cases(policy, [case])
    assert (result.passed, result.message) == (False, message)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[case]]\ncall = 'ls'\nexpect = 'allow'\n[[case\n", ":4: (file): not valid TOML"),
        ("[[case]]\ncall = 'ls'\nexpct = 'allow'\n", ":3: case.0.expct: unknown key"),
        ("[[case]]\ncall = 'ls'\nexpect = 'allow'\n", None),
        ("[[case]]\ncall = 'ls'\nexpect = 'permit'\n", ":3: case.0.expect: unknown effect"),
        ("[[case]]\ncall = 'ls'\n", ":1: case.0.expect: missing"),
        ("[[case]]\ncall = { tol = 'x' }\nexpect = 'deny'\n", ":2: case.0.call.tol: unknown key"),
        ("[[case]]\ncall = 3\nexpect = 'deny'\n", ":2: case.0.call: give a command line"),
        ('[[case]]\ncall = { write = "a\\u0000" }\nexpect = "deny"\n', ":2: case.0.call.write"),
        ("[[case]]\ncall = ''\nexpect = 'deny'\n", ":2: case.0.call: the command line is empty"),
        ("title = 'x'\n", ":1: title: unknown key; a cases file holds [[case]] tables"),
        ("# nothing yet\n", ": case: no [[case]] tables"),
    ],
    ids=[
        "toml",
        "unknown-key",
        "fine",
        "unknown-effect",
        "missing",
        "unknown-call-key",
        "call-not-a-table",
        "nul-path",
        "blank-command",
        "unknown-top-key",
        "empty",
    ],
)
def test_a_bad_cases_file_names_file_line_and_key(
    tmp_path: Path, text: str, problem: str | None
) -> None:
    path = write(tmp_path, "cases.toml", text)
    if problem is None:
        assert len(load_cases(path)) == 1
        return
    with pytest.raises(CasesError) as raised:
        load_cases(path)
    assert f"{path}{problem}" in str(raised.value)


def test_a_missing_cases_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CasesError, match=r"cases file .*nope\.toml does not exist"):
        load_cases(tmp_path / "nope.toml")


# -- stockade policy test ------------------------------------------------------------------------

runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    done = runner.invoke(app, ["policy", "test", *args], env={"COLUMNS": "200"})
    return done.exit_code, done.stdout, done.stderr


def test_the_command_passes_a_policy_whose_examples_and_cases_hold(tmp_path: Path) -> None:
    policy = write(tmp_path, "p.toml", POLICY)
    cases = write(tmp_path, "cases.toml", CASES)
    code, out, _ = cli(str(policy), str(cases))
    assert code == 0, out
    assert "10 passed, 0 failed" in out
    for column in ("case", "call", "expected", "got", "rule", "result"):
        assert column in out
    assert "pushing asks" in out
    assert "ask (ask-push)" in out
    code, out, _ = cli(str(policy))  # the examples alone
    assert (code, out.splitlines()[-1]) == (0, "7 passed, 0 failed")


def test_the_command_lists_mismatches_and_exits_1(tmp_path: Path) -> None:
    # failing examples stop a load, but to a test they are failures, not a bad file
    old, new, key, _, message = FAILING[0]
    text = POLICY.replace(old, new)
    policy = write(tmp_path, "p.toml", text)
    cases = write(tmp_path, "cases.toml", CASES.replace('expect = "ask"', 'expect = "deny"'))
    code, out, err = cli(str(policy), str(cases))
    assert (code, err) == (1, "")
    assert f"{policy}:{line_of(text, 'examples.allow')}: {key}: {message}" in out
    assert f"{cases}:1: case.0: 'git push origin main' is asked" in out
    assert "FAIL" in out
    assert out.splitlines()[-1] == "9 passed, 2 failed"


def test_the_command_prints_json(tmp_path: Path) -> None:
    policy = write(tmp_path, "p.toml", POLICY)
    cases = write(tmp_path, "cases.toml", CASES.replace('rule = "ask-push"', 'rule = "deny-env"'))
    code, out, _ = cli(str(policy), str(cases), "--json")
    assert code == 1
    payload = json.loads(out)
    assert payload["ok"] is False
    [failed] = [c for c in payload["cases"] if not c["passed"]]
    assert failed == {
        "case": "pushing asks",
        "source": str(cases),
        "line": 1,
        "key": "case.0",
        "call": "'git push origin main'",
        "expected": "ask",
        "expected_rule": "deny-env",
        "got": "ask",
        "rule": "ask-push",
        "reason": "pushing publishes work",
        "passed": False,
        "message": "'git push origin main' is asked by rule 'ask-push', expected rule 'deny-env'",
    }
    assert len(payload["cases"]) == 10


def test_brackets_in_a_command_line_are_shown_as_written(tmp_path: Path) -> None:
    policy = write(tmp_path, "p.toml", 'default = "allow"\n')
    cases = write(tmp_path, "c.toml", "[[case]]\ncall = 'echo [bold]x[/bold]'\nexpect = 'deny'\n")
    code, out, _ = cli(str(policy), str(cases))
    assert code == 1
    assert "'echo [bold]x[/bold]' is allowed" in out


@pytest.mark.parametrize(
    ("policy_text", "cases_text", "error"),
    [
        (None, CASES, "does not exist"),
        ('default = "maybe"\n', CASES, "unknown effect"),
        (POLICY, None, "cases file"),
        (POLICY, "[[case]]\ncall = 'ls'\nexpect = 'perhaps'\n", "case.0.expect: unknown effect"),
        (POLICY, "[[case]\n", "not valid TOML"),
        ('default = "allow"\n', "", "no [[case]] tables"),
        ('default = "allow"\n', False, "nothing to test"),
    ],
    ids=[
        "no-policy",
        "bad-policy",
        "no-cases",
        "bad-effect",
        "bad-toml",
        "empty-cases",
        "nothing",
    ],
)
def test_unusable_input_exits_2_with_the_reason(
    tmp_path: Path, policy_text: str | None, cases_text: str | bool | None, error: str
) -> None:
    policy = tmp_path / "p.toml"
    if policy_text is not None:
        policy.write_text(policy_text, encoding="utf-8")
    args = [str(policy)]
    if cases_text is not False:
        cases = tmp_path / "cases.toml"
        if isinstance(cases_text, str):
            cases.write_text(cases_text, encoding="utf-8")
        args.append(str(cases))
    code, out, err = cli(*args)
    assert code == 2, out + err
    assert err.startswith("error:")
    assert error in err
    assert out == ""


def test_check_takes_the_workspace_it_will_guard(tmp_path: Path) -> None:
    policy = write(tmp_path, "p.toml", POLICY)
    (tmp_path / "project").mkdir()
    args = ["policy", "check", str(policy), "--workspace", str(tmp_path / "project"), "--json"]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["ok"] is True
    args[4] = str(tmp_path / "missing")
    assert runner.invoke(app, args).exit_code == 2  # a folder that is not there: bad usage
