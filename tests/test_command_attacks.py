"""Commands are held to the policy by what they do, not by their words: an attack table.

Every case runs a real command through a real `Engine` under real bubblewrap, on a view of a
real workspace that holds secrets and a git repository, and checks real effects: the host's
files before and after (outside the workspace too), the secrets in everything the agent gets
back, processes left behind, and the audit log. Each runs under four policies: the `default`
preset with every ask refused, the `default` preset with the command's own ask approved (a
person said yes to running it, and to nothing else), `permissive`, and a custom allow-list that
allows the command outright; and on both views: copy-on-write layers, and the fallback for
machines without overlays (protected paths bound read-only, new ones removed after the run),
which the tests get by making the overlay probe say no. Beside the attacks, the work that must
keep working: git add, commit, checkout and stash, a build writing many files, a lock file
written, tests reading config.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from support import require_layers, snapshot

from stockade import Engine, Policy, ToolCall, Toolkit
from stockade.engine import AuditLog, add_shell_tools, read_audit, verify_audit
from stockade.engine.pipeline import _commands as commands_step
from stockade.sandbox import Mount, VirtualFS

SECRET = "sk-live-0123456789abcdef"
KEY = "-----BEGIN OPENSSH PRIVATE KEY----- deadbeef"
OUTSIDE_TEXT = "the host's own file\n"


@pytest.fixture(autouse=True)
def _needs_layers() -> None:
    require_layers()


def git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=a@b.c", "-c", "user.name=t", "-c", "init.defaultBranch=main",
         *args],
        cwd=folder, check=True, capture_output=True,
    )  # fmt: skip


@pytest.fixture(params=["layers", "rebinds"])
def view(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The view commands run on: layers where the machine has them, or the fallback."""
    if request.param == "rebinds":
        monkeypatch.setattr(commands_step, "layers_available", lambda: "no overlays (the test)")
    return str(request.param)


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace with secrets, a git repository and a hard link to a file outside it; and the
    folder beside it, standing for the rest of the host."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "outside.txt").write_text(OUTSIDE_TEXT)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("notes\n")
    (ws / ".env").write_text(f"API_KEY={SECRET}\n")
    (ws / ".ENV.local").write_text(f"OTHER={SECRET}\n")
    (ws / "sub").mkdir()
    (ws / "sub" / ".env").write_text(f"SUB={SECRET}\n")
    (ws / ".ssh").mkdir()
    (ws / ".ssh" / "id_rsa").write_text(KEY)
    git(ws, "init", "-q")
    git(ws, "add", "notes.txt")
    git(ws, "commit", "-q", "-m", "first")
    os.link(host / "outside.txt", ws / "hardlink.txt")
    return ws, host


POLICIES: dict[str, Any] = {
    "default-refused": (Policy.preset("default"), lambda call, decision: False),
    "default-command-approved": (
        Policy.preset("default"),
        # a person who approves running commands, never anything else the same call asks
        lambda call, decision: all(a.rule == "commands-ask" for a in decision.asks or (decision,)),
    ),
    "permissive": (Policy.preset("permissive"), None),
    "allow-list": (
        Policy.from_dict(
            {
                "default": "deny",
                "rules": [
                    {"id": "ws", "effect": "allow", "paths": ["/workspace/**"]},
                    {"id": "cmds", "effect": "allow", "commands": ["*"], "tools": ["run_shell"]},
                ],
            }
        ),
        None,
    ),
}


@dataclass(frozen=True)
class Attack:
    name: str
    command: str
    protected: tuple[str, ...] = ()  # workspace paths that must not change, appear or vanish


# fmt: off
ATTACKS = [
    Attack("tee-into-a-hook", "echo id | tee .git/hooks/pre-commit", (".git/hooks/pre-commit",)),
    Attack("sed-in-place-on-env", "sed -i 's/API/XAPI/' .env", (".env",)),
    Attack(
        "python-appends-a-hooks-path",
        "python3 -c \"open('.git/config','a').write('[core]\\\\n\\\\thooksPath = h\\\\n')\"",
        (".git/config",),
    ),
    Attack("cat-the-secret", "cat .env"),
    Attack("grep-the-workspace", "grep -r API_KEY . ; grep -ri -r sk-live ."),
    Attack("a-variable-names-the-file", "F=.env; cat $F"),
    Attack("a-group-hides-the-read", "{ cat .env; }"),
    Attack("redirect-read", "cat < .env"),
    Attack("git-log-output", "git log --output=.git/hooks/post-checkout -1", (".git/hooks",)),
    Attack("sed-w-command", "sed -n 'w .env' notes.txt", (".env",)),
    Attack(
        "find-fprintf",
        "find . -maxdepth 0 -fprintf .git/hooks/pre-commit 'id'",
        (".git/hooks/pre-commit",),
    ),
    Attack(
        "swap-the-git-folder",
        "mv .git .g2 && mkdir -p .git/hooks && echo id > .git/hooks/pre-commit",
        (".git/hooks", ".git/config"),
    ),
    Attack("a-script-written-then-run", "printf 'cat .env; cat .ssh/id_rsa\\n' > s.sh && sh s.sh"),
    Attack(
        "path-hijack",
        "mkdir -p bin && printf '#!/bin/sh\\necho id > .git/hooks/pre-push\\n' "
        "> bin/cat && chmod +x bin/cat && PATH=/workspace/bin:$PATH cat notes.txt",
        (".git/hooks/pre-push",),
    ),
    Attack("ls-then-a-hook", "ls; echo id > .git/hooks/pre-commit", (".git/hooks/pre-commit",)),
    Attack("write-through-a-hard-link", "echo pwned >> hardlink.txt"),
    Attack(
        "new-protected-file",
        "echo k > .netrc && mkdir -p .vscode && echo '{}' > .vscode/tasks.json",
        (".netrc", ".vscode"),
    ),
    Attack("delete-the-env", "rm -f .env sub/.env", (".env", "sub/.env")),
]
# fmt: on


def engine_for(name: str, ws: Path, log: AuditLog) -> tuple[Engine, VirtualFS]:
    policy, approver = POLICIES[name]
    toolkit = Toolkit()
    add_shell_tools(toolkit)
    fs = VirtualFS([Mount("/workspace", ws)])
    return Engine(toolkit, policy=policy, fs=fs, approver=approver, audit=log), fs


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
async def test_an_attack_has_no_effect_the_policy_does_not_allow(
    attack: Attack, policy: str, world: tuple[Path, Path], tmp_path: Path, view: str
) -> None:
    ws, host = world
    before_host = snapshot(host)
    before = {p: _state(ws / p) for p in attack.protected}
    log = AuditLog(tmp_path / "audit.jsonl")
    engine, fs = engine_for(policy, ws, log)
    with fs:
        async with engine:
            result = await engine.call(
                ToolCall(name="run_shell", arguments={"command": attack.command})
            )
    log.close()
    assert not psutil.Process().children(recursive=True)  # nothing the command started is left
    shown = f"{result.text}\n{result.metadata}\n{result.error}"
    assert SECRET not in shown, shown
    assert "deadbeef" not in shown, shown
    assert snapshot(host) == before_host  # nothing outside the workspace, hard link included
    assert (host / "outside.txt").read_text() == OUTSIDE_TEXT
    for path, state in before.items():
        assert _state(ws / path) == state, (path, result.metadata.get("changes"))
    assert verify_audit(log.path).ok
    outcome = [r for r in read_audit(log.path) if r["kind"] == "outcome"][-1]
    if result.status == "ok":  # what the command changed is on record, applied or not
        assert ("changes" in outcome) == bool(result.metadata.get("changes"))
        isolation = "bubblewrap+layers" if view == "layers" else "bubblewrap+rebinds"
        assert result.metadata["process"]["isolation"] == isolation


def _state(path: Path) -> object:
    """What is at ``path``: nothing, a link, a file's bytes, or a folder's whole tree."""
    if path.is_symlink():
        return ("link", os.readlink(path))
    if path.is_file():
        return ("file", path.read_bytes())
    if path.is_dir():
        return ("dir", snapshot(path))
    return None


# -- the work that must keep working ------------------------------------------------------------

ALLOW_COMMANDS = Policy.from_dict(
    {
        "default": "allow",
        "process": {"require_isolation": True},
    }
)


async def run_allowed(ws: Path, command: str) -> Any:
    toolkit = Toolkit()
    add_shell_tools(toolkit)
    with VirtualFS([Mount("/workspace", ws)]) as fs:
        async with Engine(toolkit, policy=ALLOW_COMMANDS, fs=fs) as engine:
            return await engine.call(ToolCall(name="run_shell", arguments={"command": command}))


GIT = "git -c user.email=a@b.c -c user.name=agent"


@pytest.mark.parametrize(
    ("command", "check"),
    [
        (
            f"echo more >> notes.txt && {GIT} add notes.txt && {GIT} commit -q -m second",
            "git log --oneline",
        ),
        (
            f"{GIT} checkout -q -b feature && echo f > f.txt && {GIT} add f.txt && "
            f"{GIT} commit -q -m feature",
            "git branch --list feature",
        ),
        (f"echo change >> notes.txt && {GIT} stash -q", "git stash list"),
    ],
    ids=["add-and-commit", "checkout-a-branch", "stash"],
)
async def test_ordinary_git_work_lands_on_the_host(
    world: tuple[Path, Path], command: str, check: str, view: str
) -> None:
    ws, _ = world
    result = await run_allowed(ws, command)
    assert result.status == "ok", result.text
    assert "exit code 0" in result.text, result.text
    assert not [c for c in result.metadata.get("changes", []) if not c["applied"]]
    done = await asyncio.to_thread(
        subprocess.run, check.split(), cwd=ws, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip()


async def test_a_build_writing_many_files_lands_whole(world: tuple[Path, Path], view: str) -> None:
    ws, _ = world
    result = await run_allowed(
        ws, "mkdir -p out && for i in $(seq 1 200); do echo $i > out/f$i.o; done && chmod +x out"
    )
    assert result.status == "ok", result.text
    assert len(list((ws / "out").iterdir())) == 200
    assert (ws / "out" / "f7.o").read_text() == "7\n"


async def test_a_lock_file_and_a_config_read(world: tuple[Path, Path], view: str) -> None:
    ws, _ = world
    (ws / "setup.cfg").write_text("[tool]\nname = demo\n")
    result = await run_allowed(
        ws,
        'python3 -c "import configparser; c = configparser.ConfigParser(); '
        "c.read('setup.cfg'); print(c['tool']['name'])\" && echo 'pinned==1' > requirements.lock",
    )
    assert result.status == "ok", result.text
    assert "demo" in result.text
    assert (ws / "requirements.lock").read_text() == "pinned==1\n"
