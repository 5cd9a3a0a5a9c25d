"""One writer per intake directory: a thread lock within the process and an ``flock`` across processes
on the same machine, so the HTTP service and CLI invocations over the same data directory take turns
(each catches up inside the lock, so none judges against stale state)."""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ledger.files import open_private_lock

__all__ = ["DirectoryLock"]


class DirectoryLock:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.thread_lock = threading.RLock()
        """Held alone for what only this process shares (the snapshot picture, closing)."""
        self._file: Any = None

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

    def close(self) -> None:
        with self.thread_lock:
            if self._file is not None:
                self._file.close()
                self._file = None
