"""A reader of the output that went away (``caucus log tail | head``).

Why: click, typer and rich each answer a closed pipe with exit 1, the code the README gives a refusal, so
a script under ``pipefail`` would read "refused". A shell reports a program that a closed pipe ended as
141 (128 + SIGPIPE), and so does ``caucus``. Restoring SIGPIPE's default action instead would end the
process on any socket a backend closes while it writes (Python's note on SIGPIPE).
"""

from __future__ import annotations

import os
import select
import stat
import sys

__all__ = ["StdoutPipe", "PIPE_CLOSED"]

PIPE_CLOSED = 141


class StdoutPipe:
    """What standard output is when a command starts, to tell afterwards whether its reader left."""

    def __init__(self) -> None:
        try:
            st = os.fstat(1)
        except OSError:
            self._pipe: tuple[int, int] | None = None
            return
        self._pipe = (st.st_dev, st.st_ino) if stat.S_ISFIFO(st.st_mode) else None

    def reader_gone(self) -> bool:
        if self._pipe is None:
            return False
        if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):  # click's and typer's answer to EPIPE
            return True
        try:
            st = os.fstat(1)
        except OSError:
            return True
        if (st.st_dev, st.st_ino) != self._pipe:  # rich put the null device in the pipe's place
            return True
        poller = select.poll()
        poller.register(1, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
