"""The intake: the one way a command becomes an event.

Every surface (CLI, HTTP) hands it a ``Submission``: the command kind, the input exactly as sent, the
sender's credential (or why it failed). The intake then, holding its lock:

1. catches its state up with the log (other processes may have written) and forwards spooled events;
2. parses; checks the sender's role; resolves the election; builds the event;
3. answers a repeated idempotency key with the original receipt (same content) or refuses it (other);
4. validates against the state; a refusal is itself recorded as ``SubmissionRejected`` (raw input and
   every error, made recordable whatever the input was: ``producers.rejections``) and every error goes
   back to the sender;
5. appends, and answers only once the log has the event durably, or, if the log is unreachable or
   cannot be written (a broker gone, a full disk, an I/O error), once the spool has fsynced it (status
   ``spooled``). If the spool cannot be written either, nothing is recorded and the caller hears why
   (``SpoolError``; HTTP 503 with Retry-After).

State. ``IntakeState`` (a reducer over the log's events) is kept in memory, caught up before each
command, and saved as a snapshot with its log positions in the intake's directory (``state.json``). A
snapshot is only a shortcut: at start the intake loads it, checks that the log still holds the event it
last applied in each partition, and reads on from there; without one it folds the whole log. Why keep
one (``tests/producers/test_bench_intake.py``, embedded log, 2 cores): folding 100k events takes 5.0 s,
loading the snapshot and catching up 1.5 s, writing it 2.3 s; at election scale (8k events) 0.38, 0.12
and 0.22 s. Each CLI command is a new process: it starts from the snapshot, and saves one only every
``SNAPSHOT_EVERY`` events; the service saves one a minute and at shutdown. The second reason: a CLI
started while the log is down validates against the snapshot (and the spool) instead of refusing
everything (with neither snapshot nor a read of the log it judges nothing: every valid report would be
refused); the snapshot may lag the log, so spooled events are checked again when forwarded. If the log
no longer holds what the snapshot (or the running state, or a spooled event: ``spool_basis``) saw -- a
memory-only broker restarted -- that is reported (``LogLostError``); ``rebuild()`` (``caucus intake
rebuild``) accepts the log as it is. A running service that found its log lost watches its snapshot file:
when another process rebuilds (a new snapshot appears), it loads that and goes on without a restart.

Group commit. Commands that queue on the lock while another is decided are decided together in the
next turn (``producers.intake_group``): one catch-up, each judged in turn (``producers.intake_judge``)
as if those before it were accepted, one ``append_batch``, and every answer only once the batch is
durable. A CLI command is a group of one.

Writers. One lock per intake directory (``producers.intake_lock``: the HTTP service and CLI invocations on
one machine take turns). Intakes on different machines writing to one Kafka topic are not serialised.
Each record is sealed with the ledger's signing key (``ledger.integrity.writer_seals``): a record that
only claims the intake as its writer is named by ``caucus verify`` and ``caucus audit``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

from ledger.config import Settings
from ledger.events import Event, utc_now
from ledger.integrity.writer_seals import sealer_for
from ledger.journal import Journal, Seal
from ledger.log.port import EventLog, LogError, LogFileReplacedError, LogLostError, LogUnavailableError, Position
from producers.credentials import Credential
from producers.intake_catch_up import IntakeLogLost, read_on
from producers.intake_connect import intake_dir, intake_parts
from producers.intake_forward import recheck
from producers.intake_lock import DirectoryLock
from producers.intake_group import Queue, Slot, Wrote, commit_group
from producers.intake_judge import MAX_BODY
from producers.intake_receipts import answer
from producers.intake_refusals import INTAKE_ACTOR, forward_refused
from producers.intake_snapshot import SnapshotFile
from producers.intake_state import IntakeState, Layered
from producers.outcomes import FlushReport, Outcome, Receipt, Refusal, Submission
from producers.rejections import MAX_RAW_INPUT
from producers.spool import Spool
from producers.spool_basis import basis_missing, basis_of

__all__ = ["Submission", "Receipt", "Refusal", "Outcome", "FlushReport", "Intake", "intake_dir", "MAX_RAW_INPUT", "MAX_BODY",
           "SNAPSHOT_EVERY", "IntakeLogLost"]

log = logging.getLogger(__name__)

SNAPSHOT_EVERY = 500
"""A CLI run saves the snapshot when this many events came in since the last one (or there is none):
saving costs about 20 us per event held (2 s at 100k), catching up 500 events costs ~25 ms."""


class Intake:
    """See the module docstring. ``connect`` opens the log; if it cannot (the broker is down), it is
    called again on later commands, so an intake started during an outage writes once the log is back."""

    def __init__(self, connect: Callable[[], EventLog], workdir: str | Path, *, name: str = "",
                 clock: Callable[[], datetime] = utc_now, retry_after: float = 5.0, seal: Seal | None = None) -> None:
        self._connect_log, self._seal = connect, seal  # seal: on each record it writes (``ledger.integrity.writer_seals``)
        self.workdir, self.name, self._clock = Path(workdir), name, clock
        self._journal: Journal | None = None
        self.spool = Spool(self.workdir / "spool.jsonl", seal)
        self.state, self._overlay = IntakeState(), IntakeState()
        self._overlay_stamp: tuple[int, int] | None = None
        self._lock = DirectoryLock(self.workdir)
        self._thread_lock = self._lock.thread_lock
        self._queue = Queue()
        self._saved_applied, self._seen_noted, self.retry_after, self._down_until = -1, -1, retry_after, 0.0
        self._no_refusals: LogUnavailableError | None = None  # see _refresh
        self._verified = self._has_read = self.started = False  # _has_read: the state is a read of this log (see _refresh)
        self.log_lost: str | None = None
        self._lost_stamp: tuple[int, int, int] | None = None
        self._generation = 0  # of the snapshot this state continues (``SnapshotFile.generation``)
        self.last_log_error: str | None = None
        self._snapshot = SnapshotFile(self.workdir / "state.json", name)

    @classmethod
    def for_settings(cls, settings: Settings, **kwargs: Any) -> Intake:
        connect, workdir, name = intake_parts(settings)
        kwargs["seal"] = kwargs["seal"] if "seal" in kwargs else sealer_for(settings.checkpoint_key, settings.data_dir).seal
        return cls(connect, workdir, name=name, **kwargs)

    # -- lifecycle --------------------------------------------------------------------------------------

    @property
    def snapshot_path(self) -> Path:
        return self._snapshot.path

    def start(self) -> Intake:
        """Load the snapshot (if it is this log's), catch up with the log, pick up the spool."""
        with self._locked():
            loaded, self._generation = self._load_snapshot()
            self.state, self._has_read = loaded or IntakeState(), loaded is not None
            self._saved_applied = loaded.applied if loaded is not None else -1
            self._rebuild_overlay()
            if (lost := self._snapshot.load_lost(self._generation)) is not None:  # found before, not yet rebuilt
                self._lost(lost)
                raise IntakeLogLost(lost)
            self._catch_up()
            self.started = True
        return self

    def close(self, *, snapshot_after: int = 1) -> None:
        """Save the snapshot if ``snapshot_after`` events came in since the last one (a CLI run passes
        SNAPSHOT_EVERY), and what was last seen of the log always (``intake_snapshot``); let go of the log."""
        with self._thread_lock:
            if self.started and self.log_lost is None:
                self.save_snapshot(min_new=snapshot_after)
                self.note_seen(force=True)
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            self._lock.close()

    def __enter__(self) -> Intake:
        return self.start() if not self.started else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _locked(self) -> AbstractContextManager[None]:
        return self._lock.held()

    # -- the log -------------------------------------------------------------------------------------

    def _journal_or_none(self, *, force: bool = False) -> Journal | None:
        """The log, or None if it is out of reach. After a failure the log is not tried again for
        ``retry_after`` seconds (unless ``force``): during an outage each command is spooled at once
        instead of waiting out the adapter's timeout; flushes (explicit or the service's background
        retry) always try."""
        if not force and time.monotonic() < self._down_until:
            return None
        if self._journal is None:
            try:
                self._journal = Journal(self._connect_log(), writer=INTAKE_ACTOR, seal=self._seal)
            except LogUnavailableError as exc:
                self._unavailable(exc)
                return None
        return self._journal

    def _unavailable(self, exc: Exception) -> None:
        """Note why the log is out of reach. The connection is kept: both adapters recover by
        themselves once the log is back (reconnecting could fail on its own, e.g. on a locked file)."""
        self.last_log_error = str(exc)
        self._down_until = time.monotonic() + self.retry_after
        self._verified = False  # a memory-only broker may come back empty, or refilled: check again

    def _catch_up(self, *, force: bool = False, reopened: bool = False) -> bool:
        """Read what the log holds beyond the state's positions. Returns False if the log is out of
        reach (the state is then as of the last successful read). The first time after a start or an
        outage, the log is checked to be the one the state describes (``intake_catch_up``)."""
        journal = self._journal_or_none(force=force)
        if journal is None:
            return False
        began = time.monotonic()
        try:
            seen = None if self._verified else self._snapshot.load_seen(self._generation)
            read_on(journal, self.state, verify=not self._verified, seen=seen)
        except LogUnavailableError as exc:
            self._unavailable(exc)
            return False
        except LogFileReplacedError as exc:  # a restore put a file in its place: open it, check it as at a start
            self._journal, self._verified = None, False
            journal.close()
            self._snapshot.write_seen(self.state, self._generation, self._lock)  # none is made in a removed one's place
            try:
                if not exc.reopen or reopened:  # a copy beside the old WAL; a file system whose inodes do not hold
                    raise
                return self._catch_up(force=force, reopened=True)
            except LogLostError as lost:
                if self.log_lost is None:  # the check of the file now there said why, with the way out
                    self._lost(str(lost))
                raise
        except LogLostError as exc:
            self._down_until = 0.0  # it answered: reachable, but not the log the state describes
            self._lost(
                f"{exc}. The intake's state (snapshot {self.snapshot_path}) describes a log this one no longer "
                "matches; run `caucus intake rebuild` to accept the log as it now is (a running service picks "
                "the rebuilt state up by itself)"
            )
            raise
        self.last_log_error, self._down_until = None, 0.0
        self._verified = self._has_read = True
        self._lock.read_began(began)
        return True

    def _lost(self, why: str) -> None:
        if self.log_lost is None:
            log.error("the log was lost: %s", why)
            with suppress(OSError):
                self._snapshot.write_lost(why, self._generation)
        self.log_lost = why
        self._lost_stamp = self._snapshot.stamp()

    def _take_rebuilt_state(self) -> bool:
        """After a lost log: if another process rebuilt the state (``caucus intake rebuild`` wrote a new
        snapshot), load it, reconnect to the log and go on. True if the intake is usable again."""
        if self.log_lost is None:
            return True
        stamp = self._snapshot.stamp()
        if stamp is None or stamp == self._lost_stamp:
            return False
        self._lost_stamp = stamp  # looked at: read again only once it changes, not on every command
        loaded, generation = self._load_snapshot()
        if loaded is None or generation <= self._generation:
            return False  # not rebuilt: a command run beside it folded the lost log as if it were new
        self._generation = generation
        log.warning("the intake's state was rebuilt by another process (%s); going on with it", self.snapshot_path)
        self.state, self._has_read = loaded, True
        self._saved_applied = loaded.applied
        self.log_lost = None
        self._lost_stamp = None
        self._verified = False
        if self._journal is not None:  # an embedded log may have been replaced by a new file: open it again
            self._journal.close()
            self._journal = None
        self._rebuild_overlay()
        return True

    def _applied(self, event: Event[Any], position: Position, *, mark: bool = True) -> None:
        """Our own append: apply it directly if nothing else was written before it, else read up to it."""
        if mark:
            self._lock.wrote()
        if self.state.positions.get(position.partition, 0) == position.offset:
            self.state.apply(event, position)
            return
        try:
            caught_up = self._catch_up()
        except LogLostError:
            caught_up = False
        if not caught_up or self.state.claim(event.envelope.idempotency_key) is None:
            # keep what we wrote in the state even if we cannot read it back now; the read confirms it
            self.state.apply(event, None)
            self.state.note_position(event, position)

    def _write_all(self, events: list[Event[Any]]) -> Wrote:
        """Append a group's events at once, or spool them if the log is out of reach or earlier spooled
        events still wait (order). None of them is in the state unless the append succeeded."""
        if self.spool.pending():
            self._forward()
        if not self.spool.pending():
            journal = self._journal_or_none()
            if journal is not None:
                try:
                    positions = journal.append_batch(events)
                except LogUnavailableError as exc:
                    self._unavailable(exc)  # the group goes to the spool; forwarding skips what was written
                except Exception:
                    self._lock.unsure()  # part of the batch may be in the log: read it before deciding again
                    raise
                else:
                    self._lock.wrote()
                    for event, position in zip(events, positions):
                        self._applied(event, position, mark=False)
                    return Wrote("accepted", list(positions))
        spooled: list[Position | None] = []
        for event in events:
            try:
                self.spool.add(event, basis_of(self.state), self._generation)
            except Exception as exc:  # noqa: BLE001 - kept: those before it; the rest hear why
                return Wrote("spooled", spooled, exc)
            log.warning("log out of reach (%s): %s %s kept in the spool", self.last_log_error, event.type, event.event_id)
            self._overlay.apply(event, None)
            self._overlay_stamp = self.spool.stamp
            spooled.append(None)
        return Wrote("spooled", spooled)

    # -- spool ----------------------------------------------------------------------------------------

    def _rebuild_overlay(self) -> None:
        overlay = IntakeState()
        for item in (i for i in self.spool.pending() if i.sealed):  # a line another hand wrote is judged on nothing
            overlay.apply(item.event, None)
        self._overlay = overlay
        self._overlay_stamp = self.spool.stamp

    def _view(self) -> IntakeState | Layered:
        return Layered(self.state, self._overlay) if self.spool.pending() else self.state

    def _forward(self, *, force: bool = False) -> FlushReport:
        """Send spooled events in order, each checked again; none into a log they were not judged on (``spool_basis``)."""
        try:
            journal = self._journal_or_none(force=force)
            gone = journal and basis_missing(journal, self.spool.pending(), self._generation, self.state.positions)
        except LogUnavailableError as exc:  # the loop below meets the outage and says so
            self._unavailable(exc)
            gone = None
        if gone:
            self._lost(f"{gone}; run `caucus intake rebuild` to accept the log as it now is")
            raise IntakeLogLost(f"{self.log_lost}; the {len(self.spool.pending())} spooled event(s) stay in the spool until then")
        forwarded = rejected = present = 0
        error: str | None = None
        for item in self.spool.pending():
            journal = self._journal_or_none(force=force)
            if journal is None:
                error = self.last_log_error
                break
            event = item.event
            verdict = recheck(event, self.state, sealed=item.sealed)
            try:
                if verdict.action == "present":
                    self.spool.mark_forwarded(event.event_id, verdict.position, "present", verdict.original)
                    present += 1
                    continue
                if verdict.action == "refuse":
                    refusal = forward_refused(event, verdict.problems, self._clock())
                    position = journal.append(refusal)
                    self._applied(refusal, position)
                    self.spool.mark_forwarded(event.event_id, None, "rejected", refusal.event_id)
                    rejected += 1
                    continue
                position = journal.append(event)
            except LogUnavailableError as exc:
                self._unavailable(exc)
                error = str(exc)
                break
            self._applied(event, position)
            self.spool.mark_forwarded(event.event_id, position, "appended")
            forwarded += 1
        self._rebuild_overlay()
        return FlushReport(forwarded, rejected, present, len(self.spool.pending()), error)

    def flush(self) -> FlushReport:
        """Forward the spool now (``caucus spool flush``, the HTTP service's retry loop). Not into a lost
        log: the spooled events were judged against the log that was lost, and forwarded into the log as
        it now is they would land without what they rest on (a report without its unit's definition, a
        correction without the report it replaces). They wait, kept, for ``caucus intake rebuild`` (after
        the operator has restored the log), and are then checked again for conflicts with the rebuilt
        state (``intake_forward.recheck``), as every forwarded event is."""
        with self._locked():
            waiting = len(self.spool.pending())
            if not waiting:
                return FlushReport(0, 0, 0, 0)
            kept = f"; the {waiting} spooled event(s) stay in the spool until then"
            if not self._take_rebuilt_state():
                raise IntakeLogLost(f"{self.log_lost}{kept}")
            try:
                online = self._catch_up(force=True)
            except LogLostError:
                raise IntakeLogLost(f"{self.log_lost}{kept}") from None
            if not online:
                return FlushReport(0, 0, 0, waiting, self.last_log_error)
            return self._forward(force=True)

    def _refresh(self, arrived: float | None = None) -> None:
        """Catch up, unless one that began after the command ``arrived`` covers it (``intake_lock``)."""
        if not self._take_rebuilt_state():
            raise IntakeLogLost(self.log_lost or "")
        if self.spool.stamp != self._overlay_stamp:
            self._rebuild_overlay()  # another process (a CLI beside the service) changed the spool
        online = (arrived is not None and self._verified and self._lock.covers(arrived)) or self._catch_up()
        if not online and not self._has_read:  # judged against nothing, a valid report would be refused
            raise LogUnavailableError(f"{self.last_log_error or 'the log is out of reach'}; this intake has not read that log yet "
                                      "(it has no snapshot of it), so it cannot judge a command: nothing was recorded")
        self._no_refusals = None if online else self._snapshot.unseen(self.state.positions, self._generation, self._lock,
                                                                      self.last_log_error)
        if online and self.spool.pending():
            self._forward()

    # -- commands ---------------------------------------------------------------------------------------

    def submit(self, submission: Submission) -> Outcome:
        """Queue the command; whoever holds the lock next decides every queued one (``intake_group``)."""
        slot = self._queue.add(submission, time.monotonic())
        try:
            with self._locked():
                while not slot.done:
                    group = self._queue.take()
                    if not group:  # taken by a turn that was interrupted (not by an Exception) before it settled
                        slot.fail(RuntimeError("the intake's turn that held this command was interrupted; send it "
                                               "again (its key tells whether it was kept)"))
                        break
                    self._commit(group)
        except BaseException:
            self._queue.discard(slot)  # its sender hears the error: no later turn may write it
            raise
        return slot.result()

    def _commit(self, group: list[Slot]) -> None:
        """One turn: one catch-up (unless shared) for the group, its judgments, one append."""
        try:
            self._refresh(max(slot.arrived for slot in group))
            commit_group(group, self._view(), self._clock, self._write_all, self._no_refusals)
        except Exception as exc:  # noqa: BLE001 - every waiting command hears it, as each would alone
            for slot in group:
                slot.fail(exc)

    def _submit(self, sub: Submission) -> Outcome:
        """Decide one command now (the lock held, the state caught up by the caller): a group of one."""
        slot = Slot(sub, time.monotonic())
        commit_group([slot], self._view(), self._clock, self._write_all, self._no_refusals)
        return slot.result()

    # -- queries -------------------------------------------------------------------------------------------

    def lookup(self, key: str, reader: Credential | None = None) -> Outcome | None:
        """What became of the command sent with ``key``: its receipt, its last refusal, or None.
        With ``reader``, None also when the command is not theirs: a receipt is shown to its sender
        and to officials only (a chair may not learn what others sent, or that they sent it)."""
        with self._locked():
            try:
                self._refresh()
            except LogError:
                if self.log_lost is not None:
                    raise  # the receipt may name an event the log no longer holds: not "accepted" now
                # out of reach: answer from what is known (it was in the log when last read)
            return answer(self._view(), self.state, key, reader)

    def status(self) -> dict[str, Any]:
        with self._locked():
            online = False
            if self._take_rebuilt_state():
                with suppress(LogError):
                    online = self._catch_up()
            return {
                "log": self.name,
                "reachable": online,
                "log_lost": self.log_lost,
                "last_log_error": None if online else self.last_log_error,
                "events_applied": self.state.applied,
                "positions": {str(p): o for p, o in sorted(self.state.positions.items())},
                "elections": self.state.election_ids(),
                "spool": self.spool.status(),
            }

    # -- snapshots ----------------------------------------------------------------------------------------

    def _load_snapshot(self) -> tuple[IntakeState | None, int]:
        loaded, problem, generation = self._snapshot.load()
        if problem is not None:
            self.last_log_error = problem
        return loaded, generation

    def note_seen(self, *, force: bool = False) -> None:
        """Write what the state last saw of each partition (``intake_snapshot``) if it moved since: the
        service does at each retry, so one killed, not stopped, leaves a view at most seconds old."""
        if self.started and self.log_lost is None and (force or self.state.applied != self._seen_noted):
            self._seen_noted = self.state.applied
            self._snapshot.write_seen(self.state, self._generation, self._lock)

    def save_snapshot(self, *, force: bool = False, min_new: int = 1) -> bool:
        """Write the state (log-derived part only) if at least ``min_new`` events were applied since the
        last save (or there is no snapshot yet). The picture is taken under the lock; the slow part,
        encoding and writing, happens outside it so submissions are not held up."""
        with self._thread_lock:
            fresh = self.state.applied - self._saved_applied
            if not force and self._saved_applied >= 0 and fresh < min_new:
                return False
            picture = self.state.to_snapshot()
            applied = self.state.applied
        self._snapshot.write(picture, self._clock(), self._generation)
        self._saved_applied = applied
        return True

    def rebuild(self) -> dict[str, Any]:
        """Forget the snapshot and fold the whole log again; accepts a log that was lost and refilled."""
        with self._locked():
            began = time.perf_counter()
            self.state, self._has_read = IntakeState(), False
            self.log_lost = self._lost_stamp = None
            self._snapshot.forget_seen()  # the log is accepted as it is: what was seen of it before is not held against it
            self._generation = max(self._generation, self._snapshot.generation()) + 1
            if not self._catch_up():
                raise LogUnavailableError(self.last_log_error or "the log is out of reach")
            took = time.perf_counter() - began
            self.save_snapshot(force=True)
            return {"events_applied": self.state.applied, "seconds": round(took, 3), "positions": self.state.positions,
                    "spooled_waiting": len(self.spool.pending())}
