"""The intake's snapshot file (``state.json``): its state as of some log positions, a shortcut at start.

A snapshot names the log it describes and is ignored for another (or when it cannot be read: the log
is folded again instead). It is written to a private temporary file, fsynced and renamed into place,
so a reader (another process, a crash) sees the old snapshot or the new one, never half of one.

Beside it, ``state.json.seen``: the last event the intake saw in each partition, written whenever an
intake stops. A command-line intake saves the snapshot only every ``SNAPSHOT_EVERY`` events, so without
it the next one would check only what that older snapshot covers, and a log restored from a copy taken
after the snapshot but before the last accepted report would pass: the report lost, the chair holding a
receipt that says "accepted". Written in the same way, under the intake's lock, keeping per partition
the later of what it held and what the stopping intake saw; a file of another generation is ignored,
and ``caucus intake rebuild`` (which accepts the log as it is) removes it.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from ledger.files import create_private
from ledger.log.port import LogUnavailableError
from producers.intake_lock import DirectoryLock
from producers.intake_state import IntakeState

__all__ = ["SnapshotFile"]


class SnapshotFile:
    def __init__(self, path: Path, log_name: str) -> None:
        self.path = path
        self.log_name = log_name

    def load(self) -> tuple[IntakeState | None, str | None, int]:
        """The state saved for this log, or None with why it was ignored (None: there was none), and the
        snapshot's generation: how many times ``caucus intake rebuild`` accepted the log as it is. A running
        intake that found its log lost takes up a snapshot of a later generation only, never one an
        ordinary command wrote (that command saw the lost log as a new one and could not tell). Read in
        the same pass as the state: a snapshot of a whole election is megabytes of JSON."""
        data = self._read()
        if isinstance(data, str):
            return None, data, 0
        if data is None or data.get("log") != self.log_name:
            return None, None, 0
        generation = data.get("generation", 0)
        generation = generation if isinstance(generation, int) else 0
        try:
            return IntakeState.from_snapshot(data["state"]), None, generation
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            return None, f"snapshot {self.path} ignored: {exc}", generation

    def generation(self) -> int:
        """The generation alone (``load``), for a rebuild that replaces the state anyway."""
        return self.load()[2]

    def _read(self) -> dict[str, Any] | str | None:
        """The snapshot's document, None if there is none, or why it cannot be read."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            return f"snapshot {self.path} ignored: {exc}"
        return data if isinstance(data, dict) else f"snapshot {self.path} ignored: not a JSON object"

    def write(self, picture: dict[str, Any], saved_at: datetime, generation: int = 0) -> None:
        body = json.dumps({"log": self.log_name, "saved_at": saved_at.isoformat(), "generation": generation, "state": picture})
        self._replace(self.path, body)

    @property
    def seen_path(self) -> Path:
        return self.path.with_name(self.path.name + ".seen")

    def write_seen(self, state: IntakeState, generation: int, lock: DirectoryLock) -> None:
        """The last event ``state`` holds in each partition: where it sat (the next offset) and its id,
        merged under the intake's lock with what the file holds, keeping the later of the two per
        partition: an intake that stops after another saw more must not put an older view in its place."""
        with lock.held():
            seen, kept = self._read_seen(generation)
            for part, event_id in state.anchors.items():
                position = state.positions.get(part, 0)
                if position > seen.get(part, (0, ""))[0]:
                    seen[part] = (position, event_id)
            mark = (lock.last_seen or kept).hex()  # one that never read keeps what it started from
            body = {"log": self.log_name, "generation": generation, "seen": {str(p): list(v) for p, v in seen.items()},
                    "mark": mark}
            self._replace(self.seen_path, json.dumps(body))

    def forget_seen(self) -> None:
        """The log is accepted as it is (a rebuild): neither what was seen of it nor a loss found in it is
        held against it any more."""
        self.seen_path.unlink(missing_ok=True)
        self.lost_path.unlink(missing_ok=True)

    @property
    def lost_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lost")

    def write_lost(self, why: str, generation: int) -> None:
        """A loss an intake found, kept until a rebuild: a restart must not forget it and take the log as it
        is, with receipts the intake confirmed gone from it (what it saw may be newer than the seen file)."""
        self._replace(self.lost_path, json.dumps({"log": self.log_name, "generation": generation, "why": why}))

    def load_lost(self, generation: int) -> str | None:
        """Why the log of this generation was found lost, or None."""
        try:
            data = json.loads(self.lost_path.read_text(encoding="utf-8"))
            return str(data["why"]) if data.get("log") == self.log_name and data.get("generation") == generation else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def load_seen(self, generation: int) -> dict[int, tuple[int, str]]:
        """partition -> (next offset, id of the event just before it), as the last intake to stop saw
        them; nothing when there is no such file, or it is of another log or generation, or unreadable
        (then the snapshot's anchors are all there is to check)."""
        return self._read_seen(generation)[0]

    def _read_seen(self, generation: int) -> tuple[dict[int, tuple[int, str]], bytes]:
        """The seen file's positions and the lock's mark (``DirectoryLock.moved``) as the intakes that wrote
        it last read the log, in one read, both judged by the same rule: a file of another log or
        generation, or one that cannot be read, holds neither. A file from before marks has positions and
        an empty mark (then any write counts as moved)."""
        try:
            data = json.loads(self.seen_path.read_text(encoding="utf-8"))
            if data.get("log") != self.log_name or data.get("generation") != generation:
                return {}, b""
            seen = {int(p): (int(pos), str(eid)) for p, (pos, eid) in data["seen"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}, b""
        try:
            return seen, bytes.fromhex(data["mark"])
        except (ValueError, KeyError, TypeError):
            return seen, b""  # a file from before marks

    def unseen(self, positions: dict[int, int], generation: int, lock: DirectoryLock,
               why: str | None) -> LogUnavailableError | None:
        """With the log out of reach (``why``): the error a command the intake would refuse hears
        (``intake_group.commit_group``) when its state lacks events of the log: an intake of this directory
        saw events (``load_seen``) beyond ``positions`` (the state's, from an older snapshot), or someone
        wrote since (``DirectoryLock.moved``: another intake, ``caucus log append``, the importer). None
        when neither. A refusal judged on such a state was recorded for good: a report of a unit of an
        election defined after the snapshot, or appended directly, was refused as an unknown unit."""
        seen, mark = self._read_seen(generation)
        unseen = sum(max(0, end - positions.get(p, 0)) for p, (end, _) in seen.items())
        if unseen:
            lacks = f"lacks {unseen} event(s) of the log that were read before (its snapshot is older)"
        elif lock.moved(mark):
            lacks = "may lack events of the log: it was written since this intake last read it"
        else:
            return None
        return LogUnavailableError(
            f"{why or 'the log is out of reach'}; this intake's state {lacks}, so it cannot refuse a command now: "
            "the refusal could rest on what it has not seen. Nothing was recorded; send it again once the log is back")

    def _replace(self, path: Path, body: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        create_private(tmp)  # private like the log it describes (ledger.files)
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)

    def stamp(self) -> tuple[int, int, int] | None:
        """Changes whenever another process writes a snapshot (``caucus intake rebuild``)."""
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)
