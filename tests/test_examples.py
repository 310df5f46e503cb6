"""Every script in examples/ runs as a newcomer would run it, and does what it says it shows.

Each example runs in a subprocess from an empty folder, with its own empty TMPDIR; it must exit
0, leave both folders empty, and print the behaviour its docstring promises (checked below,
one function per example). An example without a check fails `test_every_example_is_checked`.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support import bin_without_bubblewrap, require_bubblewrap

from stockade.sandbox import isolation_available
from stockade.sandbox.layers import layers_available

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
NAMES = sorted(path.stem for path in EXAMPLES.glob("*.py"))
TIMEOUT_S = 60


def run_example(name: str, folder: Path, env: dict[str, str] | None = None) -> str:
    """Run ``examples/<name>.py`` from ``folder`` (emptied first); return what it printed.
    Fails unless it exits 0 and leaves nothing in its working folder or its TMPDIR."""
    cwd, tmp = folder / "cwd", folder / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        cwd=cwd,
        env={**os.environ, "TMPDIR": str(tmp), **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    assert not list(cwd.iterdir()), f"{name} left files in its working folder"
    assert not list(tmp.iterdir()), f"{name} left files in its temporary folder"
    return done.stdout


@pytest.fixture(scope="module")
def output(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """What an example printed; each example runs once for the whole module."""
    printed: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in printed:
            printed[name] = run_example(name, tmp_path_factory.mktemp(name))
        return printed[name]

    return get


def blocks(stdout: str) -> dict[str, str]:
    """The output as {unindented line: that line and the indented lines after it}."""
    found: dict[str, str] = {}
    head = ""
    for line in stdout.splitlines():
        if not line.startswith(" "):
            head = line
            found[head] = ""
        found[head] += line + "\n"
    return found


# -- what each example must show ---------------------------------------------------------------


def check_quickstart(stdout: str) -> None:
    calls = list(blocks(stdout).values())
    assert len(calls) == 4, stdout
    write, count, env, escape = calls
    assert "-> ok: created /workspace/notes.txt (14 bytes)" in write
    assert "decision allow, rule workspace-files" in write
    # the custom tool read back what was written: "hi from a tool" is four words
    assert count.startswith("word_count")
    assert "-> ok: 4\n" in count
    assert "'.env'" in env
    assert "-> denied:" in env
    assert "decision deny, rule dangerous-path" in env
    assert "/workspace/../etc/passwd" in escape
    assert "-> denied:" in escape
    assert "outside every mount" in escape
    assert "decision deny, rule sandbox" in escape


def check_policy_modes(stdout: str) -> None:
    cases = blocks(stdout)
    expected = {  # (rule effect, subject): (status, effect, written, approver's answer)
        ("allow", "bot"): ("ok", "allow", True, None),
        ("warn", "bot"): ("ok", "warn", True, None),
        ("ask", "alice"): ("ok", "allow", True, True),
        ("ask", "mallory"): ("denied", "deny", False, False),
        ("deny", "bot"): ("denied", "deny", False, None),
    }
    assert len(cases) == len(expected), stdout
    for (rule_effect, subject), (status, effect, written, answer) in expected.items():
        case = cases[f"rule effect {rule_effect}, called by {subject}:"]
        assert f"status {status}, effect {effect}, rule {rule_effect}-reports\n" in case, case
        assert f"reports/{rule_effect}-{subject}.md written: {written}\n" in case, case
        if answer is None:
            assert "approver" not in case, case
        else:
            assert f"approver asked about {subject}'s write_file (ask-reports): {answer}" in case
            assert ("approved" if answer else "refused") + " by the approver" in case, case
        warned = "warnings: ['writes to reports/ are set to warn']" in case
        assert warned == (rule_effect == "warn"), case


def boxed_isolation() -> str:
    """What a command run by the engine reports as its isolation on this machine."""
    if not isolation_available():
        return "none"
    return "bubblewrap+layers" if layers_available() is None else "bubblewrap"


def check_shell_sandbox(stdout: str) -> None:
    isolation = boxed_isolation()
    assert f"bubblewrap available: {isolation_available()}\n" in stdout
    ran = blocks(stdout)["run_shell 'pwd && echo built > out.txt && ls'"]
    assert "approver asked (commands-ask" in ran, ran
    assert "-> ok (rule commands-ask" in ran, ran
    assert "exit code 0" in ran, ran
    assert f"isolation: {isolation}," in ran, ran
    assert ("WITHOUT isolation" in ran) == (isolation == "none"), ran
    # the file the command wrote is really on the host, in the mounted folder
    assert "out.txt on the host: 'built'" in stdout

    refused = blocks(stdout)["run_shell 'rm -rf /'"]
    assert "-> denied (rule dangerous-command:rm-recursive-force" in refused, refused
    assert "approver" not in refused, "a dangerous command is refused before anyone is asked"

    hung = blocks(stdout)["run_shell 'sleep 30'"]
    assert "-> timeout (rule commands-ask" in hung, hung
    assert "killed with every process it started" in hung, hung
    seconds = re.search(r"-> timeout \(rule commands-ask, ([\d.]+)s\)", hung)
    assert seconds is not None, hung
    assert 0.4 <= float(seconds.group(1)) < 5, "killed at its 0.5 s timeout, not later"


def check_audit_and_trace(stdout: str) -> None:
    assert stdout.startswith("write_file: ok\nread_text_file: ok\nwrite_file: denied\n"), stdout
    written = hashlib.sha256(b"1. audit\n").hexdigest()
    assert f"#2 ok, file sha256 after: {written}\n" in stdout
    assert "#6 denied, file sha256 after: None\n" in stdout
    # read back by call id: the intent (the policy asked) and the outcome (nobody to approve)
    assert (
        "#5 intent: {'effect': 'ask', 'rule': 'dangerous-path', "
        "'paths': [['/workspace/.git/hooks/pre-commit', 'write']], 'approval': None}"
    ) in stdout
    assert "#6 outcome: {'effect': 'deny', 'rule': 'dangerous-path', 'paths': None, " in stdout
    assert "'approval': 'refused'}" in stdout
    assert "audit log intact: 6 records in 1 file(s)\n" in stdout
    spans = blocks(stdout)["spans:"]
    names = re.findall(r"^  ([^:]+):", spans, re.MULTILINE)
    assert names == [
        "execute_tool write_file",
        "execute_tool read_text_file",
        "execute_tool write_file",
        "run session",
    ], spans
    assert "'stockade.paths': ('write:/workspace/plan.md',)" in spans
    assert "'stockade.bytes_written': 9" in spans
    assert "'stockade.decision.rule': 'dangerous-path'" in spans
    assert "'stockade.run.agent': 'example'" in spans
    assert re.search(r"after editing record 2: audit log NOT intact: record 2 .*edited", stdout)


def check_replay_transcript(stdout: str) -> None:
    assert stdout.startswith("4 calls in reply.json\n"), stdout
    calls = blocks(stdout)
    read = calls["read_text_file: ok"]
    assert "'tool_call_id': 'call_1', 'content': 'print(\"hello\")\\n'" in read
    assert "replaced 1 occurrence in /workspace/app.py" in calls["edit_file: ok"]
    assert "'call_3'" in calls["write_file: error"]
    assert "not valid JSON" in stdout
    assert "'call_4'" in calls["write_file: denied"]
    assert "protected path" in stdout
    assert "staged modified /workspace/app.py:" in stdout
    assert '\n-print("hello")\n+print("hi")\n' in stdout
    assert "before commit, app.py on disk: 'print(\"hello\")\\n'" in stdout
    assert "after commit, app.py on disk: 'print(\"hi\")\\n'" in stdout


CHECKS: dict[str, Callable[[str], None]] = {
    "quickstart": check_quickstart,
    "policy_modes": check_policy_modes,
    "shell_sandbox": check_shell_sandbox,
    "audit_and_trace": check_audit_and_trace,
    "replay_transcript": check_replay_transcript,
}


def _check_adapter_ends(stdout: str) -> None:
    """What the three adapter examples end with alike: the allowed write and the approved one
    on the host, the key untouched, and each call's outcome in the audit log."""
    found = blocks(stdout)
    host = found["on the host:"]
    assert '  notes.md: "# Notes\\n"\n' in host, host
    assert '  .vscode/settings.json: "{}\\n"\n' in host, host
    assert '  .env: "API_KEY=kept\\n"\n' in host, host  # refused: never written
    outcomes = set(found["audit log outcomes:"].splitlines()[1:])
    assert outcomes == {
        "  call_1 ok",
        "  call_2 denied",
        "  call_3 ok (approved)",
        "  call_4 denied (refused)",
    }, outcomes


def _check_framework_approval(stdout: str, stopped: str, shown: str, run: str) -> None:
    """An adapter example whose framework stopped for the two asks (``stopped`` heads that
    block), then showed the model each call's outcome (``shown`` heads that block); the
    refusal names ``run``."""
    found = blocks(stdout)
    asked = found[stopped]
    assert asked.count("rule dangerous-path: a protected path") == 2, asked
    assert "the person says yes to call_3" in asked, asked
    assert "the person says no to call_4" in asked, asked
    seen = found[shown]
    assert "call_1: " in seen, seen
    assert "created /workspace/notes.md (8 bytes)" in seen, seen
    assert "denied by rule sandbox: '/workspace/../etc/passwd'" in seen, seen
    assert "outside every mount" in seen, seen
    assert "created /workspace/.vscode/settings.json (3 bytes)" in seen, seen
    refusal = next(line for line in seen.splitlines() if "call_4" in line)
    assert "denied by rule dangerous-path: a protected path" in refusal, refusal
    assert refusal.endswith(f"refused in {run}"), refusal
    _check_adapter_ends(stdout)


def check_adapter_openai_agents(stdout: str) -> None:
    _check_framework_approval(
        stdout, "run stopped for approval:", "the model was shown:", "the OpenAI Agents SDK run"
    )
    assert "run finished: Notes written; the key stays as it is.\n" in stdout


def check_adapter_pydantic_ai(stdout: str) -> None:
    _check_framework_approval(
        stdout, "run ended with calls to approve:", "the model was shown:", "the pydantic-ai run"
    )
    seen = blocks(stdout)["the model was shown:"]
    assert "  call_2: failed: denied by rule sandbox" in seen, seen  # a failed tool return
    assert "  call_4: denied: denied by rule dangerous-path" in seen, seen  # pydantic-ai's denial
    assert "run finished: Notes written; the key stays as it is.\n" in stdout


def check_adapter_langchain(stdout: str) -> None:
    loop = blocks(stdout)["agent loop:"]
    assert "  call_1 success: created /workspace/notes.md (8 bytes)\n" in loop, loop
    assert "  call_2 error: denied by rule sandbox: '/workspace/../etc/passwd'" in loop, loop
    # the asks went to the engine's approver, in the order the calls came
    assert loop.index("approver asked about call_3 (rule dangerous-path): yes") < loop.index(
        "call_3 success: created /workspace/.vscode/settings.json"
    ), loop
    assert "approver asked about call_4 (rule dangerous-path): no" in loop, loop
    assert "  call_4 error: denied by rule dangerous-path: a protected path" in loop, loop
    assert "refused by the approver" in loop, loop
    assert "agent said: Notes written; the key stays as it is.\n" in stdout
    _check_adapter_ends(stdout)


CHECKS["adapter_openai_agents"] = check_adapter_openai_agents
CHECKS["adapter_pydantic_ai"] = check_adapter_pydantic_ai
CHECKS["adapter_langchain"] = check_adapter_langchain


# -- the tests ---------------------------------------------------------------------------------


def test_every_example_is_checked() -> None:
    assert NAMES, "examples/ holds no scripts"
    assert set(NAMES) == set(CHECKS), (
        "each examples/*.py needs a check_<name> function in CHECKS (and each check an example)"
    )


@pytest.mark.parametrize("name", NAMES)
def test_example_is_a_runnable_script_that_says_how_to_run_it(name: str) -> None:
    source = (EXAMPLES / f"{name}.py").read_text(encoding="utf-8")
    module = ast.parse(source)
    docstring = ast.get_docstring(module)
    assert docstring
    assert f"Run: python examples/{name}.py" in docstring
    functions = {
        n.name for n in module.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert "main" in functions, f"{name} has no main()"
    assert 'if __name__ == "__main__":' in source


@pytest.mark.parametrize("name", NAMES)
def test_example_runs_and_shows_what_it_claims(name: str, output: Callable[[str], str]) -> None:
    if name not in CHECKS:
        pytest.fail(f"examples/{name}.py has no check in tests/test_examples.py")
    CHECKS[name](output(name))


def test_shell_sandbox_runs_under_bubblewrap(output: Callable[[str], str]) -> None:
    require_bubblewrap()
    ran = blocks(output("shell_sandbox"))["run_shell 'pwd && echo built > out.txt && ls'"]
    assert f"isolation: {boxed_isolation()}, warnings: ()" in ran
    assert "--- stdout ---\n     /workspace\n     out.txt\n" in ran  # the logical path, boxed


def test_shell_sandbox_without_bubblewrap_still_runs_and_warns(tmp_path: Path) -> None:
    bin_dir = bin_without_bubblewrap(tmp_path)
    stdout = run_example("shell_sandbox", tmp_path, env={"PATH": str(bin_dir)})
    assert "bubblewrap available: False\n" in stdout
    ran = blocks(stdout)["run_shell 'pwd && echo built > out.txt && ls'"]
    assert "isolation: none, warnings: ('bubblewrap is not available" in ran, ran
    assert "warning: bubblewrap is not available: the command ran WITHOUT isolation" in ran, ran
    assert "out.txt on the host: 'built'" in stdout
    assert "-> denied (rule dangerous-command:rm-recursive-force" in stdout


def check_claude_code_hook(stdout: str) -> None:
    calls = blocks(stdout)
    decisions = {head: text.splitlines()[1].strip() for head, text in calls.items() if head}
    read, env, key, climb, link, push, curl, mcp, garbage = list(decisions.values())[:9]
    assert read.startswith("-> allow: Stockade: allowed by rule workspace-files"), read
    assert env.startswith("-> ask: Stockade: approval needed by rule dangerous-path"), env
    assert "(write <project>/.env)" in env
    for outside in (key, climb):
        assert outside.startswith("-> deny: Stockade: denied by rule sandbox: "), outside
        assert "is outside the workspace (<project>)" in outside
    assert "symbolic link that leads outside /workspace" in link, link
    assert push.startswith("-> ask: Stockade: approval needed by rule commands-ask"), push
    assert "WITHOUT Stockade's box" in push
    assert curl.startswith("-> deny: Stockade: denied by rule dangerous-command:"), curl
    assert mcp.startswith("-> allow: Stockade: allowed by the policy's default"), mcp
    assert garbage.startswith("-> exit 2 (blocked): Stockade blocked this tool call: "), garbage
    assert "not JSON" in garbage
    log = calls["audit log:"]
    assert "claude_code:Write: ask (rule dangerous-path)" in log
    assert "claude_code:?: deny (rule hook-input)" in log
    assert "audit log intact: 9 records in 1 file(s)" in log


CHECKS["claude_code_hook"] = check_claude_code_hook
