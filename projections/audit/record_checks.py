"""Audit findings about how records reached the log, not what they say: written without the intake, or
dated before records the log already held.

Why: the §12 checks read the results, and a result an official appended directly (``caucus log
append``, ``caucus simulate write``) looks like any other to them, under whatever actor the official
typed. Its record's ``caucus-writer`` header names who wrote it, so the audit lists every such record
(``DIRECT_WRITE``: info when the actor is the writer, warn when the event names someone else). And
``recorded_at`` orders history for as-of reads and the trail: an event whose ``recorded_at`` lies
before that of records appended earlier, by more than ``TOLERANCE``, rewrote the past
(``RECORDED_OUT_OF_ORDER``: warn for a direct write; info for the intake's, whose only such records
are spooled while the log was out of reach and forwarded later). Appended earlier means by the log's
own append time where it keeps one (``timestamp_ms`` > 0), across partitions, and by offset within a
partition always. The importer's records are left out of both: it writes the published releases'
own times into a log of today, and anyone can check them against the releases (all three checks leave
them out).

And an event cannot have happened after it was recorded: an ``occurred_at`` later than its
``recorded_at`` by more than a sender's clock may run ahead (``CLOCK_SKEW``) is ``OCCURRED_AFTER_RECORDED``
(warn). The intake refuses such a command (IN_THE_FUTURE), so only a direct write or a log from before
that rule holds one; the trail orders a unit's events by these times.

And a correction or a redraw cannot have been recorded before the result or toss it supersedes: a read
as of a time in between would show the replacement of something the ledger did not yet hold
(``RECORDED_BEFORE_SUPERSEDED``, warn). The intake stamps the time of acceptance, so only a direct
write dated back within the tolerance holds one; ``log append`` keeps it, so that such a log restores.

And a record whose ``caucus-writer`` claims the intake or the importer (or names no writer) is taken
as checked by them: ``FORGED_WRITER`` (error) names one that no seal by a trusted key vouches for,
once the log holds such seals (``ledger.integrity.writer_seals``; ``caucus verify`` says the same).

The checks read the log itself, the whole of it, whatever the audit's source (the projection, a cut
of the log): a backdated record matters precisely to a read as of an earlier time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ledger.codec import Codec, default_codec
from ledger.event_values import CLOCK_SKEW
from ledger.events import CheckpointSigned, Event, ResultCorrected, ResultReported, TieBroken
from ledger.integrity.keys import TrustedKey
from ledger.integrity.writer_seals import forged_writers
from ledger.log.port import EventLog, StoredRecord
from ledger.record_headers import is_direct_writer, is_imported_history, writer_of
from projections.audit.checks import AuditFinding
from projections.tally import ElectionContext

__all__ = ["RECORD_CODES", "TOLERANCE", "record_findings", "log_record_findings"]

RECORD_CODES: tuple[str, ...] = ("DIRECT_WRITE", "RECORDED_OUT_OF_ORDER", "OCCURRED_AFTER_RECORDED",
                                  "RECORDED_BEFORE_SUPERSEDED", "FORGED_WRITER")

_REPLACEABLE = (ResultReported, ResultCorrected, TieBroken)

TOLERANCE = timedelta(seconds=60)
"""Clocks of the machines that wrote a log differ a little: a record dated this much before the newest
one appended earlier is not a finding."""


def log_record_findings(log: EventLog, ctx: ElectionContext, codec: Codec | None = None,
                        trusted: Sequence[TrustedKey] | None = None) -> list[AuditFinding]:
    """The findings of ``record_findings`` over every record ``log`` holds now."""
    codec = codec or default_codec()
    marks = log.high_watermarks()
    records = [r for r in log.read({}) if r.position.offset < marks.get(r.position.partition, 0)]
    return record_findings(((r, codec.decode(r.value)) for r in records), ctx, trusted)


def record_findings(records: Iterable[tuple[StoredRecord, Event[Any]]], ctx: ElectionContext,
                    trusted: Sequence[TrustedKey] | None = None) -> list[AuditFinding]:
    """The ``RECORD_CODES`` findings for the events of ``ctx``'s election.

    A record is held to the records before it in its partition and to those the log appended at a
    strictly earlier time: records appended in the same millisecond (one batch) have no order across
    partitions. ``trusted``: the keys that check writer seals (None: none at hand, see ``forged_writers``)."""
    ordered = sorted(records, key=lambda item: (max(item[0].timestamp_ms, 0), item[0].position))
    found = _forged(ordered, ctx, trusted)
    by_partition: dict[int, datetime] = {}
    earlier: datetime | None = None  # the newest recorded_at appended before the current millisecond
    this_ms: datetime | None = None  # ... and within it
    ms = -1
    replaceable: dict[str, datetime] = {}  # results and tosses, by event id: when recorded
    for rec, event in ordered:
        replaced = replaceable.get(getattr(event.payload, "supersedes", "") or "")
        if isinstance(event.payload, _REPLACEABLE):
            replaceable[event.event_id] = event.envelope.recorded_at
        if rec.timestamp_ms > 0 and rec.timestamp_ms != ms:
            ms, earlier = rec.timestamp_ms, _newer(earlier, this_ms)
            this_ms = None
        env = event.envelope
        writer = writer_of(rec.headers)
        imported = writer.startswith("importer:")
        history = is_imported_history(writer)  # its times are the history's, not this ledger's clock
        before = _newer(by_partition.get(rec.position.partition), earlier if rec.timestamp_ms > 0 else None)
        if env.election_id == ctx.election_id and not imported:
            found.extend(_findings_of(ctx, rec, event, writer, None if history else before, times=not history))
            if replaced is not None and env.recorded_at < replaced and not history:
                found.append(_before_superseded(ctx, rec, event, writer, replaced))
        if not history:
            by_partition[rec.position.partition] = _newer(by_partition.get(rec.position.partition), env.recorded_at) \
                or env.recorded_at
            if rec.timestamp_ms > 0:
                this_ms = _newer(this_ms, env.recorded_at)
    return found


def _forged(ordered: Sequence[tuple[StoredRecord, Event[Any]]], ctx: ElectionContext,
            trusted: Sequence[TrustedKey] | None) -> list[AuditFinding]:
    """``FORGED_WRITER``: a record of this election whose writer no trusted seal vouches for."""
    at = {rec.position: (rec, event) for rec, event in ordered}
    claims = ((rec.position, rec.headers, rec.value) for rec, event in ordered if not isinstance(event.payload, CheckpointSigned))
    found = []
    for forged in forged_writers(claims, trusted):
        rec, event = at[forged.position]
        if event.envelope.election_id == ctx.election_id:
            found.append(_finding(ctx, rec, event, "FORGED_WRITER", "error", "a seal by a trusted key",
                                  forged.problem, f"{event.type} {event.event_id}: {forged.message}"))
    return found


def _newer(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else max(a, b)


def _findings_of(ctx: ElectionContext, rec: StoredRecord, event: Event[Any], writer: str,
                 before: datetime | None, *, times: bool = True) -> list[AuditFinding]:
    env = event.envelope
    found: list[AuditFinding] = []
    if is_direct_writer(writer):
        severity = "info" if writer == env.actor else "warn"
        found.append(_finding(ctx, rec, event, "DIRECT_WRITE", severity, "the intake", writer,
                              f"{event.type} {event.event_id} was written to the log directly by {writer}, not "
                              f"through the intake; its actor {env.actor!r} is what the writer gave"))
    if before is not None and env.recorded_at < before - TOLERANCE:
        severity = "warn" if is_direct_writer(writer) else "info"
        found.append(_finding(ctx, rec, event, "RECORDED_OUT_OF_ORDER", severity,
                              f"at or after {before.isoformat()}", env.recorded_at.isoformat(),
                              f"{event.type} {event.event_id} at {rec.position} is recorded at "
                              f"{env.recorded_at.isoformat()}, before {before.isoformat()}, the newest record "
                              f"appended ahead of it: reads as of a time in between see it, though it was not "
                              f"in the log then (written by {writer or 'an unnamed writer'})"))
    if times and env.occurred_at > env.recorded_at + CLOCK_SKEW:
        found.append(_finding(ctx, rec, event, "OCCURRED_AFTER_RECORDED", "warn",
                              f"at or before {(env.recorded_at + CLOCK_SKEW).isoformat()}", env.occurred_at.isoformat(),
                              f"{event.type} {event.event_id} at {rec.position} says it occurred at "
                              f"{env.occurred_at.isoformat()}, after it was recorded ({env.recorded_at.isoformat()}; "
                              f"a sender's clock may run {int(CLOCK_SKEW.total_seconds() // 60)} minutes ahead): "
                              f"the intake refuses such a time (written by {writer or 'an unnamed writer'})"))
    return found


def _before_superseded(ctx: ElectionContext, rec: StoredRecord, event: Event[Any], writer: str,
                       replaced: datetime) -> AuditFinding:
    env = event.envelope
    return _finding(ctx, rec, event, "RECORDED_BEFORE_SUPERSEDED", "warn", f"at or after {replaced.isoformat()}",
                    env.recorded_at.isoformat(),
                    f"{event.type} {event.event_id} at {rec.position} is recorded at {env.recorded_at.isoformat()}, "
                    f"before {replaced.isoformat()}, when {event.payload.supersedes}, which it supersedes, was recorded: "
                    f"reads as of a time in between show a replacement of what the ledger did not yet hold "
                    f"(written by {writer or 'an unnamed writer'})")


def _finding(ctx: ElectionContext, rec: StoredRecord, event: Event[Any], code: str, severity: str, expected: str,
             reported: str, message: str) -> AuditFinding:
    unit = ctx.units.get(event.unit_id)
    county_id = unit.county_id if unit is not None else None
    county = ctx.counties.get(county_id or "")
    return AuditFinding(
        unit_id=event.unit_id,
        unit_name=unit.name if unit is not None else None,
        county_id=county_id,
        county_name=county.name if county is not None else county_id,
        satellite=unit.is_satellite if unit is not None else False,
        status=f"record {rec.position}",
        result_event_id=event.event_id,
        code=code,
        severity=severity,
        message=message,
        candidate=None,
        expected=expected,
        reported=reported,
        likely_cause=_likely_cause(code, writer_of(rec.headers)),
    )


def _likely_cause(code: str, writer: str) -> str:
    if code == "FORGED_WRITER":
        return "a record put in the log by someone able to write its file or topic, under the intake's or importer's name"
    if code == "DIRECT_WRITE" or is_direct_writer(writer):
        return "a direct write (caucus log append or caucus simulate write)"
    if code == "RECORDED_BEFORE_SUPERSEDED":
        return "a direct write dated back within the clock tolerance (caucus log append)"
    if code == "OCCURRED_AFTER_RECORDED":
        return "a sender's clock far ahead, accepted by an intake from before it refused IN_THE_FUTURE"
    return "an event spooled while the log was out of reach, forwarded later"
