"""The exit codes and options of the ``stockade`` command, as the README documents them: the
real command in a subprocess (a pseudo-terminal where Ctrl-C matters).

What a user relies on: wrong or contradictory options exit 2 with one line naming the option and
what to give; a problem found exits 1 with one line (a file that is no audit log, a state folder
that cannot be made); Ctrl-C exits 130; ``-`` reads standard input wherever a file is read;
``--help`` shows no type beside a flag; ``--version`` prints the version.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import typer
from support import one_error_line, read_until, stockade_cli

from stockade.engine.cli.app import app
from stockade.engine.cli.common import default_state
from stockade.engine.observe import AuditLog, verify_audit
from stockade.version import __version__

CALLS = '{"name": "write_file", "arguments": {"path": "notes.txt", "content": "hi"}}\n'
POLICY = 'version = 1\ndefault = "allow"\n'


@pytest.fixture(autouse=True)
def _state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's state folder, where the audit logs go by default: the test's own."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-home"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A workspace ``ws``, a transcript ``calls.jsonl`` and a policy ``policy.toml``."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "calls.jsonl").write_text(CALLS)
    (tmp_path / "policy.toml").write_text(POLICY)
    return tmp_path


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """A real audit log of two records (a call's intent and outcome), and one written by a
    program of its own kind."""
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as audit:
        audit.record("intent", {"tool": "run_shell", "effect": "allow", "command": "echo [/]"})
        audit.record("outcome", {"tool": "run_shell", "status": "ok", "duration_s": 0.1})
        audit.record("deploy", {"tool": "ship", "target": "prod"})
    return path


# -- 2: wrong or contradictory options ---------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "calls.jsonl", "--workspace", "ws", "--policy", "policy.toml", "--preset",
          "strict"], "give --policy or --preset, not both"),
        (["policy", "explain", "--tool", "read_text_file", "--arg", "path=a", "--policy",
          "policy.toml", "--preset", "strict"], "give --policy or --preset, not both"),
        (["serve", "--workspace", "ws", "--policy", "policy.toml", "--preset", "strict"],
         "give --policy or --preset, not both"),
        (["run", "calls.jsonl", "--workspace", "ws", "--approve", "maybe"],
         "--approve must be ask, yes or no, not 'maybe'"),
        (["run", "calls.jsonl", "--workspace", "missing"], "--workspace missing does not exist"),
        (["run", "calls.jsonl", "--workspace", "ws", "--apply"],
         "--apply applies an overlay's changes without asking: give it with --overlay"),
        (["run", "calls.jsonl", "--workspace", "ws", "--preset", "nope"],
         "--preset nope: no such preset; the presets are default, read-only, strict, permissive"),
        (["run", "calls.jsonl", "--workspace", "ws", "--mount", "nothing-equal"],
         "--mount 'nothing-equal': write PREFIX=DIR or PREFIX=DIR:ro"),
        (["policy", "explain", "--tool", "read_text_file", "--arg", "path=a", "--mount",
          "/docs=missing"], "--mount '/docs=missing': missing does not exist"),
        (["audit", "show", "--workspace", "missing"], "--workspace missing does not exist"),
        (["policy", "explain", "--tool", "read_text_file", "--arg", "path=a", "--workspace",
          "missing"], "--workspace missing does not exist or is not a folder"),
        (["policy", "check", "policy.toml", "--workspace", "missing"],
         "--workspace missing does not exist or is not a folder"),
        (["audit", "tail", "--follow", "-"], "--follow cannot follow standard input"),
        (["run", "-", "--workspace", "ws"],
         "TRANSCRIPT - reads standard input, where the answers to the questions would come "
         "from: give --approve yes or --approve no"),
        (["run", "-", "--workspace", "ws", "--policy", "-", "--approve", "no"],
         "TRANSCRIPT - and --policy - both read standard input"),
        (["policy", "test", "-", "-"], "FILE and CASES cannot both be - (standard input)"),
        (["serve", "--workspace", "ws", "--policy", "-"],
         "--policy -: this command cannot read its policy from standard input"),
    ],
    ids=["policy-and-preset-run", "policy-and-preset-explain", "policy-and-preset-serve",
         "approve-maybe", "missing-workspace-run", "apply-without-overlay", "unknown-preset",
         "bad-mount", "missing-mount", "missing-workspace-audit", "missing-workspace-explain",
         "missing-workspace-check", "follow-stdin",
         "stdin-and-questions", "stdin-twice", "stdin-twice-test", "serve-policy-stdin"],
)  # fmt: skip
def test_wrong_options_exit_2_with_one_line_naming_them(
    project: Path, args: list[str], said: str
) -> None:
    done = stockade_cli(*args, cwd=project)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in one_error_line(done.stderr)
    assert not (project / "ws" / "notes.txt").exists()  # nothing ran
    assert not (project / "state-home").exists()  # nothing was recorded either


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--kind", "bogus", "intent, outcome, recovered, audit_unwritable (or one this log "
         "holds: deploy)"),
        ("--effect", "nope", "allow, warn, ask, deny"),
        ("--status", "fine", "ok, error, denied, timeout, cancelled, pending"),
    ],
)  # fmt: skip
def test_a_filter_value_outside_its_set_is_a_usage_error_naming_the_values(
    log: Path, option: str, value: str, allowed: str
) -> None:
    done = stockade_cli("audit", "show", str(log), option, value, cwd=log.parent)
    assert done.returncode == 2, done.stdout + done.stderr
    assert one_error_line(done.stderr) == f"error: {option} {value!r}: give one of {allowed}"
    assert done.stdout == ""  # no empty table that reads as "nothing happened"


def test_filters_inside_their_sets_still_find_records(log: Path) -> None:
    for option, value, seqs in [
        ("--kind", "outcome", [2]),
        ("--kind", "deploy", [3]),  # a program's own kind, which the log holds
        ("--effect", "ALLOW", [1]),
        ("--status", "ok", [2]),
    ]:
        done = stockade_cli("audit", "show", str(log), option, value, "--json", cwd=log.parent)
        assert done.returncode == 0, done.stderr
        assert [json.loads(line)["seq"] for line in done.stdout.splitlines()] == seqs


# -- 1: the command ran and found a problem ----------------------------------------------------


@pytest.mark.parametrize("command", ["show", "tail"])
def test_a_file_that_is_no_audit_log_is_an_error_naming_the_line(log: Path, command: str) -> None:
    with log.open("a") as handle:
        handle.write("this is not a record\n")
    done = stockade_cli("audit", command, str(log), cwd=log.parent)
    assert done.returncode == 1, done.stdout + done.stderr
    line = one_error_line(done.stderr)
    assert f"{log} line 4 is not an audit record" in line
    other = log.parent / "traces.jsonl"
    other.write_text('{"name": "a span"}\n')
    done = stockade_cli("audit", command, str(other), cwd=log.parent)
    assert done.returncode == 1
    assert "line 1 is not an audit record (no seq, kind and hash)" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["run", "calls.jsonl", "--workspace", "ws"],
        ["serve", "--workspace", "ws"],
    ],
    ids=["run", "serve"],
)
def test_a_state_folder_that_cannot_be_made_names_the_option_and_what_to_do(
    project: Path, args: list[str]
) -> None:
    done = stockade_cli(*args, "--state", "/proc/no-such-folder", cwd=project)
    assert done.returncode == 1, done.stdout + done.stderr
    line = one_error_line(done.stderr)
    assert line.startswith("error: --state /proc/no-such-folder: the state folder")
    assert "No such file or directory" in line
    assert "Give --state DIR, a folder you can write" in line


def test_an_error_quoting_brackets_is_printed_as_it_is(project: Path) -> None:
    done = stockade_cli("run", "calls[/x].jsonl", "--workspace", "ws", cwd=project)
    assert done.returncode == 1, done.stderr
    assert "no transcript at calls[/x].jsonl" in one_error_line(done.stderr)


def test_a_record_quoting_brackets_is_shown_as_it_is(log: Path) -> None:
    done = stockade_cli("audit", "show", str(log), cwd=log.parent)
    assert done.returncode == 0, done.stderr
    assert "echo [/]" in done.stdout


# -- "-" is standard input ---------------------------------------------------------------------


def test_run_reads_its_calls_from_stdin(project: Path) -> None:
    done = stockade_cli("run", "-", "--workspace", "ws", "--approve", "no", "--json",
                        cwd=project, stdin=CALLS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [r["status"] for r in json.loads(done.stdout)["results"]] == ["ok"]
    assert (project / "ws" / "notes.txt").read_text() == "hi"
    bad = stockade_cli("run", "-", "--workspace", "ws", "--approve", "no", cwd=project,
                       stdin="not json\n")  # fmt: skip
    assert bad.returncode == 1
    assert "/dev/stdin:1: not valid JSON" in one_error_line(bad.stderr)


def test_policies_and_cases_are_read_from_stdin(project: Path) -> None:
    strict = 'version = 1\ndefault = "deny"\n'
    check = stockade_cli("policy", "check", "-", cwd=project, stdin=strict)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "the policy can be used" in check.stdout
    broken = stockade_cli("policy", "check", "-", cwd=project, stdin="version = 1\n[[rules]\n")
    assert broken.returncode == 1
    explain = stockade_cli("policy", "explain", "--tool", "read_text_file", "--arg", "path=a",
                           "--policy", "-", "--json", cwd=project, stdin=strict)  # fmt: skip
    assert explain.returncode == 0, explain.stderr
    assert json.loads(explain.stdout)["effect"] == "deny"
    cases = '[[case]]\ncall = { tool = "write_file", write = ["a.txt"] }\nexpect = "allow"\n'
    tested = stockade_cli("policy", "test", "policy.toml", "-", "--json", cwd=project,
                          stdin=cases)  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert json.loads(tested.stdout)["ok"] is True
    # a policy whose examples fail, from a pipe: read once, its failing example reported
    failing = strict + '[[rules]]\nid = "r"\neffect = "deny"\ncommands = ["ls"]\n'
    failing += 'examples.allow = ["ls"]\n'
    again = stockade_cli("policy", "test", "-", "--json", cwd=project, stdin=failing)
    assert again.returncode == 1, again.stdout + again.stderr
    assert [case["passed"] for case in json.loads(again.stdout)["cases"]] == [False]


def test_run_with_a_policy_from_stdin_keeps_no_file_to_append_to(project: Path) -> None:
    done = stockade_cli("run", "calls.jsonl", "--workspace", "ws", "--policy", "-", "--approve",
                        "no", "--json", cwd=project, stdin=POLICY)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (project / "ws" / "notes.txt").read_text() == "hi"


def test_audit_reads_a_log_from_stdin(log: Path) -> None:
    text = log.read_text()
    shown = stockade_cli("audit", "show", "-", "--kind", "outcome", "--json", cwd=log.parent,
                         stdin=text)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert [json.loads(line)["seq"] for line in shown.stdout.splitlines()] == [2]
    verified = stockade_cli("audit", "verify", "-", "--json", cwd=log.parent, stdin=text)
    assert verified.returncode == 0, verified.stdout
    assert json.loads(verified.stdout)["records"] == 3


# -- help and version --------------------------------------------------------------------------


def _command_paths(command: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for name, sub in getattr(command, "commands", {}).items():
        paths += _command_paths(sub, (*prefix, name))
    return paths


def test_no_help_shows_a_type_beside_a_flag(tmp_path: Path) -> None:
    paths = _command_paths(typer.main.get_command(app))
    assert ("audit", "tail") in paths  # every command, walked
    assert ("policy", "test") in paths
    with ThreadPoolExecutor(8) as pool:
        helps = list(pool.map(lambda p: stockade_cli(*p, "--help", cwd=tmp_path), paths))
    for path, done in zip(paths, helps, strict=True):
        assert done.returncode == 0, (path, done.stderr)
        assert "--help" in done.stdout, path
        assert "<bool>" not in done.stdout, (path, done.stdout)
    run_help = helps[paths.index(("run",))].stdout
    for shown in ("--overlay", "--verbose", "PREFIX=DIR[:ro]"):
        assert shown in run_help


def test_version_is_an_option_too(tmp_path: Path) -> None:
    done = stockade_cli("--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == stockade_cli("version", cwd=tmp_path).stdout == f"{__version__}\n"


# -- 130: Ctrl-C -------------------------------------------------------------------------------


def _in_terminal(args: list[str], cwd: Path) -> tuple[int, int]:
    """``stockade args`` on a pseudo-terminal of its own, where Ctrl-C is a keystroke."""
    script = str(Path(sys.executable).parent / "stockade")
    pid, terminal = pty.fork()
    if pid == 0:  # pragma: no cover - the child becomes the command
        os.chdir(cwd)
        os.execve(script, [script, *args], {**os.environ, "COLUMNS": "200"})
    return pid, terminal


def test_tail_follow_waits_for_the_log_and_ctrl_c_exits_130(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    log = default_state(workspace) / "audit.jsonl"
    pid, terminal = _in_terminal(["audit", "tail", "--follow", "--json", "--workspace",
                                  str(workspace)], tmp_path)  # fmt: skip
    try:
        shown = read_until(terminal, b"to be created")
        assert f"waiting for {log}".encode() in shown
        log.parent.mkdir(parents=True)
        with AuditLog(log) as audit:
            audit.record("intent", {"tool": "write_file", "effect": "allow"})
        shown += read_until(terminal, b'"write_file"')
        os.write(terminal, b"\x03")
        shown += read_until(terminal, b"")
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(terminal)
    out = shown.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 130, out
    assert out.count("waiting for") == 1  # said once
    assert "Traceback" not in out
    assert verify_audit(log).ok


def test_an_empty_policy_on_standard_input_is_refused_not_taken_for_no_rules(
    project: Path,
) -> None:
    """`cat missing.toml | stockade run ... --policy -` reads nothing: that must not become a
    policy without rules (which allows what is not dangerous), and nothing may run."""
    calls = project / "calls.jsonl"
    write = {"name": "write_file", "arguments": {"path": "pwn.txt", "content": "x"}}
    calls.write_text(json.dumps(write) + "\n")
    done = stockade_cli(
        "run", str(calls), "--workspace", "ws", "--policy", "-", "--approve", "no",
        cwd=project, stdin="",
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "standard input held no policy" in one_error_line(done.stderr)
    assert not (project / "ws" / "pwn.txt").exists()


def test_a_reader_that_goes_away_ends_the_command_quietly_with_141(project: Path) -> None:
    """`stockade ... | head -1`: the output's reader closing is no bug to report."""
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "stockade"), "version"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=project,
    )
    assert process.stdout is not None
    process.stdout.close()  # before it writes: its first write finds nobody reading
    _, err = process.communicate(timeout=60)
    assert process.returncode == 141, err
    assert b"bug" not in err
    assert b"Traceback" not in err


def test_verify_of_a_folder_or_of_a_missing_named_seal_says_not_intact(
    project: Path, log: Path
) -> None:
    folder = project / "a-folder.jsonl"
    folder.mkdir()
    done = stockade_cli("audit", "verify", str(folder), cwd=project)
    assert done.returncode == 1
    assert "cannot read" in done.stdout + done.stderr
    assert "bug" not in done.stderr
    fine = stockade_cli("audit", "verify", str(log), cwd=project)
    assert fine.returncode == 0, fine.stdout + fine.stderr
    typo = stockade_cli(
        "audit", "verify", str(log), "--seal", str(project / "nope.seal"), cwd=project
    )
    assert typo.returncode == 1
    assert "does not exist" in typo.stdout + typo.stderr
