"""What a command may not read, found before it runs (`ReadMasks`), and the fallback view used
where overlays cannot be mounted. Real folders in tmp_path, real policies, real bubblewrap.

What a user relies on: every path the policy would not let the call read is masked, at every
depth (a folder whole, without looking inside), and another hard-link name of a masked file
too; ordinary files are not; the folder listings the masks come from are reused while a folder
is unchanged, listed again when it changes or changed too recently to be trusted; a workspace
too large to judge is refused. In the fallback, a protected path a command creates is removed
after the run and reported, an existing one cannot be written, and ordinary writes land.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import require_bubblewrap

from stockade import Engine, Policy, ToolCall, Toolkit
from stockade.engine import add_shell_tools
from stockade.engine.pipeline import _commands as commands_step
from stockade.engine.pipeline import _masks
from stockade.engine.pipeline._masks import ReadMasks, TooManyEntriesError, linked_files
from stockade.policies import Effect, Request
from stockade.policies.request import Access
from stockade.sandbox import Mount, VirtualFS

COMMAND = Request("agent", "run_shell", action="execute", command="make test")
DEFAULT = Policy.preset("default")
ALLOW = Policy.from_dict({"default": "allow", "process": {"require_isolation": True}})
MINUTE_NS = 60_000_000_000
FIXTURE_IN_GIVEN = [HealthCheck.function_scoped_fixture]


def plant(root: Path, files: dict[str, str]) -> Path:
    """Files (with their folders) under ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def age(*folders: Path, ago_ns: int = MINUTE_NS) -> int:
    """Set the folders' modification time ``ago_ns`` back (their listings become trustworthy,
    or racy if that is under two seconds); the time set."""
    when = time.time_ns() - ago_ns
    for folder in folders:
        os.utime(folder, ns=(when, when))
    return when


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every listing counts as made long after its folder last changed. A folder's change
    time cannot be set back (only its modification time can), so without this every folder a
    test just made would be racy, and listed again on each command."""
    monkeypatch.setattr(_masks, "_RACY_NS", -(1 << 62))


def listing(masks: ReadMasks, folder: Path) -> object:
    """The listing the masks keep for ``folder`` (to tell a reused one from a new one)."""
    return masks._listings[os.path.realpath(folder)]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def mounts(ws: Path) -> tuple[Mount, ...]:
    return (Mount("/workspace", ws),)


# -- what is masked ----------------------------------------------------------------------------


def test_the_default_preset_masks_protected_files_at_every_depth_and_nothing_else(
    ws: Path, mounts: tuple[Mount, ...]
) -> None:
    plant(
        ws,
        {
            ".env": "API_KEY=sk-live\n",
            "sub/deeper/.env": "SUB=sk-live\n",
            ".ssh/id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\n",
            ".ssh/known_hosts": "host\n",
            "notes.txt": "notes\n",
            "src/main.py": "print(1)\n",
            "sub/deeper/readme.md": "# readme\n",
            "env.txt": "not a dotenv\n",
        },
    )
    masked = ReadMasks(DEFAULT).masks(COMMAND, mounts)
    assert sorted(masked) == ["/workspace/.env", "/workspace/.ssh", "/workspace/sub/deeper/.env"]
    assert len(masked) == len(set(masked))


def test_a_masked_folder_is_masked_whole_without_listing_what_it_holds(
    ws: Path, mounts: tuple[Mount, ...]
) -> None:
    plant(ws, {".ssh/id_rsa": "key", ".ssh/inner/.env": "x", ".ssh/inner/deep/file": "x"})
    masked = ReadMasks(DEFAULT).masks(COMMAND, mounts)
    assert masked == ["/workspace/.ssh"]  # /workspace/.ssh/id_rsa is covered by it


def test_a_custom_rule_that_denies_reads_masks_those_paths_for_reading_only(
    ws: Path, mounts: tuple[Mount, ...]
) -> None:
    plant(
        ws,
        {
            "secrets/prod.key": "k",
            "secrets/inner/dev.key": "k",
            "docs/a.md": "a",
            "warned.txt": "w",
            "plain.txt": "p",
        },
    )
    policy = Policy.from_dict(
        {
            "dangerous_paths": {"replace": []},
            "rules": [
                {
                    "id": "no-secrets",
                    "effect": "deny",
                    "actions": ["read"],
                    "paths": ["/workspace/secrets/**"],
                },
                {"id": "asks", "effect": "ask", "paths": ["/workspace/docs/a.md"]},
                {"id": "warns", "effect": "warn", "paths": ["/workspace/warned.txt"]},
            ],
        }
    )
    masks = ReadMasks(policy)
    assert sorted(masks.masks(COMMAND, mounts)) == ["/workspace/docs/a.md", "/workspace/secrets"]
    # the deny is about reads: as writes, only the ask is refused
    assert masks.masks(COMMAND, mounts, "write") == ["/workspace/docs/a.md"]


def test_the_verdicts_of_one_subject_are_not_used_for_another(
    ws: Path, mounts: tuple[Mount, ...]
) -> None:
    plant(ws, {"hr/salaries.csv": "x", "hr/policy.md": "x", "notes.txt": "x"})
    age(ws, ws / "hr")
    policy = Policy.from_dict(
        {
            "rules": [
                {"id": "hr", "effect": "deny", "subjects": ["bot"], "paths": ["/workspace/hr/**"]}
            ]
        }
    )
    masks = ReadMasks(policy)
    bot = Request("bot", "run_shell", action="execute", command="ls")
    for _ in range(2):  # the second time from the kept listings
        assert masks.masks(COMMAND, mounts) == []
        assert masks.masks(bot, mounts) == ["/workspace/hr"]
        assert masks.masks(COMMAND, mounts) == []


def test_another_hard_link_name_of_a_masked_file_is_masked_too(
    ws: Path, mounts: tuple[Mount, ...]
) -> None:
    plant(ws, {".env": "API_KEY=sk-live\n", "notes.txt": "notes\n", "sub/x.txt": "x"})
    os.link(ws / ".env", ws / "sub" / "copy.txt")
    os.link(ws / ".env", ws / "innocent.cfg")
    masks = ReadMasks(DEFAULT)
    expected = ["/workspace/.env", "/workspace/innocent.cfg", "/workspace/sub/copy.txt"]
    assert sorted(masks.masks(COMMAND, mounts)) == expected
    age(ws, ws / "sub")
    masks.masks(COMMAND, mounts)
    assert sorted(masks.masks(COMMAND, mounts)) == expected  # from the kept listings too


def test_a_symbolic_link_is_not_masked_as_itself(ws: Path, mounts: tuple[Mount, ...]) -> None:
    # a link to a masked file leads to its mask; the link itself is not listed
    plant(ws, {".env": "API_KEY=sk-live\n"})
    os.symlink(".env", ws / "alias")
    os.symlink("/etc/hostname", ws / ".envrc")
    assert ReadMasks(DEFAULT).masks(COMMAND, mounts) == ["/workspace/.env"]


def test_memory_and_overlay_mounts_are_walked_through_the_file_system(
    ws: Path, tmp_path: Path
) -> None:
    staged = tmp_path / "inbox"
    staged.mkdir()
    plant(staged, {".envrc": "export A=1\n", "brief.txt": "b"})
    all_mounts = [
        Mount("/workspace", ws),
        Mount("/workspace/scratch", memory=True),
        Mount("/userinput", staged, overlay=True),
    ]
    with VirtualFS(all_mounts) as fs:
        fs.write_text("/workspace/scratch/.env", "K=v\n")
        fs.write_text("/workspace/scratch/ok.txt", "fine\n")
        fs.write_text("/userinput/sub/.env", "staged, not on the host yet\n")
        masks = ReadMasks(DEFAULT)
        assert sorted(masks.masks(COMMAND, fs.mounts, fs=fs)) == [
            "/userinput/.envrc",
            "/userinput/sub/.env",
            "/workspace/scratch/.env",
        ]
        assert masks.masks(COMMAND, fs.mounts) == []  # without the file system: host mounts only


@pytest.mark.usefixtures("settled")
def test_a_folder_mounted_under_two_prefixes_is_judged_under_each(ws: Path) -> None:
    plant(ws, {"inbox/private.txt": "p", "notes.txt": "n"})
    age(ws, ws / "inbox")
    policy = Policy.from_dict(
        {
            "rules": [
                {
                    "id": "no-private",
                    "effect": "deny",
                    "actions": ["read"],
                    "paths": ["/userinput/private.txt"],
                }
            ]
        }
    )
    nested = (Mount("/workspace", ws), Mount("/userinput", ws / "inbox", read_only=True))
    assert policy.decide_path(COMMAND, "/userinput/private.txt", "read").effect is Effect.DENY
    assert "/userinput/private.txt" in ReadMasks(policy).masks(COMMAND, nested)


# -- the listings kept -------------------------------------------------------------------------


@pytest.mark.usefixtures("settled")
def test_an_unchanged_folder_is_not_listed_again(ws: Path, mounts: tuple[Mount, ...]) -> None:
    plant(ws, {"sub/a.txt": "a", ".env": "k"})
    age(ws, ws / "sub")
    masks = ReadMasks(DEFAULT)
    first = masks.masks(COMMAND, mounts)
    kept = listing(masks, ws), listing(masks, ws / "sub")
    assert masks.masks(COMMAND, mounts) == first == ["/workspace/.env"]
    assert (listing(masks, ws), listing(masks, ws / "sub")) == kept
    assert listing(masks, ws) is kept[0]
    assert listing(masks, ws / "sub") is kept[1]


@pytest.mark.usefixtures("settled")
def test_a_folder_that_changed_is_listed_again(ws: Path, mounts: tuple[Mount, ...]) -> None:
    plant(ws, {"sub/a.txt": "a", "notes.txt": "n"})
    age(ws, ws / "sub")
    masks = ReadMasks(DEFAULT)
    assert masks.masks(COMMAND, mounts) == []
    before_ws, before_sub = listing(masks, ws), listing(masks, ws / "sub")
    (ws / "sub" / ".env").write_text("API_KEY=new\n")  # the folder's time moves on
    assert masks.masks(COMMAND, mounts) == ["/workspace/sub/.env"]
    assert listing(masks, ws / "sub") is not before_sub
    assert listing(masks, ws) is before_ws  # its parent did not change
    (ws / "sub" / ".env").unlink()
    assert masks.masks(COMMAND, mounts) == []


def test_a_folder_changed_less_than_two_seconds_before_its_listing_is_listed_again(
    ws: Path, mounts: tuple[Mount, ...]
) -> None:
    plant(ws, {"notes.txt": "n"})
    when = age(ws, ago_ns=500_000_000)  # half a second: within the clock's reach
    masks = ReadMasks(DEFAULT)
    assert masks.masks(COMMAND, mounts) == []
    first = listing(masks, ws)
    # an entry added within the same clock tick leaves the folder's time as it was
    (ws / ".env").write_text("API_KEY=sk-live\n")
    os.utime(ws, ns=(when, when))
    assert masks.masks(COMMAND, mounts) == ["/workspace/.env"]
    assert listing(masks, ws) is not first


def test_a_folder_that_is_gone_is_forgotten(ws: Path, mounts: tuple[Mount, ...]) -> None:
    plant(ws, {"sub/.env": "k"})
    masks = ReadMasks(DEFAULT)
    assert masks.masks(COMMAND, mounts) == ["/workspace/sub/.env"]
    (ws / "sub" / ".env").unlink()
    (ws / "sub").rmdir()
    assert masks.masks(COMMAND, mounts) == []
    (ws / "sub").mkdir()
    assert masks.masks(COMMAND, mounts) == []


# -- too many entries --------------------------------------------------------------------------


def test_more_entries_than_max_entries_refuses_the_command(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_masks, "MAX_ENTRIES", 5)
    plant(ws, {f"f{i}.txt": "x" for i in range(4)})
    (ws / "dir").mkdir()
    masks = ReadMasks(DEFAULT)
    assert masks.masks(COMMAND, (Mount("/workspace", ws),)) == []  # exactly five: judged
    (ws / "dir" / "one-more.txt").write_text("x")
    with pytest.raises(TooManyEntriesError, match="more than 5 files and folders"):
        masks.masks(COMMAND, (Mount("/workspace", ws),))


def test_the_entries_of_every_mount_count_together_but_a_masked_folders_do_not(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_masks, "MAX_ENTRIES", 5)
    other = tmp_path / "other"
    plant(ws, {"a": "x", "b": "x", "c": "x"})
    plant(other, {"d": "x", "e": "x"})
    plant(ws, {f".ssh/key{i}": "k" for i in range(20)})  # one entry: never walked into
    with pytest.raises(TooManyEntriesError):
        ReadMasks(DEFAULT).masks(COMMAND, (Mount("/workspace", ws), Mount("/userinput", other)))
    (ws / "c").unlink()
    found = ReadMasks(DEFAULT).masks(COMMAND, (Mount("/workspace", ws), Mount("/userinput", other)))
    assert found == ["/workspace/.ssh"]


# -- properties --------------------------------------------------------------------------------

NAMES = [".env", ".ssh", "id_rsa", ".git", "hooks", "config", "src", "notes.txt", ".envrc", "a"]
ENTRIES = st.lists(
    st.tuples(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3), st.booleans()),
    max_size=14,
)
_examples = itertools.count()


def build(root: Path, entries: list[tuple[list[str], bool]], links: list[int]) -> None:
    """The tree ``entries`` describes (a path, and whether it is a folder), skipping what
    clashes with what is there; then hard links between its files, as ``links`` picks them."""
    for parts, is_dir in entries:
        path = root.joinpath(*parts)
        try:
            if is_dir:
                path.mkdir(parents=True, exist_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("/".join(parts))
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            continue
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for number, pick in enumerate(links):
        if len(files) < 2:
            break
        source = files[pick % len(files)]
        link = source.parent / f"link{number}"
        if not link.exists():
            os.link(source, link)


def expected_masks(policy: Policy, root: Path, prefix: str, access: Access) -> set[str]:
    """What must be masked, judged path by path on a fresh walk: the shallowest refused entries,
    and the other names of refused files."""
    found: set[str] = set()
    names: dict[int, list[str]] = defaultdict(list)
    refused: set[int] = set()

    def walk(folder: Path, logical: str) -> None:
        for entry in os.scandir(folder):
            if entry.is_symlink():
                continue
            path = f"{logical}/{entry.name}"
            effect = policy.decide_path(COMMAND, path, access).effect
            if effect in (Effect.DENY, Effect.ASK):
                found.add(path)
                if not entry.is_dir(follow_symlinks=False):
                    refused.add(entry.inode())
            elif entry.is_dir(follow_symlinks=False):
                walk(Path(entry.path), path)
            else:
                names[entry.inode()].append(path)

    walk(root, prefix)
    return found | {path for inode in refused for path in names[inode]}


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE_IN_GIVEN)
@given(
    entries=ENTRIES,
    links=st.lists(st.integers(min_value=0, max_value=50), max_size=3),
    access=st.sampled_from(["read", "write"]),
)
def test_the_masks_are_every_refused_path_judged_one_by_one(
    tmp_path: Path, entries: list[tuple[list[str], bool]], links: list[int], access: Access
) -> None:
    root = tmp_path / f"tree-{next(_examples)}"
    root.mkdir()
    build(root, entries, links)
    found = ReadMasks(DEFAULT).masks(COMMAND, (Mount("/workspace", root),), access)
    assert len(found) == len(set(found))
    assert set(found) == expected_masks(DEFAULT, root, "/workspace", access)


@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURE_IN_GIVEN)
@given(before=ENTRIES, after=ENTRIES, removed=st.lists(st.integers(0, 50), max_size=4))
def test_kept_listings_give_the_same_masks_as_fresh_ones_after_any_change(
    tmp_path: Path,
    before: list[tuple[list[str], bool]],
    after: list[tuple[list[str], bool]],
    removed: list[int],
) -> None:
    root = tmp_path / f"tree-{next(_examples)}"
    root.mkdir()
    build(root, before, [])
    age(root, *(p for p in root.rglob("*") if p.is_dir()))
    mounts = (Mount("/workspace", root),)
    kept = ReadMasks(DEFAULT)
    kept.masks(COMMAND, mounts)  # every listing kept, and trusted
    build(root, after, [])
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for pick in removed:
        if files:
            files.pop(pick % len(files)).unlink()
    assert sorted(kept.masks(COMMAND, mounts)) == sorted(ReadMasks(DEFAULT).masks(COMMAND, mounts))


# -- linked files ------------------------------------------------------------------------------


def test_linked_files_lists_the_writable_files_with_other_names(tmp_path: Path) -> None:
    ws, ro, elsewhere = (plant(tmp_path / n, {"plain.txt": "p"}) for n in ("ws", "ro", "host"))
    plant(ws, {"sub/deep.txt": "d", "masked/inner.txt": "i"})
    os.link(elsewhere / "plain.txt", ws / "to-outside.txt")
    os.link(ws / "sub" / "deep.txt", ws / "twin.txt")
    os.link(ws / "masked" / "inner.txt", ws / "masked" / "inner2.txt")
    os.link(ro / "plain.txt", ro / "twin.txt")
    os.symlink("plain.txt", ws / "symlink")
    mounts = (Mount("/workspace", ws), Mount("/userinput", ro, read_only=True))
    found = linked_files(mounts, {"/workspace/masked"})
    assert sorted(found) == [
        "/workspace/sub/deep.txt",
        "/workspace/to-outside.txt",
        "/workspace/twin.txt",
    ]


# -- the fallback view -------------------------------------------------------------------------


@pytest.fixture
def rebinds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands run on the fallback view: the overlay probe says no, as on a machine without
    overlays; bubblewrap itself is needed."""
    require_bubblewrap()
    monkeypatch.setattr(commands_step, "layers_available", lambda: "no overlays (the test)")


async def run(ws: Path, command: str, policy: Policy) -> Any:
    toolkit = Toolkit()
    add_shell_tools(toolkit)
    with VirtualFS([Mount("/workspace", ws)]) as fs:
        async with Engine(toolkit, policy=policy, fs=fs) as engine:
            return await engine.call(ToolCall(name="run_shell", arguments={"command": command}))


def changes(result: Any) -> dict[str, dict[str, Any]]:
    return {change["path"]: change for change in result.metadata.get("changes", [])}


# the names are put together at run time, as a script would: the command's words name none
CREATE_PROTECTED = (
    "python3 -c \"import os; os.makedirs('.gi' + 't/hooks'); "
    "open('.gi' + 't/hooks/pre-commit', 'w').write('#!/bin/sh\\nid\\n'); "
    "open('.e' + 'nv', 'w').write('K=v\\n')\""
)


@pytest.mark.usefixtures("rebinds")
async def test_the_fallback_removes_a_new_protected_file_and_reports_it(ws: Path) -> None:
    plant(ws, {"notes.txt": "one\n"})
    result = await run(ws, CREATE_PROTECTED, Policy.preset("permissive"))
    assert result.status == "ok", result.text
    assert result.metadata["process"]["isolation"] == "bubblewrap+rebinds"
    assert result.metadata["process"]["exit_code"] == 0, result.text
    found = changes(result)
    assert set(found) == {"/workspace/.env", "/workspace/.git"}
    assert found["/workspace/.env"]["kind"] == "added"
    assert found["/workspace/.git"]["kind"] == "created_dir"
    for change in found.values():
        assert change["applied"] is False
        assert "removed after the run" in change["reason"]
    assert not (ws / ".env").exists()
    assert not (ws / ".git").exists()
    assert sorted(os.listdir(ws)) == ["notes.txt"]


@pytest.mark.usefixtures("rebinds")
async def test_the_fallback_keeps_an_existing_protected_file_unwritable_and_unread(
    ws: Path,
) -> None:
    plant(ws, {".envrc": "export API_KEY=sk-live-secret\n", ".git/hooks/pre-commit": "true\n"})
    command = (
        'python3 -c "'
        "import os\n"
        "for name in ('.env' + 'rc', '.gi' + 't/hooks/pre-commit'):\n"
        "    try:\n"
        "        print('read', name, repr(open(name).read()))\n"
        "    except OSError as exc:\n"
        "        print('unreadable', name, exc.errno)\n"
        "    try:\n"
        "        open(name, 'a').write('pwned')\n"
        "    except OSError as exc:\n"
        "        print('refused', name, exc.errno)\n"
        '"'
    )
    result = await run(ws, command, Policy.preset("permissive"))
    assert result.status == "ok", result.text
    assert result.metadata["process"]["isolation"] == "bubblewrap+rebinds"
    assert "sk-live-secret" not in result.text
    assert result.text.count("refused") == 2, result.text
    assert "read .envrc ''" in result.text  # masked: it reads as empty
    assert (ws / ".envrc").read_text() == "export API_KEY=sk-live-secret\n"
    assert (ws / ".git" / "hooks" / "pre-commit").read_text() == "true\n"


@pytest.mark.usefixtures("rebinds")
async def test_the_fallback_lands_an_ordinary_write(ws: Path) -> None:
    plant(ws, {"notes.txt": "one\n"})
    result = await run(
        ws, "echo two >> notes.txt && mkdir -p src && echo 'print(1)' > src/new.py", ALLOW
    )
    assert result.status == "ok", result.text
    assert result.metadata["process"]["isolation"] == "bubblewrap+rebinds"
    assert (ws / "notes.txt").read_text() == "one\ntwo\n"
    assert (ws / "src" / "new.py").read_text() == "print(1)\n"
    assert not [c for c in changes(result).values() if not c["applied"]]


@pytest.mark.usefixtures("rebinds")
@pytest.mark.usefixtures("settled")
async def test_the_fallback_sees_a_new_protected_file_in_a_folder_it_did_not_list_lately(
    ws: Path,
) -> None:
    plant(ws, {"sub/a.txt": "a\n"})
    age(ws / "sub")  # its listing is kept, and trusted, from before the run
    command = "python3 -c \"open('sub/.env' + 'rc', 'w').write('x')\""
    result = await run(ws, command, Policy.preset("permissive"))
    assert result.status == "ok", result.text
    assert changes(result)["/workspace/sub/.envrc"]["applied"] is False
    assert sorted(os.listdir(ws / "sub")) == ["a.txt"]


@pytest.mark.usefixtures("settled")
async def test_the_fallback_sees_a_new_protected_file_whose_folder_time_was_put_back(
    ws: Path,
) -> None:
    plant(ws, {"sub/a.txt": "a\n"})
    age(ws / "sub")
    command = (
        "touch -r sub /tmp/when && python3 -c \"open('sub/.env' + 'rc', 'w').write('x')\" "
        "&& touch -r /tmp/when sub"
    )
    result = await run(ws, command, Policy.preset("permissive"))
    assert result.status == "ok", result.text
    assert not (ws / "sub" / ".envrc").exists()
    assert "/workspace/sub/.envrc" in changes(result)
