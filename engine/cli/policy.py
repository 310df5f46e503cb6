"""``stockade policy``: check a policy file, test it, explain a decision, list the presets.

stockade policy check stockade.toml
generate-policy | stockade policy check -          # - reads standard input, here and for FILE,
                                                   # CASES and --policy in every command below
stockade policy test stockade.toml cases.toml     # its rules' examples and the cases (policy_test)
stockade policy explain --tool write_file --arg path=.env --arg content=x
stockade policy explain --tool run_shell --arg "command=curl x | sh" --preset permissive
stockade policy presets
stockade policy push stockade.toml --store URL     # publish to a policy store (policy_push)
"""

from __future__ import annotations

import asyncio
import json
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer

from stockade.engine.cli.common import (
    MountsOption,
    PolicyOrStdinOption,
    PresetOption,
    fail,
    input_file,
    load_policy,
    usage,
)
from stockade.engine.cli.policy_push import policy_push
from stockade.engine.cli.policy_test import policy_test
from stockade.engine.cli.session import Session, mounts_of
from stockade.engine.errors import CallError
from stockade.engine.messages import ToolCall
from stockade.errors import ConfigurationError
from stockade.policies import PRESETS, Decision, Request, lint_policy
from stockade.sandbox import SandboxError

policy_app = typer.Typer(
    name="policy",
    help="Check and test policy files, explain decisions, list the presets.",
    no_args_is_help=True,
)
policy_app.command("test")(policy_test)
policy_app.command("push")(policy_push)

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


@policy_app.command()
def check(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="The policy file (TOML); - for stdin.")
    ],
    workspace: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="The folder the policy will guard as /workspace, to check its paths against.",
            file_okay=False,
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Load the file and report what is wrong (errors: exit 1) or probably a mistake
    (warnings and notes: exit 0), each with its line."""
    from rich.console import Console

    _existing(workspace)
    file = input_file(file)
    findings = lint_policy(file, workspace=workspace)
    errors = [f for f in findings if f.severity == "error"]
    if as_json:
        rows = [
            {"severity": f.severity, "line": f.line, "key": f.key, "message": f.message}
            for f in findings
        ]
        sys.stdout.write(json.dumps({"ok": not errors, "findings": rows}, indent=2) + "\n")
    else:
        console = Console(highlight=False)
        for finding in findings:
            style = {"error": "bold red", "warning": "yellow"}.get(finding.severity, "dim")
            console.print(f"{file}:{finding}", style=style, markup=False)  # may quote [x]
        verdict = "cannot be used" if errors else "can be used"
        console.print(f"{file}: {len(findings)} finding(s); the policy {verdict}.", markup=False)
    raise typer.Exit(1 if errors else 0)


@policy_app.command()
def presets(as_json: AsJson = False) -> None:
    """The shipped presets and what each does."""
    from rich.console import Console
    from rich.table import Table

    rows = []
    for name in PRESETS:
        text = (
            resources.files("stockade.policies.presets").joinpath(f"{name}.toml").read_text("utf-8")
        )
        rows.append({"name": name, "description": tomllib.loads(text).get("description", "")})
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    table = Table("preset", "what it does")
    for row in rows:
        table.add_row(row["name"], row["description"])
    Console().print(table)


@policy_app.command()
def explain(
    tool: Annotated[
        str, typer.Option(metavar="NAME", help="The tool called, e.g. write_file or run_shell.")
    ],
    arg: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME=VALUE",
            help="An argument as name=value (JSON objects, lists, strings); repeatable.",
        ),
    ] = None,
    policy_file: PolicyOrStdinOption = None,
    preset: PresetOption = None,
    subject: Annotated[str, typer.Option(metavar="NAME", help="Who calls.")] = "agent",
    workspace: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="A folder as /workspace, so paths are resolved through it (links followed).",
            file_okay=False,
        ),
    ] = None,
    mounts: MountsOption = None,
    as_json: AsJson = False,
) -> None:
    """What the policy decides on one call of a built-in tool (file and command tools), and
    why, without running it. The mounts are those ``stockade run`` and ``serve`` would have
    with the same ``--workspace`` and ``--mount`` options (without ``--workspace``, an empty
    /workspace in memory: paths are then judged as spelled, normalised)."""
    from rich.console import Console

    _existing(workspace)
    chosen = load_policy(policy_file, preset, stdin=True)
    arguments = _arguments(arg or [])
    try:
        chosen_mounts = mounts_of(workspace, mounts or [])
    except ConfigurationError as exc:
        usage(str(exc))  # a --mount written wrong, or naming no folder
    try:
        session = Session(chosen, chosen_mounts)
    except (ValueError, SandboxError) as exc:
        fail(str(exc))
    try:
        request, decision = asyncio.run(_preview(session, tool, arguments, subject))
    except (CallError, SandboxError) as exc:
        fail(str(exc))
    finally:
        session.close()
    offered = decision.suggestions  # (an ask's, as an approver would see them)
    if as_json:
        payload = {
            "effect": decision.effect.value,
            "rule": decision.rule,
            "reason": decision.reason,
            "decided_on": {"action": decision.action, "target": decision.target},
            "asks": [
                {"rule": a.rule, "reason": a.reason, "action": a.action, "target": a.target}
                for a in decision.asks
            ],
            "suggestions": [
                {
                    "kind": s.kind,
                    "summary": s.summary,
                    "approvals": [a.model_dump(exclude={"id", "reason"}) for a in s.approvals],
                }
                for s in offered
            ],
            "request": {
                "subject": request.subject,
                "tool": request.tool,
                "action": request.action,
                "paths": [list(p) for p in request.paths],
                "command": request.command,
                "read_only": request.read_only,
            },
            "policy": chosen.source,
        }
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return
    console = Console(highlight=False)
    console.print(decision.explain(), markup=False)  # paths and commands may hold [brackets]
    for path, access in request.paths:
        console.print(f"  touches: {access} {path}", markup=False)
    if request.command is not None:
        console.print(f"  command: {request.command}", markup=False)
    console.print(f"  policy: {chosen.source}", markup=False)
    if offered:
        console.print("  a yes for the session or always would keep one of (narrowest first):")
        for number, suggestion in enumerate(offered, 1):
            console.print(f"    {number}. {suggestion.summary}", markup=False)


def _existing(workspace: Path | None) -> None:
    """A usage error, in one line, for a --workspace that is no folder."""
    if workspace is not None and not workspace.is_dir():
        usage(
            f"--workspace {workspace} does not exist or is not a folder; create it first, or "
            "give another"
        )


async def _preview(
    session: Session, tool: str, arguments: dict[str, Any], subject: str
) -> tuple[Request, Decision]:
    call = ToolCall(name=tool, arguments=arguments, subject=subject)
    async with session.engine as engine:
        found = engine.toolkit.resolve(tool)
        if found is not None and found.spec.command is not None:
            await engine.isolation()  # so the decision says what a run here would meet
        return engine.preview(call)


def _arguments(items: list[str]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            usage(f"--arg {item!r} is not name=value; write e.g. --arg path=notes.txt")
        # JSON for objects, lists, quoted strings and literals; anything else is text (the
        # tool's schema turns "5" into 5 where it wants a number, but not 5 into "5")
        if value[:1] in ("{", "[", '"') or value in ("true", "false", "null"):
            try:
                arguments[name] = json.loads(value)
                continue
            except ValueError:
                usage(f"--arg {name}: {value!r} looks like JSON but is not valid JSON")
        arguments[name] = value
    return arguments
