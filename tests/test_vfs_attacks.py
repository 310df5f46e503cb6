"""Attacks on the virtual filesystem's path handling, and the benign paths that must keep working.

Every case of the table runs against each mount kind it makes sense for: a host mount, an overlay
over the same host folder (the case's changes are then committed, so the commit is attacked too),
and a memory mount seeded with the same regular files (memory mounts hold no links, so the link
cases skip it). After every case: nothing outside the workspace changed (names, sizes, mtimes,
content hashes), a refusal is the expected error class and its message names the path, and
"TOP-SECRET" appears in no result and no message.

Where the cases come from (the prefix of each case id):

* ``MCP``  modelcontextprotocol/servers, src/filesystem/__tests__/path-validation.test.ts
  (traversal, prefix confusion, null bytes, percent names, symlink escapes, new files under a
  symlinked parent, rename over a symlink, nested symlink chains, hard links);
* ``GO``   golang/go, src/os/root_test.go, ``rootTestCases`` (".." escapes, absolute symlinks,
  symlink chains, dangling symlinks, symlink cycles, "symlink dotdot slash", Remove of a link);
* ``SJ``   cyphar/filepath-securejoin, join_test.go (links to "/", many-".." links, lexical vs
  non-lexical "..", loops, ENOTDIR, dangling relative links);
* ``PATT`` swisskyrepo/PayloadsAllTheThings, "Directory Traversal" payloads (``../``, ``..\\``,
  ``%2e%2e%2f`` and double encoding, ``....//``, ``..;/``, overlong UTF-8 ``%c0%ae``, NUL,
  fullwidth look-alikes, ``~``, ``$HOME``), which must all be taken literally, never decoded;
* ``OWN``  cases from Stockade's threat model (read-only mounts, quotas, mount root).

Where the sandbox deliberately differs from a source, the case says so: ``..`` is resolved
lexically before any link is looked at (the issue asks for it; Go and securejoin resolve it
physically), and absolute links that stay inside the mount work (Go's os.Root refuses them).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import snapshot, stray_temp_files

import stockade.sandbox.hostroot
from stockade.sandbox import (
    IsADirectoryError_,
    Mount,
    NotADirectoryError_,
    NotFoundError,
    PathDeniedError,
    PathEscapeError,
    QuotaError,
    ReadOnlyError,
    SandboxError,
    VirtualFS,
    openat2_available,
)
from stockade.sandbox.logical import normalize, split

SECRET = "TOP-SECRET"
MAX_FILE = 64 * 1024
KINDS = ("host", "overlay", "memory")

# -- the layout ------------------------------------------------------------------------------

# regular files, the same in every mount kind (memory mounts get them through the VFS)
FILES = {
    "file.txt": "hello",
    "target.txt": "target content",
    ".env": "DOTFILE=1",
    "my notes.txt": "notes with spaces",
    "ünïcødé.txt": "unicode name",
    "café.txt": "composed",
    "日本語/ファイル.txt": "japanese",
    "dir/sibling.txt": "sib",
    "dir/nested/deep.txt": "deep",
    "sub/file.txt": "sub file",
    "go/g/c/target": "go-target",
    "sj/cousinparent/cousin/test": "cousin",
}
DIRS = ("empty_dir", "ldir", "go/a", "go/g/h", "goesc/a", "sj/subdir")
BIG = "big.bin"  # over MAX_FILE, created behind the quota's back


def _links(base: Path) -> dict[str, str]:
    """Symlinks of the host workspace: name -> target ($WS, $OUT, $EVIL are host folders)."""
    ws, out, evil = base / "workspace", base / "outside", base / "workspace-evil"
    return {
        # inside -> inside: must work
        "link_in_rel": "target.txt",
        "link_in_abs": f"{ws}/target.txt",
        "link_dir_in": "dir",
        "link_dir_in_abs": f"{ws}/dir",
        "link_dot": "dir/.",
        "ldir/link_up": "../dir/sibling.txt",
        "ldir/link_up_root": "..",
        "chain_in_a": "chain_in_b",
        "chain_in_b": "target.txt",
        "dangling_in": "missing_in.txt",
        "link_root": ".",
        "link_root_abs": str(ws),
        # inside -> outside: must be refused
        "link_out_rel": "../outside/secret.txt",
        "link_out_abs": f"{out}/secret.txt",
        "link_out_dir_rel": "../outside",
        "link_out_dir_abs": str(out),
        "link_evil": str(evil),
        "link_evil_rel": "../workspace-evil/evil.txt",
        "chain_a": "chain_b",
        "chain_b": "../outside/secret.txt",
        "dangling_out": "../outside/missing.txt",
        "dangling_out_abs": f"{out}/new_file.txt",
        "link_slash": "/",
        "link_dotdot": "..",
        "ldir/link_dotdot2": "../..",
        "link_escape_return": "../workspace/target.txt",
        "loop_a": "loop_b",
        "loop_b": "loop_a",
        "loop_self": "loop_self",
        # Go's "symlink chain" and "symlink chain escapes", inside go/ and goesc/
        "go/link": "a/b/c/target",
        "go/a/b": "e",
        "go/a/e": "../f",
        "go/f": "g/h/i",
        "go/g/h/i": "..",
        "goesc/link": "a/b/c/target",
        "goesc/a/b": "e",
        "goesc/a/e": "../../../workspace",
        # securejoin's TestSymlink / TestNonLexical / TestSymlinkLoop, inside sj/
        "sj/etc": "somepath",
        "sj/etclink": "../../../../../../../../../../../../../etc",
        "sj/passwd": "/../../../../../../../../../../../../../etc/passwd",
        "sj/subdir/link": "../cousinparent/cousin",
        "sj/subdir/link2": "/../cousinparent/cousin",
        "sj/self": "/../../../../../../../../../../../../../../../../self",
    }


@dataclass(frozen=True)
class Layout:
    base: Path
    ws: Path
    outside: Path


def build_layout(base: Path, *, host_workspace: bool) -> Layout:
    """The outside world (a secret, a ``workspace-evil`` sibling, a read-only input folder) and,
    for host and overlay mounts, the workspace with its files, links and a hard link."""
    out = base / "outside"
    (out / "sub").mkdir(parents=True)
    (out / "secret.txt").write_text(SECRET)
    (out / "sub" / "deeper.txt").write_text(f"{SECRET} deeper")
    (base / "workspace-evil").mkdir()
    (base / "workspace-evil" / "evil.txt").write_text(f"{SECRET} evil")
    (base / "userinput").mkdir()
    (base / "userinput" / "brief.txt").write_text("brief")
    ws = base / "workspace"
    ws.mkdir()
    if host_workspace:
        for name, text in FILES.items():
            (ws / name).parent.mkdir(parents=True, exist_ok=True)
            (ws / name).write_text(text)
        for name in DIRS:
            (ws / name).mkdir(parents=True, exist_ok=True)
        (ws / BIG).write_bytes(b"B" * (MAX_FILE + 1))
        for name, target in _links(base).items():
            os.symlink(target, ws / name)
        os.link(out / "secret.txt", ws / "hardlink.txt")
    return Layout(base, ws, out)


def make_fs(kind: str, layout: Layout) -> VirtualFS:
    """A VirtualFS with ``/workspace`` of the given kind and a read-only ``/userinput``."""
    if kind == "memory":
        workspace = Mount("/workspace", memory=True)
    else:
        workspace = Mount("/workspace", layout.ws, overlay=kind == "overlay")
    fs = VirtualFS(
        [workspace, Mount("/userinput", layout.base / "userinput", read_only=True)],
        max_file_bytes=MAX_FILE,
        durable=False,
    )
    if kind == "memory":
        for name, text in FILES.items():
            fs.write_text(name, text)
        for name in DIRS:
            fs.mkdir(name)
        fs.max_file_bytes = MAX_FILE + 1
        fs.write_bytes(BIG, b"B" * (MAX_FILE + 1))
        fs.max_file_bytes = MAX_FILE
    return fs


def names_path(message: str, *paths: str) -> bool:
    """Whether an error message names one of ``paths``: as given, as its logical form, or by an
    ancestor inside a mount (the link or folder on the way that caused the refusal)."""
    for raw in paths:
        if not raw.strip():
            if "empty" in message:
                return True
            continue
        if raw in message or repr(raw) in message or (len(raw) > 80 and raw[:40] in message):
            return True
        try:
            logical = normalize(raw)
        except SandboxError:
            continue
        if logical in message:
            return True
        parts = split(logical)
        if any("/" + "/".join(parts[:n]) in message for n in range(2, len(parts))):
            return True
    return False


# -- the table -------------------------------------------------------------------------------

OK = "works"
SAFE = "works, or refused with PathEscapeError"
ANY = object()
ABSENT = object()
DIR = object()


@dataclass(frozen=True)
class Case:
    """One case: ``setup`` says what of the layout it relies on; ``op`` runs on ``path`` (and
    ``target`` for move); ``expect`` is OK, SAFE or the error class of the refusal; ``result``
    is the expected return value (or a predicate on it); ``after`` lists (path, expected
    content | ABSENT | DIR) checked through the VFS afterwards."""

    setup: str
    op: str
    path: str
    expect: object
    result: object = ANY
    target: str | None = None
    data: str = "written-by-test"
    after: tuple[tuple[str, object], ...] = ()
    links: bool = False
    secret_ok: bool = False
    overwrite: bool = False
    # where an overlay deliberately differs (it refuses to move links: staging a link's move
    # would need a second kind of staged entry for little use), what it does instead
    overlay_expect: object = None


def case(
    case_id: str,
    setup: str,
    op: str,
    path: str,
    expect: object,
    result: object = ANY,
    **kwargs: object,
) -> object:
    return pytest.param(Case(setup, op, path, expect, result, **kwargs), id=case_id)


def link(
    case_id: str, setup: str, op: str, path: str, expect: object, result: object = ANY, **kw: object
) -> object:
    """A case that needs host links: host and overlay mounts only."""
    return case(case_id, setup, op, path, expect, result, links=True, **kw)


def written(path: str, data: str = "written-by-test") -> tuple[tuple[str, object], ...]:
    return ((path, data),)


def has(name: str) -> Callable[[object], bool]:
    return lambda listing: isinstance(listing, list) and name in listing


E, NF, RO = PathEscapeError, NotFoundError, ReadOnlyError
LONG_ESCAPE = "/workspace/" + "a/" * 500 + "../" * 501 + "etc/passwd"
DEEP = "/workspace/" + "a/" * 100 + "f.txt"
GO_CHAIN = "go/link -> a/b/c/target, a/b -> e, a/e -> ../f, f -> g/h/i, g/h/i -> .."
GO_CHAIN_OUT = "goesc/link -> a/b/c/target, a/b -> e, a/e -> ../../../workspace"
HARD = "hardlink.txt: a hard link to $OUT/secret.txt"

# fmt: off
CASES = [
    # ---- traversal by spelling --------------------------------------------------------------
    case("PATT-dotdot-slash", "outside/secret.txt", "read", "../outside/secret.txt", E),
    case("PATT-dotdot-deep-etc-passwd", "-", "read", "../../../../../../../../etc/passwd", E),
    case("MCP-traversal-absolute", "-", "read", "/workspace/../../../etc/passwd", E),
    case("MCP-traversal-src-dotdot", "dir/", "read", "/workspace/dir/../../outside/secret.txt", E),
    case("MCP-traversal-dot-dotdot", "-", "read", "/workspace/./../outside/secret.txt", E),
    case("MCP-traversal-in-then-out", "-", "read", "/workspace/../workspace/../outside/x", E),
    # Go refuses "../ROOT/target"; here '..' is logical: back into /workspace is no escape
    case("GO-path-escapes-but-returns", "file.txt", "read", "../workspace/file.txt", OK,
         "hello"),
    case("GO-long-path-escapes", "dir/", "read", "dir/../../../workspace/file.txt", E),
    case("GO-path-with-dotdot-dotdot-slash", "dir/", "list", "dir/../../../", E),
    case("MCP-parent-of-mount-lists-mounts", "-", "list", "/workspace/..", OK,
         ["userinput", "workspace"]),
    case("MCP-parent-of-mount-read", "-", "read", "/workspace/..", E),
    case("MCP-root-lists-mounts", "-", "list", "/", OK, ["userinput", "workspace"]),
    case("PATT-dotdot-write", "-", "write", "../outside/pwned.txt", E),
    case("MCP-prefix-write-evil", "workspace-evil/", "write", "/workspace/../workspace-evil/p", E),
    case("MCP-prefix-read-evil", "workspace-evil/", "read", "/workspace-evil/evil.txt", E),
    case("MCP-prefix-list-evil", "workspace-evil/", "list", "/workspace-evil", E),
    case("MCP-prefix-project2", "-", "read", "/workspace2/file.txt", E),
    case("MCP-prefix-project_backup", "-", "stat", "/workspace_backup", E),
    case("MCP-prefix-project.bak-exists", "-", "exists", "/workspace.bak/file.txt", E),
    case("MCP-prefix-relative-sibling", "workspace-evil/", "read", "../workspace-evil/evil.txt",
         E),
    case("MCP-absolute-etc-passwd", "-", "read", "/etc/passwd", E),
    case("MCP-long-escape", "-", "read", LONG_ESCAPE, E),
    case("OWN-stat-outside", "outside/", "stat", "../outside/secret.txt", E),
    case("OWN-exists-escape-raises", "outside/", "exists", "../outside/secret.txt", E),
    case("OWN-delete-outside", "outside/", "delete", "../outside/secret.txt", E),
    case("OWN-mkdir-outside", "outside/", "mkdir", "../outside/newdir", E),
    case("OWN-move-out", "file.txt", "move", "file.txt", E, target="../outside/moved.txt",
         after=(("file.txt", "hello"),)),
    case("OWN-move-in-from-outside", "outside/", "move", "../outside/secret.txt", E,
         target="stolen.txt", after=(("stolen.txt", ABSENT),)),
    case("OWN-canonical-outside", "outside/", "canonical", "../outside/secret.txt", E),
    case("MCP-dotdot-stays-inside", "file.txt", "read", "dir/../file.txt", OK, "hello"),
    case("MCP-canonical-dotdot-inside", "file.txt", "canonical", "dir/nested/../../file.txt",
         OK, "/workspace/file.txt"),
    case("GO-path-with-dot", "dir/nested/", "read", "./dir/./nested/./deep.txt", OK, "deep"),
    case("GO-path-with-dotdot", "dir/nested/", "read",
         "dir/../dir/nested/../../dir/nested/../nested/deep.txt", OK, "deep"),
    case("MCP-multiple-slashes", "dir/nested/", "read", "/workspace//dir///nested//deep.txt",
         OK, "deep"),
    case("MCP-trailing-slash", "dir/", "list", "/workspace/dir/", OK, ["nested", "sibling.txt"]),
    case("MCP-trailing-slashes-canonical", "-", "canonical", "/workspace///", OK, "/workspace"),
    case("GO-empty-path", "-", "read", "", E),
    case("OWN-relative-list", "dir/", "list", "dir", OK, ["nested", "sibling.txt"]),
    # ---- NUL bytes --------------------------------------------------------------------------
    case("PATT-nul-extension-bypass", "file.txt", "read", "file.txt\x00.png", E),
    case("MCP-nul-mid-path", "-", "read", "/workspace\x00/etc/passwd", E),
    case("MCP-nul-leading", "-", "read", "\x00/workspace/file.txt", E),
    case("MCP-nul-trailing-write", "-", "write", "/workspace/\x00", E),
    case("PATT-nul-then-traversal", "-", "write", "x\x00/../../outside/secret.txt", E),
    case("PATT-nul-canonical", "-", "canonical", "file.txt\x00", E),
    # ---- encodings and look-alikes: literal names, never decoded ----------------------------
    case("PATT-backslash-read", "-", "read", "..\\..\\outside\\secret.txt", NF),
    case("PATT-backslash-write", "-", "write", "..\\outside\\pwned.txt", OK,
         after=written("..\\outside\\pwned.txt")),
    case("PATT-url-encoded-read", "-", "read", "%2e%2e%2f%2e%2e%2foutside%2fsecret.txt", NF),
    case("PATT-url-encoded-canonical", "-", "canonical", "%2e%2e/%2e%2e/outside", OK,
         "/workspace/%2e%2e/%2e%2e/outside"),
    case("PATT-url-encoded-write", "-", "write", "%2e%2e%2fpwned.txt", OK,
         after=written("/workspace/%2e%2e%2fpwned.txt")),
    case("PATT-double-encoded", "-", "read", "%252e%252e%252foutside%252fsecret.txt", NF),
    case("PATT-dotdot-encoded-slash", "-", "read", "..%2f..%2foutside%2fsecret.txt", NF),
    case("PATT-four-dots", "-", "read", "....//....//outside/secret.txt", NF),
    case("PATT-four-dots-write", "-", "write", "....//....//pwned.txt", OK,
         after=written("/workspace/..../..../pwned.txt")),
    case("PATT-dotdot-semicolon", "-", "read", "..;/outside/secret.txt", NF),
    case("PATT-overlong-utf8-text", "-", "read", "%c0%ae%c0%ae/outside/secret.txt", NF),
    # the raw bytes C0 AE (surrogate-escaped) are a name of their own, not '.'
    case("PATT-overlong-utf8-raw", "-", "write", "\udcc0\udcae\udcc0\udcae/pwned.txt", OK,
         after=written("\udcc0\udcae\udcc0\udcae/pwned.txt")),
    case("PATT-fullwidth-dots", "-", "read", "．．／．．／outside／secret.txt", NF),
    case("PATT-fullwidth-write", "-", "write", "．．／pwned.txt", OK,
         after=written("/workspace/．．／pwned.txt")),
    case("PATT-two-dot-leader", "-", "read", "\u2025/outside/secret.txt", NF),
    case("PATT-tilde", "-", "read", "~/.ssh/id_rsa", NF),
    case("PATT-tilde-write", "-", "write", "~/.bashrc", OK,
         after=written("/workspace/~/.bashrc")),
    case("PATT-tilde-canonical", "-", "canonical", "~", OK, "/workspace/~"),
    case("PATT-env-var", "-", "read", "$HOME/.ssh/id_rsa", NF),
    case("PATT-env-var-braces", "-", "read", "${HOME}/../outside/secret.txt", NF),
    case("PATT-windows-env-var", "-", "canonical", "%USERPROFILE%/x", OK,
         "/workspace/%USERPROFILE%/x"),
    # ---- lengths ----------------------------------------------------------------------------
    case("MCP-very-long-inside", "-", "write", DEEP, OK, after=written(DEEP)),
    case("OWN-path-too-long", "-", "read", "a/" * 2100, E),
    case("OWN-name-too-long", "-", "write", "x" * 256, E),
    case("OWN-name-255-bytes", "-", "write", "x" * 255, OK, after=written("x" * 255)),
    case("OWN-unicode-name-244-bytes", "-", "write", "é" * 120 + ".txt", OK,
         after=written("é" * 120 + ".txt")),
    # short in characters, too long in bytes: an absolute path of few characters is still
    # measured in bytes (a memory mount has no limit of its own to catch it)
    case("OWN-unicode-name-256-bytes-absolute", "-", "write", "/workspace/" + "é" * 128, E),
    # ---- surrogates: a name is bytes, and each file has one spelling ------------------------
    case("OWN-lone-surrogate-write", "-", "write", "x\ud800.txt", E),
    case("OWN-lone-surrogate-absolute-read", "-", "read", "/workspace/\udfff", E),
    # escaped bytes that are UTF-8 spell café.txt a second way: refused, not an alias
    case("OWN-escaped-utf8-read", "café.txt (NFC)", "read", "caf\udcc3\udca9.txt", E),
    case("OWN-escaped-utf8-write", "café.txt (NFC)", "write", "/workspace/caf\udcc3\udca9.txt",
         E, after=(("café.txt", "composed"),)),
    # ---- benign names -----------------------------------------------------------------------
    case("MCP-dotfile", ".env", "read", ".env", OK, "DOTFILE=1"),
    case("MCP-spaces", "my notes.txt", "read", "my notes.txt", OK, "notes with spaces"),
    case("MCP-unicode", "ünïcødé.txt", "read", "/workspace/ünïcødé.txt", OK, "unicode name"),
    case("MCP-cjk", "日本語/ファイル.txt", "read", "日本語/ファイル.txt", OK, "japanese"),
    case("MCP-unicode-nfc", "café.txt (NFC)", "read", "café.txt", OK, "composed"),
    case("MCP-unicode-nfd-is-another-name", "café.txt (NFC)", "read", "cafe\u0301.txt", NF),
    case("OWN-case-variant-name", ".env", "read", ".ENV", NF),
    case("OWN-case-variant-mount", "-", "read", "/WORKSPACE/file.txt", E),
    case("MCP-dotdot-prefix-name", "-", "write", "..test", OK,
         after=written("/workspace/..test")),
    case("MCP-dotdot-suffix-name", "-", "write", "test..", OK,
         after=written("/workspace/test..")),
    case("MCP-three-dots-name", "-", "write", ".../x.txt", OK,
         after=written("/workspace/.../x.txt")),
    case("MCP-percent-name", "-", "write", "report_50%.pdf", OK,
         after=written("report_50%.pdf")),
    case("MCP-spaces-unicode-write", "-", "write", "new dir/with space/ünï file.txt", OK,
         after=written("new dir/with space/ünï file.txt")),
    case("OWN-stat-file", "file.txt", "stat", "file.txt", OK, ("file", 5)),
    case("OWN-stat-dir", "dir/", "stat", "dir", OK, ("dir", None)),
    case("OWN-exists-missing", "-", "exists", "nope.txt", OK, False),
    case("OWN-exists-file", "dir/nested/", "exists", "dir/nested/deep.txt", OK, True),
    case("OWN-read-mount-root", "-", "read", "/workspace", IsADirectoryError_),
    case("OWN-delete-mount-root", "-", "delete", "dir/..", SandboxError,
         after=(("file.txt", "hello"),)),
    case("OWN-delete-file", "dir/sibling.txt", "delete", "dir/sibling.txt", OK,
         after=(("dir/sibling.txt", ABSENT),)),
    case("OWN-mkdir-nested", "-", "mkdir", "new/a/b", OK, after=(("new/a/b", DIR),)),
    case("OWN-move-within", "file.txt", "move", "file.txt", OK, target="moved/file.txt",
         after=(("moved/file.txt", "hello"), ("file.txt", ABSENT))),
    case("OWN-canonical-missing-tail", "-", "canonical", "missing/deeper/x.txt", OK,
         "/workspace/missing/deeper/x.txt"),
    case("SJ-enotdir-child", "file.txt", "read", "file.txt/child", NotADirectoryError_),
    case("OWN-read-missing", "-", "read", "nope/x.txt", NF),
    # ---- read-only mount --------------------------------------------------------------------
    case("OWN-ro-write", "/userinput", "write", "/userinput/brief.txt", RO,
         after=(("/userinput/brief.txt", "brief"),)),
    case("OWN-ro-delete", "/userinput", "delete", "/userinput/brief.txt", RO),
    case("OWN-ro-mkdir", "/userinput", "mkdir", "/userinput/new", RO),
    case("OWN-ro-move-out", "/userinput", "move", "/userinput/brief.txt", RO,
         target="brief.txt", after=(("brief.txt", ABSENT),)),
    case("OWN-ro-move-in", "/userinput", "move", "file.txt", RO, target="/userinput/file.txt",
         after=(("file.txt", "hello"),)),
    case("OWN-ro-dotdot-into", "/userinput", "write", "/workspace/../userinput/x.txt", RO),
    case("OWN-ro-read", "/userinput", "read", "/userinput/brief.txt", OK, "brief"),
    case("OWN-ro-dotdot-out", "/userinput", "write", "/userinput/../workspace/from_in.txt", OK,
         after=written("from_in.txt")),
    case("OWN-ro-escape", "/userinput", "read", "/userinput/../outside/secret.txt", E),
    # ---- quotas -----------------------------------------------------------------------------
    case("OWN-quota-read", "big.bin > max_file_bytes", "read", BIG, QuotaError),
    case("OWN-quota-write", "-", "write", "huge.txt", QuotaError, data="x" * (MAX_FILE + 1),
         after=(("huge.txt", ABSENT),)),
    # ---- symlinks inside -> inside: must work -----------------------------------------------
    link("MCP-link-inside-rel", "link_in_rel -> target.txt", "read", "link_in_rel", OK,
         "target content"),
    link("MCP-link-inside-rel-canonical", "link_in_rel -> target.txt", "canonical",
         "link_in_rel", OK, "/workspace/target.txt"),
    # Go's os.Root refuses every absolute link; the issue wants those staying inside to work
    link("GO-absolute-symlink-inside", "link_in_abs -> $WS/target.txt", "read", "link_in_abs",
         OK, "target content"),
    link("GO-absolute-symlink-canonical", "link_in_abs -> $WS/target.txt", "canonical",
         "link_in_abs", OK, "/workspace/target.txt"),
    link("MCP-write-through-inside-link", "link_in_rel -> target.txt", "write", "link_in_rel",
         OK, after=written("target.txt")),
    link("OWN-list-dir-link-inside", "link_dir_in -> dir", "list", "link_dir_in", OK,
         ["nested", "sibling.txt"]),
    link("OWN-dir-link-inside-canonical", "link_dir_in -> dir", "canonical",
         "link_dir_in/nested/deep.txt", OK, "/workspace/dir/nested/deep.txt"),
    link("OWN-abs-dir-link-inside", "link_dir_in_abs -> $WS/dir", "read",
         "link_dir_in_abs/nested/deep.txt", OK, "deep"),
    link("GO-symlink-ending-in-slash", "link_dir_in -> dir", "mkdir", "link_dir_in/newsub", OK,
         after=(("dir/newsub", DIR),)),
    link("OWN-link-up-inside", "ldir/link_up -> ../dir/sibling.txt", "read", "ldir/link_up",
         OK, "sib"),
    link("OWN-link-up-canonical", "ldir/link_up -> ../dir/sibling.txt", "canonical",
         "ldir/link_up", OK, "/workspace/dir/sibling.txt"),
    link("GO-symlink-ends-in-dot", "link_dot -> dir/.", "read", "link_dot/sibling.txt", OK,
         "sib"),
    link("GO-dotdot-before-symlink", "link_dir_in -> dir", "read",
         "dir/../link_dir_in/sibling.txt", OK, "sib"),
    # Go and securejoin resolve this '..' after the link (physically); here it is lexical
    link("GO-dotdot-after-symlink-lexical", "link_dir_in -> dir", "canonical",
         "link_dir_in/../file.txt", OK, "/workspace/file.txt"),
    link("GO-symlink-chain", GO_CHAIN, "read", "go/link", OK, "go-target"),
    link("GO-symlink-chain-canonical", GO_CHAIN, "canonical", "go/link", OK,
         "/workspace/go/g/c/target"),
    link("OWN-chain-inside", "chain_in_a -> chain_in_b -> target.txt", "read", "chain_in_a",
         OK, "target content"),
    link("OWN-chain-inside-canonical", "chain_in_a -> chain_in_b -> target.txt", "canonical",
         "chain_in_a", OK, "/workspace/target.txt"),
    link("OWN-exists-link-inside", "link_in_abs -> $WS/target.txt", "exists", "link_in_abs",
         OK, True),
    link("OWN-stat-link-inside", "link_in_rel -> target.txt", "stat", "link_in_rel", OK,
         ("file", 14)),
    link("GO-mkdirall-over-dir-link", "link_dir_in -> dir", "mkdir", "link_dir_in", OK,
         after=(("dir/sibling.txt", "sib"),)),
    link("SJ-nonlexical-link", "sj/subdir/link -> ../cousinparent/cousin", "read",
         "sj/subdir/link/test", OK, "cousin"),
    link("SJ-nonlexical-canonical", "sj/subdir/link -> ../cousinparent/cousin", "canonical",
         "sj/subdir/link/test", OK, "/workspace/sj/cousinparent/cousin/test"),
    link("SJ-dangling-relative-create", "sj/etc -> somepath (missing)", "write",
         "sj/etc/test", OK, after=written("sj/somepath/test")),
    link("SJ-dangling-relative-canonical", "sj/etc -> somepath (missing)", "canonical",
         "sj/etc/test", OK, "/workspace/sj/somepath/test"),
    # ---- links to the mount root (inside): must work ----------------------------------------
    link("SJ-link-to-root-list", "link_root -> .", "list", "link_root", OK, has("file.txt")),
    link("SJ-link-to-root-canonical", "link_root -> .", "canonical", "link_root", OK,
         "/workspace"),
    link("SJ-link-to-root-read-through", "link_root -> .", "read", "link_root/file.txt", OK,
         "hello"),
    link("SJ-link-to-root-write-through", "link_root -> .", "write", "link_root/new.txt", OK,
         after=written("new.txt")),
    link("SJ-abs-link-to-root-list", "link_root_abs -> $WS", "list", "link_root_abs", OK,
         has("file.txt")),
    link("SJ-abs-link-to-root-read", "link_root_abs -> $WS", "read",
         "link_root_abs/dir/sibling.txt", OK, "sib"),
    link("OWN-link-dotdot-to-root", "ldir/link_up_root -> ..", "read",
         "ldir/link_up_root/file.txt", OK, "hello"),
    link("OWN-link-dotdot-to-root-canonical", "ldir/link_up_root -> ..", "canonical",
         "ldir/link_up_root", OK, "/workspace"),
    # ---- symlinks inside -> outside: refused ------------------------------------------------
    link("MCP-link-out-rel-read", "link_out_rel -> ../outside/secret.txt", "read",
         "link_out_rel", E),
    link("MCP-link-out-abs-read", "link_out_abs -> $OUT/secret.txt", "read", "link_out_abs", E),
    link("MCP-link-out-abs-write", "link_out_abs -> $OUT/secret.txt", "write", "link_out_abs",
         E),
    link("MCP-link-out-rel-write", "link_out_rel -> ../outside/secret.txt", "write",
         "link_out_rel", E),
    link("MCP-link-out-stat", "link_out_abs -> $OUT/secret.txt", "stat", "link_out_abs", E),
    link("MCP-link-out-exists-raises", "link_out_rel -> ../outside/secret.txt", "exists",
         "link_out_rel", E),
    link("MCP-link-out-canonical", "link_out_abs -> $OUT/secret.txt", "canonical",
         "link_out_abs", E),
    link("MCP-dir-link-out-rel-read", "link_out_dir_rel -> ../outside", "read",
         "link_out_dir_rel/secret.txt", E),
    link("MCP-dir-link-out-abs-read", "link_out_dir_abs -> $OUT", "read",
         "link_out_dir_abs/secret.txt", E),
    link("MCP-dir-link-out-deeper", "link_out_dir_abs -> $OUT", "read",
         "link_out_dir_abs/sub/deeper.txt", E),
    link("MCP-dir-link-out-list", "link_out_dir_abs -> $OUT", "list", "link_out_dir_abs", E),
    link("MCP-dir-link-out-list-rel", "link_out_dir_rel -> ../outside", "list",
         "link_out_dir_rel", E),
    link("MCP-new-file-under-symlinked-parent", "link_out_dir_abs -> $OUT", "write",
         "link_out_dir_abs/new.txt", E),
    link("MCP-parent-dir-symlink-traversal", "link_out_dir_rel -> ../outside", "write",
         "link_out_dir_rel/sub1/sub2/file.txt", E),
    link("MCP-mkdir-under-symlinked-parent", "link_out_dir_abs -> $OUT", "mkdir",
         "link_out_dir_abs/newdir", E),
    link("MCP-canonical-under-symlinked-parent", "link_out_dir_rel -> ../outside", "canonical",
         "link_out_dir_rel/new.txt", E),
    link("MCP-delete-through-dir-link-out", "link_out_dir_abs -> $OUT", "delete",
         "link_out_dir_abs/secret.txt", E),
    link("MCP-move-into-symlinked-parent", "link_out_dir_abs -> $OUT", "move", "file.txt", E,
         target="link_out_dir_abs/file.txt", after=(("file.txt", "hello"),)),
    link("MCP-move-out-of-symlinked-parent", "link_out_dir_rel -> ../outside", "move",
         "link_out_dir_rel/secret.txt", E, target="got.txt", after=(("got.txt", ABSENT),)),
    link("MCP-prefix-confusion-link", "link_evil -> $BASE/workspace-evil", "read",
         "link_evil/evil.txt", E),
    link("MCP-prefix-confusion-link-rel", "link_evil_rel -> ../workspace-evil/evil.txt",
         "read", "link_evil_rel", E),
    link("MCP-nested-chain-out", "chain_a -> chain_b -> ../outside/secret.txt", "read",
         "chain_a", E),
    link("MCP-nested-chain-out-write", "chain_a -> chain_b -> ../outside/secret.txt", "write",
         "chain_a", E),
    link("GO-symlink-chain-escapes", GO_CHAIN_OUT, "read", "goesc/link", E),
    link("GO-relative-symlink-escape-and-return", "link_escape_return -> ../workspace/...",
         "read", "link_escape_return", E),
    link("GO-symlink-dotdot-slash", "link_dotdot -> ..", "read",
         "link_dotdot/outside/secret.txt", E),
    link("GO-symlink-dotdot-slash-list", "link_dotdot -> ..", "list", "link_dotdot", E),
    link("GO-symlink-dotdot-dotdot-slash", "ldir/link_dotdot2 -> ../..", "read",
         "ldir/link_dotdot2/outside/secret.txt", E),
    link("SJ-link-to-slash-read", "link_slash -> /", "read", "link_slash/etc/passwd", E),
    link("SJ-link-to-slash-list", "link_slash -> /", "list", "link_slash", E),
    link("SJ-link-to-slash-canonical", "link_slash -> /", "canonical", "link_slash", E),
    link("SJ-etclink-many-dotdots", "sj/etclink -> ../../(...)/etc", "read",
         "sj/etclink/passwd", E),
    link("SJ-absolute-many-dotdots", "sj/passwd -> /../../(...)/etc/passwd", "read",
         "sj/passwd", E),
    # securejoin scopes absolute links to its root; a host-absolute link that leaves the
    # mount is refused here instead
    link("SJ-scoped-absolute-link", "sj/subdir/link2 -> /../cousinparent/cousin", "read",
         "sj/subdir/link2/test", E),
    link("SJ-loop-through-slash", "sj/self -> /../(...)/self", "read", "sj/self", E),
    # ---- dangling links ---------------------------------------------------------------------
    link("GO-dangling-inside-read", "dangling_in -> missing_in.txt", "read", "dangling_in", NF),
    link("GO-dangling-inside-create", "dangling_in -> missing_in.txt", "write", "dangling_in",
         OK, after=written("missing_in.txt")),
    link("GO-dangling-inside-canonical", "dangling_in -> missing_in.txt", "canonical",
         "dangling_in", OK, "/workspace/missing_in.txt"),
    link("GO-dangling-inside-exists", "dangling_in -> missing_in.txt", "exists", "dangling_in",
         OK, False),
    # an escape is not absence: a dangling link out is refused, not "not found"
    link("GO-dangling-outside-read", "dangling_out -> ../outside/missing.txt", "read",
         "dangling_out", E),
    link("GO-dangling-outside-create", "dangling_out -> ../outside/missing.txt", "write",
         "dangling_out", E),
    link("GO-dangling-outside-abs-create", "dangling_out_abs -> $OUT/new_file.txt", "write",
         "dangling_out_abs", E),
    link("GO-dangling-outside-mkdir", "dangling_out_abs -> $OUT/new_file.txt", "mkdir",
         "dangling_out_abs", E),
    link("GO-dangling-outside-exists", "dangling_out -> ../outside/missing.txt", "exists",
         "dangling_out", E),
    # ---- loops ------------------------------------------------------------------------------
    link("GO-symlink-cycle-read", "loop_self -> loop_self", "read", "loop_self", SandboxError),
    link("GO-symlink-cycle-write", "loop_self -> loop_self", "write", "loop_self",
         SandboxError),
    link("SJ-symlink-loop-pair", "loop_a -> loop_b -> loop_a", "read", "loop_a", SandboxError),
    link("SJ-symlink-loop-canonical", "loop_a -> loop_b -> loop_a", "canonical", "loop_a/x",
         SandboxError),
    # ---- hard links: reading is the OS's business, writing must replace the name ------------
    link("MCP-hardlink-read", HARD, "read", "hardlink.txt", OK, SECRET, secret_ok=True),
    link("MCP-hardlink-write-replaces-name", HARD, "write", "hardlink.txt", OK,
         after=written("hardlink.txt")),
    link("OWN-hardlink-delete", HARD, "delete", "hardlink.txt", OK,
         after=(("hardlink.txt", ABSENT),)),
    link("OWN-hardlink-move", HARD, "move", "hardlink.txt", OK, target="moved_hard.txt",
         after=(("hardlink.txt", ABSENT),)),
    # ---- links deleted and moved as themselves ----------------------------------------------
    link("GO-remove-link-out-as-itself", "link_out_abs -> $OUT/secret.txt", "delete",
         "link_out_abs", OK, after=(("link_out_abs", ABSENT),)),
    link("GO-remove-dir-link-out-as-itself", "link_out_dir_rel -> ../outside", "delete",
         "link_out_dir_rel", OK, after=(("link_out_dir_rel", ABSENT),)),
    link("GO-remove-dir-link-inside-as-itself", "link_dir_in -> dir", "delete", "link_dir_in",
         OK, after=(("link_dir_in", ABSENT), ("dir/sibling.txt", "sib"))),
    link("GO-remove-link-inside-as-itself", "link_in_rel -> target.txt", "delete",
         "link_in_rel", OK, after=(("link_in_rel", ABSENT), ("target.txt", "target content"))),
    link("OWN-move-link-inside-keeps-target", "link_in_rel -> target.txt", "move",
         "link_in_rel", OK, target="moved_link", after=(("target.txt", "target content"),),
         overlay_expect=SandboxError),
    link("OWN-move-link-out", "link_out_abs -> $OUT/secret.txt", "move", "link_out_abs", SAFE,
         target="moved_out", overlay_expect=SandboxError),
    link("MCP-rename-over-link-out", "link_out_rel -> ../outside/secret.txt", "move",
         "file.txt", SAFE, target="link_out_rel", overwrite=True),
]
# fmt: on


def _applies(kind: str, c: Case) -> bool:
    return not (c.links and kind == "memory")


ATTACKS = [
    pytest.param(kind, p.values[0], id=f"{kind}-{p.id}")
    for p in CASES
    for kind in KINDS
    if _applies(kind, p.values[0])
]


def run_op(fs: VirtualFS, c: Case) -> object:
    """Run one case's operation; its return value (stat gives kind and size)."""
    if c.op == "read":
        return fs.read_text(c.path)
    if c.op == "write":
        fs.write_text(c.path, c.data)
        return None
    if c.op == "list":
        return fs.list_dir(c.path)
    if c.op == "stat":
        info = fs.stat(c.path)
        return (info.kind, info.size if info.kind == "file" else None)
    if c.op == "exists":
        return fs.exists(c.path)
    if c.op == "delete":
        fs.delete(c.path)
        return None
    if c.op == "move":
        assert c.target is not None
        fs.move(c.path, c.target, overwrite=c.overwrite)
        return None
    if c.op == "mkdir":
        fs.mkdir(c.path)
        return None
    if c.op == "canonical":
        return fs.canonical(c.path)
    raise AssertionError(f"unknown op {c.op}")


def check_after(fs: VirtualFS, c: Case, when: str) -> None:
    for path, want in c.after:
        if want is ABSENT:
            assert not fs.exists(path), f"{when}: {path} should not exist"
        elif want is DIR:
            assert fs.stat(path).kind == "dir", f"{when}: {path} should be a folder"
        else:
            assert fs.read_text(path) == want, f"{when}: {path} content"


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 80
    assert len({p.id for p in CASES}) == len(CASES)


MUTATING = {"write", "delete", "move", "mkdir"}


@pytest.fixture(scope="module")
def shared_layout(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Layout]:
    """Layouts for the cases that change nothing (reads, listings, stat, canonical), one per
    kind, built once; each such case checks that the workspace is still unchanged after it."""
    built: dict[str, Layout] = {}

    def get(kind: str) -> Layout:
        if kind not in built:
            base = tmp_path_factory.mktemp(f"shared-{kind}")
            built[kind] = build_layout(base, host_workspace=kind != "memory")
        return built[kind]

    return get


@pytest.mark.parametrize(("kind", "c"), ATTACKS)
def test_attack(kind: str, c: Case, tmp_path: Path, shared_layout: Callable[[str], Layout]) -> None:
    if c.op in MUTATING:
        layout = build_layout(tmp_path, host_workspace=kind != "memory")
    else:
        layout = shared_layout(kind)
    skip = None if kind == "memory" else layout.ws
    outside_before = snapshot(layout.base, skip=skip)
    host_ws_before = snapshot(layout.ws)
    fs = make_fs(kind, layout)
    written_before = fs.written
    if kind == "overlay" and c.overlay_expect is not None:
        c = dataclasses.replace(c, expect=c.overlay_expect)
    try:
        error: Exception | None = None
        result: object = None
        try:
            result = run_op(fs, c)
        except Exception as exc:
            error = exc
        where = f"{c.op}({c.path[:60]!r}) on a {kind} mount [{c.setup}]"

        # the outcome
        if c.expect == OK:
            assert error is None, f"{where} should work, got {error!r}"
            if callable(c.result):
                assert c.result(result), f"{where} returned {result!r}"
            elif c.result is not ANY:
                assert result == c.result, f"{where} returned {result!r}"
        elif c.expect == SAFE:
            assert error is None or isinstance(error, PathEscapeError), f"{where}: {error!r}"
        elif isinstance(c.expect, type):
            assert error is not None, f"{where} should be refused, returned {result!r}"
            assert isinstance(error, c.expect), f"{where}: {error!r}, expected {c.expect}"
            message = str(error)
            assert names_path(message, c.path, *([c.target] if c.target else [])), (
                f"{where}: the message does not name the path: {message!r}"
            )
            if c.op == "write":
                assert fs.written == written_before, "a refused write was counted"
        if error is not None:
            assert isinstance(error, SandboxError), f"{where}: not a SandboxError: {error!r}"

        # the secret never shows
        if not c.secret_ok:
            assert SECRET not in repr(result), f"{where} returned the secret"
        assert SECRET not in str(error or ""), f"{where}: the secret is in the message"

        # staging, and operations that only look, touch nothing on the host
        if kind == "overlay" or c.op not in MUTATING:
            assert snapshot(layout.ws) == host_ws_before, "the workspace changed"
        check_after(fs, c, "after the operation")
        if kind == "overlay":
            fs.commit()
            check_after(fs, c, "after commit")
            assert not stray_temp_files(layout.ws)
    finally:
        fs.close()
    assert snapshot(layout.base, skip=skip) == outside_before, (
        "something outside the workspace changed"
    )
    assert (layout.outside / "secret.txt").read_text() == SECRET


# -- focused attacks -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["host", "overlay"])
@pytest.mark.parametrize(
    ("op", "path"),
    [
        pytest.param("write", "alias/x.txt", id="write-via-link-to-nested-root"),
        pytest.param("write", "abs_alias/x.txt", id="write-via-absolute-link"),
        pytest.param("move-in", "alias/moved.txt", id="move-in-via-link"),
        pytest.param("delete", "alias/ro.txt", id="delete-via-link-to-nested-root"),
        pytest.param("move", "alias/ro.txt", id="move-out-via-link"),
        pytest.param("mkdir", "alias/newdir", id="mkdir-via-link"),
    ],
)
def test_nested_read_only_mount_cannot_be_changed_through_a_link(
    kind: str, op: str, path: str, tmp_path: Path
) -> None:
    """OWN (DESIGN: read-only mounts; issue: nested mounts): /workspace/data is a read-only
    mount of <workspace>/data. A link in the writable mount that leads into that folder must
    not make it writable: canonical() reports the read-only logical path, so a change there is
    a change of the read-only mount."""
    ws = tmp_path / "workspace"
    (ws / "data").mkdir(parents=True)
    (ws / "data" / "ro.txt").write_text("read-only content")
    os.symlink("data", ws / "alias")
    os.symlink(ws / "data", ws / "abs_alias")
    (ws / "mine.txt").write_text("mine")
    before = snapshot(ws / "data")
    fs = VirtualFS(
        [
            Mount("/workspace", ws, overlay=kind == "overlay"),
            Mount("/workspace/data", ws / "data", read_only=True),
        ]
    )

    def attempt() -> None:
        if op == "write":
            fs.write_text(path, "bypass")
        elif op == "delete":
            fs.delete(path)
        elif op == "move":
            fs.move(path, "stolen.txt")
        elif op == "move-in":
            fs.move("mine.txt", path)
        else:
            fs.mkdir(path)
        fs.commit()

    with fs:
        assert fs.canonical("alias/ro.txt") == "/workspace/data/ro.txt"
        with pytest.raises((ReadOnlyError, PathEscapeError)) as caught:
            attempt()
        assert names_path(str(caught.value), path, "/workspace/data")
        assert fs.read_text("/workspace/data/ro.txt") == "read-only content"
    assert snapshot(ws / "data") == before


@pytest.mark.parametrize("kind", ["host", "overlay"])
def test_a_folder_holding_a_read_only_mount_cannot_be_removed(kind: str, tmp_path: Path) -> None:
    """OWN: /userinput is a read-only mount of <workspace>/inbox/in. Deleting or moving away
    <workspace>/inbox from the writable /workspace would take /userinput's files with it, so
    it is refused; changes beside it, and removing a link that points at it, still work."""
    ws = tmp_path / "workspace"
    (ws / "inbox" / "in").mkdir(parents=True)
    (ws / "inbox" / "in" / "given.txt").write_text("given")
    (ws / "inbox" / "notes.txt").write_text("notes")
    (ws / "other").mkdir()
    os.symlink("inbox", ws / "inbox_link")
    fs = VirtualFS(
        [
            Mount("/workspace", ws, overlay=kind == "overlay"),
            Mount("/userinput", ws / "inbox" / "in", read_only=True),
        ]
    )
    with fs:
        refused = [
            lambda: fs.delete("inbox", recursive=True),
            lambda: fs.move("inbox", "elsewhere"),
            lambda: fs.move("inbox_link/in", "taken"),
            lambda: fs.move("other", "inbox", overwrite=True),
        ]
        for attempt in refused:
            with pytest.raises(ReadOnlyError, match="/userinput"):
                attempt()
        # what must keep working
        fs.write_text("inbox/notes.txt", "changed")
        fs.move("inbox/notes.txt", "other/notes.txt")
        fs.delete("inbox_link")
        fs.delete("other", recursive=True)
        fs.commit()
        assert fs.read_text("/userinput/given.txt") == "given"
    assert (ws / "inbox" / "in" / "given.txt").read_text() == "given"
    assert not (ws / "inbox_link").is_symlink()
    assert not (ws / "other").exists()


@pytest.mark.parametrize("kind", ["host", "overlay"])
@pytest.mark.parametrize(
    "path",
    ["link_out_abs", "link_out_dir_abs/secret.txt", "link_evil/evil.txt", "dangling_out_abs"],
)
def test_refusals_do_not_reveal_host_paths(kind: str, path: str, tmp_path: Path) -> None:
    """The agent never sees host paths. A refusal names the logical path; it must
    not print where the mount, or the link's target, lives on the host."""
    layout = build_layout(tmp_path, host_workspace=True)
    with make_fs(kind, layout) as fs:
        for attempt in (fs.read_text, fs.canonical, lambda p: fs.write_text(p, "x")):
            with pytest.raises(PathEscapeError) as caught:
                attempt(path)
            assert str(tmp_path) not in str(caught.value), str(caught.value)


# -- properties ------------------------------------------------------------------------------

SEGMENTS = [
    "..",
    ".",
    "",
    "a",
    "link_out",
    "link_in",
    "link_dir_out",
    "link_root",
    "dangling_out",
    "~",
    "%2e%2e",
    "x y",
    "ünï",
    "/",
    "secret.txt",
    "outside",
    "workspace",
    "workspace-evil",
]
PREFIXES = ["", "/", "/workspace/", "/userinput/", "../", "/workspace/a/"]
paths = st.builds(
    lambda prefix, segments: prefix + "/".join(segments),
    st.sampled_from(PREFIXES),
    st.lists(st.sampled_from(SEGMENTS), max_size=7),
)
OPS = ["read", "write", "list", "canonical", "delete", "stat", "mkdir", "move", "exists"]


class PropertyWorld:
    """One layout for all examples (hypothesis and function-scoped fixtures do not mix): the
    workspace's content is put back before each example, in place, since mounts hold its fd."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.ws = base / "workspace"
        self.outside = base / "outside"
        self.outside.mkdir(parents=True)
        (self.outside / "secret.txt").write_text(SECRET)
        (base / "workspace-evil").mkdir()
        (base / "workspace-evil" / "secret.txt").write_text(SECRET)
        (base / "userinput").mkdir()
        (base / "userinput" / "a").write_text("input")
        self.ws.mkdir()
        self.reset()
        self.before = snapshot(base, skip=self.ws)

    def reset(self) -> None:
        for entry in os.scandir(self.ws):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        ws = self.ws
        (ws / "a").mkdir()
        (ws / "a" / "file").write_text("inside")
        (ws / "x y").write_text("spaces")
        (ws / "ünï").mkdir()
        os.symlink("../outside/secret.txt", ws / "link_out")
        os.symlink("a/file", ws / "link_in")
        os.symlink(str(self.outside), ws / "link_dir_out")
        os.symlink(".", ws / "link_root")
        os.symlink("../outside/missing", ws / "dangling_out")
        os.symlink("../link_dir_out", ws / "a" / "link_out")

    def fs(self, kind: str) -> VirtualFS:
        if kind == "memory":
            workspace = Mount("/workspace", memory=True)
        else:
            workspace = Mount("/workspace", self.ws, overlay=kind == "overlay")
        fs = VirtualFS(
            [workspace, Mount("/userinput", self.base / "userinput", read_only=True)],
            durable=False,
        )
        if kind == "memory":
            fs.write_text("a/file", "inside")
            fs.write_text("x y", "spaces")
            fs.mkdir("ünï")
        return fs


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> PropertyWorld:
    return PropertyWorld(tmp_path_factory.mktemp("vfs-properties"))


def _in_a_mount(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in ("/workspace", "/userinput"))


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=300, deadline=None)
@given(op=st.sampled_from(OPS), path=paths, other=paths)
def test_random_paths_never_leave_the_workspace(
    world: PropertyWorld, kind: str, op: str, path: str, other: str
) -> None:
    if kind != "memory" and op in MUTATING:
        world.reset()
    fs = world.fs(kind)
    result: object = None
    message = ""
    try:
        try:
            if op == "read":
                result = fs.read_bytes(path)
            elif op == "write":
                fs.write_text(path, "written")
            elif op == "list":
                result = fs.list_dir(path)
            elif op == "canonical":
                result = fs.canonical(path)
            elif op == "delete":
                fs.delete(path, recursive=True)
            elif op == "stat":
                result = fs.stat(path)
            elif op == "mkdir":
                fs.mkdir(path)
            elif op == "move":
                fs.move(path, other, overwrite=True)
            else:
                result = fs.exists(path)
            if kind == "overlay":
                fs.commit()
        except SandboxError as exc:  # anything else fails the test
            message = str(exc)
        else:
            if op == "canonical":
                assert isinstance(result, str)
                assert _in_a_mount(result), result
                assert normalize(result) == result
                assert fs.canonical(result) == result  # resolved already: a fixed point
            if op == "read" and not message:
                # the canonical spelling reads the same file
                assert fs.read_bytes(fs.canonical(path)) == result
    finally:
        fs.close()
    assert SECRET not in repr(result)
    assert SECRET not in message
    assert snapshot(world.base, skip=world.ws) == world.before


# -- the swap race ---------------------------------------------------------------------------


def _exchanger() -> Callable[[Path, Path], None] | None:
    """renameat2(RENAME_EXCHANGE): swap two names atomically (a folder and a symlink)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return None

    def exchange(a: Path, b: Path) -> None:
        if renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    return exchange


@contextlib.contextmanager
def swapping(ws: Path, name: str, link_name: str) -> Iterator[list[int]]:
    """A thread that keeps swapping ``ws/name`` (a folder) with ``ws/link_name`` (a symlink out)
    until the block ends; yields a one-item list with the number of swaps done."""
    exchange = _exchanger()
    if exchange is None:
        pytest.skip("renameat2 is not available")
    try:
        exchange(ws / name, ws / link_name)
        exchange(ws / name, ws / link_name)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
            pytest.skip(f"RENAME_EXCHANGE is not supported here: {exc}")
        raise
    stop = threading.Event()
    count = [0]

    def swap() -> None:
        while not stop.is_set():
            exchange(ws / name, ws / link_name)
            count[0] += 1

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        yield count
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_swapping_a_folder_for_a_link_out_never_escapes(
    resolver: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GO (directory replaced by symlink) / MCP race tests: while raceDir is swapped with a link
    to the outside folder and back, thousands of writes and reads through raceDir either stay
    inside or are refused with a SandboxError."""
    if resolver == "openat2" and not openat2_available():
        pytest.skip("openat2 is not available on this kernel")
    if resolver == "walk":
        monkeypatch.setattr(stockade.sandbox.hostroot, "_OPENAT2", None)
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(SECRET)
    (out / "inner.txt").write_text(f"{SECRET} inner")
    ws = tmp_path / "workspace"
    (ws / "raceDir").mkdir(parents=True)
    (ws / "raceDir" / "inner.txt").write_text("inside")
    os.symlink(str(out), ws / "raceLink")
    before = snapshot(tmp_path, skip=ws)
    fs = VirtualFS([Mount("/workspace", ws)], durable=False)
    outcomes = {"ok": 0, "refused": 0}
    failures: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 8

    def work(worker: int) -> None:
        for i in range(1500):
            if time.monotonic() > deadline:
                return
            steps: list[Callable[[], object]] = [
                partial(fs.write_text, "raceDir/victim.txt", f"v{worker}-{i}"),
                partial(fs.read_text, "raceDir/victim.txt"),
                partial(fs.read_text, "raceDir/inner.txt"),
            ]
            for step in steps:
                try:
                    value = step()
                except SandboxError:
                    key = "refused"
                except Exception as exc:
                    with lock:
                        failures.append(repr(exc))
                    continue
                else:
                    key = "ok"
                    if isinstance(value, str) and SECRET in value:
                        with lock:
                            failures.append(f"read the outside: {value!r}")
                with lock:
                    outcomes[key] += 1

    with fs, swapping(ws, "raceDir", "raceLink") as swaps:
        workers = [threading.Thread(target=work, args=(n,)) for n in range(2)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(30)
    assert not failures, failures[:5]
    assert outcomes["ok"] + outcomes["refused"] >= 3000
    assert swaps[0] > 1000, "the swapper hardly ran"
    assert outcomes["ok"] > 0, outcomes
    assert outcomes["refused"] > 0, outcomes
    assert not (out / "victim.txt").exists()
    assert snapshot(tmp_path, skip=ws) == before
    assert (out / "secret.txt").read_text() == SECRET
    real = (
        ws / "raceDir"
        if (ws / "raceDir").is_dir() and not (ws / "raceDir").is_symlink()
        else (ws / "raceLink")
    )
    assert (real / "victim.txt").read_text().startswith("v")
    assert not stray_temp_files(ws)


@pytest.mark.parametrize("resolver", ["openat2", "walk"])
def test_a_guarded_view_judges_what_it_opens_while_a_link_is_swapped_in_and_out(
    resolver: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While raceDir (an ordinary folder) is swapped with raceLink, a link *inside* the mount to
    vault/, thousands of reads and writes through raceDir go on: the guard refuses vault/, and
    is asked about the file each operation really opens, so a read never returns the vault's
    file and a write never lands in it, however the swap falls."""
    if resolver == "openat2" and not openat2_available():
        pytest.skip("openat2 is not available on this kernel")
    if resolver == "walk":
        monkeypatch.setattr(stockade.sandbox.hostroot, "_OPENAT2", None)
    ws = tmp_path / "workspace"
    (ws / "vault").mkdir(parents=True)
    (ws / "vault" / "inner.txt").write_text(SECRET)
    (ws / "raceDir").mkdir()
    (ws / "raceDir" / "inner.txt").write_text("inside")
    os.symlink("vault", ws / "raceLink")
    vault_before = snapshot(ws / "vault")

    def guard(path: str, access: str) -> str | None:
        return "the vault is closed" if path.startswith("/workspace/vault") else None

    fs = VirtualFS([Mount("/workspace", ws)], durable=False)
    view = fs.guarded(guard)
    outcomes = {"ok": 0, "refused": 0, "stopped": 0}
    failures: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 8

    def work(worker: int) -> None:
        for i in range(1500):
            if time.monotonic() > deadline:
                return
            for step in (
                partial(view.read_text, "raceDir/inner.txt"),
                partial(view.write_text, "raceDir/victim.txt", f"v{worker}-{i}"),
                partial(view.list_dir, "raceDir"),
            ):
                try:
                    value = step()
                except PathDeniedError:
                    key = "refused"
                except SandboxError:
                    key = "stopped"  # a swap caught in the middle: stopped, which is safe too
                except Exception as exc:
                    with lock:
                        failures.append(repr(exc))
                    continue
                else:
                    key = "ok"
                    if isinstance(value, str) and SECRET in value:
                        with lock:
                            failures.append(f"read the vault: {value!r}")
                with lock:
                    outcomes[key] += 1

    with fs, swapping(ws, "raceDir", "raceLink") as swaps:
        workers = [threading.Thread(target=work, args=(n,)) for n in range(2)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(30)
    assert not failures, failures[:5]
    assert swaps[0] > 1000, "the swapper hardly ran"
    assert outcomes["ok"] > 0, outcomes
    assert outcomes["refused"] > 0, outcomes  # the guard was asked about the vault, and said no
    assert snapshot(ws / "vault") == vault_before  # nothing landed in it
    assert not stray_temp_files(ws)
