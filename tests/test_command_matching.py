"""Command rules that match what people mean: the prefix form and the normal forms.

A rule for ``git push *`` is meant for every ``git push``: bare, with arguments, with git's
global options before the subcommand (``git -C . push``), with an assignment before the program.
A rule for ``npm install *`` is meant for every install: ``npm i``, ``npm add``, ``npm ci``,
``npm --prefix x install``. Each row goes through a real policy and through casbin (the engine
of record), which must agree. Then what must stay as it was: ``git pushx`` is another command,
an option's value is not a subcommand, an allow rule does not allow a spelling it did not see.
Hypothesis checks the matcher against its definition, the compiled matcher against casbin's,
and that a normal form never loses the subcommand or its arguments.
"""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.policies import Effect, Policy, Request, parse_command
from stockade.policies.command_forms import PROGRAMS, normal_forms
from stockade.policies.command_patterns import CommandPattern, command_match

# -- helpers -----------------------------------------------------------------------------------


def rule_policy(default: str, effect: str, *patterns: str, **top: Any) -> Policy:
    """A policy with one command rule ``r`` and no protected paths."""
    data: dict[str, Any] = {"default": default, "dangerous_paths": {"replace": []}, **top}
    data["rules"] = [{"id": "r", "effect": effect, "commands": list(patterns)}]
    return Policy.from_dict(data)


def execute(line: str) -> Request:
    """What a shell tool asks before running ``line`` in the box."""
    return Request("agent", "run_shell", "execute", command=line, isolated=True)


def decide(policy: Policy, line: str) -> tuple[Effect, str | None]:
    """The effect and rule for ``line``; casbin must give the same whole decision."""
    request = execute(line)
    decision = policy.decide(request)
    assert decision == policy.decide_with_casbin(request), line
    return decision.effect, decision.rule


# -- the traps: a rule catches every spelling of what it names -----------------------------------

GIT_PUSH = [
    "git push",
    "git push origin main",
    "git -C . push origin main",
    "git -C 'my dir' push",
    "git -c a=b push",
    "git -c core.sshCommand=x push --force",
    "GIT_DIR=x git push",
    "/usr/bin/git --no-pager push",
    "git --git-dir=.git --work-tree . push",
    "git -P --bare --namespace ns --exec-path=/x --literal-pathspecs push",
    "git -C a -c b=c --git-dir x push -u origin HEAD",
    "cd repo && git -C sub push",
    "nice -n 5 env GIT_TRACE=1 git -C . push",
]

NPM_INSTALL = [
    "npm install",
    "npm install lodash",
    "npm i lodash",
    "npm in lodash",
    "npm isntall lodash",
    "npm add lodash",
    "npm ci",
    "npm clean-install",
    "npm ic --omit dev",
    "npm install-clean",
    "npm --prefix x install",
    "npm --prefix=x i lodash",
    "npm -g i lodash",
    "npm --global --silent --loglevel warn install lodash",
    "npm -w app --yes i lodash",
    "npm it",
    "npm cit",
]


@pytest.mark.parametrize("effect", ["deny", "ask", "warn"])
@pytest.mark.parametrize("line", GIT_PUSH)
def test_a_git_push_rule_catches_every_git_push(effect: str, line: str) -> None:
    policy = rule_policy("allow", effect, "git push *")
    assert decide(policy, line) == (Effect(effect), "r")


@pytest.mark.parametrize("effect", ["deny", "ask", "warn"])
@pytest.mark.parametrize("line", NPM_INSTALL)
def test_an_npm_install_rule_catches_every_install(effect: str, line: str) -> None:
    policy = rule_policy("allow", effect, "npm install *")
    assert decide(policy, line) == (Effect(effect), "r")


OTHER_PROGRAMS = [
    ("npm uninstall *", "npm rm lodash"),
    ("npm uninstall *", "npm --prefix x un lodash"),
    ("npm test *", "npm t"),
    ("npm test *", "npm tst -- --watch"),
    ("npm run *", "npm run-script build"),
    ("npm exec *", "npm x cowsay"),
    ("pnpm install *", "pnpm i"),
    ("pnpm install *", "pnpm -C app --filter web i"),
    ("pnpm install *", "pnpm add left-pad"),
    ("pnpm remove *", "pnpm un left-pad"),
    ("pnpm remove *", "pnpm -w rm left-pad"),
    ("yarn add *", "yarn --cwd app add left-pad"),
    ("yarn install *", "yarn"),
    ("yarn install *", "yarn --cwd app --frozen-lockfile"),
    ("cargo publish *", "cargo +nightly -q publish"),
    ("cargo publish *", "cargo -C crate --locked --color never -Z unstable-options publish"),
    ("docker rm *", "docker --context prod rm web"),
    ("docker rm *", "docker -H tcp://x:2375 -l debug --config /c rm web"),
    ("kubectl delete *", "kubectl -n prod delete pod web"),
    ("kubectl delete *", "kubectl --context prod --kubeconfig k.yaml delete pod web"),
    ("kubectl delete *", "kubectl --namespace=prod delete pod web"),
]


@pytest.mark.parametrize(("pattern", "line"), OTHER_PROGRAMS)
def test_global_options_and_aliases_of_the_common_programs_are_seen_through(
    pattern: str, line: str
) -> None:
    assert decide(rule_policy("allow", "deny", pattern), line) == (Effect.DENY, "r")


# -- what must not change -------------------------------------------------------------------------

NOT_A_GIT_PUSH = [
    "git pushx",
    "git",
    "git status",
    "git log push",  # an argument named push
    "git -C push status",  # -C's value, not the subcommand
    "git -c push=1 status",
    "git --help push",  # prints help: no push runs
    "echo git push",
    "gitx push",
    "npm install",
]


@pytest.mark.parametrize("line", NOT_A_GIT_PUSH)
def test_a_git_push_rule_leaves_other_commands_alone(line: str) -> None:
    assert decide(rule_policy("allow", "deny", "git push *"), line) == (Effect.ALLOW, None)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("git push", (Effect.ALLOW, "r")),
        ("git push origin main", (Effect.ALLOW, "r")),
        ("git pushx", (Effect.DENY, None)),
        ("git", (Effect.DENY, None)),
        # the written spelling still gets the default: an option can change what push does
        ("git -c core.sshCommand=x push", (Effect.DENY, None)),
        ("git -C /elsewhere push", (Effect.DENY, None)),
        ("GIT_SSH_COMMAND=x git push", (Effect.DENY, None)),
    ],
)
def test_an_allow_rule_allows_only_what_it_sees_in_every_spelling(
    line: str, expected: tuple[Effect, str | None]
) -> None:
    assert decide(rule_policy("deny", "allow", "git push *"), line) == expected


def test_other_fnmatch_patterns_keep_their_meaning() -> None:
    assert decide(rule_policy("allow", "deny", "git push*"), "git pushx") == (Effect.DENY, "r")
    build = rule_policy("allow", "deny", "npm run test:*")
    assert decide(build, "npm run test:unit") == (Effect.DENY, "r")
    assert decide(build, "npm run test") == (Effect.ALLOW, None)
    assert decide(rule_policy("allow", "deny", "make"), "make all") == (Effect.ALLOW, None)
    # a wildcard before the final " *" still allows the words alone
    assert decide(rule_policy("allow", "deny", "* push *"), "git push") == (Effect.DENY, "r")


def test_dangerous_command_patterns_use_the_prefix_form_and_the_normal_forms() -> None:
    policy = Policy.from_dict(
        {
            "default": "allow",
            "dangerous_paths": {"replace": []},
            "dangerous_commands": {"effect": "deny", "extend": ["git push *", "npm install *"]},
        }
    )
    for line in ("git push", "git -C . push --force", "npm ci", "npm --prefix x i evil"):
        decision = policy.decide(execute(line))
        assert decision.effect is Effect.DENY, line
        assert decision.rule is not None, line
        assert decision.rule.startswith("dangerous-command"), line
    assert policy.decide(execute("git pushx")).effect is Effect.ALLOW


# -- the spellings themselves ---------------------------------------------------------------------


def test_spellings_are_written_then_bare_then_normal_forms_each_once() -> None:
    (command,) = parse_command("X=1 /usr/bin/npm --prefix x i lodash").commands
    assert command.spellings() == [
        "X=1 /usr/bin/npm --prefix x i lodash",
        "npm --prefix x i lodash",
        "npm i lodash",
        "npm install lodash",
    ]
    (plain,) = parse_command("npm install lodash").commands
    assert plain.spellings() == ["npm install lodash"]
    (ci,) = parse_command("npm clean-install").commands
    assert ci.spellings() == ["npm clean-install", "npm ci", "npm install"]


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("ls", ("-la",)),
        ("git", ("push",)),
        ("git", ("-C",)),  # a value option without its value: no subcommand
        ("git", ("--version",)),
        ("git", ("-C", "x", "--", "push")),
        ("npm", ()),
        ("cargo", ("+nightly",)),
    ],
)
def test_no_normal_form_when_nothing_differs_or_nothing_runs(
    name: str, args: tuple[str, ...]
) -> None:
    assert normal_forms(name, args) == []


def test_value_options_read_both_ways_and_unknown_options_as_flags() -> None:
    assert normal_forms("kubectl", ("-n", "prod", "get", "pods")) == ["kubectl get pods"]
    assert normal_forms("kubectl", ("-nprod", "get", "pods")) == ["kubectl get pods"]
    assert normal_forms("git", ("--git-dir", "x", "push")) == ["git push"]
    assert normal_forms("git", ("--git-dir=x", "push")) == ["git push"]
    assert normal_forms("git", ("--some-new-flag", "push")) == ["git push"]
    # -v is a value option of kubectl and the version of git
    assert normal_forms("kubectl", ("-v", "6", "apply")) == ["kubectl apply"]
    assert normal_forms("git", ("-v", "push")) == []


# -- properties ------------------------------------------------------------------------------------

WORD = st.text(alphabet="abcxyz-_./:=", min_size=1, max_size=5)


@settings(max_examples=400)
@given(
    st.lists(WORD, min_size=2, max_size=2),
    st.lists(WORD, min_size=0, max_size=5),
    st.booleans(),
)
def test_a_prefix_form_matches_exactly_the_commands_starting_with_its_words(
    prefix: list[str], words: list[str], share: bool
) -> None:
    command_words = [*prefix, *words] if share else words
    command = " ".join(command_words)
    pattern = CommandPattern(f"{prefix[0]} {prefix[1]} *")
    expected = command_words[:2] == prefix
    assert pattern.match(command) is expected, (pattern, command)
    assert command_match(command, [pattern.pattern]) is expected


PATTERN_TEXT = st.text(alphabet="ab *?[]!-", max_size=8)
COMMAND_TEXT = st.text(alphabet="ab -[]!*", max_size=8)


@settings(max_examples=1500)
@given(PATTERN_TEXT, COMMAND_TEXT)
def test_the_compiled_matcher_agrees_with_the_casbin_one(pattern: str, command: str) -> None:
    compiled = CommandPattern(pattern).match(command)
    assert compiled is command_match(command, [pattern]), (pattern, command)
    # and with fnmatch itself, except where the prefix form adds the words alone
    if not pattern.endswith(" *"):
        assert compiled is fnmatch.fnmatchcase(command, pattern)
    elif fnmatch.fnmatchcase(command, pattern):
        assert compiled


def _global_options(program: str) -> st.SearchStrategy[list[str]]:
    """Words a program's table says come before its subcommand: value options with their
    value (as two words or with "="), and options it does not know (read as flags)."""
    valued = sorted(PROGRAMS[program].valued)
    value = st.text(alphabet="abc-_./=", min_size=1, max_size=4)
    pair = st.tuples(st.sampled_from(valued), value, st.booleans()).map(
        lambda p: [f"{p[0]}={p[1]}"] if p[0].startswith("--") and p[2] else [p[0], p[1]]
    )
    flag = st.sampled_from(["--quiet", "-q", "--no-color", "--x-y"]).map(lambda f: [f])
    return st.lists(st.one_of(pair, flag), max_size=4).map(
        lambda parts: [word for part in parts for word in part]
    )


@st.composite
def program_lines(draw: st.DrawFn) -> tuple[str, list[str], str, list[str]]:
    program = draw(st.sampled_from(sorted(PROGRAMS)))
    table = PROGRAMS[program]
    options = draw(_global_options(program))
    if table.toolchain and draw(st.booleans()):
        options = ["+nightly", *options]
    names = [*sorted(table.aliases), "push", "build", "delete", "run"]
    subcommand = draw(st.sampled_from(names))
    rest = draw(st.lists(st.text(alphabet="abc-=./", min_size=1, max_size=4), max_size=4))
    return program, options, subcommand, rest


@settings(max_examples=600)
@given(program_lines())
def test_normal_forms_keep_the_subcommand_and_its_arguments_in_order(
    drawn: tuple[str, list[str], str, list[str]],
) -> None:
    program, options, subcommand, rest = drawn
    args = [*options, subcommand, *rest]
    forms = normal_forms(program, tuple(args))
    program_spec = PROGRAMS[program]
    names = {subcommand, *program_spec.aliases.get(subcommand, ())}
    for form in forms:
        words = form.split(" ")
        assert words[0] == program
        # an option the table does not know is read both ways, so a form may start later;
        # either way it is the program, a subcommand, and the words after it, in order
        tail = words[2:]
        assert tail == args[len(args) - len(tail) :], form
    if options:  # the options are seen through: the subcommand as written is a form
        expected = {" ".join([program, name, *rest]) for name in names}
        if subcommand in program_spec.groups and rest:
            expected = {" ".join([program, *w]) for w in _group_words(program, subcommand, rest)}
        assert expected & set(forms), (forms, expected)


def _group_words(program: str, group: str, rest: list[str]) -> list[list[str]]:
    """docker's management commands: ``container rm x`` is also ``rm x``."""
    short = PROGRAMS[program].groups[group].get(rest[0], rest[0])
    return [[group, *rest], [short, *rest[1:]]]
