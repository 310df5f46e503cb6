"""The threads sync tools run in.

A `concurrent.futures.ThreadPoolExecutor` hands each job to whichever idle thread the OS wakes
first from a shared queue, which is usually the one that has slept longest. An agent calls
tools one after another, so the thread that just finished is idle again, still awake and
cache-warm, when the next job arrives; waking a cold one instead costs tens of microseconds per
call (measured in benchmarks/bench_engine.py). This pool gives each job to the most recently
idle thread (a stack, not a queue), starts threads on demand up to ``max_workers``, and queues
jobs only when every thread is busy.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

from stockade.engine.errors import EngineClosedError
from stockade.errors import ConfigurationError

P = ParamSpec("P")
T = TypeVar("T")

_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class _Worker:
    __slots__ = ("job", "wake")

    def __init__(self, job: _Job) -> None:
        self.job: _Job | None = job
        self.wake = threading.Event()


class WorkerPool(Executor):
    """A thread pool that reuses the most recently idle thread first."""

    def __init__(self, max_workers: int, *, name: str = "stockade-tool") -> None:
        if max_workers < 1:
            raise ConfigurationError(f"max_workers must be at least 1, got {max_workers}")
        self._max = max_workers
        self._name = name
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._threads: list[threading.Thread] = []
        self._backlog: deque[_Job] = deque()
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` in a worker thread."""
        future: Future[T] = Future()
        job: _Job = (future, fn, args, kwargs)
        with self._lock:
            if self._closed:
                raise EngineClosedError(
                    "cannot run a sync tool: the engine's worker pool is shut down"
                )
            if self._idle:
                worker = self._idle.pop()
                worker.job = job
                worker.wake.set()
            elif len(self._threads) < self._max:
                thread = threading.Thread(
                    target=self._work,
                    args=(_Worker(job),),
                    name=f"{self._name}-{len(self._threads)}",
                    daemon=True,  # a tool stuck forever must not keep the process alive
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._backlog.append(job)
        return future

    def _work(self, worker: _Worker) -> None:
        while True:
            job = worker.job
            if job is None:
                return
            future, fn, args, kwargs = job
            worker.job = job = None
            result: Any = None
            error: BaseException | None = None
            runs = future.set_running_or_notify_cancel()
            if runs:
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    error = exc
            # Back on the idle stack *before* the caller learns the job is done: its next job
            # then finds this (warm) thread instead of starting or waking another one.
            with self._lock:
                idle = not self._backlog and not self._closed
                if self._backlog:
                    worker.job = self._backlog.popleft()
                elif idle:
                    worker.wake.clear()
                    self._idle.append(worker)
                closing = self._closed and worker.job is None
            if runs:
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs, result, error  # drop references before sleeping
            if closing:
                return
            if idle:
                worker.wake.wait()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop idle threads; running jobs finish (a thread cannot be killed). With
        ``cancel_futures`` queued jobs are cancelled, otherwise they still run."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while self._backlog:
                    self._backlog.popleft()[0].cancel()
            for worker in self._idle:
                worker.job = None
                worker.wake.set()
            self._idle.clear()
            threads = list(self._threads)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()
