"""Data files are private by default: the log, the stores, the intake's state and spool.

Why here and not left to the umask: the usual umask (022) makes every file a process creates readable
by every user of the machine, and these files hold every report, every refusal's raw input and the
intake's view of who sent what. SQLite creates a database's ``-wal`` and ``-shm`` files with the
database file's own permissions, so creating the database file first, with the mode chosen here, is
enough for all three.

The mode is 0600 unless configured (``file_mode`` = ``0640`` lets a group of readers, e.g. auditors'
accounts, read the embedded files). ``set_file_mode`` is called once by the command line from the
settings; library users get 0600.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["DEFAULT_FILE_MODE", "file_mode", "set_file_mode", "create_private", "check_file_mode", "lock_beside",
           "open_private_lock", "replace_secret_file"]

DEFAULT_FILE_MODE = 0o600
_mode = DEFAULT_FILE_MODE


def check_file_mode(mode: int) -> int:
    """The mode if it is one the ledger accepts for its data files, else ValueError saying why."""
    if mode & ~0o777:
        raise ValueError(f"{mode:#o} is not a permission mode (at most 0777)")
    if mode & 0o007:
        raise ValueError(f"{mode:04o} lets every user of the machine read or write the data: no permission for others is allowed")
    if mode & 0o600 != 0o600:
        raise ValueError(f"{mode:04o} does not let the owner read and write: the owner needs 6 (rw)")
    if mode & 0o111:
        raise ValueError(f"{mode:04o} makes data files executable")
    return mode


def set_file_mode(mode: int) -> None:
    global _mode
    _mode = check_file_mode(mode)


def file_mode() -> int:
    return _mode


def create_private(path: Path) -> bool:
    """Create ``path`` empty with the data-file mode unless it exists; True if it was created here.

    ``O_EXCL`` so that two processes creating the same file at once do not both think they made it,
    and an existing file (and its mode, which an operator may have chosen) is left as it is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _mode)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, _mode)  # the umask may have taken bits away from the mode asked for (0640 under 077)
    finally:
        os.close(fd)
    return True


@contextmanager
def lock_beside(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` + ``.lock`` for the ``with`` block: a small file read, changed and
    written back by several processes (credentials, what a key signed) is changed by one at a time.
    Raises OSError when the lock file cannot be opened.

    The lock file is the owner's only (0600, like the secret beside it): it holds nothing, but a lock
    others can open is a lock others can hold, stalling every change of the secret."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(open_private_lock(path.with_name(path.name + ".lock")), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def open_private_lock(path: Path) -> int:
    """A descriptor on the lock file ``path``, created 0600 if missing; one left readable by others (by
    an older version) is made private when it is ours. Raises OSError when it cannot be opened."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077 and os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o600)
    except OSError:
        os.close(fd)
        raise
    return fd


def replace_secret_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` in one step (a temporary file, fsynced, renamed over it), readable by
    its owner only: a reader sees the old file or the new one, never half of one. Raises OSError."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
