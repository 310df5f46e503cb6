"""``stockade policy test``: run a policy's examples and a cases file's cases, and say which
calls the policy decides otherwise than they expect.

stockade policy test stockade.toml                  # the examples in its rules
stockade policy test stockade.toml cases.toml       # and the cases of a cases file
stockade policy test stockade.toml cases.toml --json
generate-cases | stockade policy test stockade.toml -   # - : standard input (FILE or CASES)

Exit codes: 0 every case passed, 1 some did not, 2 the policy or the cases file cannot be used
(or there is nothing to test).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from stockade.engine.cli.common import STDIN, input_file
from stockade.policies import Policy, PolicyError
from stockade.policies.policy_examples import (
    Case,
    CaseResult,
    describe,
    example_cases,
    examples_in,
    load_cases,
    run_cases,
)
from stockade.policies.policy_file import read


def policy_test(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="The policy file (TOML); - for stdin.")
    ],
    cases_file: Annotated[
        Path | None,
        typer.Argument(
            metavar="CASES",
            # escaped: typer's help reads markup, and would drop "[[case]]"
            help="A cases file: \\[\\[case]] tables with call and expect; - for stdin.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Check that the policy decides each example of its rules, and each case of CASES, as
    they expect (exit 0), or list those it does not (exit 1)."""
    if file == STDIN and cases_file == STDIN:
        _unusable("FILE and CASES cannot both be - (standard input): give one of them as a file")
    try:
        policy, cases = load_for_test(input_file(file))
        if cases_file is not None:
            cases += load_cases(input_file(cases_file))
    except PolicyError as exc:
        _unusable(str(exc))
    if not cases:
        _unusable(
            f"nothing to test: the rules of {file} have no examples and no cases file was given"
        )
    results = run_cases(policy, cases)
    failed = [r for r in results if not r.passed]
    if as_json:
        payload = {"ok": not failed, "policy": policy.source, "cases": [_row(r) for r in results]}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        _print(results, failed)
    raise typer.Exit(1 if failed else 0)


def load_for_test(path: Path) -> tuple[Policy, list[Case]]:
    """The policy file at ``path`` and the examples of its rules, to test it. Examples that
    fail do not stop this (they are what a test reports), though they stop a load; anything
    else wrong with the file raises `PolicyError`. The file is read once (it may be a pipe)."""
    spec, text = read(path)  # raises if the file, or the examples themselves, are invalid
    try:
        policy = Policy(spec, source=str(path), text=text, file=path.resolve())
    except PolicyError as exc:
        if not exc.problems or not all(".examples." in p.key for p in exc.problems):
            raise
        rules = [rule.model_copy(update={"examples": None}) for rule in spec.rules]
        bare = spec.model_copy(update={"rules": rules})  # the same rules, nothing to check
        policy = Policy(bare, source=str(path), text=text, file=path.resolve())
        return policy, examples_in(spec, text, str(path))
    return policy, examples_in(policy.spec, text=None, source=policy.source) and example_cases(
        policy
    )


def _unusable(message: str) -> NoReturn:
    # exit 2, not `fail`'s 1: 1 says the policy decided a case otherwise than expected
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True, highlight=False, soft_wrap=True).print(
        Text.assemble(("error:", "bold red"), " ", message)
    )
    raise typer.Exit(2)


def _row(result: CaseResult) -> dict[str, Any]:
    case, decision = result.case, result.decision
    return {
        "case": case.label,
        "source": case.source,
        "line": case.line,
        "key": case.key,
        "call": describe(case.call),
        "expected": case.expect.value,
        "expected_rule": case.rule,
        "got": None if decision is None else decision.effect.value,
        "rule": None if decision is None else decision.rule,
        "reason": None if decision is None else decision.reason,
        "passed": result.passed,
        "message": result.message,
    }


def _print(results: list[CaseResult], failed: list[CaseResult]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    table = Table("case", "call", "expected", "got", "rule", "result")
    for result in results:
        case, decision = result.case, result.decision
        expected = case.expect.value if case.rule is None else f"{case.expect.value} ({case.rule})"
        got = "-" if decision is None else decision.effect.value
        rule = "-" if decision is None else decision.rule or "(default)"
        verdict = Text("pass", "green") if result.passed else Text("FAIL", "bold red")
        # Text, not markup: a command line may hold [brackets]
        table.add_row(
            Text(case.label),
            Text(describe(case.call)),
            Text(expected),
            Text(got),
            Text(rule),
            verdict,
        )
    console.print(table)
    for result in failed:
        case = result.case
        where = f"{case.source}:{case.line}" if case.line else case.source
        console.print(Text(f"{where}: {case.key}: {result.message}", "red"), soft_wrap=True)
    passed = len(results) - len(failed)
    console.print(f"{passed} passed, {len(failed)} failed")
