"""One writer per intake directory: a thread lock within the process and an ``flock`` across processes
on the same machine, so the HTTP service and CLI invocations over the same data directory take turns
(each catches up inside the lock, so none judges against stale state).

Catching up costs a read of the log (a fetch round trip on Kafka) even when nothing is new. Commands
that queued on the lock while one catch-up ran may share it: whatever was written before they arrived
was in the log when it began. Except what another process's intake wrote while they waited, after
that catch-up: so every intake marks a file beside the lock (``intake.written``) after each append,
and a command shares a catch-up only if the mark is still the one this intake last saw (``covers``).
Writers without an intake (``caucus log append``, ``caucus simulate write``, ``caucus import``) take the
same lock and leave the same mark (``producers.direct_writes.intake_turn``).
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ledger.files import open_private_lock

__all__ = ["DirectoryLock"]

_MARK_BYTES = 16


class DirectoryLock:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.thread_lock = threading.RLock()
        """Held alone for what only this process shares (the snapshot picture, closing)."""
        self._file: Any = None
        self._marks: int | None = None
        self._seen = b""
        self._read_from = float("-inf")

    @contextmanager
    def held(self) -> Iterator[None]:
        with self.thread_lock:
            if self._file is None:
                self.workdir.mkdir(parents=True, exist_ok=True)
                self._file = open(open_private_lock(self.workdir / "intake.lock"), "a")  # beside the state: private
            fcntl.flock(self._file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._file, fcntl.LOCK_UN)

    # -- sharing a catch-up (call these while ``held``) --------------------------------------------------

    def _mark_file(self) -> int:
        if self._marks is None:
            self._marks = os.open(self.workdir / "intake.written", os.O_RDWR | os.O_CREAT, 0o600)
        return self._marks

    def read_began(self, at: float) -> None:
        """A catch-up that began at ``at`` (monotonic) read the log to its end."""
        self._read_from = at
        self._seen = os.pread(self._mark_file(), _MARK_BYTES, 0)

    def wrote(self) -> None:
        """This intake appended to the log: other processes' intakes must read on before deciding."""
        self._seen = os.urandom(_MARK_BYTES)
        os.pwrite(self._mark_file(), self._seen, 0)

    def unsure(self) -> None:
        """An append failed and may have written part of its batch, which this intake's state does not
        hold: every intake, this one too, must read the log before its next decision."""
        self.wrote()
        self._read_from = float("-inf")

    @property
    def last_seen(self) -> bytes:
        """The mark as this intake last read the log or wrote to it (empty: it has done neither)."""
        return self._seen

    def moved(self, started_from: bytes) -> bool:
        """Whether anyone (another intake, a direct writer) wrote since this intake last read the log or
        wrote to it; where it has done neither, since the state it started from (``started_from``, the
        mark kept with the seen file: ``intake_snapshot``)."""
        return os.pread(self._mark_file(), _MARK_BYTES, 0) != (self._seen or started_from)

    def covers(self, arrived: float) -> bool:
        """Whether a command that ``arrived`` (monotonic) may decide without catching up again."""
        return self._read_from >= arrived and os.pread(self._mark_file(), _MARK_BYTES, 0) == self._seen

    def close(self) -> None:
        with self.thread_lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            if self._marks is not None:
                os.close(self._marks)
                self._marks = None
