"""Whether the file at an embedded log's path is still the one a connection holds open.

Why: SQLite keeps reading and writing a file it has open after the file was removed or another was put
at its path (a restore from a copy, a data directory made again), so a long-running process (the intake
service, a runner, the read API) would go on with a file no other process sees, and confirm appends that
no reader will ever find. One ``stat`` per append or read tells; the connection then has to be opened
again, and what it finds checked against what was seen (the intake does that).

A copy moved into place while the old file's write-ahead log (``-wal``) stays beside it is refused
outright: SQLite would apply the old file's pages to the new one. The write-ahead log is watched too: a
copy written over the file in place keeps its inode, but the ``-wal`` removed with it (as a restore must)
leaves the connection writing into a file no one else sees. SQLite keeps the ``-wal`` beside the file a
symlink points to, and removes it only when the last connection closes, never under an open one.
"""

from __future__ import annotations

import os
from pathlib import Path

from ledger.log.port import LogFileReplacedError, LogUnavailableError

__all__ = ["HeldFile", "file_identity"]


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``; None if there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LogUnavailableError(f"the embedded log at {path} cannot be looked at: {exc}") from exc
    return st.st_dev, st.st_ino


class HeldFile:
    """The file a connection opened at ``path``. ``before``: its identity taken before the connection
    opened it, so that a file swapped in while it opened is caught at the first check (a file the
    connection created has none: its identity is taken now)."""

    def __init__(self, path: Path, before: tuple[int, int] | None) -> None:
        self.path = path
        target = Path(os.path.realpath(path))
        self.wal = target.with_name(target.name + "-wal")
        self._main = before if before is not None else file_identity(path)
        self._wal = file_identity(self.wal)

    def check(self) -> None:
        """``LogFileReplacedError`` unless the file at the path is still the one held open."""
        now = file_identity(self.path)
        if now == self._main:
            wal = file_identity(self.wal)
            if self._wal is None or wal == self._wal:
                self._wal = wal
                return
            raise LogFileReplacedError(
                f"the write-ahead log {self.wal} of the embedded log was {'removed' if wal is None else 'replaced'} while "
                "this process had the log open (the log written over in place, as a restore by copying does?); nothing "
                "more is read or written through the old one: open the log again, and check it against what was seen of it")
        what = "removed" if now is None else "replaced by another file"
        if now is not None and self._wal is not None and file_identity(self.wal) == self._wal:  # the same target's
            raise LogFileReplacedError(
                f"the embedded log at {self.path} was {what} while this process had it open, but its write-ahead log "
                f"{self.wal} is still the old file's, which SQLite would apply to the new one: stop every process that "
                f"uses the log, remove {self.wal} and {self.path.name}-shm beside it, then start again", reopen=False)
        raise LogFileReplacedError(
            f"the embedded log at {self.path} was {what} while this process had it open; nothing more is read or "
            "written through the old file: open the log again, and check it against what was seen of it", removed=now is None)
