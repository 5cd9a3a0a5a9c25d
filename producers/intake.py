"""The intake: the one way a command becomes an event.

Every surface (CLI, HTTP) hands it a ``Submission``: the command kind, the input exactly as sent, the
sender's credential (or why it failed). The intake then, holding its lock:

1. catches its state up with the log (other processes may have written) and forwards spooled events;
2. parses; checks the sender's role; resolves the election; builds the event;
3. answers a repeated idempotency key with the original receipt (same content) or refuses it (other
   content);
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
one (``tests/producers/test_bench_intake.py``, embedded log, 2-core machine): folding 100k events takes
5.0 s (3 s of it reading and decoding), loading the snapshot and catching up 1.5 s, writing it 2.3 s; at
election scale (8k events) 0.38 s, 0.12 s and 0.22 s. Each CLI command is a new process, so it starts
from the snapshot, and saves a new one only every ``SNAPSHOT_EVERY`` events; the HTTP service saves one
a minute and at shutdown. The second reason: a CLI started while the log is down validates against the
snapshot (and the spool) instead of refusing everything; the snapshot may then lag the log, which is
why spooled events are checked again when they are forwarded. If the log no longer holds what the
snapshot (or the running state) saw -- a memory-only broker restarted -- that is reported
(``LogLostError``), never papered over; ``rebuild()`` (``caucus intake rebuild``) accepts the log as it
now is. A running intake (the HTTP service) that found its log lost watches its snapshot file: when
another process rebuilds (a new snapshot appears), it loads that and goes on, without a restart.

Writers. One lock per intake directory: a thread lock within the process and an ``flock`` across
processes on the same machine, so the HTTP service and CLI invocations over the same data directory
take turns (each catches up inside the lock, so none judges against stale state). Intakes on different
machines writing to one Kafka topic are not serialised; run one intake per log.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from ledger.backends import backends_for
from ledger.config import Settings
from ledger.files import create_private
from ledger.events import Channel, Event, Problem, SubmissionRejected, new_event, utc_now
from ledger.journal import Journal
from ledger.log.port import EventLog, LogError, LogLostError, LogUnavailableError, Position
from ledger.render import event_to_json
from producers.commands import CommandKind, Parsed, claimable, parse_command
from producers.credentials import AuthFailure, Credential, authorize, election_scope
from producers.intake_state import IntakeState, Layered, claimed_key, fingerprint, rejection_key
from producers.outcomes import FlushReport, Outcome, Receipt, Refusal, Submission, category_of
from producers.rejections import MAX_RAW_INPUT, raw_record, recordable
from producers.spool import Spool
from producers.strict_json import escaped
from producers.validation import check, conflicts, precheck, resolve_election, to_payload, with_warnings

__all__ = [
    "Submission",
    "Receipt",
    "Refusal",
    "Outcome",
    "FlushReport",
    "Intake",
    "intake_dir",
    "MAX_RAW_INPUT",
    "MAX_BODY",
    "SNAPSHOT_EVERY",
]

MAX_BODY = 1024 * 1024
"""Largest command accepted, in bytes (an election of 1,765 units is about 250 kB)."""

INTAKE_ACTOR = "system:intake"

log = logging.getLogger(__name__)

SNAPSHOT_EVERY = 500
"""A CLI run saves the snapshot when this many events came in since the last one (or there is none):
saving costs about 20 us per event held (2 s at 100k), catching up 500 events costs ~25 ms."""


def intake_dir(settings: Settings) -> Path:
    """Where the intake of this log keeps its snapshot, spool and lock: one directory per log target,
    so a spool is never forwarded to a log it was not meant for."""
    return backends_for(settings).intake_dir()


class Intake:
    """See the module docstring. ``connect`` opens the log; if it cannot (the broker is down), it is
    called again on later commands, so an intake started during an outage writes once the log is back."""

    def __init__(
        self,
        connect: Callable[[], EventLog],
        workdir: str | Path,
        *,
        name: str = "",
        clock: Callable[[], datetime] = utc_now,
        retry_after: float = 5.0,
    ) -> None:
        self._connect_log = connect
        self.workdir = Path(workdir)
        self.name = name
        self._clock = clock
        self._journal: Journal | None = None
        self.spool = Spool(self.workdir / "spool.jsonl")
        self.state = IntakeState()
        self._overlay = IntakeState()
        self._overlay_stamp: tuple[int, int] | None = None
        self._thread_lock = threading.RLock()
        self._lock_file: Any = None
        self._saved_applied = -1
        self.retry_after = retry_after
        self._down_until = 0.0
        self._verified = False
        self.log_lost: str | None = None
        self._lost_stamp: tuple[int, int, int] | None = None
        self.last_log_error: str | None = None
        self.started = False

    @classmethod
    def for_settings(cls, settings: Settings, **kwargs: Any) -> Intake:
        backends = backends_for(settings)
        return cls(backends.open_log, backends.intake_dir(), name=backends.intake_name(), **kwargs)

    # -- lifecycle --------------------------------------------------------------------------------------

    @property
    def snapshot_path(self) -> Path:
        return self.workdir / "state.json"

    def start(self) -> Intake:
        """Load the snapshot (if it is this log's), catch up with the log, pick up the spool."""
        with self._locked():
            loaded = self._load_snapshot()
            self.state = loaded or IntakeState()
            self._saved_applied = loaded.applied if loaded is not None else -1
            self._rebuild_overlay()
            self._catch_up()
            self.started = True
        return self

    def close(self, *, snapshot_after: int = 1) -> None:
        """Save the snapshot if ``snapshot_after`` events came in since the last one, and let go of
        the log. A CLI run passes SNAPSHOT_EVERY so it does not pay for a snapshot on every command."""
        with self._thread_lock:
            if self.started and self.log_lost is None:
                self.save_snapshot(min_new=snapshot_after)
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            if self._lock_file is not None:
                self._lock_file.close()
                self._lock_file = None

    def __enter__(self) -> Intake:
        return self.start() if not self.started else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._thread_lock:
            if self._lock_file is None:
                self.workdir.mkdir(parents=True, exist_ok=True)
                self._lock_file = open(self.workdir / "intake.lock", "a")
            fcntl.flock(self._lock_file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_file, fcntl.LOCK_UN)

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
                self._journal = Journal(self._connect_log(), writer=INTAKE_ACTOR)
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

    def _catch_up(self, *, force: bool = False) -> bool:
        """Read what the log holds beyond the state's positions. Returns False if the log is out of
        reach (the state is then as of the last successful read). The first time after a start or an
        outage, the last record applied in each partition is read again and must be the one the state
        remembers: a log that was lost and refilled to beyond the old positions is caught too."""
        journal = self._journal_or_none(force=force)
        if journal is None:
            return False
        state = self.state
        start = dict(state.positions)
        expect: dict[int, str] = {}
        if not self._verified:
            for part, offset in state.positions.items():
                if offset > 0 and part in state.anchors:
                    start[part] = offset - 1
                    expect[part] = state.anchors[part]
        try:
            for logged in journal.read(start):
                part = logged.position.partition
                if part in expect:
                    want = expect.pop(part)
                    if logged.event.event_id != want:
                        raise LogLostError(part, state.positions[part], logged.position.offset)
                    continue
                state.apply(logged.event, logged.position)
        except LogUnavailableError as exc:
            self._unavailable(exc)
            return False
        except LogLostError as exc:
            self._down_until = 0.0  # it answered: reachable, but not the log the state describes
            self._lost(
                f"{exc}. The intake's state (snapshot {self.snapshot_path}) describes a log this one no longer "
                "matches; run `caucus intake rebuild` to accept the log as it now is (a running service picks "
                "the rebuilt state up by itself)"
            )
            raise
        if expect:
            # a partition whose remembered last record did not come back at all
            part = next(iter(expect))
            self._lost(f"partition {part} no longer holds the event the intake last applied there; run "
                       "`caucus intake rebuild` to accept the log as it now is")
            raise LogLostError(part, state.positions[part], state.positions[part] - 1)
        self.last_log_error = None
        self._down_until = 0.0
        self._verified = True
        return True

    def _lost(self, why: str) -> None:
        if self.log_lost is None:
            log.error("the log was lost: %s", why)
        self.log_lost = why
        self._lost_stamp = self._snapshot_stamp()

    def _snapshot_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.snapshot_path.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _take_rebuilt_state(self) -> bool:
        """After a lost log: if another process rebuilt the state (``caucus intake rebuild`` wrote a new
        snapshot), load it, reconnect to the log and go on. True if the intake is usable again."""
        if self.log_lost is None:
            return True
        stamp = self._snapshot_stamp()
        if stamp is None or stamp == self._lost_stamp:
            return False
        loaded = self._load_snapshot()
        if loaded is None:
            return False
        log.warning("the intake's state was rebuilt by another process (%s); going on with it", self.snapshot_path)
        self.state = loaded
        self._saved_applied = loaded.applied
        self.log_lost = None
        self._lost_stamp = None
        self._verified = False
        if self._journal is not None:  # an embedded log may have been replaced by a new file: open it again
            self._journal.close()
            self._journal = None
        self._rebuild_overlay()
        return True

    def _applied(self, event: Event[Any], position: Position) -> None:
        """Our own append: apply it directly if nothing else was written before it, else read up to it."""
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

    def _write(self, event: Event[Any]) -> tuple[Literal["accepted", "spooled"], Position | None]:
        """Append, or spool if the log is out of reach or earlier spooled events still wait (order)."""
        if self.spool.pending():
            self._forward()
        if not self.spool.pending():
            journal = self._journal_or_none()
            if journal is not None:
                try:
                    position = journal.append(event)
                except LogUnavailableError as exc:
                    self._unavailable(exc)
                else:
                    self._applied(event, position)
                    return "accepted", position
        self.spool.add(event)
        log.warning("log out of reach (%s): %s %s kept in the spool", self.last_log_error, event.type, event.event_id)
        self._overlay.apply(event, None)
        self._overlay_stamp = self.spool.stamp
        return "spooled", None

    # -- spool ----------------------------------------------------------------------------------------

    def _rebuild_overlay(self) -> None:
        overlay = IntakeState()
        for item in self.spool.pending():
            overlay.apply(item.event, None)
        self._overlay = overlay
        self._overlay_stamp = self.spool.stamp

    def _view(self) -> IntakeState | Layered:
        return Layered(self.state, self._overlay) if self.spool.pending() else self.state

    def _forward(self, *, force: bool = False) -> FlushReport:
        """Send spooled events to the log in order, re-checking each against the log first."""
        forwarded = rejected = present = 0
        error: str | None = None
        for item in self.spool.pending():
            journal = self._journal_or_none(force=force)
            if journal is None:
                error = self.last_log_error
                break
            event = item.event
            key = event.envelope.idempotency_key
            claim = self.state.claim(key)
            try:
                if claim is not None and (claim.event_id == event.event_id or claim.fingerprint() == fingerprint(event)):
                    self.spool.mark_forwarded(event.event_id, claim.position, "present", claim.event_id)
                    present += 1
                    continue
                known = self.state.rejection(claimed_key(key)) if isinstance(event.payload, SubmissionRejected) else None
                if known is not None and known.event_id == event.event_id:
                    self.spool.mark_forwarded(event.event_id, known.position, "present", event.event_id)
                    present += 1
                    continue
                problems = conflicts(event, self.state)
                if claim is not None:
                    problems = (
                        Problem(
                            "idempotency_key",
                            "IDEMPOTENCY_CONFLICT",
                            f"key {key!r} was used meanwhile for other content (event {claim.event_id})",
                        ),
                        *problems,
                    )
                if problems and not isinstance(event.payload, SubmissionRejected):
                    refusal = self._rejection_event(
                        command=f"forward {event.type}",
                        raw=json.dumps(event_to_json(event), sort_keys=True),
                        errors=problems,
                        sender=event.envelope.actor,
                        election_id=event.envelope.election_id,
                        unit_id=event.envelope.unit_id,
                        channel=Channel.SYSTEM,
                        claimed=key,
                    )
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
        """Forward the spool now (``caucus spool flush``, the HTTP service's retry loop)."""
        with self._locked():
            waiting = len(self.spool.pending())
            if not waiting:
                return FlushReport(0, 0, 0, 0)
            try:
                online = self._catch_up(force=True)
            except LogLostError:
                online = True  # forward anyway: the events were accepted and belong in the log as it now is
            if not online:
                return FlushReport(0, 0, 0, waiting, self.last_log_error)
            return self._forward(force=True)

    def _refresh(self) -> None:
        if not self._take_rebuilt_state():
            raise LogError(f"the log was lost: {self.log_lost}")
        if self.spool.stamp != self._overlay_stamp:
            self._rebuild_overlay()  # another process (a CLI beside the service) changed the spool
        online = self._catch_up()
        if online and self.spool.pending():
            self._forward()

    # -- commands ---------------------------------------------------------------------------------------

    def submit(self, submission: Submission) -> Outcome:
        with self._locked():
            self._refresh()
            return self._submit(submission)

    def _submit(self, sub: Submission) -> Outcome:
        if len(sub.body) > MAX_BODY:
            too_large = Problem("body", "TOO_LARGE", f"the input is {len(sub.body)} bytes; at most {MAX_BODY} are accepted")
            parsed = Parsed(None, (too_large,), unit_id=claimable(sub.unit_id), idempotency_key=claimable(sub.idempotency_key))
        else:
            parsed = parse_command(sub.kind, sub.body, unit_id=sub.unit_id, idempotency_key=sub.idempotency_key)
        unit_id = claimable(sub.unit_id) or parsed.unit_id
        key = parsed.idempotency_key or claimable(sub.idempotency_key)

        def refuse(errors: tuple[Problem, ...], sender: str, election_id: str = "") -> Refusal:
            return self._refuse(sub, errors, sender, election_id or parsed.election_id, unit_id, key)

        if isinstance(sub.sender, AuthFailure):
            return refuse((sub.sender.problem,), sub.sender.claimed)
        credential = sub.sender
        actor = credential.actor
        denied = authorize(credential, sub.kind, unit_id if sub.kind is not CommandKind.DEFINE else None)
        if denied is not None:
            return refuse((denied,), actor)
        if parsed.command is None:
            return refuse((*parsed.errors, *precheck(parsed.data, self._view())), actor)
        command = parsed.command
        view = self._view()
        claim = view.claim(command.idempotency_key)
        election_id: str | None
        problems: tuple[Problem, ...]
        if claim is not None and claim.election_id and getattr(command, "election_id", "") is None:
            # A retry that names no election is about the election its original went to, even if
            # another election with the same unit was defined since (which would make it ambiguous).
            election_id, problems = claim.election_id, ()
        else:
            election_id, problems = resolve_election(command, view)
        if election_id is None:
            return refuse(problems, actor)
        payload, problems = to_payload(command, actor)
        if payload is None:
            return refuse(problems, actor, election_id)
        now = self._clock()
        draft = new_event(
            payload,
            election_id=election_id,
            unit_id=command.unit_id,
            actor=actor,
            channel=sub.channel,
            idempotency_key=command.idempotency_key,
            occurred_at=command.occurred_at or now,
            recorded_at=now,
        )
        claim = view.claim(command.idempotency_key)
        if claim is not None:
            if claim.fingerprint() == fingerprint(draft):
                return Receipt(
                    "duplicate",
                    claim.event_id,
                    claim.event_type,
                    claim.election_id,
                    claim.unit_id,
                    claim.key,
                    claim.position,
                )
            return refuse(
                (
                    Problem(
                        "idempotency_key",
                        "IDEMPOTENCY_CONFLICT",
                        f"key {command.idempotency_key!r} was already used for different content (event "
                        f"{claim.event_id}, a {claim.event_type} for unit {claim.unit_id or '(election)'}); "
                        "use a new key for a new command",
                    ),
                ),
                actor,
                election_id,
            )
        # Checked only for a new write: a duplicate above repeats a receipt, it writes nothing.
        out_of_scope = election_scope(credential, election_id, view.elections_of_unit(command.unit_id))
        if out_of_scope is not None:
            return refuse((out_of_scope,), actor, election_id)
        verdict = check(command, payload, election_id, view)
        if verdict.errors:
            return refuse(verdict.errors, actor, election_id)
        event = replace(draft, payload=with_warnings(payload, verdict.warnings))
        status, position = self._write(event)
        return Receipt(
            status, event.event_id, event.type, election_id, command.unit_id, command.idempotency_key, position, verdict.warnings
        )

    def _rejection_event(
        self,
        *,
        command: str,
        raw: str,
        errors: tuple[Problem, ...],
        sender: str,
        election_id: str,
        unit_id: str,
        channel: Channel,
        claimed: str,
        raw_bytes: bytes = b"",
    ) -> Event[SubmissionRejected]:
        """The record of a refusal. Everything the sender controls is made encodable and bounded here
        (ids it cannot be filed under are left empty; the raw input keeps them), so a refusal can
        always be recorded."""
        event_id = str(uuid.uuid4())
        return new_event(
            SubmissionRejected(
                command=escaped(command, 200), raw_input=raw, errors=recordable(errors), sender=escaped(sender, 200), raw_bytes=raw_bytes
            ),
            election_id=claimable(election_id),
            unit_id=claimable(unit_id),
            actor=INTAKE_ACTOR,
            channel=channel,
            idempotency_key=rejection_key(event_id, claimable(claimed)),
            recorded_at=self._clock(),
            event_id=event_id,
        )

    def _refuse(
        self, sub: Submission, errors: tuple[Problem, ...], sender: str, election_id: str, unit_id: str, key: str
    ) -> Refusal:
        raw, raw_bytes = raw_record(sub.body)
        event = self._rejection_event(
            command=f"{sub.kind.value}{f' ({sub.via})' if sub.via else ''}",
            raw=raw,
            raw_bytes=raw_bytes,
            errors=errors,
            sender=sender,
            election_id=election_id,
            unit_id=unit_id,
            channel=sub.channel,
            claimed=key,
        )
        status, position = self._write(event)
        recorded = event.payload.errors  # what was recorded is what the sender hears
        log.info("refused %s from %s: %s", sub.kind.value, sender, ", ".join(f"{e.field} {e.code}" for e in recorded))
        return Refusal(recorded, category_of(recorded), event.event_id, "log" if status == "accepted" else "spool", position, claimable(key))

    # -- queries -------------------------------------------------------------------------------------------

    def lookup(self, key: str, reader: Credential | None = None) -> Outcome | None:
        """What became of the command sent with ``key``: its receipt, its last refusal, or None.
        With ``reader``, None also when the command is not theirs: a receipt is shown to its sender
        and to officials only (a chair may not learn what others sent, or that they sent it)."""
        with self._locked():
            try:
                self._refresh()
            except LogError:
                pass  # answer from what is known
            view = self._view()
            claim = view.claim(key)
            if reader is not None and reader.role != "official":
                rejected = view.rejection(key)
                owner = claim.actor if claim is not None else (rejected.sender if rejected is not None else "")
                if owner != reader.actor:
                    return None
            if claim is not None:
                status: Literal["accepted", "spooled"] = "accepted" if claim.position is not None else "spooled"
                if claim.position is None and self.state.claim(key) is not None:
                    status = "accepted"  # in the log, position not read back yet
                return Receipt(status, claim.event_id, claim.event_type, claim.election_id, claim.unit_id, key, claim.position)
            rejection = view.rejection(key)
            if rejection is not None:
                return Refusal(
                    rejection.errors,
                    category_of(rejection.errors),
                    rejection.event_id,
                    "log" if rejection.position is not None else "spool",
                    rejection.position,
                    key,
                )
            return None

    def status(self) -> dict[str, Any]:
        with self._locked():
            online = False
            if self._take_rebuilt_state():
                try:
                    online = self._catch_up()
                except LogError:
                    online = False
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

    def _load_snapshot(self) -> IntakeState | None:
        try:
            data = json.loads(self.snapshot_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self.last_log_error = f"snapshot {self.snapshot_path} ignored: {exc}"
            return None
        if data.get("log") != self.name:
            return None
        try:
            return IntakeState.from_snapshot(data["state"])
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            self.last_log_error = f"snapshot {self.snapshot_path} ignored: {exc}"
            return None

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
        body = json.dumps({"log": self.name, "saved_at": self._clock().isoformat(), "state": picture})
        self.workdir.mkdir(parents=True, exist_ok=True)
        tmp = self.snapshot_path.with_name(f"state.{os.getpid()}.{threading.get_ident()}.tmp")
        create_private(tmp)  # private like the log it describes (ledger.files)
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.snapshot_path)
        self._saved_applied = applied
        return True

    def rebuild(self) -> dict[str, Any]:
        """Forget the snapshot and fold the whole log again; accepts a log that was lost and refilled."""
        with self._locked():
            began = time.perf_counter()
            self.state = IntakeState()
            self.log_lost = None
            self._lost_stamp = None
            if not self._catch_up():
                raise LogUnavailableError(self.last_log_error or "the log is out of reach")
            took = time.perf_counter() - began
            self.save_snapshot(force=True)
            return {"events_applied": self.state.applied, "seconds": round(took, 3), "positions": self.state.positions}
