"""The worker pool sync tools run in: results, limits, reuse of the warm thread, shutdown."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError, wait

import pytest

from stockade.engine.pipeline._workers import WorkerPool


def test_runs_the_job_in_another_thread_and_returns_its_result() -> None:
    pool = WorkerPool(2)
    future = pool.submit(lambda a, b=0: (threading.get_ident(), a + b), 2, b=3)
    ident, total = future.result(timeout=5)
    assert total == 5
    assert ident != threading.get_ident()
    pool.shutdown()


def test_an_exception_in_the_job_reaches_the_future() -> None:
    pool = WorkerPool(1)

    def boom() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        pool.submit(boom).result(timeout=5)
    assert pool.submit(lambda: "still working").result(timeout=5) == "still working"
    pool.shutdown()


def test_calls_one_after_another_reuse_the_same_warm_thread() -> None:
    pool = WorkerPool(8)
    idents = {pool.submit(threading.get_ident).result(timeout=5) for _ in range(50)}
    assert len(idents) == 1
    assert pool.threads == 1
    pool.shutdown()


def test_never_runs_more_jobs_at_once_than_max_workers_and_queues_the_rest_in_order() -> None:
    pool = WorkerPool(3)
    lock = threading.Lock()
    state = {"now": 0, "max": 0}
    finished: list[int] = []

    def job(n: int) -> int:
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.02)
        with lock:
            state["now"] -= 1
            finished.append(n)
        return n

    futures = [pool.submit(job, n) for n in range(12)]
    assert [f.result(timeout=10) for f in futures] == list(range(12))
    assert state["max"] == 3
    assert pool.threads == 3
    # queued jobs start in submission order (finish order within a wave may vary)
    assert sorted(finished[:3]) == [0, 1, 2]
    assert sorted(finished[-3:]) == [9, 10, 11]
    pool.shutdown()


def test_a_job_cancelled_while_queued_never_runs() -> None:
    pool = WorkerPool(1)
    gate = threading.Event()
    ran: list[str] = []
    blocker = pool.submit(gate.wait, 5)
    queued = pool.submit(ran.append, "queued")
    assert queued.cancel()
    gate.set()
    blocker.result(timeout=5)
    pool.submit(lambda: None).result(timeout=5)  # the worker has passed the cancelled job
    assert ran == []
    pool.shutdown()


def test_shutdown_stops_idle_threads_and_refuses_new_jobs() -> None:
    pool = WorkerPool(4, name="shutdown-test")
    wait([pool.submit(time.sleep, 0.01) for _ in range(4)], timeout=5)
    threads = [t for t in threading.enumerate() if t.name.startswith("shutdown-test")]
    assert threads
    pool.shutdown(wait=True)
    assert not any(t.is_alive() for t in threads)
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(lambda: None)


def test_shutdown_with_cancel_futures_cancels_queued_jobs_but_lets_running_ones_finish() -> None:
    pool = WorkerPool(1)
    gate = threading.Event()
    running = pool.submit(gate.wait, 5)
    queued = pool.submit(lambda: "never")
    time.sleep(0.01)
    pool.shutdown(wait=False, cancel_futures=True)
    with pytest.raises(CancelledError):
        queued.result(timeout=5)
    gate.set()
    assert running.result(timeout=5) is True


def test_threads_are_daemons_so_a_stuck_tool_cannot_keep_the_process_alive() -> None:
    pool = WorkerPool(1, name="daemon-test")
    pool.submit(lambda: None).result(timeout=5)
    (thread,) = [t for t in threading.enumerate() if t.name == "daemon-test-0"]
    assert thread.daemon
    pool.shutdown()


def test_max_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        WorkerPool(0)
