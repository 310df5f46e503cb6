"""The virtual filesystem's operations for applying a command's changes: ``write_bytes`` with a
mode and ``replace_link``, the two-phase ``write_aside`` and its ``finish``, ``sync``, ``chmod``
and ``symlink``, on host, memory and overlay mounts, with real files in tmp_path.

What a user relies on: modes land exactly (on disk, whatever the umask); a link is written
through to its target, or replaced when asked, and a link that leads out of the mount is never
followed; a file written aside is invisible at its target until ``finish(True)``, leaves nothing
after ``finish(False)``, and a run that never finishes leaves the old content in place; a link
is made in one step (its name is never missing) and stores its target as given; memory and
overlay mounts refuse links with a clear error.
"""

from __future__ import annotations

import itertools
import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import stray_temp_files

from stockade.sandbox import (
    IsADirectoryError_,
    Mount,
    NotFoundError,
    PathDeniedError,
    PathEscapeError,
    ReadOnlyError,
    SandboxError,
    VirtualFS,
)
from stockade.sandbox.guard import Access

KINDS = ("host", "memory", "overlay")
ON_HOST = ("host", "overlay")
OUTSIDE_TEXT = b"the host's own file\n"
MODES = st.integers(min_value=0, max_value=0o7777)
FIXTURE_IN_GIVEN = [HealthCheck.function_scoped_fixture]


@dataclass
class World:
    """A VirtualFS with ``/workspace`` of one kind; for host and overlay, the folder behind it
    (``root``); beside it, a file standing for the rest of the host (``outside``)."""

    kind: str
    fs: VirtualFS
    root: Path
    outside: Path

    def landed(self) -> Path:
        """The host folder with what was written in place (an overlay's changes committed)."""
        if self.kind == "overlay":
            self.fs.commit()
        return self.root

    def disk_mode(self, name: str) -> int:
        return stat.S_IMODE(os.stat(self.landed() / name).st_mode)


def make_world(kind: str, base: Path) -> World:
    root = base / "ws"
    root.mkdir()
    outside = base / "outside.txt"
    outside.write_bytes(OUTSIDE_TEXT)
    if kind == "memory":
        mount = Mount("/workspace", memory=True)
    else:
        mount = Mount("/workspace", root, overlay=kind == "overlay")
    return World(kind, VirtualFS([mount]), root, outside)


@pytest.fixture(params=KINDS)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    made = make_world(str(request.param), tmp_path)
    with made.fs:
        yield made


@pytest.fixture(params=ON_HOST)
def on_host(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """A host or overlay mount: one whose folder holds links."""
    made = make_world(str(request.param), tmp_path)
    with made.fs:
        yield made


@pytest.fixture
def host(tmp_path: Path) -> Iterator[World]:
    made = make_world("host", tmp_path)
    with made.fs:
        yield made


_fresh = itertools.count()


def fresh_world(kind: str, tmp_path: Path) -> World:
    """A world of its own for one hypothesis example."""
    base = tmp_path / f"example-{next(_fresh)}"
    base.mkdir()
    return make_world(kind, base)


def overlay_pending(world: World) -> bool:
    return world.kind == "overlay" and bool(world.fs.changes())


# -- write_bytes: modes ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURE_IN_GIVEN)
@given(data=st.binary(max_size=4096), mode=MODES, replacing=st.booleans())
def test_a_write_with_a_mode_has_exactly_that_content_and_those_bits(
    kind: str, tmp_path: Path, data: bytes, mode: int, replacing: bool
) -> None:
    made = fresh_world(kind, tmp_path)
    with made.fs as fs:
        if replacing:
            fs.write_bytes("dir/f.bin", b"before", mode=0o600)
        fs.write_bytes("dir/f.bin", data, mode=mode)
        assert fs.read_bytes("dir/f.bin") == data
        assert fs.stat("dir/f.bin").mode == mode
        if kind != "memory":
            root = made.landed()
            assert (root / "dir" / "f.bin").read_bytes() == data
            assert stat.S_IMODE(os.stat(root / "dir" / "f.bin").st_mode) == mode
            assert stray_temp_files(root) == []


@pytest.mark.parametrize(
    "kind",
    [
        "host",
        "memory",
        "overlay",
    ],
)
def test_a_write_without_a_mode_keeps_the_bits_of_the_file_it_replaces(
    kind: str, tmp_path: Path
) -> None:
    made = make_world(kind, tmp_path)
    with made.fs as fs:
        if kind == "memory":
            fs.write_bytes("run.sh", b"old", mode=0o751)
        else:
            (made.root / "run.sh").write_bytes(b"old")
            os.chmod(made.root / "run.sh", 0o751)
        fs.write_bytes("run.sh", b"new")
        assert fs.stat("run.sh").mode == 0o751
        assert fs.read_bytes("run.sh") == b"new"


def test_an_overlay_commit_keeps_the_bits_of_the_file_it_replaces(tmp_path: Path) -> None:
    made = make_world("overlay", tmp_path)
    (made.root / "run.sh").write_bytes(b"old")
    os.chmod(made.root / "run.sh", 0o751)
    with made.fs as fs:
        fs.write_bytes("run.sh", b"new")
        assert made.disk_mode("run.sh") == 0o751
        assert (made.root / "run.sh").read_bytes() == b"new"


@pytest.mark.parametrize(
    "kind",
    [
        "host",
        "overlay",
        "memory",
    ],
)
def test_a_new_file_without_a_mode_gets_0o644_whatever_the_umask(kind: str, tmp_path: Path) -> None:
    previous = os.umask(0o077)
    try:
        made = make_world(kind, tmp_path)
        with made.fs as fs:
            fs.write_bytes("new.txt", b"x")
            assert fs.stat("new.txt").mode == 0o644
            if kind != "memory":
                assert made.disk_mode("new.txt") == 0o644
    finally:
        os.umask(previous)


@pytest.mark.parametrize("mode", [-1, 0o10000], ids=["-1", "0o10000"])
def test_write_bytes_refuses_a_mode_that_is_not_a_file_mode_as_chmod_does(
    world: World, mode: int
) -> None:
    with pytest.raises(SandboxError):
        world.fs.chmod("/workspace", mode)  # what chmod says about the same mode
    with pytest.raises(SandboxError):
        world.fs.write_bytes("f.txt", b"x", mode=mode)
    assert not world.fs.exists("f.txt")


# -- write_bytes: links ------------------------------------------------------------------------


def test_a_write_through_a_link_inside_lands_on_its_target_and_keeps_the_link(
    on_host: World,
) -> None:
    (on_host.root / "target.txt").write_bytes(b"old")
    os.symlink("target.txt", on_host.root / "link")
    on_host.fs.write_bytes("link", b"through")
    root = on_host.landed()
    assert os.readlink(root / "link") == "target.txt"
    assert (root / "target.txt").read_bytes() == b"through"


def test_replace_link_puts_a_file_in_the_links_place_and_leaves_its_target_alone(
    on_host: World,
) -> None:
    (on_host.root / "target.txt").write_bytes(b"old")
    os.symlink("target.txt", on_host.root / "link")
    on_host.fs.write_bytes("link", b"replaced", mode=0o640, replace_link=True)
    assert on_host.fs.lstat("link").kind == "file"
    root = on_host.landed()
    assert not os.path.islink(root / "link")
    assert (root / "link").read_bytes() == b"replaced"
    assert stat.S_IMODE(os.lstat(root / "link").st_mode) == 0o640
    assert (root / "target.txt").read_bytes() == b"old"
    assert stray_temp_files(root) == []


def test_a_link_leading_out_of_the_mount_is_never_written_through(on_host: World) -> None:
    os.symlink(on_host.outside, on_host.root / "out")
    os.symlink("../outside.txt", on_host.root / "climb")
    for name in ("out", "climb"):
        with pytest.raises(PathEscapeError):
            on_host.fs.write_bytes(name, b"pwned")
    assert not overlay_pending(on_host)
    assert on_host.outside.read_bytes() == OUTSIDE_TEXT
    assert os.readlink(on_host.root / "out") == str(on_host.outside)


def test_a_folder_link_leading_out_of_the_mount_is_not_followed_on_the_way(
    on_host: World,
) -> None:
    elsewhere = on_host.root.parent / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, on_host.root / "dir")
    for replace_link in (False, True):
        with pytest.raises(PathEscapeError):
            on_host.fs.write_bytes("dir/new.txt", b"pwned", replace_link=replace_link)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(
    "kind",
    [
        "host",
        "overlay",
    ],
)
def test_replace_link_replaces_a_link_that_leads_out_of_the_mount_without_following_it(
    kind: str, tmp_path: Path
) -> None:
    made = make_world(kind, tmp_path)
    os.symlink(made.outside, made.root / "out")
    with made.fs as fs:
        fs.write_bytes("out", b"mine now", replace_link=True)
        root = made.landed()
    assert not os.path.islink(root / "out")
    assert (root / "out").read_bytes() == b"mine now"
    assert made.outside.read_bytes() == OUTSIDE_TEXT


# -- write_aside: the write done in two --------------------------------------------------------


def test_nothing_is_at_the_target_before_finish_and_the_new_content_after(host: World) -> None:
    (host.root / "old.txt").write_bytes(b"old")
    os.chmod(host.root / "old.txt", 0o600)
    finish_old = host.fs.write_aside("old.txt", b"new content")
    finish_new = host.fs.write_aside("sub/new.txt", b"brand new", mode=0o750)
    assert (host.root / "old.txt").read_bytes() == b"old"
    assert host.fs.read_bytes("old.txt") == b"old"
    assert not (host.root / "sub" / "new.txt").exists()
    assert not host.fs.exists("sub/new.txt")
    assert len(stray_temp_files(host.root)) == 2  # written, beside their targets
    host.fs.sync()
    finish_old(True)
    finish_new(True)
    assert (host.root / "old.txt").read_bytes() == b"new content"
    assert host.disk_mode("old.txt") == 0o600  # the replaced file's bits
    assert (host.root / "sub" / "new.txt").read_bytes() == b"brand new"
    assert host.disk_mode("sub/new.txt") == 0o750
    assert stray_temp_files(host.root) == []


def test_finish_false_leaves_the_target_as_it_was_and_nothing_beside_it(host: World) -> None:
    (host.root / "old.txt").write_bytes(b"old")
    finish_old = host.fs.write_aside("old.txt", b"dropped")
    finish_new = host.fs.write_aside("new.txt", b"dropped")
    finish_old(False)
    finish_new(False)
    assert (host.root / "old.txt").read_bytes() == b"old"
    assert not (host.root / "new.txt").exists()
    assert sorted(os.listdir(host.root)) == ["old.txt"]


def test_a_dropped_write_into_new_folders_leaves_only_the_folders(host: World) -> None:
    # the folders are made (and judged) when the file is written aside; dropping the file
    # leaves them, empty, as a refused write_bytes into new folders would
    finish = host.fs.write_aside("new/deeper/f.txt", b"dropped")
    finish(False)
    assert os.listdir(host.root) == ["new"]
    assert os.listdir(host.root / "new" / "deeper") == []


def test_a_write_never_finished_leaves_the_old_content_and_only_a_temp_file_beside_it(
    tmp_path: Path,
) -> None:
    made = make_world("host", tmp_path)
    (made.root / "config.toml").write_bytes(b"old = 1\n")
    with made.fs as fs:
        fs.write_aside("config.toml", b"new = 2\n")
        fs.sync()
    # the process died here: nothing ever finished the write
    assert (made.root / "config.toml").read_bytes() == b"old = 1\n"
    temps = stray_temp_files(made.root)
    assert len(temps) == 1
    assert Path(temps[0]).name.endswith(".tmp")
    assert Path(temps[0]).read_bytes() == b"new = 2\n"
    with VirtualFS([Mount("/workspace", made.root)]) as again:
        assert again.read_bytes("config.toml") == b"old = 1\n"


@settings(max_examples=30, deadline=None, suppress_health_check=FIXTURE_IN_GIVEN)
@given(
    batch=st.dictionaries(
        st.sampled_from(["a.txt", "b.txt", "sub/c.txt", "sub/d.bin", "e"]),
        st.tuples(st.binary(max_size=512), st.booleans(), st.booleans()),
        min_size=1,
    )
)
def test_a_batch_lands_exactly_the_files_finished_true(
    tmp_path: Path, batch: dict[str, tuple[bytes, bool, bool]]
) -> None:
    made = fresh_world("host", tmp_path)
    with made.fs as fs:
        for name, (_, existed, _) in batch.items():
            if existed:
                fs.write_bytes(name, b"before")
        before = fs.written
        finishes = {name: fs.write_aside(name, data) for name, (data, _, _) in batch.items()}
        fs.sync()
        for name, finish in finishes.items():
            finish(batch[name][2])
        for name, (data, existed, place) in batch.items():
            path = made.root / name
            if place:
                assert path.read_bytes() == data
            elif existed:
                assert path.read_bytes() == b"before"
            else:
                assert not path.exists()
        assert stray_temp_files(made.root) == []
        placed = sum(len(data) for data, _, place in batch.values() if place)
        assert fs.written == before + placed  # dropped bytes are not counted


def test_write_aside_with_replace_link_replaces_the_link_only_at_finish(host: World) -> None:
    (host.root / "target.txt").write_bytes(b"target")
    os.symlink("target.txt", host.root / "link")
    finish = host.fs.write_aside("link", b"file now", replace_link=True)
    assert os.readlink(host.root / "link") == "target.txt"
    finish(True)
    assert not os.path.islink(host.root / "link")
    assert (host.root / "link").read_bytes() == b"file now"
    assert (host.root / "target.txt").read_bytes() == b"target"


def test_write_aside_through_a_link_leading_out_is_refused_and_writes_nothing(
    host: World,
) -> None:
    os.symlink(host.outside, host.root / "out")
    with pytest.raises(PathEscapeError):
        host.fs.write_aside("out", b"pwned")
    assert host.outside.read_bytes() == OUTSIDE_TEXT
    assert stray_temp_files(host.root) == []
    assert host.fs.written == 0


@pytest.mark.parametrize("kind", ["memory", "overlay"])
def test_on_a_mount_not_on_the_host_write_aside_writes_at_once_and_finish_changes_nothing(
    kind: str, tmp_path: Path
) -> None:
    made = make_world(kind, tmp_path)
    with made.fs as fs:
        finish = fs.write_aside("f.txt", b"at once", mode=0o600)
        assert fs.read_bytes("f.txt") == b"at once"
        assert fs.stat("f.txt").mode == 0o600
        finish(False)
        assert fs.read_bytes("f.txt") == b"at once"
        assert fs.written == len(b"at once")
        if kind == "overlay":
            assert not (made.root / "f.txt").exists()  # staged, as any overlay write
            assert [c.path for c in fs.changes()] == ["/workspace/f.txt"]


def test_the_bytes_written_aside_are_counted_once_and_given_back_when_dropped(
    host: World,
) -> None:
    kept = host.fs.write_aside("kept.txt", b"12345")
    dropped = host.fs.write_aside("dropped.txt", b"123")
    assert host.fs.written == 8
    kept(True)
    dropped(False)
    assert host.fs.written == 5


def test_write_aside_on_a_read_only_mount_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    with (
        VirtualFS([Mount("/userinput", folder, read_only=True)]) as fs,
        pytest.raises(ReadOnlyError),
    ):
        fs.write_aside("/userinput/f.txt", b"x")
    assert os.listdir(folder) == []


def test_the_guard_is_asked_when_written_aside_and_again_at_finish(host: World) -> None:
    (host.root / "t.txt").write_bytes(b"old")
    asked: list[tuple[str, Access]] = []
    refuse = {"now": False}

    def guard(path: str, access: Access) -> str | None:
        asked.append((path, access))
        return "not now" if refuse["now"] else None

    view = host.fs.guarded(guard)
    finish = view.write_aside("t.txt", b"new")
    assert asked == [("/workspace/t.txt", "write")]
    refuse["now"] = True
    with pytest.raises(PathDeniedError):
        finish(True)
    assert asked[-1] == ("/workspace/t.txt", "write")
    assert (host.root / "t.txt").read_bytes() == b"old"
    assert host.fs.written == 0  # nothing placed, nothing counted
    with pytest.raises(PathDeniedError):
        view.write_aside("u.txt", b"refused at once")
    assert not (host.root / "u.txt").exists()


def test_a_finish_the_guard_refuses_leaves_nothing_beside_the_target(host: World) -> None:
    (host.root / "t.txt").write_bytes(b"old")
    refuse = {"now": False}
    view = host.fs.guarded(lambda path, access: "not now" if refuse["now"] else None)
    finish = view.write_aside("t.txt", b"new")
    refuse["now"] = True
    with pytest.raises(PathDeniedError):
        finish(True)
    assert stray_temp_files(host.root) == []


def test_dropping_a_write_whose_finish_was_refused_gives_its_bytes_back_once(
    host: World,
) -> None:
    refuse = {"now": False}
    view = host.fs.guarded(lambda path, access: "not now" if refuse["now"] else None)
    finish = view.write_aside("t.txt", b"1234")
    refuse["now"] = True
    with pytest.raises(PathDeniedError):
        finish(True)
    finish(False)
    assert stray_temp_files(host.root) == []
    assert host.fs.written == 0


# -- sync --------------------------------------------------------------------------------------


def test_sync_flushes_without_placing_anything(host: World) -> None:
    (host.root / "f.txt").write_bytes(b"old")
    finish = host.fs.write_aside("f.txt", b"new")
    host.fs.sync()
    assert (host.root / "f.txt").read_bytes() == b"old"
    finish(True)
    host.fs.sync()
    assert (host.root / "f.txt").read_bytes() == b"new"


def test_sync_works_on_every_kind_of_mount_together(tmp_path: Path) -> None:
    folders = [tmp_path / name for name in ("ws", "ro", "ov")]
    for folder in folders:
        folder.mkdir()
    mounts = [
        Mount("/workspace", folders[0]),
        Mount("/userinput", folders[1], read_only=True),
        Mount("/staged", folders[2], overlay=True),
        Mount("/scratch", memory=True),
    ]
    with VirtualFS(mounts) as fs:
        for prefix in ("/workspace", "/staged", "/scratch"):
            fs.write_bytes(f"{prefix}/f.txt", b"x")
        fs.sync()
        assert (folders[0] / "f.txt").read_bytes() == b"x"
        assert not (folders[2] / "f.txt").exists()  # sync does not commit an overlay
        assert fs.read_bytes("/scratch/f.txt") == b"x"


# -- chmod -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=30, deadline=None, suppress_health_check=FIXTURE_IN_GIVEN)
@given(mode=MODES)
def test_chmod_sets_exactly_those_bits_on_a_file(kind: str, tmp_path: Path, mode: int) -> None:
    made = fresh_world(kind, tmp_path)
    with made.fs as fs:
        fs.write_bytes("f.txt", b"content")
        if kind == "overlay":
            fs.commit()
        fs.chmod("f.txt", mode)
        assert fs.stat("f.txt").mode == mode
        assert fs.read_bytes("f.txt") == b"content"
        if kind != "memory":
            assert made.disk_mode("f.txt") == mode
            assert (made.root / "f.txt").read_bytes() == b"content"


@pytest.mark.parametrize("kind", ["host", "memory"])
def test_chmod_sets_the_bits_of_a_folder(kind: str, tmp_path: Path) -> None:
    made = make_world(kind, tmp_path)
    with made.fs as fs:
        fs.mkdir("dir")
        fs.chmod("dir", 0o710)
        assert fs.stat("dir").mode == 0o710
        if kind == "host":
            assert made.disk_mode("dir") == 0o710


def test_an_overlay_refuses_to_stage_the_bits_of_a_folder(tmp_path: Path) -> None:
    made = make_world("overlay", tmp_path)
    (made.root / "dir").mkdir()
    os.chmod(made.root / "dir", 0o755)
    with made.fs as fs:
        with pytest.raises(SandboxError, match="files only"):
            fs.chmod("dir", 0o700)
        assert fs.changes() == []
    assert made.disk_mode("dir") == 0o755


def test_chmod_through_a_link_inside_changes_its_target(on_host: World) -> None:
    (on_host.root / "target.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(on_host.root / "target.sh", 0o644)
    os.symlink("target.sh", on_host.root / "link")
    on_host.fs.chmod("link", 0o755)
    root = on_host.landed()
    assert stat.S_IMODE(os.stat(root / "target.sh").st_mode) == 0o755
    assert os.readlink(root / "link") == "target.sh"


def test_chmod_through_a_link_leading_out_is_refused_and_the_outside_keeps_its_bits(
    on_host: World,
) -> None:
    os.chmod(on_host.outside, 0o644)
    os.symlink(on_host.outside, on_host.root / "out")
    with pytest.raises(PathEscapeError):
        on_host.fs.chmod("out", 0o777)
    assert stat.S_IMODE(os.stat(on_host.outside).st_mode) == 0o644
    assert not overlay_pending(on_host)


@pytest.mark.parametrize("mode", [-1, 0o10000, 0o100644], ids=["-1", "0o10000", "0o100644"])
def test_chmod_refuses_a_mode_that_is_not_0_to_0o7777(world: World, mode: int) -> None:
    world.fs.write_bytes("f.txt", b"x", mode=0o640)
    with pytest.raises(SandboxError, match="not a file mode"):
        world.fs.chmod("f.txt", mode)
    assert world.fs.stat("f.txt").mode == 0o640


@pytest.mark.parametrize(
    "kind",
    [
        "host",
        "memory",
        "overlay",
    ],
)
def test_chmod_of_a_missing_file_says_it_does_not_exist(kind: str, tmp_path: Path) -> None:
    made = make_world(kind, tmp_path)
    with made.fs as fs, pytest.raises(NotFoundError):
        fs.chmod("missing.txt", 0o600)


def test_chmod_on_a_read_only_mount_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"x")
    os.chmod(tmp_path / "f.txt", 0o644)
    with (
        VirtualFS([Mount("/userinput", tmp_path, read_only=True)]) as fs,
        pytest.raises(ReadOnlyError),
    ):
        fs.chmod("/userinput/f.txt", 0o777)
    assert stat.S_IMODE(os.stat(tmp_path / "f.txt").st_mode) == 0o644


# -- symlink -----------------------------------------------------------------------------------

LINK_TARGETS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\0"),
    min_size=1,
    max_size=200,
)


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE_IN_GIVEN)
@given(target=LINK_TARGETS)
def test_a_link_stores_its_target_exactly_as_given(tmp_path: Path, target: str) -> None:
    made = fresh_world("host", tmp_path)
    with made.fs as fs:
        fs.symlink("link", target)
        assert os.readlink(made.root / "link") == target
        assert fs.lstat("link").kind == "link"
        assert stray_temp_files(made.root) == []
    assert made.outside.read_bytes() == OUTSIDE_TEXT


def test_a_link_replaces_a_file_or_a_link_in_its_place(host: World) -> None:
    (host.root / "name").write_bytes(b"a file")
    host.fs.symlink("name", "first")
    assert os.readlink(host.root / "name") == "first"
    host.fs.symlink("name", "second")
    assert os.readlink(host.root / "name") == "second"
    host.fs.mkdir("sub")
    host.fs.symlink("sub/deeper", "../name")
    assert os.readlink(host.root / "sub" / "deeper") == "../name"
    assert stray_temp_files(host.root) == []


def test_the_name_of_a_link_being_replaced_is_never_missing(host: World) -> None:
    host.fs.symlink("name", "a")
    missing: list[OSError] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                os.lstat(host.root / "name")
            except OSError as exc:
                missing.append(exc)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for round_ in range(300):
            host.fs.symlink("name", "b" if round_ % 2 else "a")
    finally:
        stop.set()
        watcher.join()
    assert missing == []
    assert stray_temp_files(host.root) == []


def test_a_link_over_a_folder_is_refused_and_the_folder_stays(host: World) -> None:
    (host.root / "dir").mkdir()
    (host.root / "dir" / "kept.txt").write_bytes(b"kept")
    with pytest.raises(IsADirectoryError_):
        host.fs.symlink("dir", "elsewhere")
    assert (host.root / "dir" / "kept.txt").read_bytes() == b"kept"
    assert stray_temp_files(host.root) == []


def test_a_link_to_the_outside_is_stored_but_never_followed(host: World) -> None:
    host.fs.symlink("out", str(host.outside))
    host.fs.symlink("climb", "../outside.txt")
    for name in ("out", "climb"):
        assert host.fs.lstat(name).kind == "link"
        with pytest.raises(PathEscapeError):
            host.fs.read_bytes(name)
        with pytest.raises(PathEscapeError):
            host.fs.write_bytes(name, b"pwned")
        with pytest.raises(PathEscapeError):
            host.fs.chmod(name, 0o777)
    assert os.readlink(host.root / "out") == str(host.outside)
    assert host.outside.read_bytes() == OUTSIDE_TEXT


def test_a_link_cannot_be_made_in_a_folder_that_leads_out(host: World) -> None:
    elsewhere = host.root.parent / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, host.root / "dir")
    with pytest.raises(PathEscapeError):
        host.fs.symlink("dir/link", "anything")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(
    ("kind", "says"),
    [("memory", "memory mount, which holds no symbolic links"), ("overlay", "cannot stage")],
)
def test_memory_and_overlay_mounts_refuse_a_link_with_a_clear_error(
    kind: str, says: str, tmp_path: Path
) -> None:
    made = make_world(kind, tmp_path)
    with made.fs as fs:
        with pytest.raises(SandboxError, match=says) as raised:
            fs.symlink("link", "target.txt")
        assert type(raised.value) is SandboxError  # not an escape, nor a missing file
        assert raised.value.path == "/workspace/link"
        assert not fs.exists("link")
        if kind == "overlay":
            assert fs.changes() == []
    assert os.listdir(made.root) == []


@pytest.mark.parametrize("target", ["", "a\0b"])
def test_a_link_needs_a_target_without_nul(host: World, target: str) -> None:
    with pytest.raises(SandboxError, match="non-empty path without NUL"):
        host.fs.symlink("link", target)
    assert os.listdir(host.root) == []


def test_the_mount_itself_cannot_become_a_link(host: World) -> None:
    with pytest.raises(SandboxError, match="mount itself"):
        host.fs.symlink("/workspace", "elsewhere")
    assert host.root.is_dir()
    assert not host.root.is_symlink()


def test_a_link_on_a_read_only_mount_is_refused(tmp_path: Path) -> None:
    with (
        VirtualFS([Mount("/userinput", tmp_path, read_only=True)]) as fs,
        pytest.raises(ReadOnlyError),
    ):
        fs.symlink("/userinput/link", "x")
    assert os.listdir(tmp_path) == []


def test_a_guarded_link_is_judged_as_a_write_of_its_own_name(host: World) -> None:
    asked: list[tuple[str, Access]] = []

    def guard(path: str, access: Access) -> str | None:
        asked.append((path, access))
        return "no links here" if path.endswith("/refused") else None

    view = host.fs.guarded(guard)
    (host.root / "target.txt").write_bytes(b"t")
    view.symlink("allowed", "target.txt")
    with pytest.raises(PathDeniedError, match="no links here"):
        view.symlink("refused", "target.txt")
    assert asked == [("/workspace/allowed", "write"), ("/workspace/refused", "write")]
    assert sorted(os.listdir(host.root)) == ["allowed", "target.txt"]


def test_write_aside_of_a_file_of_our_own_links_it_on_a_host_mount_and_copies_elsewhere(
    tmp_path: Path,
) -> None:
    source = tmp_path / "layer-file"
    source.write_bytes(b"from the layer")
    for kind in ("host", "memory", "overlay"):
        (tmp_path / kind).mkdir()
        made = make_world(kind, tmp_path / kind)
        with made.fs:
            finish = made.fs.write_aside("landed.txt", source, mode=0o640)
            made.fs.sync()
            finish(True)
            assert made.fs.read_bytes("/workspace/landed.txt") == b"from the layer"
            assert made.fs.stat("/workspace/landed.txt").mode == 0o640
            if kind == "host":  # the same file, not a copy: linked, then renamed into place
                assert os.stat(made.root / "landed.txt").st_ino == os.stat(source).st_ino
    source.unlink()
    assert os.stat(tmp_path / "host" / "ws" / "landed.txt").st_nlink == 1


def test_write_aside_copies_a_file_that_has_another_name(host: World, tmp_path: Path) -> None:
    source = tmp_path / "layer-file"
    source.write_bytes(b"twice named")
    os.link(source, tmp_path / "other-name")
    host.fs.write_aside("copied.txt", source)(True)
    assert (host.root / "copied.txt").read_bytes() == b"twice named"
    assert os.stat(host.root / "copied.txt").st_ino != os.stat(source).st_ino
