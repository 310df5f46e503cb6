"""Ordinary git work is not blocked by the protected-path list, and what makes git run code is.

Real git runs in a temporary repository. For each command, the exact paths it wrote, created,
renamed or removed are found twice: by comparing the repository before and after (what stays),
and, where strace exists, by tracing every file system call git and its children made (lock
files and temporary objects too, which are gone by the end). Each path is then judged, as the
logical path it has when the repository is the workspace, by the default preset: none of
``git add``, ``commit``, ``checkout -b``, ``stash`` (and a few more everyday commands) may touch
a protected path, while ``git config`` does, and so do writes to hooks, config and info.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from stockade.engine import Engine, ToolCall, Toolkit, add_file_tools
from stockade.policies import Effect, Policy, Request
from stockade.sandbox import Mount, VirtualFS

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

DEFAULT = Policy.preset("default")
STRACE = shutil.which("strace")
_TRACED = (
    "open,openat,creat,mkdir,mkdirat,rename,renameat,renameat2,unlink,unlinkat,rmdir,"
    "link,linkat,symlink,symlinkat"
)
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC")


def git_env(home: Path) -> dict[str, str]:
    """git as a user with no configuration of their own, so nothing outside the test matters."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "A",
        "GIT_AUTHOR_EMAIL": "a@example.com",
        "GIT_COMMITTER_NAME": "A",
        "GIT_COMMITTER_EMAIL": "a@example.com",
        "LANG": "C",
    }


def run_git(repo: Path, *args: str, trace: Path | None = None) -> None:
    command = ["git", *args]
    if trace is not None and STRACE is not None:
        command = [STRACE, "-qq", "-ff", "-o", str(trace), "-e", f"trace={_TRACED}", *command]
    done = subprocess.run(
        command, cwd=repo, env=git_env(repo.parent), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"


def git_output(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, env=git_env(repo.parent), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def snapshot(repo: Path) -> dict[str, tuple[object, ...]]:
    """Every entry of the repository (the working tree and .git): kind and content."""
    found: dict[str, tuple[object, ...]] = {}
    for folder, dirs, files in os.walk(repo):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            key = str(path.relative_to(repo))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = ("dir",)
            else:
                found[key] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def traced_changes(trace: Path, repo: Path) -> dict[str, str]:
    """Paths (relative to the repository) that the traced calls wrote or removed, with how."""
    found: dict[str, str] = {}
    for part in trace.parent.glob(f"{trace.name}.*"):
        for line in part.read_text(errors="replace").splitlines():
            call, _, rest = line.partition("(")
            if re.search(r"\)\s+= -1 ", line) or not re.search(r"\)\s+= ", line):
                continue  # failed calls changed nothing
            names = _QUOTED.findall(rest)
            if not names:
                continue
            written: list[tuple[str, str]] = []
            if call in ("open", "openat", "creat"):
                flags = rest.split(",", 2)[-1] if call == "openat" else rest
                if call == "creat" or any(flag in flags for flag in _WRITE_FLAGS):
                    written.append((names[0], "write"))
            elif call in ("mkdir", "mkdirat"):
                written.append((names[0], "write"))
            elif call.startswith("rename") and len(names) >= 2:
                written += [(names[0], "delete"), (names[1], "write")]
            elif call in ("unlink", "unlinkat", "rmdir"):
                written.append((names[0], "delete"))
            elif call in ("link", "linkat", "symlink", "symlinkat") and len(names) >= 2:
                written.append((names[1], "write"))
            for name, access in written:
                path = Path(name) if name.startswith("/") else repo / name
                try:
                    relative = path.resolve(strict=False).relative_to(repo.resolve())
                except ValueError:
                    continue  # outside the repository (/dev/null ...)
                found.setdefault(str(relative), access)
        part.unlink()
    return found


def changes_of(repo: Path, tmp: Path, *args: str) -> dict[str, str]:
    """Run ``git args`` in ``repo``; every path it changed (relative), with how: write or
    delete."""
    before = snapshot(repo)
    trace = tmp / "trace"
    run_git(repo, *args, trace=trace)
    after = snapshot(repo)
    changed = {k: "write" for k in after if before.get(k) != after[k]}
    changed |= {k: "delete" for k in before if k not in after}
    if STRACE is not None:
        for path, access in traced_changes(trace, repo).items():
            changed.setdefault(path, access)
    changed.pop(".", None)
    return changed


def judged(relative: str, access: str) -> tuple[Effect, str | None]:
    request = Request("agent", "write_file", paths=[(f"/workspace/{relative}", access)])  # type: ignore[list-item]
    decision = DEFAULT.decide(request)
    return decision.effect, decision.rule


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    run_git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("one\n")
    (root / "src").mkdir()
    (root / "src" / "b.py").write_text("print(1)\n")
    run_git(root, "add", ".")
    run_git(root, "commit", "-q", "-m", "first")
    return root


# the commands of ordinary work, in order, with the edits before them
EVERYDAY: list[tuple[str, tuple[str, ...]]] = [
    ("a.txt", ("add", "a.txt")),
    ("", ("commit", "-q", "-m", "second")),
    ("", ("checkout", "-q", "-b", "feature")),
    ("src/b.py", ("commit", "-q", "-am", "on feature")),
    ("", ("checkout", "-q", "main")),
    ("", ("merge", "-q", "--ff-only", "feature")),
    ("a.txt", ("stash", "-q")),
    ("", ("stash", "pop", "-q")),
    ("", ("stash", "-q")),
    ("", ("tag", "v1")),
    ("", ("reset", "-q", "--soft", "HEAD~1")),
    ("", ("branch", "-q", "feature-2")),
    ("", ("pack-refs", "--all")),
]


def test_everyday_git_writes_no_protected_path(repo: Path, tmp_path: Path) -> None:
    seen: dict[str, str] = {}
    for edit, args in EVERYDAY:
        if edit:
            (repo / edit).write_text((repo / edit).read_text() + "more\n")
        changed = changes_of(repo, tmp_path, *args)
        assert changed, f"git {' '.join(args)} changed nothing: the check sees nothing"
        for path, access in changed.items():
            assert judged(path, access) == (Effect.ALLOW, "workspace-files"), (args, path, access)
        seen |= changed
    # what git wrote is what the docs say it needs: the index, objects, refs, logs, HEAD ...
    git_paths = {p for p in seen if p.startswith(".git/")}
    for needed in (".git/index", ".git/HEAD", ".git/ORIG_HEAD", ".git/COMMIT_EDITMSG",
                   ".git/refs/heads/feature", ".git/refs/stash", ".git/logs/HEAD",
                   ".git/packed-refs", ".git/refs/tags/v1"):  # fmt: skip
        assert needed in seen, (needed, sorted(git_paths))
    assert any(p.startswith(".git/objects/") for p in seen)
    if STRACE is not None:  # transient files only a trace sees
        assert ".git/index.lock" in seen
        assert any(p.endswith(".lock") and "refs/heads" in p for p in seen), sorted(git_paths)


PROTECTED_WRITES = [
    ".git/hooks/pre-commit", ".git/info/exclude", ".git/info/attributes", ".git/config",
    ".git/config.worktree", ".git/commondir", ".git/objects/info/alternates",
    ".git/rebase-merge/git-rebase-todo", ".git/modules/lib/hooks/post-checkout",
    ".git/modules/lib/config", ".git",
]  # fmt: skip


def test_git_config_and_writes_to_hooks_and_info_are_protected(repo: Path, tmp_path: Path) -> None:
    changed = changes_of(repo, tmp_path, "config", "core.hooksPath", "elsewhere")
    assert changed.get(".git/config") == "write"
    assert judged(".git/config", "write") == (Effect.ASK, "dangerous-path")
    # deleting a branch rewrites the config too (it drops the branch's section): asked about
    run_git(repo, "branch", "doomed")
    assert changes_of(repo, tmp_path, "branch", "-q", "-D", "doomed").get(".git/config")
    # housekeeping rewrites info/refs (for serving over dumb HTTP): asked about as well
    assert changes_of(repo, tmp_path, "gc", "-q").get(".git/info/refs") == "write"
    assert judged(".git/info/refs", "write") == (Effect.ASK, "dangerous-path")
    for written in PROTECTED_WRITES:
        assert judged(written, "write") == (Effect.ASK, "dangerous-path"), written
    # a submodule's or worktree's .git is a file pointing elsewhere: protected as a file
    assert judged("vendor/lib/.git", "write") == (Effect.ASK, "dangerous-path")
    assert judged("vendor/lib/.git", "delete") == (Effect.ASK, "dangerous-path")


async def test_through_the_engine_git_data_is_written_and_hooks_are_refused(repo: Path) -> None:
    """The real effect: the file tools can do git's ordinary writes (git then sees them), and
    a hook or config written by an agent never reaches the disk."""
    head = (repo / ".git" / "refs" / "heads" / "main").read_text().strip()
    toolkit = Toolkit()
    add_file_tools(toolkit)
    with VirtualFS([Mount("/workspace", repo)]) as fs:
        async with Engine(toolkit, fs=fs) as engine:  # the default preset, nobody to approve
            branch = await engine.call(
                ToolCall(
                    name="write_file",
                    arguments={"path": ".git/refs/heads/topic", "content": head + "\n"},
                )
            )
            hook = await engine.call(
                ToolCall(
                    name="write_file",
                    arguments={"path": ".git/hooks/post-checkout", "content": "#!/bin/sh\nid\n"},
                )
            )
            config = await engine.call(
                ToolCall(
                    name="edit_file",
                    arguments={
                        "path": ".git/config",
                        "old_text": "[core]",
                        "new_text": "[core]\n\tfsmonitor = touch /tmp/pwned",
                    },
                )
            )
            pointer = await engine.call(
                ToolCall(
                    name="write_file",
                    arguments={"path": "sub/.git", "content": "gitdir: ../evil\n"},
                )
            )
            listed = await engine.call(ToolCall(name="list_directory", arguments={"path": ".git"}))
    assert branch.status == "ok", branch.text
    assert "topic" in git_output(repo, "branch", "--list", "topic")
    for refused in (hook, config, pointer):
        assert refused.status == "denied", refused.text
        assert refused.decision is not None
        assert refused.decision.rule == "dangerous-path"
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    assert "fsmonitor" not in (repo / ".git" / "config").read_text()
    assert not (repo / "sub" / ".git").exists()
    assert listed.status == "ok"  # git's folder stays readable
