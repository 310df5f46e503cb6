"""One policy for every host: policies published to a real PostgreSQL (started by the tests, on
loopback) through casbin's SQL adapter, followed by engines through casbin's watcher."""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_server import PASSWORD, PostgresServer
from support import one_error_line, serve_params, stockade_cli, until

from stockade.engine import Engine, ToolCall
from stockade.engine.cli.session import standard_toolkit
from stockade.policies import Effect, Policy, Request
from stockade.policies.store import PolicyStore, PolicyStoreError
from stockade.sandbox import Mount, VirtualFS

OPEN = """
default = "allow"
[[rules]]
id = "no-secrets"
effect = "deny"
tools = ["read_text_file", "write_file"]
paths = ["/workspace/secrets/**"]
reason = "secrets stay put"
"""
CLOSED = """
default = "deny"
[limits]
max_in_flight = 4
[[rules]]
id = "reads-only"
effect = "allow"
actions = ["read"]
reason = "reading is fine"
"""
BROKEN = """
default = "allow"
[[rules]]
id = "typo"
effect = "permit"
"""


def policy_of(text: str) -> Policy:
    return Policy.from_dict(tomllib.loads(text))


@pytest.fixture
def store(postgres_url: str) -> Iterator[PolicyStore]:
    pushed = PolicyStore(postgres_url)
    yield pushed
    pushed.close()


def following(url: str) -> Policy:
    """A policy from the store whose feed listens (the watcher takes ~2 s to subscribe)."""
    policy = Policy.from_store(url)
    assert policy.feed is not None
    assert policy.feed.listening.wait(20), policy.feed.problem
    return policy


def write_call(path: str = "/workspace/notes.txt") -> ToolCall:
    return ToolCall(name="write_file", arguments={"path": path, "content": "x"})


# -- what is stored is the policy --------------------------------------------------------------

RICH = """
description = "every table at once"
default = "ask"
shadow = false
[roles]
builders = ["ci", "agent"]
[limits]
max_in_flight = 3
per_tool = { run_shell = 1 }
[process]
timeout_s = 30
memory_mb = 512
[host_files]
mode = "warn"
[dangerous_commands]
remove = ["power"]
[[rules]]
id = "builders-write"
effect = "allow"
subjects = ["builders"]
tools = ["write_file", "edit_file"]
paths = ["/workspace/src/**", "!/workspace/src/vendor/**"]
reason = "builders, [brackets], (parens), 100% sure"
[[rules]]
id = "npm"
effect = "allow"
tools = ["run_shell"]
commands = ["npm test", "npm run build:*"]
"""

REQUESTS = [
    Request(subject=s, tool=t, action=a, paths=p)
    for s in ("agent", "ci", "visitor")
    for t, a, p in (
        ("write_file", "call", (("/workspace/src/a.py", "write"),)),
        ("write_file", "call", (("/workspace/src/vendor/x.py", "write"),)),
        ("read_file", "call", (("/workspace/README.md", "read"),)),
        ("edit_file", "call", (("/workspace/.env", "write"),)),
    )
] + [
    Request(subject="agent", tool="run_shell", action="execute", command=c, isolated=True)
    for c in (
        "npm test",
        "npm run build:web",
        "curl x | sh",
        "rm -rf /workspace",
        "shutdown -h now",
    )
]


def test_a_pushed_policy_comes_back_whole(store: PolicyStore, postgres_url: str) -> None:
    original = policy_of(RICH)
    version = store.push(original, note="ops: every table")
    stored = Policy.from_store(postgres_url)
    try:
        assert stored.feed is not None
        assert stored.feed.version == version
        for key in ("default", "limits", "process", "host_files", "roles", "description"):
            assert getattr(stored.spec, key) == getattr(original.spec, key), key
        assert stored.spec.dangerous_commands == original.spec.dangerous_commands
        for request in REQUESTS:
            assert stored.decide(request) == original.decide(request), request
        assert store.read().note.endswith("ops: every table")
    finally:
        stored.feed.close()


def test_an_empty_store_says_how_to_fill_it(postgres_url: str) -> None:
    with pytest.raises(PolicyStoreError, match="holds no policy yet: publish one with"):
        Policy.from_store(postgres_url)


def test_an_unreachable_store_is_named_without_its_password(tmp_path: Path) -> None:
    url = f"postgresql://stockade:{PASSWORD}@127.0.0.1:1/stockade"
    with pytest.raises(PolicyStoreError) as caught:
        Policy.from_store(url)
    assert "127.0.0.1:1" in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_the_adapter_and_watcher_bring_one_casbin(tmp_path: Path) -> None:
    """The SQL adapter and the watcher are built on pycasbin: the older ``casbin``
    distribution, which installs the same module, must not come along."""
    assert importlib.metadata.distribution("pycasbin")
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("casbin")
    for name in ("sqlalchemy-adapter", "casbin-postgresql-watcher"):
        needs = importlib.metadata.requires(name) or []
        assert any(r.startswith("pycasbin") for r in needs), (name, needs)


def test_a_reader_sees_one_whole_policy_while_pushes_replace_it(
    store: PolicyStore, postgres_url: str
) -> None:
    """A push replaces every line in one transaction and a read is one query: a reader racing
    forty pushes reads the first policy or the second, never lines of both."""
    first, second = policy_of(RICH), policy_of(CLOSED)
    store.push(first)
    shapes = {len(first.casbin_lines()), len(second.casbin_lines())}
    assert len(shapes) == 2
    seen: list[int] = []
    done = threading.Event()

    def read() -> None:
        reader = PolicyStore(postgres_url)
        while not done.is_set():
            seen.append(len(reader.read().lines) - 1)  # less the settings line
        reader.close()

    threads = [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    for n in range(40):
        store.push(second if n % 2 == 0 else first)
    done.set()
    for thread in threads:
        thread.join()
    assert len(seen) > 40
    assert set(seen) <= shapes, set(seen) - shapes


# -- engines follow the store ------------------------------------------------------------------


async def test_a_push_from_another_process_reaches_three_engines_within_a_second(
    store: PolicyStore, postgres_url: str, tmp_path: Path, workspace: Path
) -> None:
    store.push(policy_of(OPEN))
    policies = [following(postgres_url) for _ in range(3)]
    fs = VirtualFS([Mount("/workspace", workspace)])
    engines = [Engine(standard_toolkit(shell=False), policy=p, fs=fs) for p in policies]
    try:
        for engine in engines:
            assert (await engine.call(write_call())).ok
        closed = tmp_path / "closed.toml"
        closed.write_text(CLOSED)
        pushed = await asyncio.to_thread(
            stockade_cli, "policy", "push", str(closed), "--store", postgres_url, cwd=tmp_path
        )
        assert pushed.returncode == 0, pushed.stderr
        assert PASSWORD not in pushed.stdout + pushed.stderr
        sent = time.monotonic()
        pending = set(range(3))
        took: dict[int, float] = {}
        while pending and time.monotonic() - sent < 5:
            for index in list(pending):
                result = await engines[index].call(write_call())
                if result.status == "denied":
                    took[index] = time.monotonic() - sent
                    pending.discard(index)
            await asyncio.sleep(0.01)
        assert not pending, "an engine never took the pushed policy"
        assert max(took.values()) < 1.0, took
        for engine in engines:  # and it stays taken: reads allowed, default deny for the rest
            assert (await engine.call(write_call())).decision.rule is None  # type: ignore[union-attr]
            read = await engine.call(
                ToolCall(name="read_text_file", arguments={"path": "notes.txt"})
            )
            assert read.ok, read.text
    finally:
        for engine in engines:
            await engine.aclose()
        for policy in policies:
            policy.feed.close()  # type: ignore[union-attr]
        fs.close()


def test_a_bad_policy_is_refused_and_the_store_keeps_its_own(
    store: PolicyStore, postgres_url: str, tmp_path: Path
) -> None:
    store.push(policy_of(OPEN))
    before = store.read().version
    broken = tmp_path / "broken.toml"
    broken.write_text(BROKEN)
    refused = stockade_cli("policy", "push", str(broken), "--store", postgres_url, cwd=tmp_path)
    assert refused.returncode == 1
    assert "nothing was published" in refused.stderr
    assert "line 5: error: rules.0.effect" in refused.stderr
    assert store.read().version == before
    missing = stockade_cli("policy", "push", str(broken), cwd=tmp_path)
    assert missing.returncode == 2
    assert "--store" in missing.stderr


# -- the database goes away --------------------------------------------------------------------


@pytest.mark.slow
async def test_the_database_stopped_and_restarted_under_load(
    tmp_path: Path, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Calls go on by the last good policy while the store is down, each saying so; after the
    restart the engine follows pushes again; no call is decided by anything but a whole
    policy (the open one or the closed one)."""
    caplog.set_level(logging.WARNING, logger="stockade.policy_store")
    with PostgresServer.start(tmp_path / "pg") as server:
        store = PolicyStore(server.url)
        store.push(policy_of(OPEN))
        policy = following(server.url)
        feed = policy.feed
        assert feed is not None
        feed.recheck_s = 0.5  # notice the outage soon
        fs = VirtualFS([Mount("/workspace", workspace)])
        engine = Engine(standard_toolkit(shell=False), policy=policy, fs=fs)
        verdicts: list[tuple[str, str | None, list[str]]] = []
        stop = asyncio.Event()

        async def load() -> None:
            while not stop.is_set():
                for path in ("/workspace/notes.txt", "/workspace/secrets/key"):
                    result = await engine.call(write_call(path))
                    rule = result.decision.rule if result.decision else None
                    verdicts.append(
                        (result.status, rule, list(result.notes.warnings) if result.notes else [])
                    )
                await asyncio.sleep(0.005)

        worker = asyncio.create_task(load())
        try:
            await asyncio.sleep(0.3)
            await asyncio.to_thread(server.stop)
            await until(lambda: feed.problem is not None, 10)
            await asyncio.sleep(0.5)
            stale = await engine.call(write_call())
            assert stale.ok  # the last good policy still decides
            warnings = stale.notes.warnings if stale.notes else []
            assert any("last good policy" in w for w in warnings), warnings
            await asyncio.to_thread(server.boot)
            await until(lambda: feed.problem is None and feed.listening.is_set(), 30)
            pusher = PolicyStore(server.url)
            await asyncio.to_thread(pusher.push, policy_of(CLOSED))
            pusher.close()
            await until(lambda: verdicts[-1][0] == "denied" and verdicts[-2][0] == "denied", 5)
        finally:
            stop.set()
            await worker
            await engine.aclose()
            feed.close()
            store.close()
            fs.close()
    allowed_open = {("ok", None), ("denied", "no-secrets")}
    closed = {("denied", None)}
    shapes = [(status, rule) for status, rule, _ in verdicts]
    assert set(shapes) <= allowed_open | closed, set(shapes)
    first_closed = next(i for i, s in enumerate(shapes) if s in closed)
    assert all(s in closed for s in shapes[first_closed:]), "went back to the old policy"
    assert sum("last good policy" in " ".join(w) for _, _, w in verdicts) > 0
    warned = [r.getMessage() for r in caplog.records if "last good policy" in r.getMessage()]
    assert len(warned) == 1, warned  # said once per outage, not once per call
    assert any("answers again" in r.getMessage() for r in caplog.records)


# -- the CLI -----------------------------------------------------------------------------------


def test_run_decides_by_the_store(store: PolicyStore, postgres_url: str, tmp_path: Path) -> None:
    store.push(policy_of(CLOSED))
    (tmp_path / "ws").mkdir()
    calls = tmp_path / "calls.jsonl"
    calls.write_text(
        '{"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}\n'
        '{"name": "list_directory", "arguments": {"path": "."}}\n'
    )
    done = stockade_cli(
        "run", str(calls), "--workspace", "ws", "--json", cwd=tmp_path,
        env={"STOCKADE_POLICY_STORE": postgres_url, "XDG_STATE_HOME": str(tmp_path / "state")},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # one call was denied
    assert not (tmp_path / "ws" / "a.txt").exists()
    assert '"denied"' in done.stdout
    assert PASSWORD not in done.stdout + done.stderr


def test_policy_store_and_a_preset_contradict(postgres_url: str, tmp_path: Path) -> None:
    done = stockade_cli(
        "run",
        "-",
        "--approve",
        "no",
        "--preset",
        "strict",
        "--policy-store",
        postgres_url,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "give --policy-store or --policy/--preset, not both" in one_error_line(done.stderr)


def test_an_unreachable_store_fails_the_command_in_one_line(tmp_path: Path) -> None:
    url = f"postgresql://stockade:{PASSWORD}@127.0.0.1:1/stockade"
    done = stockade_cli("run", "-", "--approve", "no", "--policy-store", url, cwd=tmp_path)
    assert done.returncode == 1
    line = one_error_line(done.stderr)
    assert "cannot be used" in line
    assert PASSWORD not in line


def test_effects_survive_the_store(store: PolicyStore, postgres_url: str) -> None:
    """Each effect a rule can have is stored and decides the same."""
    text = "\n".join(
        f'[[rules]]\nid = "{e.value}"\neffect = "{e.value}"\ntools = ["t_{e.value}"]\n'
        for e in Effect
    )
    store.push(policy_of(text))
    stored = Policy.from_store(postgres_url)
    try:
        for effect in Effect:
            request = Request(subject="agent", tool=f"t_{effect.value}", action="call")
            assert stored.decide(request).effect is effect
    finally:
        stored.feed.close()  # type: ignore[union-attr]


def test_the_claude_code_hook_decides_by_the_store(
    store: PolicyStore, postgres_url: str, tmp_path: Path
) -> None:
    """One policy for every machine's hook too: each hook call reads the store's policy."""
    from test_hook_claude_code import Project

    project = Project(tmp_path)
    write = {"file_path": str(project.folder / "notes.txt"), "content": "x"}
    store.push(policy_of(OPEN))
    opened = project.decide("Write", write, "--policy-store", postgres_url, spawn=True)
    assert opened["permissionDecision"] == "allow"
    store.push(policy_of(CLOSED))
    closed = project.decide("Write", write, "--policy-store", postgres_url, spawn=True)
    assert closed["permissionDecision"] == "deny"
    assert PASSWORD not in closed["permissionDecisionReason"]


async def test_serve_decides_by_the_store_and_ships_its_audit_there(
    store: PolicyStore, postgres_url: str, tmp_path: Path
) -> None:
    """`stockade serve --policy-store URL --audit-store URL`: one policy and one audit trail
    for every host's server."""
    from mcp import Client

    from stockade.engine.observe import read_store, verify_store

    for folder in ("ws", "docs"):
        (tmp_path / folder).mkdir()
    store.push(policy_of(OPEN))
    params = serve_params(tmp_path, "--policy-store", postgres_url, "--audit-store", postgres_url)
    async with Client(params) as client:
        wrote = await client.call_tool("write_file", {"path": "notes.txt", "content": "x"})
        refused = await client.call_tool("write_file", {"path": "secrets/k", "content": "x"})
    assert not wrote.is_error
    assert refused.is_error
    assert (tmp_path / "ws" / "notes.txt").exists()
    assert not (tmp_path / "ws" / "secrets").exists()
    for _ in range(100):  # the server ships its last records as it stops
        outcomes = [r for r in read_store(postgres_url) if r.get("kind") == "outcome"]
        if len(outcomes) == 2:
            break
        await asyncio.sleep(0.1)
    assert sorted(r["status"] for r in outcomes) == ["denied", "ok"]
    assert verify_store(postgres_url).ok
