"""The policy store under attack and under failure: pushes that race, lines in the store that are
not Stockade's, a policy narrowed by its caller, a URL whose connection settings sit in its query.
About 4 s in all (a few pushes and reads on the shared test server)."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg2
import pytest
from test_policy_store import CLOSED, OPEN, RICH, policy_of, write_call

from stockade.engine import Engine
from stockade.engine.cli.session import standard_toolkit
from stockade.policies import Policy
from stockade.policies.store import TABLE, PolicyStore, PolicyStoreError
from stockade.sandbox import Mount, VirtualFS


def test_two_pushes_racing_leave_one_whole_policy(postgres_url: str) -> None:
    """Two operators publishing at once: the store ends up holding one of the two policies,
    whole, never the lines of both."""
    first, second = policy_of(RICH), policy_of(CLOSED)
    shapes = {len(first.casbin_lines()), len(second.casbin_lines())}
    seen: list[int] = []
    for _ in range(15):
        stores = [PolicyStore(postgres_url) for _ in range(2)]
        stores[0].push(first)  # the table exists before the race, both are connected
        stores[1].read()
        start = threading.Barrier(2)

        def push(store: PolicyStore, policy: Policy, start: threading.Barrier = start) -> None:
            start.wait()
            store.push(policy)

        threads = [
            threading.Thread(target=push, args=(s, p))
            for s, p in zip(stores, (first, second), strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seen.append(len(stores[0].read().lines) - 1)  # less the settings line
        for store in stores:
            store.close()
    assert set(seen) <= shapes, seen


def test_a_push_says_the_version_it_published(postgres_url: str) -> None:
    store = PolicyStore(postgres_url)
    try:
        version = store.push(policy_of(OPEN))
        assert store.read().version == version
    finally:
        store.close()


def test_lines_in_the_store_that_are_not_stockades_are_a_store_error(postgres_url: str) -> None:
    """Someone wrote a short line into the table: loading says so as a PolicyStoreError (the
    commands print it in one line), not an IndexError."""
    store = PolicyStore(postgres_url)
    store.push(policy_of(OPEN))
    store.close()
    conn = psycopg2.connect(postgres_url)
    with conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO {TABLE} (ptype, v0, v1) VALUES ('p', 'alice', 'data1')")
    conn.close()
    with pytest.raises(PolicyStoreError, match="does not hold a Stockade policy"):
        Policy.from_store(postgres_url, follow=False)


def test_the_watcher_connects_as_the_url_says() -> None:
    """Connection settings in the URL's query (a socket folder as host, sslmode) reach the
    watcher too, not only the SQL adapter."""
    store = PolicyStore("postgresql://stockade:pw@/stockade?sslmode=disable&host=/run/postgresql")
    watcher = store.watcher(listen=False)
    try:
        assert watcher.host == "/run/postgresql"
        assert watcher.sslmode == "disable"
    finally:
        watcher.stop()


async def test_a_policy_the_caller_narrowed_stays_narrowed(
    postgres_url: str, tmp_path: Path, workspace: Path
) -> None:
    """``Policy.from_store(url).protect([...])``: the caller's protected paths hold for every
    call, and for the policies the store publishes later too."""
    store = PolicyStore(postgres_url)
    store.push(policy_of(OPEN))
    policy = Policy.from_store(postgres_url)
    assert policy.feed is not None
    fs = VirtualFS([Mount("/workspace", workspace)])
    engine = Engine(
        standard_toolkit(shell=False), policy=policy.protect(["/workspace/keep/**"]), fs=fs
    )
    try:
        for _ in range(2):
            result = await engine.call(write_call("/workspace/keep/a.txt"))
            assert result.status == "denied", result
        store.push(policy_of(OPEN.replace("secrets stay put", "secrets stay where they are")))
        assert policy.feed.refresh()
        result = await engine.call(write_call("/workspace/keep/a.txt"))
        assert result.status == "denied", result
        assert engine.policy.spec is policy.feed.current.spec  # the new one is taken
        assert (await engine.call(write_call())).status == "ok"
    finally:
        await engine.aclose()
        policy.feed.close()
        store.close()
        fs.close()


def test_a_password_in_the_urls_query_is_masked_too() -> None:
    store = PolicyStore("postgresql://stockade@127.0.0.1:1/stockade?password=hunter2xyz")
    assert "hunter2xyz" not in store.where
    with pytest.raises(PolicyStoreError) as caught:
        store.read()
    assert "hunter2xyz" not in str(caught.value)
    assert store.watcher(listen=False).password == "hunter2xyz"
