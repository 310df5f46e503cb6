"""Copy-on-write layers for commands (sandbox/layers.py), with real bubblewrap and real overlays.

What a caller relies on: a command run with a `Staging` changes nothing on the host; what it did
is listed exactly (files added, modified, deleted, folders created, renamed, modes, links); a
file hard-linked to one outside the mount is never written through; masked paths cannot be read
or written; the layers leave nothing behind.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import require_layers, snapshot

from stockade.sandbox import Bubblewrap, Mount, VirtualFS, run_process
from stockade.sandbox.layers import StagedChange, Staging


@pytest.fixture(autouse=True)
def _needs_layers() -> None:
    require_layers()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / "notes.txt").write_text("one\n")
    (root / "old.txt").write_text("old\n")
    (root / ".env").write_text("API_KEY=sk-live-secret\n")
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    return root


@pytest.fixture
def fs(project: Path) -> Iterator[VirtualFS]:
    with VirtualFS([Mount("/workspace", project)]) as vfs:
        yield vfs


CONTENT: dict[str, bytes] = {}  # what each staged file held, read before the layers go


def staged_run(
    fs: VirtualFS, command: str, masks: tuple[str, ...] = (), base: Path | None = None
) -> tuple[str, str, list[StagedChange]]:
    CONTENT.clear()
    with Staging(fs.mounts, masks=masks, base=base) as staging:
        result = run_process(command, fs=fs, timeout=20, staging=staging)
        assert result.isolation == "bubblewrap+layers"
        changes = staging.changes()
        CONTENT.update({c.path: c.source.read_bytes() for c in changes if c.source is not None})
        return result.stdout, result.stderr, changes


def kinds(changes: list[StagedChange]) -> dict[str, str]:
    return {c.path: c.kind for c in changes}


def test_nothing_reaches_the_host_and_every_change_is_listed(fs: VirtualFS, project: Path) -> None:
    before = snapshot(project)
    _, stderr, changes = staged_run(
        fs,
        "echo two >> notes.txt && rm old.txt && mv src lib && mkdir -p a/b && echo n > a/b/n.txt"
        " && ln -s notes.txt link && chmod 600 lib/app.py",
    )
    assert stderr == ""
    assert snapshot(project) == before  # not one byte on the host
    assert kinds(changes) == {
        "/workspace/a": "created_dir",
        "/workspace/a/b": "created_dir",
        "/workspace/a/b/n.txt": "added",
        "/workspace/lib": "created_dir",
        "/workspace/lib/app.py": "added",
        "/workspace/link": "link",
        "/workspace/notes.txt": "modified",
        "/workspace/old.txt": "deleted",
        "/workspace/src": "deleted",
    }
    by_path = {c.path: c for c in changes}
    notes = by_path["/workspace/notes.txt"]
    assert notes.size == len(b"one\ntwo\n")
    assert notes.sha256_before is not None
    assert notes.sha256_after != notes.sha256_before
    assert CONTENT["/workspace/notes.txt"] == b"one\ntwo\n"
    assert by_path["/workspace/lib/app.py"].mode == 0o600
    assert by_path["/workspace/link"].target == "notes.txt"


def test_a_file_opened_but_not_changed_is_no_change(fs: VirtualFS) -> None:
    _, _, changes = staged_run(fs, "cat notes.txt > /dev/null && touch notes.txt")
    assert changes == []


def test_a_mode_change_alone_is_a_mode_change(fs: VirtualFS) -> None:
    _, _, changes = staged_run(fs, "chmod +x notes.txt")
    assert [(c.path, c.kind, c.mode) for c in changes] == [("/workspace/notes.txt", "mode", 0o755)]


def test_a_hard_link_to_a_file_outside_is_not_written_through(
    fs: VirtualFS, project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    os.link(outside, project / "hl.txt")
    _, _, changes = staged_run(fs, "echo pwned >> hl.txt")
    assert outside.read_text() == "outside\n"
    assert kinds(changes) == {"/workspace/hl.txt": "modified"}


def test_masked_paths_cannot_be_read_or_written(fs: VirtualFS, project: Path) -> None:
    stdout, stderr, changes = staged_run(
        fs,
        "cat .env; ls -A .ssh; cat .ssh/id_rsa; echo x > .env; touch .ssh/k; grep -r KEY . ; true",
        masks=("/workspace/.env", "/workspace/.ssh"),
    )
    assert "sk-live-secret" not in stdout + stderr
    assert "PRIVATE KEY" not in stdout + stderr
    assert "Read-only file system" in stderr
    assert changes == []
    assert (project / ".env").read_text() == "API_KEY=sk-live-secret\n"


def test_a_masked_name_that_does_not_exist_yet_is_left_to_be_judged(fs: VirtualFS) -> None:
    _, _, changes = staged_run(fs, "echo k > .netrc", masks=("/workspace/.netrc",))
    assert kinds(changes) == {"/workspace/.netrc": "added"}


def test_a_read_only_mount_stays_read_only_and_has_no_layer(tmp_path: Path, project: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "brief.txt").write_text("brief\n")
    with VirtualFS([Mount("/workspace", project), Mount("/userinput", docs, read_only=True)]) as fs:
        _, stderr, changes = staged_run(
            fs, "echo x >> /userinput/brief.txt; cat /userinput/brief.txt"
        )
    assert "Read-only file system" in stderr
    assert changes == []


def test_the_layers_leave_nothing_behind(fs: VirtualFS, tmp_path: Path) -> None:
    base = tmp_path / "state"
    base.mkdir()
    staged_run(fs, "echo x > new.txt", base=base)
    assert list(base.iterdir()) == []


def test_a_staging_folder_inside_a_mount_is_refused(project: Path) -> None:
    from stockade.sandbox import SandboxError

    with pytest.raises(SandboxError, match="inside a mount"):
        Staging([Mount("/workspace", project)], base=project)


def test_without_perl_the_layers_are_entered_by_python_in_a_fresh_process(
    fs: VirtualFS, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Perl enters the layers fastest; where it is missing a fresh Python does the same, with
    the same result."""
    machine = _without_perl(tmp_path, monkeypatch)
    with Staging(fs.mounts, masks=("/workspace/.env",)) as staging:
        assert staging.launcher()[:4] == [sys.executable, "-I", "-S", "-c"]
        result = run_process(
            "/bin/cat .env; echo x > /workspace/new.txt",
            fs=fs,
            timeout=20,
            staging=staging,
            bubblewrap=machine,
        )
        assert "sk-live-secret" not in result.stdout
        assert kinds(staging.changes()) == {"/workspace/new.txt": "added"}
    assert not (project / "new.txt").exists()


def test_the_same_layers_serve_a_second_run(fs: VirtualFS, project: Path) -> None:
    """A tool may run several commands on one staging: the second sees what the first wrote
    (the upper layer is never synced, and its work folder marks itself against a second mount;
    the layers clear the mark between runs)."""
    with Staging(fs.mounts) as staging:
        first = run_process("echo one > a.txt", fs=fs, timeout=20, staging=staging)
        second = run_process("cat a.txt && echo two > b.txt", fs=fs, timeout=20, staging=staging)
        assert first.exit_code == 0, first.stderr
        assert second.exit_code == 0, second.stderr
        assert second.stdout == "one\n"
        assert kinds(staging.changes()) == {
            "/workspace/a.txt": "added",
            "/workspace/b.txt": "added",
        }
    assert not (project / "a.txt").exists()


def test_the_upper_layer_is_mounted_without_syncs(fs: VirtualFS) -> None:
    """Its unmount would otherwise write the command's files to disk at every exit, though
    they are thrown away or applied (with a flush of their own)."""
    import subprocess

    with Staging(fs.mounts) as staging:
        launcher = staging.launcher()
        if launcher is None:
            pytest.skip("no launcher here (Perl is missing)")
        shown = subprocess.run(
            [*launcher, "--", "cat", "/proc/self/mountinfo"], capture_output=True, check=True
        )
        overlay = [line for line in shown.stdout.decode().splitlines() if " - overlay " in line]
        assert len(overlay) == 1, overlay
        assert "volatile" in overlay[0], overlay


def test_the_launcher_joins_the_control_group_it_is_given(fs: VirtualFS, tmp_path: Path) -> None:
    """The run's first process joins its pids group itself (sparing a shell): it writes its
    own pid, which the command keeps; a group it cannot join stops the run, saying which."""
    import subprocess

    procs = tmp_path / "cgroup.procs"
    procs.touch()
    with Staging(fs.mounts) as staging:
        launcher = staging.launcher(str(procs))
        if launcher is None:
            pytest.skip("no launcher here (Perl is missing)")
        started = subprocess.Popen([*launcher, "--", "sh", "-c", "echo $$"], stdout=subprocess.PIPE)
        out, _ = started.communicate(timeout=20)
        assert procs.read_text() == str(started.pid) == out.decode().strip()
        missing = str(tmp_path / "gone" / "cgroup.procs")
        refused = subprocess.run(
            [*(staging.launcher(missing) or []), "--", "true"], capture_output=True, check=False
        )
        assert refused.returncode != 0
        assert f"join {missing}" in refused.stderr.decode()


def _without_perl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bubblewrap:
    import shutil

    machine = Bubblewrap.probe()
    bin_dir = tmp_path / "bin-without-perl"
    bin_dir.mkdir()
    for program in ("bwrap", "prlimit"):
        found = shutil.which(program)
        if found:
            (bin_dir / program).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    return machine


def test_a_thread_started_at_fork_does_not_stop_the_layers(
    fs: VirtualFS, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library may start a thread in every forked child (a tracing SDK's batch processor
    does, at fork): a process with two threads cannot enter a user namespace, so the layers
    are never entered between fork and exec, but by a launcher of their own."""
    import threading

    machine = _without_perl(tmp_path, monkeypatch)  # Perl's launcher was never at risk
    stop = threading.Event()
    os.register_at_fork(
        after_in_child=lambda: threading.Thread(target=stop.wait, daemon=True).start()
    )
    try:
        with Staging(fs.mounts) as staging:
            for _ in range(3):
                result = run_process(
                    "echo hi > /workspace/t.txt; cat /workspace/t.txt",
                    fs=fs,
                    timeout=20,
                    staging=staging,
                    bubblewrap=machine,
                )
                assert result.stdout == "hi\n", result.stderr
    finally:
        stop.set()
