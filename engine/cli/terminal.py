"""The person at the terminal, as ``stockade run`` asks them: a question on stderr, its answer a
line read from stdin (a pipe works as well as a keyboard), and Ctrl-C while it waits.

Hand-written, because two things pull apart here. The answer must be read off the event loop
(a blocking read on it would stall every other call and the time limit on the question), so a
line is read in a daemon thread of its own: one read at a time, which the next question picks up
when an earlier one stopped waiting for it (a time limit, Ctrl-C). And Ctrl-C must reach the
question: asyncio's own handler would cancel the whole run, and the call being asked about would
be recorded as torn down instead of refused. So while a question waits, SIGINT is ours (the
handler is swapped in, and put back after): it wakes the question, which raises `Interrupted`,
and `interrupted` stays set so the caller stops before doing anything more. Outside a question
Ctrl-C is asyncio's, as ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from stockade.errors import StockadeError


class Interrupted(StockadeError):
    """Ctrl-C while a question waited for its answer."""


class Terminal:
    """Questions on stderr, answers on stdin, one question at a time."""

    def __init__(self) -> None:
        self.interrupted = False  # Ctrl-C was pressed at a question: ask nothing more
        self._reading: asyncio.Future[str] | None = None
        self._one_at_a_time = asyncio.Lock()

    def say(self, text: str) -> None:
        """Write ``text`` (a line) on stderr, where the questions go."""
        sys.stderr.write(text + "\n")
        sys.stderr.flush()

    async def line(self, question: str) -> str | None:
        """Put ``question`` on stderr and return the line answered, stripped; None when stdin
        is closed (or there is none). Raises `Interrupted` on Ctrl-C, and at once after one."""
        if self.interrupted:
            raise Interrupted("interrupted at an earlier question (Ctrl-C)")
        async with self._one_at_a_time:
            reading = self._reading
            if reading is None or reading.get_loop() is not asyncio.get_running_loop():
                reading = self._reading = _read_line()
            with _ctrl_c() as pressed:  # Ctrl-C is ours before the question shows
                sys.stderr.write(question)
                sys.stderr.flush()
                either: set[asyncio.Future[Any]] = {reading, pressed}
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if pressed.done():  # Ctrl-C (even as a line came): the read goes on, for nobody
                self.interrupted = True
                sys.stderr.write("\n" if _echoes() else "^C\n")
                sys.stderr.flush()
                raise Interrupted("interrupted at the prompt (Ctrl-C)")
            self._reading = None
            text = reading.result()
            if text and not _echoes():  # piped in: show it, so the question reads as answered
                sys.stderr.write(text if text.endswith("\n") else text + "\n")
            return text.strip() if text else None


def _read_line() -> asyncio.Future[str]:
    """A line of stdin ("" at its end), read in a daemon thread: one left blocked on a
    terminal nobody types at cannot hold the process at exit (the default executor's threads
    would: ``asyncio.run`` waits for them)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()

    def work() -> None:
        try:
            text = sys.stdin.readline() if sys.stdin is not None else ""
        except (OSError, ValueError):  # closed or unreadable: as good as no answer
            text = ""
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits for it
            loop.call_soon_threadsafe(_settle, future, text)

    threading.Thread(target=work, name="stockade-prompt", daemon=True).start()
    return future


def _settle(future: asyncio.Future[str], text: str) -> None:
    if not future.done():
        future.set_result(text)


@contextlib.contextmanager
def _ctrl_c() -> Iterator[asyncio.Future[None]]:
    """A future that Ctrl-C completes, for as long as the block runs. Through the loop's own
    signal handling: the kernel may hand SIGINT to any thread (the reader's, say), and only
    the loop's wakeup pipe is sure to wake the main thread out of its wait. Where the loop
    cannot take signals (not the main thread), it never completes, and Ctrl-C stays
    whoever's it was."""
    loop = asyncio.get_running_loop()
    pressed: asyncio.Future[None] = loop.create_future()
    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, _press, pressed)
    except (NotImplementedError, RuntimeError, ValueError):
        yield pressed
        return
    try:
        yield pressed
    finally:
        # removing puts back Python's default handler, not asyncio.run's: put that back
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


def _press(pressed: asyncio.Future[None]) -> None:
    if not pressed.done():
        pressed.set_result(None)


def _echoes() -> bool:
    """Whether stdin is a terminal, which shows what is typed (``^C`` too) as it comes."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (OSError, ValueError):
        return False
