"""bubblewrap's report of its namespace's init (``--info-fd``): the pipe it comes through, and
the pid read from it.

One run owns one `InitReport`, and the report alone closes its two descriptors, each exactly
once. That is not tidiness: in a process with threads a descriptor closed twice closes
whatever another thread opened in between under the same number (its pipe, its control
group's process list), and that thread then reads the wrong file or fails. The write end goes
to bubblewrap (``pass_fds``); `started` closes this process's copy as soon as bubblewrap has
started or failed to. The read end never blocks: the loop that watches the run reads it when it
is ready (`read`), together with the run's output, so a slow report delays nothing.
"""

from __future__ import annotations

import os
import re

_CHILD_PID = re.compile(rb'"child-pid"\s*:\s*([0-9]{1,10})\s*[,}\n]')
_MOST = 65536  # a report is about a hundred bytes; more is not bubblewrap's


class InitReport:
    """The ``--info-fd`` pipe of one run. Use as a context manager, which closes what is open."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()  # close-on-exec: only pass_fds hands one on
        os.set_blocking(self._read, False)
        self._text = b""
        self.pid: int | None = None  # bubblewrap's init, once reported
        self.done = False  # the pid came, or the pipe closed without it

    @property
    def read_end(self) -> int:
        if self._read < 0:
            raise ValueError("the report is closed")
        return self._read

    @property
    def write_end(self) -> int:
        """The descriptor to give bubblewrap (``--info-fd`` and ``pass_fds``)."""
        if self._write < 0:
            raise ValueError("the report's write end is closed: bubblewrap has started")
        return self._write

    def started(self) -> None:
        """Close this process's copy of the write end (bubblewrap has its own), so that the
        pipe ends when bubblewrap's does. Safe to call again."""
        fd, self._write = self._write, -1
        if fd >= 0:
            os.close(fd)

    def read(self) -> bool:
        """Read what has arrived, without blocking; whether the report is done (the pid came,
        or the pipe closed before it: bubblewrap failed). bubblewrap writes a line at a time,
        so the pid may come over several reads."""
        while not self.done:
            try:
                chunk = os.read(self.read_end, 4096)
            except BlockingIOError:
                return False
            except OSError:
                chunk = b""
            self._text += chunk
            found = _CHILD_PID.search(self._text)
            if found is not None:
                self.pid = int(found.group(1))
            self.done = found is not None or not chunk or len(self._text) > _MOST
        return True

    def close(self) -> None:
        """Close both ends (those still open). Safe to call again."""
        self.started()
        fd, self._read = self._read, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> InitReport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
