"""Who may write to the log without the intake: officials only, and their name goes on every record.

``caucus log append`` (restoring or moving a log) and ``caucus simulate write`` put events on the log
without validation. Anyone able to run them could otherwise forge a chair's report, so they need an
official's credential, checked like the intake checks one, and each record they write carries the
official's actor in its ``caucus-writer`` header (``ledger.record_headers``): an auditor can tell
these records from the intake's.

What they write is held to what the intake would accept of the log as it stands (``refusals``): a
second result for a unit that has one, a correction of an unknown or superseded event, a second toss
of a settled tie, a key used for other content, all refused as the intake refuses them
(``producers.intake_forward.recheck``, the check a spooled event gets when it is forwarded); what
each event says is held to the intake's parse and checks (``producers.direct_content``: a negative
or fractional count, an unknown unit or candidate, a toss for no tie, a result that breaks a caucus
rule), except the caucus-rule findings of published records (the import channel); and an event id
the log already holds for other content is refused (the log keeps one event per id: the new content
would be dropped while reported written). A second definition of an election is let through when it
changes nothing an opened, reported or tossed-for unit is counted under (``producers.redefinition``), or when it
is a published record: the importer writes one when a later release amends the first (the 2020
history holds two), so a restored log holds it too; the audit lists it among the direct writes.
Certifications and checkpoints are held to ``producers.direct_records``. Refused too is a
``recorded_at`` that goes back before the newest record of the log (or of the file) by more than
``TOLERANCE``, or that lies ahead of now at all: ``recorded_at`` is when the ledger accepted an event,
and as-of reads, the trail and the audit order history by it. Such a record is refused rather than
given the time of the append: a restore must keep the times it restores, and a command that changes
what an official handed it without saying so would hide the very thing an auditor looks for. Events
in the file are judged in order, each against the log and the file's events before it, so a whole
log restores into an empty one; one refusal refuses the whole file, and nothing is appended.

The importer (``caucus import``) needs none: it writes only what the party's published releases
say, under the fixed actor of the importer, with event ids derived from the releases (so running it
again appends nothing), and anyone can check its events against the same public files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ledger.cli_output import fail
from ledger.config import Settings
from ledger.events import CheckpointSigned, Event, Problem, ResultCorrected, ResultReported, ResultsCertified
from ledger.integrity.keys import TrustedKey
from ledger.journal import Journal
from ledger.log.port import Position
from producers.credentials import AuthFailure, CredentialError, CredentialStore
from producers.direct_content import KEPT_ALWAYS, content_problems
from producers.direct_records import CheckpointTrees
from producers.intake_forward import recheck
from producers.intake_lock import DirectoryLock
from producers.intake_state import IntakeState, fingerprint

__all__ = ["official_writer", "refusals", "judge", "append_new", "Judged", "intake_turn", "REFUSED", "TOLERANCE"]

REFUSED = 1

TOLERANCE = timedelta(seconds=60)
"""How far a directly written ``recorded_at`` may lie before the newest record (or after now): clocks
of the machines that wrote the log differ a little, and a log's partitions have no common order."""


def official_writer(settings: Settings, token: str | None, credentials: Path | None, what: str) -> str:
    """The actor of the official whose ``token`` this is; otherwise the command stops (exit 1, refused)."""
    store = CredentialStore(credentials or settings.credentials or settings.data_dir / "credentials.json")
    try:
        found = store.authenticate(token or settings.token)
    except CredentialError as exc:
        raise fail(str(exc)) from exc
    if isinstance(found, AuthFailure):
        raise fail(f"refused: to {what} you need an official's credential (--token or CAUCUS_TOKEN; an operator "
                   f"issues one with `caucus credentials issue --official NAME`): {found.problem.message}",
                   REFUSED, kind="unauthenticated")
    if found.role != "official":
        raise fail(f"refused: to {what} you need an official's credential; {found.actor} is a {found.role}",
                   REFUSED, kind="forbidden")
    return found.actor


@contextmanager
def intake_turn(settings: Settings) -> Iterator[None]:
    """Judge and append while holding the intake's lock of this log, then mark the write
    (``producers.intake_lock``): a direct write is a write an intake beside it must read before its
    next decision. Without the lock the check raced an intake's append; without the mark an intake
    whose queued commands share a catch-up decided them against a log that had moved on (a second
    result for a unit accepted, a toss for a tie that no longer stands)."""
    from ledger.backends import backends_for

    lock = DirectoryLock(backends_for(settings).intake_dir())
    turn = lock.held()
    try:
        try:
            turn.__enter__()
        except OSError:  # a data directory no intake could write its lock in: no intake here to wait for
            yield
            return
        try:
            yield
        finally:
            try:
                lock.wrote()  # also after a failed append: it may have written part of the batch
            finally:
                turn.__exit__(None, None, None)
    finally:
        lock.close()


@dataclass
class Judged:
    """What ``judge`` found: the events refused (by index, with why), and where the log already holds
    the events it holds with the same content (by event id). The Kafka log, unlike the embedded one,
    keeps no index of the ids it holds, so a writer that appended them again would double them: a
    re-run import or restore appends only the others (``append_new``)."""

    refused: list[tuple[int, tuple[Problem, ...]]]
    held: dict[str, Position]


def refusals(journal: Journal, events: Sequence[Event[Any]], now: datetime,
             lines: Sequence[str | Mapping[str, Any]] | None = None,
             trusted: Sequence[TrustedKey] | None = None, *, check_times: bool = True) -> list[tuple[int, tuple[Problem, ...]]]:
    """``judge``'s refusals alone."""
    return judge(journal, events, now, lines, trusted, check_times=check_times).refused


def append_new(journal: Journal, events: Sequence[Event[Any]], held: Mapping[str, Position]) -> list[Position]:
    """Append the events the log does not hold yet; each event's position, in order, held ones included."""
    fresh = [event for event in events if event.event_id not in held]
    placed = dict(zip((e.event_id for e in fresh), journal.append_batch(fresh))) if fresh else {}
    return [held[e.event_id] if e.event_id in held else placed[e.event_id] for e in events]


def judge(journal: Journal, events: Sequence[Event[Any]], now: datetime,
          lines: Sequence[str | Mapping[str, Any]] | None = None,
          trusted: Sequence[TrustedKey] | None = None, *, check_times: bool = True) -> Judged:
    """Why each of ``events`` (by index) may not be appended to the log ``journal`` reads, judged in
    order as the intake would judge them; none refused when all may. Reads the whole log. With ``lines``
    (each event's JSON as given, or its text) what each says is judged too (``producers.direct_content``),
    and a checkpoint's key against ``trusted``. ``check_times=False``: the events carry the times of a
    published history (the importer's), not of this write, and are not judged by them."""
    state = IntakeState()
    held_at: dict[str, Position] = {}
    newest: datetime | None = None
    wanted = {event.event_id for event in events}
    held: dict[str, str] = {}  # of the file's event ids, those the log holds: their content's fingerprint
    partitions = journal.log.partitions
    trees = CheckpointTrees(partitions) if any(isinstance(e.payload, CheckpointSigned) for e in events) else None
    certified = _CertificationOrder()
    for logged in journal.read({}):
        state.apply(logged.event, logged.position)
        certified.note(logged.event)
        newest = logged.event.recorded_at if newest is None else max(newest, logged.event.recorded_at)
        if logged.event.event_id in wanted:
            held[logged.event.event_id] = fingerprint(logged.event)
            held_at.setdefault(logged.event.event_id, logged.position)
        if trees is not None:
            trees.logged(logged.position.partition, logged.raw)
    written = set(held)  # ids the log will hold: appending one of them again writes nothing
    found: list[tuple[int, tuple[Problem, ...]]] = []
    for index, event in enumerate(events):
        mine = fingerprint(event)
        theirs = held.setdefault(event.event_id, mine)
        if theirs != mine:  # the log (or an earlier line) holds other content under this id
            found.append((index, (_id_taken(event.event_id),)))
            continue
        if event.event_id in written:
            continue
        problems = [*_time_problems(event.recorded_at, newest, now), *certified.problems(event)] if check_times else []
        verdict = recheck(event, state)
        if verdict.action == "present":  # the same command under another id: the projections would fold it again
            problems.append(_copy_of(verdict.original, event.envelope.idempotency_key))
        else:
            refused = [p for p in verdict.problems if p.code not in KEPT_ALWAYS] if verdict.action == "refuse" else []
            if not refused and lines is not None:
                line = lines[index]
                doc = json.loads(line) if isinstance(line, str) else line
                refused = list(content_problems(doc, event, state, partitions, trees, trusted))
            problems.extend(refused)
            if not refused:
                state.apply(event)
                certified.note(event)
        if problems:
            found.append((index, tuple(problems)))
            continue
        newest = event.recorded_at if newest is None else max(newest, event.recorded_at)
        written.add(event.event_id)
        if trees is not None:
            trees.written(event.key, journal.codec.encode(event))
    return Judged(found, held_at)


def _copy_of(original: str, key: str) -> Problem:
    return Problem("idempotency_key", "ALREADY_RECORDED",
                   f"the log holds this command as event {original} (key {key!r}); a copy under another event id is "
                   "not a retry the intake would take: the tallies would fold it again, over what came after it "
                   "(a correction, a redefinition)")


def _id_taken(event_id: str) -> Problem:
    return Problem("event_id", "EVENT_ID_CONFLICT", f"event id {event_id} is already taken by an event of other "
                   "content; the log keeps one event per id, so this one would be lost")


class _CertificationOrder:
    """A certification covers the results recorded before it, by their times (they sit in other
    partitions), so a direct write may not date either side across the other: a certification dated
    before results the log (or a line before it) holds would leave them uncovered, though they were there
    first; a result dated before a certification already there would read as covered, though it came
    after. The minute of clock skew a direct write may have elsewhere is none here."""

    def __init__(self) -> None:
        self.results: dict[str, datetime] = {}  # by election: the newest result's time
        self.certified: dict[str, datetime] = {}  # by election: the newest certification's time

    def note(self, event: Event[Any]) -> None:
        kept = self._kind(event)
        if kept is not None:
            eid = event.envelope.election_id
            kept[eid] = max(kept.get(eid, event.recorded_at), event.recorded_at)

    def _kind(self, event: Event[Any]) -> dict[str, datetime] | None:
        if isinstance(event.payload, (ResultReported, ResultCorrected)):
            return self.results
        if isinstance(event.payload, ResultsCertified) and not event.unit_id:
            return self.certified
        return None

    def problems(self, event: Event[Any]) -> tuple[Problem, ...]:
        kind, eid, at = self._kind(event), event.envelope.election_id, event.recorded_at
        if kind is self.certified and eid in self.results and at < self.results[eid]:
            return (Problem("recorded_at", "CERTIFIED_BEFORE_RESULTS",
                            f"{at.isoformat()} is before {self.results[eid].isoformat()}, when the newest result of election "
                            f"{eid!r} the log holds (or a line before it) was recorded: the certification would not cover "
                            "results that were in the log before it"),)
        if kind is self.results and eid in self.certified and at < self.certified[eid]:
            return (Problem("recorded_at", "RECORDED_BEFORE_CERTIFICATION",
                            f"{at.isoformat()} is before {self.certified[eid].isoformat()}, when election {eid!r} was "
                            "certified: a result appended after the certification would read as covered by it; a result "
                            "after certification is recorded as such, dated now"),)
        return ()


def _time_problems(recorded_at: datetime, newest: datetime | None, now: datetime) -> tuple[Problem, ...]:
    if newest is not None and recorded_at < newest - TOLERANCE:
        return (Problem("recorded_at", "RECORDED_OUT_OF_ORDER",
                        f"{recorded_at.isoformat()} is before {newest.isoformat()}, the newest record of the log and of the "
                        f"lines before it, by more than {int(TOLERANCE.total_seconds())} s: a direct write may not backdate "
                        "an event"),)
    if recorded_at > now:
        return (Problem("recorded_at", "RECORDED_IN_FUTURE",
                        f"{recorded_at.isoformat()} is after now ({now.isoformat()}): a direct write may not postdate an "
                        "event (records appended after it would be dated before it, and a restore, which reads the log "
                        "in time order, would judge them before it)"),)
    return ()
