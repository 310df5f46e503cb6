"""File tools are judged at the moment of use: a real engine, real files, the shipped presets.

A call is decided on the paths it names when it arrives; it may then wait for a slot, and by
the time it runs a link may have been swapped in, or a walk may reach files nobody named. Each
attack below is made deterministic by an exclusive tool that holds the engine while the calls
are decided and the ground is changed under them (as a concurrent call, or a command, would).
The checks are on real effects: no secret's text (or its sha256) in anything a call returns,
the protected files on the host as they were.

Layout of every workspace (``ws``, mounted at /workspace)::

    .env  .ENV  sub/.env  .ssh/id_rsa       secrets, each with its own text
    .git/hooks/pre-commit                   a hook (protected: writing it runs code)
    src/app.py  README.md                   an ordinary project
    notes.txt  out.txt                      ordinary files that calls name
    work/notes.txt                          an ordinary folder ...
    evil/notes.txt -> ../.env               ... and one holding a link to the secret
    docs/link.txt -> ../.env                a walk reaches the secret through this link
    keys -> .ssh                            and a protected folder through this one
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support import Gate, hold, until

from stockade.engine import Engine, ToolCall, Toolkit, ToolResult
from stockade.engine.builtin.files import add_file_tools
from stockade.policies import Decision, Effect, Policy, Request
from stockade.sandbox import Mount, VirtualFS

SECRETS = {
    ".env": "API_KEY=sk-live-env-6f1c2a9e\n",
    ".ENV": "API_KEY=sk-live-upper-0b7d44f1\n",
    "sub/.env": "API_KEY=sk-live-sub-93e8aa02\n",
    ".ssh/id_rsa": "KEY-----BEGIN OPENSSH PRIVATE KEY-----c3NoLWVkMjU1MTk\n",
}
HOOK = "#!/bin/sh\necho the original hook\n"
PRESETS = ("default", "permissive")


class Decisions:
    """An observer keeping each call's decision, taken when the call arrived."""

    def __init__(self) -> None:
        self.seen: dict[str, Decision] = {}

    def began(self, call: ToolCall, description: str | None, *, current: bool) -> None:
        return None

    def decided(self, call: ToolCall, request: Request, decision: Decision) -> None:
        self.seen[call.id] = decision

    def ended(self, call: ToolCall, result: ToolResult) -> None:
        return None


@dataclass
class Box:
    preset: str
    ws: Path
    engine: Engine
    gate: Gate
    decisions: Decisions
    asked: list[Decision] = field(default_factory=list)

    async def call(self, name: str, **arguments: object) -> ToolResult:
        return await self.engine.call(ToolCall(name=name, arguments=arguments))

    async def after_the_decision(
        self, calls: list[ToolCall], meanwhile: Callable[[], None] | None = None
    ) -> list[ToolResult]:
        """Run ``calls`` late: each is decided now, then waits for a slot while ``meanwhile``
        changes the ground under it."""
        held = ToolCall(name="hold", arguments={})
        holding = self.engine.submit(held)
        await until(lambda: held.id in self.decisions.seen)  # running: it holds the engine
        tasks = [self.engine.submit(call) for call in calls]
        await until(lambda: all(call.id in self.decisions.seen for call in calls))
        if meanwhile is not None:
            meanwhile()
        self.gate.open.set()
        done = [await task for task in tasks]
        assert (await holding).status == "ok"
        return done


def put(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def layout(ws: Path) -> None:
    for relative, text in SECRETS.items():
        put(ws, relative, text)
    put(ws, ".git/hooks/pre-commit", HOOK)
    put(ws, "src/app.py", "import os\nAPI_KEY = os.environ['API_KEY']\n")
    put(ws, "README.md", "Set API_KEY in .env\n")
    put(ws, "notes.txt", "ordinary notes\n")
    put(ws, "out.txt", "ordinary output\n")
    put(ws, "work/notes.txt", "work notes\n")
    (ws / "evil").mkdir()
    os.symlink("../.env", ws / "evil" / "notes.txt")
    (ws / "docs").mkdir()
    os.symlink("../.env", ws / "docs" / "link.txt")
    os.symlink(".ssh", ws / "keys")


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Callable[..., Box]]:
    """Boxes over a fresh workspace each: ``make(preset, answer=None)``; ``answer`` is what an
    approver says to every ask (None: no approver, so asks are refused)."""
    opened: list[tuple[Engine, VirtualFS]] = []

    def factory(preset: str, answer: bool | None = None) -> Box:
        ws = tmp_path / f"ws{len(opened)}"
        ws.mkdir()
        layout(ws)
        toolkit = Toolkit()
        add_file_tools(toolkit)
        toolkit.add(hold)
        gate, decisions = Gate(), Decisions()
        fs = VirtualFS([Mount("/workspace", ws)])
        asked: list[Decision] = []

        def approver(call: ToolCall, decision: Decision) -> bool:
            asked.append(decision)
            return bool(answer)

        engine = Engine(
            toolkit,
            fs=fs,
            policy=Policy.preset(preset),
            context=[gate],
            observers=[decisions],
            approver=approver if answer is not None else None,
        )
        opened.append((engine, fs))
        return Box(preset, ws, engine, gate, decisions, asked)

    yield factory
    for engine, fs in opened:
        await engine.aclose()
        fs.close()


def leaked(results: list[ToolResult]) -> list[str]:
    """Each secret (or its sha256) found anywhere in the results: content, metadata, the
    tool's metadata, the error, the notes."""
    everything = "\n".join(repr(result) for result in results)
    found = []
    for name, text in SECRETS.items():
        digest = hashlib.sha256(text.encode()).hexdigest()
        if text.strip() in everything or text.split("=")[-1].strip() in everything:
            found.append(name)
        if digest in everything:
            found.append(f"sha256 of {name}")
    return found


def assert_protected_files_untouched(ws: Path) -> None:
    for relative, text in SECRETS.items():
        assert (ws / relative).read_text() == text, relative
    assert (ws / ".git/hooks/pre-commit").read_text() == HOOK


def assert_refused(result: ToolResult, path: str, *fragments: str) -> None:
    """Refused where it landed: the tool started, and the view refused ``path``."""
    assert result.status == "error", result.text
    assert result.error is not None
    assert result.error.type == "PathDeniedError", result.text
    assert path in result.error.message, result.text
    assert "rule dangerous-path" in result.error.message, result.text
    for fragment in fragments:
        assert fragment in result.error.message, result.text


def assert_left_out(result: ToolResult, at_least: int) -> None:
    assert result.status == "ok", result.text
    assert result.metadata["left_out"] >= at_least, result.metadata
    assert "left out: the policy does not let this call read" in result.text
    assert any("rule dangerous-path" in r for r in result.metadata["left_out_reasons"])


# -- the attacks -------------------------------------------------------------------------------


def asks(box: Box) -> bool:
    """Whether the box's policy asks about protected paths (default), rather than denying."""
    return box.preset == "default"


def swap_in_a_link(ws: Path, name: str, target: str) -> Callable[[], None]:
    """What a command does between a call's decision and its run: ``name`` becomes a link."""

    def swap() -> None:
        (ws / name).unlink()
        os.symlink(target, ws / name)

    return swap


def late(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


@dataclass(frozen=True)
class Attack:
    """What the agent does (``run``: the results it gets back), and what must come of it on
    top of the common checks (``expect``)."""

    run: Callable[[Box], Awaitable[list[ToolResult]]]
    expect: Callable[[Box, list[ToolResult]], None]


# (a) time of check is not time of use


async def swap_a_folder_run(box: Box) -> list[ToolResult]:
    """Two moves swap work/ for evil/ (whose notes.txt links to .env) while a read of
    work/notes.txt, decided on an ordinary file, waits for its slot."""
    return await box.after_the_decision(
        [
            late("move_file", source="work", destination="old"),
            late("move_file", source="evil", destination="work"),
            late("read_text_file", path="work/notes.txt"),
        ]
    )


def swap_a_folder_expect(box: Box, results: list[ToolResult]) -> None:
    *moved, read = results
    assert [m.status for m in moved] == ["ok", "ok"], [m.text for m in moved]
    assert box.decisions.seen[read.call_id].effect is Effect.ALLOW  # an ordinary file, then
    assert (box.ws / "work" / "notes.txt").is_symlink()  # the swap did happen
    assert_refused(read, "/workspace/.env", *(["reached at run time"] if asks(box) else []))


async def link_after_read_run(box: Box) -> list[ToolResult]:
    read = late("read_text_file", path="notes.txt")
    return await box.after_the_decision([read], swap_in_a_link(box.ws, "notes.txt", ".env"))


def link_after_read_expect(box: Box, results: list[ToolResult]) -> None:
    (read,) = results
    assert box.decisions.seen[read.call_id].effect is Effect.ALLOW
    assert_refused(read, "/workspace/.env", "may not be read")


async def link_after_hash_run(box: Box) -> list[ToolResult]:
    info = late("file_info", path="notes.txt")
    return await box.after_the_decision([info], swap_in_a_link(box.ws, "notes.txt", ".env"))


def link_after_hash_expect(box: Box, results: list[ToolResult]) -> None:
    assert_refused(results[0], "/workspace/.env")


async def link_after_write_run(box: Box) -> list[ToolResult]:
    write = late("write_file", path="out.txt", content="echo pwned\n")
    swap = swap_in_a_link(box.ws, "out.txt", ".git/hooks/pre-commit")
    return await box.after_the_decision([write], swap)


def link_after_write_expect(box: Box, results: list[ToolResult]) -> None:
    (write,) = results
    assert box.decisions.seen[write.call_id].effect is Effect.ALLOW
    assert_refused(write, "/workspace/.git/hooks/pre-commit", "may not be written")
    assert os.readlink(box.ws / "out.txt") == ".git/hooks/pre-commit"  # the link, unchanged


async def move_a_folder_run(box: Box) -> list[ToolResult]:
    """Moving sub/ would take sub/.env from where it is: a delete of a protected path."""
    return [await box.call("move_file", source="sub", destination="elsewhere")]


def move_a_folder_expect(box: Box, results: list[ToolResult]) -> None:
    assert_refused(results[0], "/workspace/sub/.env", "may not be deleted")
    assert not (box.ws / "elsewhere").exists()


# (b) walks judge only where they start


async def grep_everything_run(box: Box) -> list[ToolResult]:
    return [
        await box.call("grep", pattern="KEY", path="/workspace"),
        await box.call("grep", pattern="sk-live|openssh", ignore_case=True),
    ]


def grep_everything_expect(box: Box, results: list[ToolResult]) -> None:
    everything, secrets = results
    # .env .ENV .ssh sub/.env docs/link.txt keys evil/notes.txt (and .git/hooks)
    assert_left_out(everything, 7)
    assert "/workspace/src/app.py:2: API_KEY = os.environ['API_KEY']" in everything.text
    assert_left_out(secrets, 7)
    assert secrets.metadata["matches"] == 0


INCLUDES = ("**/.env*", ".ssh/*", "keys/*", "**/.ENV", "sub/*", "docs/*", "**/*")


async def grep_including_run(box: Box) -> list[ToolResult]:
    return [
        await box.call("grep", pattern="KEY", path="/workspace", include=include)
        for include in INCLUDES
    ]


def grep_including_expect(box: Box, results: list[ToolResult]) -> None:
    for result in results:
        assert_left_out(result, 1)


GLOBS = (".ssh/*", "**/.env*", "**/id_rsa", "keys/*", "docs/*", "**/*")


async def glob_run(box: Box) -> list[ToolResult]:
    return [await box.call("glob_files", pattern=pattern) for pattern in GLOBS]


def glob_expect(box: Box, results: list[ToolResult]) -> None:
    for result in results:
        assert_left_out(result, 1)
        listed = [line for line in result.text.splitlines() if line.startswith("/workspace/")]
        for line in listed:
            assert not line.endswith(("id_rsa", ".env", ".ENV", "link.txt")), result.text


async def list_run(box: Box) -> list[ToolResult]:
    return [await box.call("list_directory", path=path) for path in ("/workspace", "docs", "sub")]


def list_expect(box: Box, results: list[ToolResult]) -> None:
    top, docs, sub = results
    assert_left_out(top, 4)  # .env .ENV .ssh keys
    shown = {line.split("  ")[0] for line in top.text.splitlines()}
    assert not {".env", ".ENV", ".ssh/", "keys/"} & shown, top.text
    assert {"src/", "README.md", "notes.txt"} <= shown, top.text
    assert_left_out(docs, 1)
    assert "link.txt" not in docs.text
    assert_left_out(sub, 1)
    assert ".env" not in sub.text.split("[")[0]


async def walk_a_link_run(box: Box) -> list[ToolResult]:
    return [await box.call("grep", pattern="KEY", path="docs")]


def walk_a_link_expect(box: Box, results: list[ToolResult]) -> None:
    assert_left_out(results[0], 1)
    assert results[0].metadata["matches"] == 0


ATTACKS = {
    "swap-a-folder-for-one-holding-a-link": Attack(swap_a_folder_run, swap_a_folder_expect),
    "read-through-a-link-made-after-the-decision": Attack(
        link_after_read_run, link_after_read_expect
    ),
    "hash-through-a-link-made-after-the-decision": Attack(
        link_after_hash_run, link_after_hash_expect
    ),
    "write-through-a-link-made-after-the-decision": Attack(
        link_after_write_run, link_after_write_expect
    ),
    "move-a-folder-holding-a-secret": Attack(move_a_folder_run, move_a_folder_expect),
    "grep-the-workspace": Attack(grep_everything_run, grep_everything_expect),
    "grep-with-include-patterns": Attack(grep_including_run, grep_including_expect),
    "glob-inside-protected-places": Attack(glob_run, glob_expect),
    "list-folders-holding-secrets": Attack(list_run, list_expect),
    "walk-through-a-link-into-the-secret": Attack(walk_a_link_run, walk_a_link_expect),
}


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("attack", sorted(ATTACKS))
async def test_attack(attack: str, preset: str, make: Callable[..., Box]) -> None:
    """Under ``default`` with nobody to answer (asks refused) and under ``permissive`` (protected
    paths denied): nothing of a secret comes back, nothing protected changes, and what was
    refused or left out is said."""
    box = make(preset)
    results = await ATTACKS[attack].run(box)
    assert leaked(results) == []
    assert_protected_files_untouched(box.ws)
    ATTACKS[attack].expect(box, results)


# -- the work that must keep working ----------------------------------------------------------


@pytest.mark.parametrize("preset", PRESETS)
async def test_grep_and_glob_over_an_ordinary_project(
    preset: str, make: Callable[..., Box]
) -> None:
    box = make(preset)
    put(box.ws, "src/pkg/util.py", "def key_of(x):\n    return x.KEY\n")
    grep = await box.call("grep", pattern="KEY", path="src")
    assert grep.status == "ok", grep.text
    assert grep.text.splitlines() == [
        "/workspace/src/app.py:2: API_KEY = os.environ['API_KEY']",
        "/workspace/src/pkg/util.py:2: return x.KEY",
    ]
    assert grep.metadata == {"path": "/workspace/src", "matches": 2, "skipped_files": 0}
    glob = await box.call("glob_files", pattern="**/*.py", path="src")
    assert glob.text.splitlines() == ["/workspace/src/app.py", "/workspace/src/pkg/util.py"]
    assert glob.metadata == {"path": "/workspace/src", "matches": 2}
    listing = await box.call("list_directory", path="src")
    assert listing.text.splitlines() == ["app.py  (42 bytes)", "pkg/"]
    assert listing.metadata == {"path": "/workspace/src", "entries": 2}
    # over the whole workspace, the ordinary files are all found, the rest said to be left out
    whole = await box.call("grep", pattern="API_KEY", path="/workspace", include="**/*.{py,md}")
    assert whole.text.splitlines()[:2] == [
        "/workspace/README.md:1: Set API_KEY in .env",
        "/workspace/src/app.py:2: API_KEY = os.environ['API_KEY']",
    ]
    assert_left_out(whole, 1)


@pytest.mark.parametrize("preset", PRESETS)
async def test_reading_through_an_in_mount_link_to_an_ordinary_file(
    preset: str, make: Callable[..., Box]
) -> None:
    box = make(preset)
    os.symlink("work/notes.txt", box.ws / "current")
    result = await box.call("read_text_file", path="current")
    assert result.status == "ok", result.text
    assert result.text == "work notes\n"
    assert result.metadata["path"] == "/workspace/work/notes.txt"
    # and a link swapped in after the decision, to an ordinary file, is simply followed
    read = ToolCall(name="read_text_file", arguments={"path": "notes.txt"})
    swap = swap_in_a_link(box.ws, "notes.txt", "work/notes.txt")
    (late,) = await box.after_the_decision([read], swap)
    assert late.status == "ok", late.text
    assert late.text == "work notes\n"


@pytest.mark.parametrize("preset", PRESETS)
async def test_writing_through_a_link_to_an_allowed_file(
    preset: str, make: Callable[..., Box]
) -> None:
    box = make(preset)
    os.symlink("work/notes.txt", box.ws / "today.txt")
    result = await box.call("write_file", path="today.txt", content="written through\n")
    assert result.status == "ok", result.text
    assert (box.ws / "work" / "notes.txt").read_text() == "written through\n"
    assert os.readlink(box.ws / "today.txt") == "work/notes.txt"
    edit = await box.call("edit_file", path="today.txt", old_text="through", new_text="again")
    assert edit.status == "ok", edit.text
    assert (box.ws / "work" / "notes.txt").read_text() == "written again\n"
    moved = await box.call("move_file", source="work", destination="desk")
    assert moved.status == "ok", moved.text
    assert (box.ws / "desk" / "notes.txt").read_text() == "written again\n"


async def test_an_approved_call_does_what_was_approved(make: Callable[..., Box]) -> None:
    """The approver said yes to writing .env, editing it and reading it through a link: each
    works, reading what it changes included. A walk it was not asked about still leaves the
    secrets out, and nobody is asked mid-run."""
    box = make("default", answer=True)
    write = await box.call("write_file", path=".env", content="API_KEY=rotated\n")
    assert write.status == "ok", write.text
    assert write.metadata["sha256_before"] == hashlib.sha256(SECRETS[".env"].encode()).hexdigest()
    edit = await box.call("edit_file", path=".env", old_text="rotated", new_text="rotated-again")
    assert edit.status == "ok", edit.text
    assert (box.ws / ".env").read_text() == "API_KEY=rotated-again\n"
    read = await box.call("read_text_file", path="docs/link.txt")
    assert read.status == "ok", read.text
    assert read.text == "API_KEY=rotated-again\n"
    assert len(box.asked) == 3
    walk = await box.call("grep", pattern="KEY", path="/workspace")
    assert_left_out(walk, 5)
    assert "rotated" not in walk.text
    assert len(box.asked) == 3  # the walk was allowed as it arrived; nobody was asked after


async def test_a_path_that_warns_is_noted_once_and_shadow_mode_refuses_nothing(
    tmp_path: Path,
) -> None:
    """What the policy would only warn about is read, and the call's warnings name it once; a
    policy in shadow mode refuses nothing at run time either, and says what it would have
    refused."""
    ws = tmp_path / "ws"
    ws.mkdir()
    layout(ws)
    put(ws, "reports/q1.md", "KEY figures\n")
    rules = [
        {"id": "warn-reports", "effect": "warn", "reason": "reports are sensitive",
         "actions": ["read"], "paths": ["/workspace/reports/**"]},
    ]  # fmt: skip
    toolkit = Toolkit()
    add_file_tools(toolkit)
    with VirtualFS([Mount("/workspace", ws)]) as fs:
        for shadow in (False, True):
            policy = Policy.from_dict(
                {"default": "allow", "shadow": shadow, "dangerous_paths": {"effect": "ask"},
                 "rules": rules}
            )  # fmt: skip
            async with Engine(toolkit, fs=fs, policy=policy) as engine:
                result = await engine.call(
                    ToolCall(name="grep", arguments={"pattern": "KEY", "include": "reports/*"})
                )
                secrets = await engine.call(ToolCall(name="grep", arguments={"pattern": "sk-live"}))
            assert result.status == "ok", result.text
            assert result.text.splitlines()[0] == "/workspace/reports/q1.md:1: KEY figures"
            assert result.notes is not None
            noted = [w for w in result.notes.warnings if "/workspace/reports/q1.md" in w]
            assert noted == [
                "reports are sensitive (read of /workspace/reports/q1.md, reached at run time)"
            ], result.notes.warnings  # once, though it was both looked at and read
            assert secrets.status == "ok", secrets.text
            if shadow:  # a trial blocks nothing: the warnings say what would have been refused
                assert secrets.notes is not None
                would = [w for w in secrets.notes.warnings if w.startswith("shadow mode")]
                assert any("/workspace/.env:" in w for w in would), secrets.notes.warnings
                assert "left_out" not in secrets.metadata
            else:
                assert leaked([secrets]) == []
                assert_left_out(secrets, 5)


async def test_a_walk_reaches_what_a_lasting_approval_covers_and_nothing_else(
    tmp_path: Path,
) -> None:
    """A walk meets files nobody named, so nobody can be asked about them: those that need a
    yes are left out, unless a lasting approval (here one kept for the session) covers them."""
    ws = tmp_path / "ws"
    ws.mkdir()
    put(ws, "reports/q1.md", "KEY figures\n")
    put(ws, "private/p.md", "KEY private\n")
    rules = [
        {"id": "ask-reports", "effect": "ask", "actions": ["read"], "paths": ["reports/**"]},
        {"id": "ask-private", "effect": "ask", "actions": ["read"], "paths": ["private/**"]},
    ]
    toolkit = Toolkit()
    add_file_tools(toolkit)
    policy = Policy.from_dict({"default": "allow", "rules": rules})

    def keep_folder(call: ToolCall, decision: Decision) -> object:
        from stockade.engine import Approve

        return Approve("session", next(s for s in decision.suggestions if s.kind == "folder"))

    grep = ToolCall(name="grep", arguments={"pattern": "KEY"})
    with VirtualFS([Mount("/workspace", ws)]) as fs:
        async with Engine(toolkit, fs=fs, policy=policy, approver=keep_folder) as engine:
            before = await engine.call(grep)
            # asked (it names reports/), and answered: for the session, the whole folder
            named = ToolCall(name="grep", arguments={"pattern": "KEY", "path": "reports"})
            assert (await engine.call(named)).status == "ok"
            after = await engine.call(grep)
    assert "/workspace/reports/q1.md" not in before.text
    assert "/workspace/reports/q1.md:1: KEY figures" in after.text
    assert "/workspace/private/p.md" not in after.text  # no approval covers it
