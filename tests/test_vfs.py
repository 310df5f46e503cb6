"""The virtual filesystem's public API on host, memory and overlay mounts: reading and writing,
atomic replacement, listing, stat, folders, deletes, moves, read-only mounts, quotas, the
errors (each naming the logical path), the constructor's checks, and the overlay's staging,
review (changes with diffs), discard and all-or-nothing commit."""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import snapshot, stray_temp_files

import stockade.sandbox
from stockade.errors import StockadeError
from stockade.sandbox import (
    Change,
    ExistsError,
    FileInfo,
    IsADirectoryError_,
    Mount,
    NotADirectoryError_,
    NotFoundError,
    NotTextError,
    PathDeniedError,
    PathEscapeError,
    QuotaError,
    ReadOnlyError,
    SandboxError,
    VirtualFS,
)
from stockade.sandbox.egress_wire import WireError

KINDS = ("host", "memory", "overlay")

# -- helpers ---------------------------------------------------------------------------------


def make_fs(kind: str, root: Path, **options: object) -> VirtualFS:
    """A VirtualFS with ``/workspace`` of the given kind over ``root`` (unused for memory)."""
    if kind == "memory":
        mount = Mount("/workspace", memory=True)
    else:
        mount = Mount("/workspace", root, overlay=kind == "overlay")
    return VirtualFS([mount], **options)  # type: ignore[arg-type]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def seed(fs: VirtualFS, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        if isinstance(content, bytes):
            fs.write_bytes(name, content)
        else:
            fs.write_text(name, content)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fs(kind: str, ws: Path) -> Iterator[VirtualFS]:
    with make_fs(kind, ws) as vfs:
        yield vfs


# -- reading and writing ---------------------------------------------------------------------


def test_read_write_text_and_bytes(fs: VirtualFS) -> None:
    fs.write_text("/workspace/a.txt", "héllo\n")
    fs.write_bytes("/workspace/b.bin", b"\x00\x01\xff")
    assert fs.read_text("/workspace/a.txt") == "héllo\n"
    assert fs.read_bytes("/workspace/a.txt") == "héllo\n".encode()
    assert fs.read_bytes("/workspace/b.bin") == b"\x00\x01\xff"
    fs.write_bytes("/workspace/c.bin", bytearray(b"xy"))  # any bytes-like object
    assert fs.read_bytes("c.bin") == b"xy"
    fs.write_text("empty.txt", "")
    assert fs.read_text("empty.txt") == ""


def test_relative_paths_resolve_against_workspace(fs: VirtualFS) -> None:
    fs.write_text("notes/todo.md", "ship it")
    assert fs.read_text("/workspace/notes/todo.md") == "ship it"
    assert fs.read_text("./notes/../notes/todo.md") == "ship it"
    assert fs.canonical("notes/todo.md") == "/workspace/notes/todo.md"


def test_write_replaces_content(fs: VirtualFS) -> None:
    fs.write_text("a.txt", "a long first version")
    fs.write_text("a.txt", "short")
    assert fs.read_text("a.txt") == "short"


def test_write_creates_parent_folders(fs: VirtualFS) -> None:
    fs.write_text("a/b/c/d.txt", "deep")
    assert fs.read_text("a/b/c/d.txt") == "deep"
    for folder in ("a", "a/b", "a/b/c"):
        assert fs.stat(folder).kind == "dir"
    assert fs.list_dir("a/b") == ["c"]


def test_write_creates_parent_folders_on_the_host(ws: Path) -> None:
    with make_fs("host", ws) as fs:
        fs.write_text("x/y/z.txt", "z")
    assert (ws / "x" / "y" / "z.txt").read_text() == "z"
    assert (ws / "x" / "y").is_dir()


def test_names_with_spaces_unicode_and_dots(fs: VirtualFS) -> None:
    names = ["my notes.txt", "ünïcødé.txt", "日本語.md", ".env", "..hidden", "a..b", "~", "%2e%2e"]
    for name in names:
        fs.write_text(name, name)
    for name in names:
        assert fs.read_text(name) == name
    assert fs.list_dir("/workspace") == sorted(names)


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "not-durable"])
def test_atomic_replace_reader_never_sees_a_partial_file(ws: Path, durable: bool) -> None:
    """A reader never sees a half-written file while a writer rewrites 1 MB repeatedly."""
    size = 1 << 20
    versions = [b"a" * size, b"b" * size]
    with make_fs("host", ws, durable=durable) as fs:
        fs.write_bytes("big.bin", versions[0])
        stop = threading.Event()
        seen: list[int] = []
        bad: list[str] = []

        def read() -> None:
            while not stop.is_set():
                data = fs.read_bytes("big.bin")
                if data not in versions:
                    bad.append(f"{len(data)} bytes, starting {data[:8]!r}")
                seen.append(len(data))

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for i in range(100):
                fs.write_bytes("big.bin", versions[i % 2])
        finally:
            stop.set()
            reader.join(30)
    assert not bad, bad[:3]
    assert len(seen) > 5
    assert not stray_temp_files(ws)


def test_no_temp_files_left_behind(ws: Path) -> None:
    with make_fs("host", ws) as fs:
        for i in range(30):
            fs.write_text(f"d{i % 3}/f{i % 5}.txt", f"version {i}")
        fs.mkdir("folder")
        with pytest.raises(IsADirectoryError_):
            fs.write_text("folder", "over a folder")
        fs.write_text("file.txt", "x")
        with pytest.raises(NotADirectoryError_):
            fs.write_text("file.txt/below.txt", "under a file")
    assert not stray_temp_files(ws)
    assert sorted(os.listdir(ws)) == ["d0", "d1", "d2", "file.txt", "folder"]


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o750, 0o755, 0o664], ids=oct)
def test_file_mode_is_preserved_on_replace(ws: Path, mode: int) -> None:
    target = ws / "script.sh"
    target.write_text("#!/bin/sh\n")
    target.chmod(mode)
    with make_fs("host", ws) as fs:
        fs.write_text("script.sh", "#!/bin/sh\necho hi\n")
        assert fs.stat("script.sh").mode == mode
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert target.read_text() == "#!/bin/sh\necho hi\n"


def test_write_through_a_hard_link_replaces_the_name(ws: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("original")
    os.link(elsewhere, ws / "linked.txt")
    with make_fs("host", ws) as fs:
        fs.write_text("linked.txt", "new")
        assert fs.read_text("linked.txt") == "new"
    assert elsewhere.read_text() == "original"
    assert (ws / "linked.txt").stat().st_nlink == 1


# -- listing, stat, exists -------------------------------------------------------------------


def test_list_dir_is_sorted(fs: VirtualFS) -> None:
    names = ["b", "a", "C", "ä", "10", "2", ".dot"]
    for name in names:
        fs.write_text(f"d/{name}", name)
    fs.mkdir("d/sub")
    assert fs.list_dir("d") == sorted([*names, "sub"])
    assert fs.list_dir("/workspace/d/") == sorted([*names, "sub"])
    assert fs.list_dir("d/sub") == []


def test_list_dir_of_root_lists_the_mount_tops(tmp_path: Path, ws: Path) -> None:
    (tmp_path / "in").mkdir()
    mounts = [
        Mount("/workspace", ws),
        Mount("/userinput", tmp_path / "in", read_only=True),
        Mount("/mem/deep", memory=True),
    ]
    with VirtualFS(mounts) as fs:
        assert fs.list_dir("/") == ["mem", "userinput", "workspace"]
        assert fs.list_dir("/workspace/..") == ["mem", "userinput", "workspace"]
        assert fs.list_dir("/mem/deep") == []


def test_list_dir_default_is_the_workspace(fs: VirtualFS) -> None:
    fs.write_text("x.txt", "x")
    assert fs.list_dir() == ["x.txt"]


def test_stat_fields(kind: str, fs: VirtualFS, ws: Path) -> None:
    before = time.time()
    fs.write_text("f.txt", "12345")
    fs.mkdir("d")
    info = fs.stat("f.txt")
    assert isinstance(info, FileInfo)
    assert info.path == "/workspace/f.txt"
    assert info.kind == "file"
    assert info.size == 5
    assert before - 5 <= info.modified <= time.time() + 5
    assert info.mode & 0o600 == 0o600
    assert fs.stat("d").kind == "dir"
    assert fs.stat("d").path == "/workspace/d"
    assert fs.stat("/workspace").kind == "dir"
    if kind == "host":
        host = (ws / "f.txt").stat()
        assert info.mode == stat.S_IMODE(host.st_mode)
        assert info.modified == host.st_mtime


def test_stat_reports_host_files_in_an_overlay(ws: Path) -> None:
    (ws / "run.sh").write_text("#!/bin/sh\n")
    (ws / "run.sh").chmod(0o755)
    with make_fs("overlay", ws) as fs:
        info = fs.stat("run.sh")
        assert (info.kind, info.size, info.mode) == ("file", 10, 0o755)


@pytest.mark.parametrize("kind", ["host", "overlay"])
def test_lstat_and_canonical_without_following_the_last_link(
    kind: str, ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (ws / "f.txt").write_text("x")
    (ws / "d").mkdir()
    os.symlink("f.txt", ws / "link")
    os.symlink("d", ws / "dirlink")
    os.symlink(outside / "secret.txt", ws / "out")
    os.symlink(outside, ws / "outdir")
    with make_fs(kind, ws) as fs:
        assert fs.lstat("f.txt").kind == "file"
        assert fs.lstat("d").kind == "dir"
        assert (fs.lstat("link").kind, fs.stat("link").kind) == ("link", "file")
        assert fs.lstat("dirlink").kind == "link"
        assert fs.lstat("out").kind == "link"  # the link itself, not where it leads
        assert fs.canonical("link", follow_last=False) == "/workspace/link"
        assert fs.canonical("link") == "/workspace/f.txt"
        assert fs.canonical("out", follow_last=False) == "/workspace/out"
        assert fs.canonical("dirlink/x", follow_last=False) == "/workspace/d/x"
        with pytest.raises(PathEscapeError):
            fs.lstat("outdir/secret.txt")
        with pytest.raises(PathEscapeError, match=re.escape("/workspace/outdir/secret.txt")):
            fs.canonical("outdir/secret.txt", follow_last=False)
        with pytest.raises(PathEscapeError):
            fs.stat("out")


def test_lstat_on_memory_is_stat(ws: Path) -> None:
    with make_fs("memory", ws) as fs:
        fs.write_text("f.txt", "x")
        assert fs.lstat("f.txt") == fs.stat("f.txt")
        assert fs.canonical("a/b", follow_last=False) == "/workspace/a/b"


def test_exists(fs: VirtualFS) -> None:
    fs.write_text("d/f.txt", "x")
    assert fs.exists("d/f.txt")
    assert fs.exists("d")
    assert fs.exists("/workspace")
    assert not fs.exists("d/missing.txt")
    assert not fs.exists("missing/deeper/x.txt")
    with pytest.raises(PathEscapeError, match=re.escape("/etc/passwd")):
        fs.exists("../../etc/passwd")
    with pytest.raises(PathEscapeError, match="outside every mount"):
        fs.exists("/workspace-evil/x")
    with pytest.raises(PathEscapeError, match="NUL"):
        fs.exists("d/f.txt\x00")


def test_exists_is_false_below_a_file(fs: VirtualFS) -> None:
    """Like os.path.exists: nothing can be below a file, and that is not an escape."""
    fs.write_text("f.txt", "x")
    assert fs.exists("f.txt/below") is False


# -- folders, deletes ------------------------------------------------------------------------


def test_mkdir(fs: VirtualFS) -> None:
    fs.mkdir("a/b/c")
    assert fs.stat("a/b/c").kind == "dir"
    fs.mkdir("a/b/c")  # existing folders are fine
    fs.mkdir("/workspace")
    fs.write_text("f.txt", "x")
    with pytest.raises(NotADirectoryError_, match=re.escape("/workspace/f.txt")):
        fs.mkdir("f.txt")
    with pytest.raises(NotADirectoryError_, match=re.escape("/workspace/f.txt")):
        fs.mkdir("f.txt/sub")
    assert fs.read_text("f.txt") == "x"


def test_delete_file_and_empty_folder(fs: VirtualFS) -> None:
    fs.write_text("d/f.txt", "x")
    fs.delete("d/f.txt")
    assert not fs.exists("d/f.txt")
    fs.delete("d")
    assert not fs.exists("d")
    assert fs.list_dir("/workspace") == []


def test_delete_refuses_a_non_empty_folder(fs: VirtualFS) -> None:
    fs.write_text("d/sub/f.txt", "x")
    with pytest.raises(SandboxError, match=re.escape("/workspace/d")) as caught:
        fs.delete("d")
    assert "not empty" in str(caught.value)
    assert fs.read_text("d/sub/f.txt") == "x"
    fs.delete("d", recursive=True)
    assert not fs.exists("d")
    assert not fs.exists("d/sub/f.txt")


def test_delete_errors(fs: VirtualFS) -> None:
    with pytest.raises(NotFoundError, match=re.escape("/workspace/missing.txt")):
        fs.delete("missing.txt")
    with pytest.raises(SandboxError, match=re.escape("/workspace")):
        fs.delete("/workspace", recursive=True)
    with pytest.raises(PathEscapeError):
        fs.delete("../x")


def test_delete_on_the_host(ws: Path) -> None:
    (ws / "d" / "sub").mkdir(parents=True)
    (ws / "d" / "sub" / "f.txt").write_text("x")
    (ws / "keep.txt").write_text("keep")
    with make_fs("host", ws) as fs:
        fs.delete("d", recursive=True)
    assert sorted(os.listdir(ws)) == ["keep.txt"]


@pytest.mark.parametrize("kind", ["host", "overlay"])
def test_delete_a_symlink_as_itself(kind: str, ws: Path, tmp_path: Path) -> None:
    (ws / "target.txt").write_text("target")
    (ws / "dir").mkdir()
    (ws / "dir" / "inner.txt").write_text("inner")
    os.symlink("target.txt", ws / "link.txt")
    os.symlink("dir", ws / "dirlink")
    with make_fs(kind, ws) as fs:
        fs.delete("link.txt")
        fs.delete("dirlink")
        assert not fs.exists("link.txt")
        assert not fs.exists("dirlink")
        assert fs.read_text("target.txt") == "target"
        assert fs.read_text("dir/inner.txt") == "inner"
        fs.commit()
    assert sorted(os.listdir(ws)) == ["dir", "target.txt"]
    assert (ws / "target.txt").read_text() == "target"
    assert (ws / "dir" / "inner.txt").read_text() == "inner"


@pytest.mark.parametrize("kind", ["host", "overlay"])
def test_recursive_delete_does_not_follow_links_out(kind: str, ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("precious")
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("x")
    os.symlink(outside, ws / "d" / "out")
    with make_fs(kind, ws) as fs:
        fs.delete("d", recursive=True)
        fs.commit()
    assert os.listdir(ws) == []
    assert (outside / "precious.txt").read_text() == "precious"


# -- moves -----------------------------------------------------------------------------------


def test_move_a_file_within_a_mount(fs: VirtualFS) -> None:
    fs.write_text("a.txt", "a")
    fs.move("a.txt", "sub/dir/b.txt")  # missing folders are created
    assert fs.read_text("sub/dir/b.txt") == "a"
    assert not fs.exists("a.txt")


@pytest.mark.parametrize("kind", ["host", "memory"])
def test_move_a_folder_within_a_mount(kind: str, ws: Path) -> None:
    with make_fs(kind, ws) as fs:
        fs.write_text("src/one.txt", "1")
        fs.write_text("src/deep/two.txt", "2")
        fs.move("src", "dst")
        assert fs.read_text("dst/one.txt") == "1"
        assert fs.read_text("dst/deep/two.txt") == "2"
        assert not fs.exists("src")


def test_overlay_refuses_to_move_a_folder(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "one.txt").write_text("1")
    with make_fs("overlay", ws) as fs:
        with pytest.raises(SandboxError, match=re.escape("/workspace/src")):
            fs.move("src", "dst")
        assert fs.read_text("src/one.txt") == "1"


def test_move_overwrite_flag(fs: VirtualFS) -> None:
    fs.write_text("a.txt", "a")
    fs.write_text("b.txt", "b")
    with pytest.raises(ExistsError, match=re.escape("/workspace/b.txt")):
        fs.move("a.txt", "b.txt")
    assert fs.read_text("a.txt") == "a"
    assert fs.read_text("b.txt") == "b"
    fs.move("a.txt", "b.txt", overwrite=True)
    assert fs.read_text("b.txt") == "a"
    assert not fs.exists("a.txt")


def test_move_missing_source(fs: VirtualFS) -> None:
    with pytest.raises(NotFoundError, match=re.escape("/workspace/missing.txt")):
        fs.move("missing.txt", "b.txt")
    assert not fs.exists("b.txt")


@pytest.fixture
def two_mounts(ws: Path) -> Iterator[VirtualFS]:
    with VirtualFS([Mount("/workspace", ws), Mount("/mem", memory=True)]) as fs:
        yield fs


def test_move_across_mounts_copies_then_deletes(two_mounts: VirtualFS, ws: Path) -> None:
    fs = two_mounts
    fs.write_text("/workspace/a.txt", "from host")
    before = fs.written
    fs.move("/workspace/a.txt", "/mem/sub/a.txt")
    assert fs.read_text("/mem/sub/a.txt") == "from host"
    assert not fs.exists("/workspace/a.txt")
    assert not (ws / "a.txt").exists()
    assert fs.written == before + len("from host")  # the copy counts as a write
    fs.move("/mem/sub/a.txt", "/workspace/back.txt")
    assert (ws / "back.txt").read_text() == "from host"
    assert not fs.exists("/mem/sub/a.txt")


def test_move_across_mounts_overwrite_and_folders(two_mounts: VirtualFS) -> None:
    fs = two_mounts
    fs.write_text("/workspace/a.txt", "a")
    fs.write_text("/mem/a.txt", "old")
    with pytest.raises(ExistsError, match=re.escape("/mem/a.txt")):
        fs.move("/workspace/a.txt", "/mem/a.txt")
    assert fs.read_text("/workspace/a.txt") == "a"
    fs.move("/workspace/a.txt", "/mem/a.txt", overwrite=True)
    assert fs.read_text("/mem/a.txt") == "a"
    fs.mkdir("/workspace/folder")
    with pytest.raises(SandboxError, match=re.escape("/workspace/folder")):
        fs.move("/workspace/folder", "/mem/folder")
    assert fs.exists("/workspace/folder")


# -- read-only and nested mounts -------------------------------------------------------------


@pytest.fixture
def with_readonly(tmp_path: Path, ws: Path) -> Iterator[tuple[VirtualFS, Path]]:
    inbox = tmp_path / "inbox"
    (inbox / "sub").mkdir(parents=True)
    (inbox / "brief.txt").write_text("brief")
    mounts = [Mount("/workspace", ws), Mount("/userinput", inbox, read_only=True)]
    with VirtualFS(mounts) as fs:
        yield fs, inbox


READ_ONLY_OPERATIONS: list[tuple[str, Callable[[VirtualFS], object], str]] = [
    ("write", lambda fs: fs.write_text("/userinput/new.txt", "x"), "/userinput/new.txt"),
    ("overwrite", lambda fs: fs.write_text("/userinput/brief.txt", "x"), "/userinput/brief.txt"),
    ("delete", lambda fs: fs.delete("/userinput/brief.txt"), "/userinput/brief.txt"),
    ("delete-folder", lambda fs: fs.delete("/userinput/sub", recursive=True), "/userinput/sub"),
    ("mkdir", lambda fs: fs.mkdir("/userinput/new"), "/userinput/new"),
    ("move-from", lambda fs: fs.move("/userinput/brief.txt", "b.txt"), "/userinput/brief.txt"),
    ("move-to", lambda fs: fs.move("/workspace/w.txt", "/userinput/w.txt"), "/userinput/w.txt"),
    ("move-within", lambda fs: fs.move("/userinput/brief.txt", "/userinput/b.txt"), "/userinput"),
    ("dotdot-into", lambda fs: fs.write_text("../userinput/x", "x"), "/userinput/x"),
]


@pytest.mark.parametrize(
    ("operation", "path"),
    [pytest.param(op, path, id=name) for name, op, path in READ_ONLY_OPERATIONS],
)
def test_read_only_mount_refuses_changes(
    with_readonly: tuple[VirtualFS, Path],
    operation: Callable[[VirtualFS], object],
    path: str,
    ws: Path,
) -> None:
    fs, inbox = with_readonly
    fs.write_text("/workspace/w.txt", "w")
    before = snapshot(inbox)
    with pytest.raises(ReadOnlyError) as caught:
        operation(fs)
    assert path in str(caught.value)
    assert "read-only" in str(caught.value)
    assert isinstance(caught.value, PermissionError)
    assert snapshot(inbox) == before
    assert fs.read_text("/userinput/brief.txt") == "brief"
    assert fs.read_text("/workspace/w.txt") == "w"
    assert fs.list_dir("/userinput") == ["brief.txt", "sub"]


@pytest.mark.parametrize("reverse", [False, True], ids=["outer-first", "inner-first"])
def test_nested_mounts_longest_prefix_wins(tmp_path: Path, ws: Path, reverse: bool) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "table.csv").write_text("a,b")
    mounts = [Mount("/workspace", ws), Mount("/workspace/data", data, read_only=True)]
    with VirtualFS(reversed(mounts) if reverse else mounts) as fs:
        assert fs.read_text("/workspace/data/table.csv") == "a,b"
        assert fs.read_text("data/table.csv") == "a,b"
        with pytest.raises(ReadOnlyError, match=re.escape("/workspace/data/new.csv")):
            fs.write_text("/workspace/data/new.csv", "x")
        with pytest.raises(ReadOnlyError, match=re.escape("/workspace/data")):
            fs.delete("/workspace/data")
        assert "data" in fs.list_dir("/workspace")  # the nested mount shows as a folder
        fs.write_text("/workspace/data-evil/x.txt", "x")  # a sibling, not the nested mount
        assert (ws / "data-evil" / "x.txt").read_text() == "x"
        assert fs.canonical("/workspace/data/../data/table.csv") == "/workspace/data/table.csv"
        assert fs.host_path("/workspace/data/table.csv") == (data / "table.csv").resolve()
    assert sorted(os.listdir(data)) == ["table.csv"]


def test_host_path(ws: Path) -> None:
    (ws / "real").mkdir()
    os.symlink("real", ws / "alias")
    with VirtualFS([Mount("/workspace", ws), Mount("/mem", memory=True)]) as fs:
        assert fs.host_path("/workspace/real/x.txt") == ws.resolve() / "real" / "x.txt"
        assert fs.host_path("alias/x.txt") == ws.resolve() / "real" / "x.txt"
        assert fs.host_path("/workspace") == ws.resolve()
        with pytest.raises(SandboxError, match=re.escape("/mem/x")):
            fs.host_path("/mem/x")
        with pytest.raises(PathEscapeError):
            fs.host_path("../x")


def test_memory_mount_never_touches_the_host(tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    with VirtualFS([Mount("/workspace", memory=True)]) as fs:
        fs.write_text("a/b.txt", "x")
        fs.mkdir("c")
        fs.move("a/b.txt", "c/b.txt")
        fs.delete("a")
        assert fs.list_dir() == ["c"]
    assert snapshot(tmp_path) == before


# -- quotas ----------------------------------------------------------------------------------


def test_max_file_bytes_on_write(fs: VirtualFS) -> None:
    fs.max_file_bytes = 10
    fs.write_bytes("ok.bin", b"x" * 10)  # exactly the limit is fine
    with pytest.raises(QuotaError, match=re.escape("/workspace/big.bin")) as caught:
        fs.write_bytes("big.bin", b"x" * 11)
    assert "10" in str(caught.value)
    assert not fs.exists("big.bin")
    assert fs.written == 10


def test_max_file_bytes_on_read(kind: str, fs: VirtualFS, ws: Path) -> None:
    if kind == "memory":
        fs.write_bytes("big.bin", b"x" * 100)
    else:
        (ws / "big.bin").write_bytes(b"x" * 100)
    fs.max_file_bytes = 99
    with pytest.raises(QuotaError, match=re.escape("/workspace/big.bin")):
        fs.read_bytes("big.bin")
    with pytest.raises(QuotaError, match=re.escape("/workspace/big.bin")):
        fs.read_text("big.bin")
    fs.max_file_bytes = 100
    assert len(fs.read_bytes("big.bin")) == 100


def test_max_file_bytes_on_read_of_a_staged_file(ws: Path) -> None:
    with make_fs("overlay", ws) as fs:
        fs.write_bytes("staged.bin", b"x" * 100)
        fs.max_file_bytes = 50
        with pytest.raises(QuotaError, match=re.escape("/workspace/staged.bin")):
            fs.read_bytes("staged.bin")


def test_max_write_bytes_across_writes(kind: str, ws: Path) -> None:
    with make_fs(kind, ws, max_write_bytes=100) as fs:
        fs.write_bytes("a.bin", b"x" * 60)
        fs.write_bytes("b.bin", b"x" * 40)
        assert fs.written == 100
        with pytest.raises(QuotaError, match=re.escape("/workspace/c.bin")) as caught:
            fs.write_bytes("c.bin", b"x")
        assert "100" in str(caught.value)
        assert not fs.exists("c.bin")
        assert fs.written == 100


def test_failed_writes_are_refunded(kind: str, ws: Path) -> None:
    with make_fs(kind, ws, max_write_bytes=100) as fs:
        fs.mkdir("folder")
        fs.write_text("file.txt", "")
        with pytest.raises(IsADirectoryError_):
            fs.write_bytes("folder", b"x" * 60)
        with pytest.raises(NotADirectoryError_):
            fs.write_bytes("file.txt/below", b"x" * 60)
        with pytest.raises(PathEscapeError):
            fs.write_bytes("../outside.bin", b"x" * 60)
        assert fs.written == 0
        fs.write_bytes("all.bin", b"x" * 100)  # the whole budget is still there
        assert fs.written == 100


def test_failed_move_across_mounts_is_refunded(ws: Path) -> None:
    with VirtualFS(
        [Mount("/workspace", ws), Mount("/mem", memory=True)], max_write_bytes=100
    ) as fs:
        fs.write_bytes("/mem/src.bin", b"x" * 30)
        fs.mkdir("/workspace/folder")
        with pytest.raises(IsADirectoryError_):
            fs.move("/mem/src.bin", "/workspace/folder", overwrite=True)
        assert fs.read_bytes("/mem/src.bin") == b"x" * 30
        assert fs.written == 30


# -- errors ----------------------------------------------------------------------------------


def test_not_text(fs: VirtualFS) -> None:
    fs.write_bytes("nul.bin", b"abc\x00def")
    fs.write_bytes("latin1.txt", "café".encode("latin-1"))
    with pytest.raises(NotTextError, match=re.escape("/workspace/nul.bin")) as binary:
        fs.read_text("nul.bin")
    assert "binary" in str(binary.value)
    with pytest.raises(NotTextError, match=re.escape("/workspace/latin1.txt")) as latin:
        fs.read_text("latin1.txt")
    assert "UTF-8" in str(latin.value)
    assert isinstance(latin.value, ValueError)
    assert fs.read_bytes("nul.bin") == b"abc\x00def"


ERROR_CASES: list[tuple[str, Callable[[VirtualFS], object], type[SandboxError], str]] = [
    ("read-folder", lambda fs: fs.read_text("d"), IsADirectoryError_, "/workspace/d"),
    ("read-mount", lambda fs: fs.read_bytes("/workspace"), IsADirectoryError_, "/workspace"),
    ("write-over-folder", lambda fs: fs.write_text("d", "x"), IsADirectoryError_, "/workspace/d"),
    ("list-file", lambda fs: fs.list_dir("f.txt"), NotADirectoryError_, "/workspace/f.txt"),
    ("write-below-file", lambda fs: fs.write_text("f.txt/x", "x"), NotADirectoryError_,
     "/workspace/f.txt"),
    ("read-below-file", lambda fs: fs.read_text("f.txt/x"), NotADirectoryError_,
     "/workspace/f.txt"),
    ("read-missing", lambda fs: fs.read_text("missing.txt"), NotFoundError,
     "/workspace/missing.txt"),
    ("read-missing-dir", lambda fs: fs.read_text("nodir/x.txt"), NotFoundError,
     "/workspace/nodir"),
    ("list-missing", lambda fs: fs.list_dir("nodir"), NotFoundError, "/workspace/nodir"),
    ("stat-missing", lambda fs: fs.stat("missing.txt"), NotFoundError, "/workspace/missing.txt"),
    ("delete-missing", lambda fs: fs.delete("d/missing"), NotFoundError, "/workspace/d/missing"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("operation", "error", "path"),
    [pytest.param(op, error, path, id=name) for name, op, error, path in ERROR_CASES],
)
def test_errors_name_the_logical_path(
    fs: VirtualFS, operation: Callable[[VirtualFS], object], error: type[Exception], path: str
) -> None:
    fs.write_text("f.txt", "x")
    fs.write_text("d/inner.txt", "x")
    with pytest.raises(error) as caught:
        operation(fs)
    assert path in str(caught.value)
    assert caught.value.path is not None  # type: ignore[attr-defined]
    assert caught.value.path.startswith("/workspace")  # type: ignore[attr-defined]


def test_errors_are_also_builtin_exceptions(fs: VirtualFS) -> None:
    with pytest.raises(FileNotFoundError):
        fs.read_text("missing")
    fs.mkdir("d")
    with pytest.raises(IsADirectoryError):
        fs.read_text("d")
    fs.write_text("f", "x")
    with pytest.raises(NotADirectoryError):
        fs.list_dir("f")
    with pytest.raises(FileExistsError):
        fs.move("f", "d")
    with pytest.raises(PermissionError):
        fs.read_text("/etc/passwd")


BUILTIN_BASES: list[tuple[type[Exception], type[Exception]]] = [
    (SandboxError, OSError),
    (PathEscapeError, PermissionError),
    (PathDeniedError, PermissionError),
    (ReadOnlyError, PermissionError),
    (QuotaError, OSError),
    (NotFoundError, FileNotFoundError),
    (IsADirectoryError_, IsADirectoryError),
    (NotADirectoryError_, NotADirectoryError),
    (ExistsError, FileExistsError),
    (NotTextError, ValueError),
    (WireError, OSError),  # what a boxed command sent its network's proxy
]


@pytest.mark.parametrize(("error", "builtin"), BUILTIN_BASES, ids=lambda e: e.__name__)
def test_each_sandbox_error_is_a_stockade_error_and_still_its_builtin(
    error: type[Exception], builtin: type[Exception]
) -> None:
    raised = error("/workspace/x: what went wrong", "/workspace/x")
    for base in (StockadeError, SandboxError, OSError, builtin):
        with pytest.raises(base) as caught:
            raise raised
        assert caught.value.path == "/workspace/x"  # type: ignore[attr-defined]
        assert str(caught.value) == "/workspace/x: what went wrong"


def test_every_exception_class_of_the_sandbox_is_checked_above() -> None:
    """A new error class anywhere in the sandbox must be added to BUILTIN_BASES."""
    defined = {
        value
        for module in pkgutil.iter_modules(stockade.sandbox.__path__, "stockade.sandbox.")
        for value in vars(importlib.import_module(module.name)).values()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == module.name
    }
    assert defined == {error for error, _ in BUILTIN_BASES}


def test_pyfakefs_is_imported_with_the_first_memory_mount_not_with_the_sandbox() -> None:
    """pyfakefs brings doctest, unittest and pdb (some 20 ms): only memory mounts need it."""
    code = (
        "import sys\n"
        "import stockade.sandbox as sandbox\n"
        "print('pyfakefs' in sys.modules)\n"
        "sandbox.VirtualFS([sandbox.Mount('/scratch', memory=True)]).close()\n"
        "print('pyfakefs' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("kind", ["host", "overlay"])
def test_a_fifo_is_refused_without_blocking(kind: str, ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    with make_fs(kind, ws) as fs:
        assert fs.stat("pipe").kind == "other"
        assert fs.exists("pipe")
        assert fs.list_dir() == ["pipe"]
        outcome: list[BaseException | bytes] = []

        def read() -> None:
            try:
                outcome.append(fs.read_bytes("pipe"))
            except BaseException as exc:
                outcome.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(5)
        if reader.is_alive():  # unblock it: open the writing end
            with contextlib.suppress(OSError):
                os.close(os.open(ws / "pipe", os.O_WRONLY | os.O_NONBLOCK))
            reader.join(5)
            pytest.fail("reading a FIFO blocked")
    assert len(outcome) == 1
    assert isinstance(outcome[0], SandboxError), outcome
    assert "/workspace/pipe" in str(outcome[0])
    assert "regular file" in str(outcome[0])


def test_not_durable_writes_are_still_atomic_and_clean(ws: Path) -> None:
    (ws / "f.txt").write_text("old")
    (ws / "f.txt").chmod(0o640)
    with make_fs("host", ws, durable=False) as fs:
        for i in range(20):
            fs.write_text("f.txt", f"v{i}")
        assert fs.read_text("f.txt") == "v19"
    assert os.listdir(ws) == ["f.txt"]
    assert stat.S_IMODE((ws / "f.txt").stat().st_mode) == 0o640


# -- construction and closing ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda root: Mount("workspace", root), "absolute", id="relative-prefix"),
        pytest.param(lambda root: Mount("/workspace/", root), "/workspace", id="trailing-slash"),
        pytest.param(lambda root: Mount("/a/../b", root), "'/b'", id="dotdot-prefix"),
        pytest.param(lambda root: Mount("/w/.", root), "'/w'", id="dot-prefix"),
        pytest.param(lambda root: Mount("//w", root), "'/w'", id="double-slash"),
        pytest.param(lambda root: Mount("/m", root, memory=True), "no root", id="memory+root"),
        pytest.param(lambda root: Mount("/m"), "root folder", id="no-root"),
        pytest.param(lambda root: Mount("/m", memory=True, overlay=True), "host root",
                     id="overlay+memory"),
        pytest.param(lambda root: Mount("/m", root, overlay=True, read_only=True), "read_only",
                     id="overlay+read_only"),
        pytest.param(lambda root: Mount(5, root), "absolute", id="prefix-not-text"),  # type: ignore[arg-type]
    ],
)  # fmt: skip
def test_bad_mount_arguments(ws: Path, make: Callable[[Path], Mount], message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        make(ws)
    assert not isinstance(caught.value, SandboxError)


def test_virtualfs_needs_mounts() -> None:
    with pytest.raises(ValueError, match="at least one mount"):
        VirtualFS([])


def test_virtualfs_refuses_duplicate_prefixes(ws: Path) -> None:
    fds = open_fds()
    with pytest.raises(ValueError, match=re.escape("/workspace")):
        VirtualFS([Mount("/workspace", ws), Mount("/workspace", memory=True)])
    assert open_fds() == fds


def test_virtualfs_missing_or_bad_root(tmp_path: Path, ws: Path) -> None:
    fds = open_fds()
    with pytest.raises(NotFoundError, match="does not exist") as missing:
        VirtualFS([Mount("/workspace", ws), Mount("/in", tmp_path / "missing")])
    assert isinstance(missing.value, FileNotFoundError)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError_, match="not a folder"):
        VirtualFS([Mount("/in", tmp_path / "file")])
    assert open_fds() == fds  # the mounts opened before the failure were released


def test_close_and_context_manager(ws: Path) -> None:
    fds = open_fds()
    with VirtualFS([Mount("/workspace", ws), Mount("/o", ws, overlay=True)]) as fs:
        fs.write_text("a.txt", "a")
        assert open_fds() > fds
    assert open_fds() == fds
    fs.close()  # closing twice is harmless
    assert (ws / "a.txt").read_text() == "a"


def test_use_after_close_is_a_clear_error(ws: Path) -> None:
    fs = VirtualFS([Mount("/workspace", ws)])
    fs.close()
    with pytest.raises((SandboxError, ValueError)):
        fs.read_text("a.txt")


# -- overlays --------------------------------------------------------------------------------


@pytest.fixture
def host_tree(ws: Path) -> Path:
    (ws / "a.txt").write_text("hello\nworld\n")
    (ws / "b.txt").write_text("bee\n")
    (ws / "gone.txt").write_text("bye\n")
    (ws / "img.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    (ws / "d").mkdir()
    (ws / "d" / "inner.txt").write_text("inner\n")
    return ws


@pytest.fixture
def overlay(host_tree: Path) -> Iterator[VirtualFS]:
    with make_fs("overlay", host_tree) as fs:
        yield fs


def test_overlay_stages_writes_and_deletes(overlay: VirtualFS, host_tree: Path) -> None:
    before = snapshot(host_tree)
    overlay.write_text("a.txt", "hello\nthere\n")
    overlay.write_text("new/deep/n.txt", "new")
    overlay.delete("gone.txt")
    overlay.delete("d", recursive=True)
    overlay.mkdir("emptynew")
    overlay.move("b.txt", "moved/b.txt")
    assert snapshot(host_tree) == before  # nothing reached the host
    assert overlay.read_text("a.txt") == "hello\nthere\n"  # reads see the staged version
    assert overlay.read_text("new/deep/n.txt") == "new"
    assert overlay.read_text("moved/b.txt") == "bee\n"
    for missing in ("gone.txt", "d", "d/inner.txt", "b.txt"):
        assert not overlay.exists(missing)
        with pytest.raises(NotFoundError):
            overlay.read_bytes(missing)
    assert overlay.stat("new/deep/n.txt").size == 3
    assert overlay.stat("new/deep").kind == "dir"
    assert overlay.stat("emptynew").kind == "dir"


def test_overlay_list_dir_is_the_merged_view(overlay: VirtualFS) -> None:
    overlay.write_text("c.txt", "c")
    overlay.delete("b.txt")
    overlay.mkdir("e")
    overlay.write_text("d/staged.txt", "s")
    assert overlay.list_dir() == ["a.txt", "c.txt", "d", "e", "gone.txt", "img.bin"]
    assert overlay.list_dir("d") == ["inner.txt", "staged.txt"]
    assert overlay.list_dir("e") == []


def test_overlay_changes_with_diffs(overlay: VirtualFS) -> None:
    overlay.write_text("a.txt", "hello\nthere\n")
    overlay.write_text("new.txt", "new\n")
    overlay.write_text("b.txt", "bee\n")  # the same content: no change
    overlay.delete("gone.txt")
    overlay.mkdir("newdir")
    overlay.write_bytes("img.bin", b"\x89PNG\r\n\x1a\n\x00\x01")
    overlay.write_bytes("blob.bin", b"\xff\xfe\x00")
    assert overlay.changes() == [
        Change(
            "/workspace/a.txt",
            "modified",
            "--- a/workspace/a.txt\n+++ b/workspace/a.txt\n@@ -1,2 +1,2 @@\n"
            " hello\n-world\n+there\n",
        ),
        Change(
            "/workspace/blob.bin", "added", "binary file /workspace/blob.bin: absent -> 3 bytes\n"
        ),
        Change(
            "/workspace/gone.txt",
            "deleted",
            "--- a/workspace/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n",
        ),
        Change(
            "/workspace/img.bin",
            "modified",
            "binary file /workspace/img.bin: 9 bytes -> 10 bytes\n",
        ),
        Change(
            "/workspace/new.txt",
            "added",
            "--- /dev/null\n+++ b/workspace/new.txt\n@@ -0,0 +1 @@\n+new\n",
        ),
        Change("/workspace/newdir", "created_dir", ""),
    ]


def test_overlay_diff_calls_nul_bytes_binary(overlay: VirtualFS) -> None:
    """read_text calls data with NUL bytes binary; the diff must not print it as text."""
    overlay.write_bytes("nul.bin", b"\x00\x01\x02")
    (change,) = overlay.changes()
    assert change.diff == "binary file /workspace/nul.bin: absent -> 3 bytes\n"


def test_overlay_discard(overlay: VirtualFS, host_tree: Path) -> None:
    before = snapshot(host_tree)
    overlay.write_text("a.txt", "changed")
    overlay.write_text("x/new.txt", "new")
    overlay.delete("gone.txt")
    overlay.mkdir("emptynew")
    assert len(overlay.changes()) == 4
    overlay.discard()
    assert overlay.changes() == []
    assert overlay.read_text("a.txt") == "hello\nworld\n"
    assert overlay.read_text("gone.txt") == "bye\n"
    assert not overlay.exists("x")
    assert not overlay.exists("emptynew")
    assert snapshot(host_tree) == before


def test_overlay_commit_applies_everything(overlay: VirtualFS, host_tree: Path) -> None:
    overlay.write_text("a.txt", "hello\nthere\n")
    overlay.write_text("new/deep/n.txt", "new")
    overlay.delete("gone.txt")
    overlay.delete("d", recursive=True)
    overlay.mkdir("emptynew")
    overlay.move("b.txt", "moved.txt")
    overlay.commit()
    assert overlay.changes() == []
    assert (host_tree / "a.txt").read_text() == "hello\nthere\n"
    assert (host_tree / "new" / "deep" / "n.txt").read_text() == "new"
    assert (host_tree / "moved.txt").read_text() == "bee\n"
    assert (host_tree / "emptynew").is_dir()
    assert sorted(os.listdir(host_tree)) == ["a.txt", "emptynew", "img.bin", "moved.txt", "new"]
    assert not stray_temp_files(host_tree)
    assert overlay.read_text("moved.txt") == "bee\n"  # the view is the host again


def test_overlay_commit_preserves_file_mode(ws: Path) -> None:
    (ws / "run.sh").write_text("#!/bin/sh\n")
    (ws / "run.sh").chmod(0o755)
    with make_fs("overlay", ws) as fs:
        fs.write_text("run.sh", "#!/bin/sh\necho hi\n")
        fs.commit()
    assert stat.S_IMODE((ws / "run.sh").stat().st_mode) == 0o755


def test_overlay_write_through_a_link_inside_stages_the_target(ws: Path) -> None:
    (ws / "real.txt").write_text("old")
    os.symlink("real.txt", ws / "alias.txt")
    with make_fs("overlay", ws) as fs:
        fs.write_text("alias.txt", "new")
        assert fs.read_text("real.txt") == "new"
        assert [c.path for c in fs.changes()] == ["/workspace/real.txt"]
        fs.commit()
    assert (ws / "real.txt").read_text() == "new"
    assert os.readlink(ws / "alias.txt") == "real.txt"


def test_overlay_delete_then_recreate_a_folder(overlay: VirtualFS, host_tree: Path) -> None:
    """Deleting a folder and writing a new file in it: the old files stay deleted."""
    overlay.delete("d", recursive=True)
    overlay.write_text("d/new.txt", "new")
    assert overlay.list_dir("d") == ["new.txt"]
    assert not overlay.exists("d/inner.txt")
    with pytest.raises(NotFoundError):
        overlay.read_text("d/inner.txt")
    overlay.commit()
    assert os.listdir(host_tree / "d") == ["new.txt"]


def _staged(fs: VirtualFS) -> list[tuple[str, str]]:
    return [(c.path, c.kind) for c in fs.changes()]


def test_overlay_commit_is_all_or_nothing(overlay: VirtualFS, host_tree: Path) -> None:
    """One staged write cannot be made at commit time (its folder was replaced by a file on the
    host): every other change is rolled back, nothing is left behind, the changes stay staged,
    and the commit works once the host is fixed."""
    (host_tree / "sub").mkdir()
    (host_tree / "sub" / "s.txt").write_text("s")
    overlay.write_text("a.txt", "hello\nthere\n")
    overlay.write_text("fresh/dir/f.txt", "fresh")
    overlay.write_text("z.txt", "z")
    overlay.write_text("sub/new.txt", "new")
    overlay.delete("gone.txt")
    overlay.delete("d", recursive=True)
    overlay.mkdir("emptynew")
    staged = _staged(overlay)
    # sabotage: the folder sub/ becomes a file
    shutil.rmtree(host_tree / "sub")
    (host_tree / "sub").write_text("now a file")
    before = snapshot(host_tree)
    with pytest.raises(SandboxError):
        overlay.commit()
    assert snapshot(host_tree) == before
    assert not stray_temp_files(host_tree)
    assert _staged(overlay) == staged
    assert overlay.read_text("a.txt") == "hello\nthere\n"
    # fixed, the same commit goes through
    (host_tree / "sub").unlink()
    (host_tree / "sub").mkdir()
    overlay.commit()
    assert overlay.changes() == []
    assert (host_tree / "sub" / "new.txt").read_text() == "new"
    assert (host_tree / "fresh" / "dir" / "f.txt").read_text() == "fresh"
    assert (host_tree / "a.txt").read_text() == "hello\nthere\n"
    assert not (host_tree / "gone.txt").exists()
    assert not (host_tree / "d").exists()
    assert not stray_temp_files(host_tree)


def test_overlay_commit_rolls_back_moves_already_made(
    overlay: VirtualFS, host_tree: Path, tmp_path: Path
) -> None:
    """The failure comes late, after old files were already moved aside: a folder of a staged
    delete was swapped for a link out of the mount. Everything is put back; the outside is
    untouched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "inner.txt").write_text("outside content")
    (host_tree / "k" / "deep").mkdir(parents=True)
    (host_tree / "k" / "deep" / "long.txt").write_text("long")
    (host_tree / "s").mkdir()
    (host_tree / "s" / "inner.txt").write_text("inside")
    overlay.delete("k/deep/long.txt")  # the longest path: moved aside first
    overlay.delete("s/inner.txt")
    overlay.write_text("a.txt", "changed")
    overlay.write_text("new.txt", "new")
    staged = _staged(overlay)
    (host_tree / "s").rename(host_tree / "s_real")
    os.symlink(outside, host_tree / "s")
    before = snapshot(host_tree)
    outside_before = snapshot(outside)
    with pytest.raises(PathEscapeError):
        overlay.commit()
    assert snapshot(host_tree) == before
    assert snapshot(outside) == outside_before
    assert (host_tree / "k" / "deep" / "long.txt").read_text() == "long"
    assert not stray_temp_files(host_tree)
    # put the folder back: the changes are still staged, and the commit goes through
    (host_tree / "s").unlink()
    (host_tree / "s_real").rename(host_tree / "s")
    assert _staged(overlay) == staged
    overlay.commit()
    assert not (host_tree / "k" / "deep" / "long.txt").exists()
    assert not (host_tree / "s" / "inner.txt").exists()
    assert (host_tree / "new.txt").read_text() == "new"
    assert (outside / "inner.txt").read_text() == "outside content"


def test_overlay_over_a_nested_mount_of_its_own_folder(tmp_path: Path) -> None:
    """Changes are staged per overlay mount; commit applies all of them."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    mounts = [Mount("/workspace", one, overlay=True), Mount("/other", two, overlay=True)]
    with VirtualFS(mounts) as fs:
        fs.write_text("/workspace/a.txt", "a")
        fs.write_text("/other/b.txt", "b")
        assert [c.path for c in fs.changes()] == ["/workspace/a.txt", "/other/b.txt"]
        assert os.listdir(one) == []
        assert os.listdir(two) == []
        fs.commit()
    assert (one / "a.txt").read_text() == "a"
    assert (two / "b.txt").read_text() == "b"


# -- guarded views ---------------------------------------------------------------------------


class Guard:
    """A guard that records what it is asked and refuses every path under ``refused``."""

    def __init__(self, *refused: str) -> None:
        self.refused = refused
        self.asked: list[tuple[str, str]] = []

    def __call__(self, path: str, access: str) -> str | None:
        self.asked.append((path, access))
        if any(path == r or path.startswith(r + "/") for r in self.refused):
            return f"{path} is kept from {access}s"
        return None


def test_a_guarded_view_asks_about_each_operation_as_what_it_is(fs: VirtualFS) -> None:
    seed(fs, {"a.txt": "a", "d/b.txt": "b"})
    guard = Guard()
    view = fs.guarded(guard)
    steps: list[tuple[Callable[[], object], list[tuple[str, str]]]] = [
        (lambda: view.read_text("a.txt"), [("/workspace/a.txt", "read")]),
        (lambda: view.list_dir("d"), [("/workspace/d", "read")]),
        (lambda: view.stat("d/b.txt"), [("/workspace/d/b.txt", "read")]),
        (lambda: view.write_text("c.txt", "c"), [("/workspace/c.txt", "write")]),
        (lambda: view.mkdir("e"), [("/workspace/e", "write")]),
        (lambda: view.delete("c.txt"), [("/workspace/c.txt", "delete")]),
        (
            lambda: view.move("a.txt", "e/a.txt"),
            [("/workspace/a.txt", "delete"), ("/workspace/e/a.txt", "write")],
        ),
    ]
    for step, expected in steps:
        guard.asked.clear()
        step()
        assert sorted(set(guard.asked)) == sorted(expected), guard.asked
    assert fs.read_text("e/a.txt") == "a"


def test_a_refusal_names_the_path_the_access_and_the_reason(fs: VirtualFS) -> None:
    seed(fs, {"vault/key.txt": SECRET_TEXT, "open.txt": "open"})
    view = fs.guarded(Guard("/workspace/vault"))
    with pytest.raises(PathDeniedError) as refused:
        view.read_text("vault/key.txt")
    assert refused.value.path == "/workspace/vault/key.txt"
    assert refused.value.reason == "/workspace/vault/key.txt is kept from reads"
    assert str(refused.value).startswith("/workspace/vault/key.txt may not be read by this call:")
    assert isinstance(refused.value, PermissionError)
    for step in (
        lambda: view.list_dir("vault"),
        lambda: view.stat("vault/key.txt"),
        lambda: view.exists("vault/key.txt"),  # a refusal is not absence
        lambda: view.write_text("vault/key.txt", "x"),
        lambda: view.delete("vault/key.txt"),
        lambda: view.move("vault/key.txt", "stolen.txt"),
        lambda: view.move("open.txt", "vault/open.txt"),
    ):
        with pytest.raises(PathDeniedError):
            step()
    assert fs.read_text("vault/key.txt") == SECRET_TEXT  # the file system itself is not guarded
    assert fs.read_text("open.txt") == "open"
    assert not fs.exists("stolen.txt")


SECRET_TEXT = "the secret text\n"


@pytest.mark.parametrize("kind", ["host", "overlay"])
def test_links_are_judged_where_they_lead(kind: str, ws: Path) -> None:
    (ws / "vault").mkdir()
    (ws / "vault" / "key.txt").write_text(SECRET_TEXT)
    (ws / "ok.txt").write_text("ok\n")
    os.symlink("vault/key.txt", ws / "to-key")
    os.symlink("vault", ws / "to-vault")
    os.symlink("ok.txt", ws / "to-ok")
    with make_fs(kind, ws) as fs:
        guard = Guard("/workspace/vault")
        view = fs.guarded(guard)
        for step in (
            lambda: view.read_text("to-key"),
            lambda: view.read_text("to-vault/key.txt"),
            lambda: view.stat("to-key"),
            lambda: view.list_dir("to-vault"),
            lambda: view.write_text("to-key", "overwritten"),  # a write lands on the target
        ):
            with pytest.raises(PathDeniedError) as refused:
                step()
            assert refused.value.path is not None
            assert refused.value.path.startswith("/workspace/vault"), refused.value.path
            assert SECRET_TEXT not in str(refused.value)
        assert view.read_text("to-ok") == "ok\n"
        view.write_text("to-ok", "through the link\n")
        assert ("/workspace/ok.txt", "write") in guard.asked
        assert view.lstat("to-key").kind == "link"  # the link itself, not what it leads to
        view.delete("to-key")  # deleted as itself: judged as itself
        assert ("/workspace/to-key", "delete") in guard.asked
        fs.commit()
    assert (ws / "vault" / "key.txt").read_text() == SECRET_TEXT
    assert (ws / "ok.txt").read_text() == "through the link\n"
    assert not (ws / "to-key").is_symlink()


@pytest.mark.parametrize("kind", ["host", "memory"])
def test_moving_or_deleting_a_folder_judges_everything_in_it(kind: str, ws: Path) -> None:
    with make_fs(kind, ws) as fs:
        seed(fs, {"d/x.txt": "x", "d/e/key.txt": SECRET_TEXT})
        guard = Guard("/workspace/d/e/key.txt", "/workspace/elsewhere/e/key.txt")
        view = fs.guarded(guard)
        with pytest.raises(PathDeniedError) as refused:
            view.move("d", "elsewhere")
        assert refused.value.path == "/workspace/d/e/key.txt"
        with pytest.raises(PathDeniedError):
            view.delete("d", recursive=True)
        assert fs.read_text("d/e/key.txt") == SECRET_TEXT
        assert not fs.exists("elsewhere")
        # a folder holding nothing the guard protects moves as before
        seed(fs, {"plain/a.txt": "a", "plain/sub/b.txt": "b"})
        guard.asked.clear()
        view.move("plain", "moved")
        assert {
            ("/workspace/plain/a.txt", "delete"),
            ("/workspace/moved/a.txt", "write"),
            ("/workspace/plain/sub/b.txt", "delete"),
            ("/workspace/moved/sub/b.txt", "write"),
        } <= set(guard.asked)
        assert fs.read_text("moved/sub/b.txt") == "b"


def test_a_refused_write_leaves_nothing_behind(fs: VirtualFS, kind: str, ws: Path) -> None:
    view = fs.guarded(Guard("/workspace/new"))
    with pytest.raises(PathDeniedError):
        view.write_text("new/deep/file.txt", "x")
    with pytest.raises(PathDeniedError):
        view.mkdir("new/deep")
    assert not fs.exists("new")
    assert fs.changes() == []
    assert fs.written == 0
    if kind == "host":
        assert not (ws / "new").exists()
        assert stray_temp_files(ws) == []


def test_a_view_shares_mounts_quota_and_locks_and_closing_it_closes_nothing(ws: Path) -> None:
    with VirtualFS([Mount("/workspace", ws)], max_write_bytes=10) as fs:
        view = fs.guarded(Guard())
        view.write_text("a.txt", "12345")
        assert fs.written == 5
        with pytest.raises(QuotaError):
            fs.write_text("b.txt", "123456")  # the view's bytes count against the same quota
        view.close()
        with view:
            pass
        assert fs.read_text("a.txt") == "12345"  # still open
        both = view.guarded(Guard("/workspace/a.txt"))
        with pytest.raises(PathDeniedError):
            both.read_text("a.txt")
        assert view.guard is not None
        assert fs.guard is None
    with pytest.raises(SandboxError, match="closed"):
        view.read_text("a.txt")
