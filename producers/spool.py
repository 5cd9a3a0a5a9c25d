"""A durable local queue of accepted events for when the log cannot be reached.

A chair's report must not be lost because the broker is down, and must not be recorded twice when it
comes back. So an event the intake accepted but could not append is written here, whole (event id
already fixed), one JSON line per record, and fsynced before the sender is told "spooled". Forwarding
appends the events to the log in spool order and then writes a ``forwarded`` line for each; a crash
between the two re-sends an event whose id the log (and every projection) already knows, so it is
dropped there, not doubled.

The file is append-only. When every event in it has been forwarded it is moved to ``archive/`` under a
timestamped name (nothing that was spooled is ever deleted) and a new file starts. A last line without
its newline is a write that never completed (and was never acknowledged): it is ignored, and cut off
before the next record is written (the one time the file is not only appended to). Any other line that
does not parse is an error an operator must look at.

Each line is sealed with the intake's signing key (the seal its log records carry, over the line's
canonical JSON and a writer of its own, ``SPOOL_WRITER``: a spool line is no event, so its seal vouches
for no log record, and a log record's for no line): the
spool lies in the data directory, and a line written there by another hand would otherwise be
forwarded, and sealed in the log, as a command the intake accepted. Such an event is refused when
forwarded (recorded as a refusal, never appended: ``intake_forward``) and left out of what the intake
judges against, and never displaces a sealed line of the same event; such a ``forwarded`` line
forwards nothing (the event is sent again, and found present). A line sealed under another key (the
signing key changed, or a version that did not seal) is refused too: flush the spool before either.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger.events import Event
from ledger.journal import Seal
from ledger.log.port import Position
from ledger.render import event_from_json, event_to_json

__all__ = ["Spool", "SpoolError", "SpooledEvent", "SPOOL_WRITER"]

SPOOL_WRITER = "system:intake spool"


class SpoolError(RuntimeError):
    """The spool file cannot be read or written."""


@dataclass(frozen=True, slots=True)
class SpooledEvent:
    event: Event[Any]
    spooled_at: str
    basis: dict[int, tuple[int, str]] = field(default_factory=dict)  # what it was judged against (spool_basis)
    generation: int = 0
    sealed: bool = True  # the line carries this intake's seal (or the spool is not sealed): see the module docstring


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_whole(fd: int, data: bytes) -> None:
    """Append ``data`` and fsync it, or leave the file as it was. A write may take only part of the
    data (a file size limit, a full disk) before it fails: without the cut, the next record would be
    glued to a torn one, and a record that was never acknowledged would be half there."""
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError:
        try:
            os.ftruncate(fd, start)
            os.fsync(fd)
        except OSError:
            pass  # the torn tail has no newline: readers ignore it, and the next append cuts it off
        raise


class Spool:
    """One spool file per log target; callers serialise access (the intake holds its lock)."""

    def __init__(self, path: str | Path, seal: Seal | None = None) -> None:
        self.path = Path(path)
        self._seal = seal
        self._pending: dict[str, SpooledEvent] | None = None
        self._stamp: tuple[int, int] | None = None
        self.ignored_partial_line = False
        self._complete_length = 0

    # -- reading ----------------------------------------------------------------------------------

    def _read(self) -> dict[str, SpooledEvent]:
        pending: dict[str, SpooledEvent] = {}
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return pending
        except OSError as exc:
            raise SpoolError(f"cannot read the spool {self.path}: {exc}") from exc
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        self.ignored_partial_line = bool(tail)
        self._complete_length = len(data) - len(tail)
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise TypeError(f"a JSON {type(record).__name__}, not an object")
                sealed = self._seal is None or record.pop("seal", None) == self._seal_of(record)
                if record["kind"] == "event":
                    event = event_from_json(record["event"])
                    basis = {int(p): (int(n), str(a)) for p, (n, a) in record.get("basis", {}).items()}
                    held = pending.get(event.event_id)
                    if held is None or not held.sealed or sealed:  # a planted line never displaces a sealed one
                        pending[event.event_id] = SpooledEvent(event, record["spooled_at"], basis,
                                                               int(record.get("generation", 0)), sealed)
                elif record["kind"] == "forwarded":
                    if sealed:
                        pending.pop(record["event_id"], None)
                else:
                    raise ValueError(f"unknown record kind {record['kind']!r}")
            except (ValueError, KeyError, TypeError) as exc:
                raise SpoolError(f"{self.path} line {number} is not a spool record: {exc}") from exc
        return pending

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def pending(self) -> list[SpooledEvent]:
        """Events spooled and not yet forwarded, in the order they were spooled. The file is reread
        when another process (a CLI beside the HTTP intake) changed it."""
        stamp = self._file_stamp()
        if self._pending is None or stamp != self._stamp:
            self._pending = self._read()
            self._stamp = stamp
        return list(self._pending.values())

    @property
    def stamp(self) -> tuple[int, int] | None:
        """Changes whenever the file does (None when there is no file): lets a holder of something
        derived from the spool know when to derive it again."""
        return self._file_stamp()

    def __len__(self) -> int:
        return len(self.pending())

    # -- writing ----------------------------------------------------------------------------------

    def _seal_of(self, record: dict[str, Any]) -> str | None:
        """The seal of a line (``record`` without its own seal; None when the spool is not sealed)."""
        if self._seal is None:
            return None
        return self._seal(SPOOL_WRITER, json.dumps(record, sort_keys=True, separators=(",", ":")).encode())[1].decode()

    def _append(self, record: dict[str, Any]) -> None:
        seal = self._seal_of(record)
        line = json.dumps(record if seal is None else {**record, "seal": seal}, sort_keys=True, separators=(",", ":")) + "\n"
        try:
            created = not self.path.exists()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.ignored_partial_line and not created:
                os.truncate(self.path, self._complete_length)  # drop the torn, never acknowledged write
                self.ignored_partial_line = False
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                _write_whole(fd, line.encode())
            finally:
                os.close(fd)
            if created:
                _fsync_dir(self.path.parent)
        except OSError as exc:
            raise SpoolError(f"cannot write the spool {self.path}: {exc}") from exc
        self._stamp = self._file_stamp()

    def add(self, event: Event[Any], basis: dict[int, tuple[int, str]] | None = None, generation: int = 0) -> SpooledEvent:
        """Keep an event durably; returns once it is fsynced. ``basis``/``generation``: the state it was
        judged against (``producers.spool_basis``)."""
        self.pending()
        assert self._pending is not None
        entry = SpooledEvent(event, datetime.now(UTC).isoformat(), dict(basis or {}), generation)
        self._append({"kind": "event", "spooled_at": entry.spooled_at, "event": event_to_json(event), "generation": generation,
                      "basis": {str(p): [n, a] for p, (n, a) in entry.basis.items()}})
        self._pending[event.event_id] = entry
        return entry

    def mark_forwarded(self, event_id: str, position: Position | None, outcome: str, note: str = "") -> None:
        """Record that a spooled event reached the log (``appended``) or was refused there and recorded
        as a SubmissionRejected (``rejected``, ``note`` names that event)."""
        self.pending()
        assert self._pending is not None
        self._append(
            {
                "kind": "forwarded",
                "event_id": event_id,
                "position": None if position is None else str(position),
                "outcome": outcome,
                "note": note,
                "at": datetime.now(UTC).isoformat(),
            }
        )
        self._pending.pop(event_id, None)
        if not self._pending:
            self._archive()

    def _archive(self) -> None:
        if not self.path.exists():
            return
        archive = self.path.parent / "archive"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        try:
            archive.mkdir(parents=True, exist_ok=True)
            os.replace(self.path, archive / f"{self.path.stem}-{stamp}{self.path.suffix}")
            _fsync_dir(self.path.parent)
        except OSError as exc:
            raise SpoolError(f"cannot archive the forwarded spool {self.path}: {exc}") from exc
        self.ignored_partial_line = False
        self._stamp = None

    def status(self) -> dict[str, Any]:
        items = self.pending()
        return {
            "path": str(self.path),
            "pending": len(items),
            "oldest": items[0].spooled_at if items else None,
            "newest": items[-1].spooled_at if items else None,
            "archived_files": len(list((self.path.parent / "archive").glob("*"))) if (self.path.parent / "archive").exists() else 0,
            "torn_last_line": self.ignored_partial_line,
        }
