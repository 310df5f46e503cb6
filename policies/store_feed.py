"""A policy kept current from a policy store: the newest published, or the last good one.

    policy = Policy.from_store(url)             # the stored policy now, with .feed
    engine = Engine(toolkit, policy=policy)     # each call is decided by policy.feed.current
    policy.feed.problem                         # None, or why it may be out of date

A feed reads the store once when opened (failing then, with nothing to fall back on), then
listens on a thread of its own: casbin's PostgreSQL watcher (LISTEN on the store's channel, in
the watcher's own subscriber process) says a push happened, and the feed reads the whole policy
in one query, builds it, and only then swaps it in (`current` is one attribute: a reader gets
the old policy or the new, never a mix). A policy that does not build is not taken.

When the store cannot be read, or its newest policy does not load, the feed keeps the last good
policy and says so in ``problem`` (the engine puts it in every result's warnings) and in the
log, once per change. The watcher's subscriber dies with the database connection; the feed then
re-reads the store every ``recheck_s`` seconds (also a safety net for a notification missed)
and subscribes again once the store answers, catching up on what it missed. The watcher takes
about two seconds to subscribe; `listening` is set once it has.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from stockade.errors import StockadeError
from stockade.policies.casbin_enforcer import new_enforcer
from stockade.policies.store import PolicyStore, PolicyStoreError, Stored

log = logging.getLogger("stockade.policy_store")


class Fed(Protocol):
    """What a feed builds (a `Policy`): it knows its feed."""

    feed: PolicyFeed | None


class Build(Protocol):
    """How a feed builds a policy from a casbin enforcer (`Policy.from_enforcer`)."""

    def __call__(self, enforcer: Any, *, source: str) -> Any: ...


def snapshot(url: str, build: Build) -> Any:
    """The policy the store at ``url`` holds now, built once and not followed."""
    store = PolicyStore(url)
    try:
        stored = store.read()
        return _loaded(store, stored, lambda: build(
            new_enforcer(stored.lines, stored.groups), source=f"{store.where}#{stored.version[:12]}"
        ))  # fmt: skip
    finally:
        store.close()


def _loaded(store: PolicyStore, stored: Stored, load: Callable[[], Any]) -> Any:
    """``load()``; what goes wrong building the stored lines said as a `StockadeError`."""
    try:
        return load()
    except StockadeError:
        raise
    except Exception as exc:  # lines the store holds that no push wrote
        raise PolicyStoreError(
            f"the policy {stored.version[:12]} in the store at {store.where} does not load: "
            f"{exc}; publish one with `stockade policy push FILE --store URL`"
        ) from exc


class PolicyFeed:
    """The newest good policy of a store (see the module docstring). Build with `open`."""

    def __init__(
        self, store: PolicyStore, build: Build, first: Stored, *, recheck_s: float = 5.0
    ) -> None:
        self.store = store
        self.recheck_s = recheck_s
        self._build = build
        self.current: Any = self._policy(first)
        self.version = first.version
        self.loaded_at = time.time()
        self.problem: str | None = None
        self.listening = threading.Event()  # the watcher is subscribed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stockade-policy-feed", daemon=True)

    @classmethod
    def open(cls, url: str, build: Build, *, recheck_s: float = 5.0) -> PolicyFeed:
        """Read the store at ``url`` now (raising `PolicyStoreError` when it cannot be, or
        `PolicyError` when its policy does not load) and keep following it."""
        store = PolicyStore(url)
        try:
            first = store.read()
            feed: PolicyFeed = _loaded(
                store, first, lambda: cls(store, build, first, recheck_s=recheck_s)
            )
        except BaseException:
            store.close()  # no connection left behind by a feed that never started
            raise
        feed._thread.start()
        return feed

    def refresh(self) -> bool:
        """Read the store and take its policy if it is newer; whether the store answered."""
        try:
            stored = self.store.read()
        except Exception as exc:  # unreachable, or anything the driver says: keep the last good
            self._trouble(str(exc))
            return False
        if stored.version != self.version:
            try:
                policy = self._policy(stored)
            except Exception as exc:  # a PolicyError, or any fault of the lines
                self._trouble(f"the policy {stored.version[:12]} in the store does not load: {exc}")
                return True
            self.current, self.version, self.loaded_at = policy, stored.version, time.time()
            log.info("policy %s from %s (%s)", stored.version[:12], self.store.where, stored.note)
        if self.problem is not None:
            log.warning("policy store %s answers again", self.store.where)
            self.problem = None
        return True

    def close(self) -> None:
        """Stop following the store."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            # not longer: a thread waiting for the watcher to subscribe ends on its own (a
            # daemon; the watcher's process is stopped by it, or at exit)
            self._thread.join(timeout=1)
        self.store.close()

    def _policy(self, stored: Stored) -> Any:
        enforcer = new_enforcer(stored.lines, stored.groups)
        policy = self._build(enforcer, source=f"{self.store.where}#{stored.version[:12]}")
        policy.feed = self
        return policy

    def _trouble(self, why: str) -> None:
        since = datetime.fromtimestamp(self.loaded_at, UTC).isoformat(timespec="seconds")
        problem = f"{why}; deciding with the last good policy ({self.version[:12]}, loaded {since})"
        if self.problem is None:  # once per outage: what follows it is the same story
            log.warning("%s", problem)
        self.problem = problem

    def _run(self) -> None:
        watcher: Any = None
        backoff = 0.5
        next_check = time.monotonic() + self.recheck_s
        while not self._stop.is_set():
            if watcher is None:
                if self.refresh():
                    watcher = self._subscribe()
                if watcher is None:
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, self.recheck_s)
                    continue
                backoff = 0.5
                self.refresh()  # what was pushed while nobody listened
                next_check = time.monotonic() + self.recheck_s
            process = watcher.subscription_process
            try:
                notified = process is not None and process.is_alive() and watcher.should_reload()
                alive = process is not None and process.is_alive()
            except Exception:  # the subscriber's pipe broke
                alive = notified = False
            if not alive:
                self.listening.clear()
                watcher.stop()
                watcher = None
                self.refresh()
                continue
            if notified or time.monotonic() >= next_check:
                self.refresh()
                next_check = time.monotonic() + self.recheck_s
            self._stop.wait(0.01)
        if watcher is not None:
            watcher.stop()
        self.listening.clear()

    def _subscribe(self) -> Any:
        watcher: Any = None
        try:
            watcher = self.store.watcher(listen=False)
            watcher.start(timeout=15)
        except Exception as exc:
            self._trouble(f"cannot listen to the policy store at {self.store.where}: {exc}")
            if watcher is not None:
                watcher.stop()
            return None
        self.listening.set()
        return watcher
