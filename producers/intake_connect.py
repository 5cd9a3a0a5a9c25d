"""How the intake reaches its log, from settings.

An embedded log is a file the first write creates. A command that finds it gone after the intake has
seen records in it (the log removed, or a restore that has not happened yet) must not create an empty
one in its place: the projection and the checkpoints would then meet "another log" and the loss would
read as a replacement. So once the intake has seen records there (``intake_snapshot``: what it saw when
it last stopped), a missing file is ``LogVanishedError`` (exit 3), and nothing is created. A Kafka
topic that comes back empty is found by the intake's own check of what it saw (``intake_catch_up``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ledger.backends import backends_for
from ledger.config import Settings
from ledger.log.port import EventLog, LogVanishedError
from producers.intake_snapshot import SnapshotFile

__all__ = ["intake_parts", "intake_dir"]


def intake_parts(settings: Settings) -> tuple[Callable[[], EventLog], Path, str]:
    """The intake's log opener, its working directory and the name its snapshot gives its log."""
    backends = backends_for(settings)
    workdir, name = backends.intake_dir(), backends.intake_name()
    if name != "embedded":
        return backends.open_log, workdir, name
    snapshot = SnapshotFile(workdir / "state.json", name)

    def connect() -> EventLog:
        if not settings.log_path.exists():
            seen = snapshot.load_seen(snapshot.generation())
            if seen:
                raise LogVanishedError(
                    f"the log {backends.describe_log()} is not there, but the intake has seen {sum(p for p, _ in seen.values())} "
                    "record(s) in it: it was lost (a file removed or moved), or the settings name another place. "
                    "Nothing was written, and no empty log was made in its place: restore the log from a copy, then "
                    "run `caucus intake rebuild`; with no copy, `caucus intake rebuild` starts an empty log here."
                )
        return backends.open_log()

    return connect, workdir, name


def intake_dir(settings: Settings) -> Path:
    """Where the intake of this log keeps its snapshot, spool and lock: one directory per log target,
    so a spool is never forwarded to a log it was not meant for."""
    return backends_for(settings).intake_dir()
