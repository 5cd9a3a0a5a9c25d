"""Publish the event log's signed checkpoints on the results feed (see ``feed_checkpoint_events``).

Who publishes: ``caucus checkpoint``, right after it signed and recorded one. The checkpoint is
already in the log and its store by then, so a feed that is away costs a warning, never the
checkpoint. At least once: each run publishes every checkpoint it knows of that the feed does not
hold yet, so one missed while the feed was away goes out with the next. To know what the feed holds
it reads only the one partition checkpoints go to (they all share the key ``election:``), and
decodes only the records of the checkpoint type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ledger.config import Settings
from ledger.integrity.checkpoints import SignedCheckpoint
from ledger.log.partitioning import partition_for
from ledger.log.port import EventLog, LogError, PendingRecord
from ledger.record_headers import event_headers
from projections.feed import open_results_log, results_log_name
from projections.feed_checkpoint_events import ACTOR, CheckpointPublished, checkpoint_feed_event
from projections.feed_events import feed_codec

__all__ = ["FeedOutcome", "published_checkpoint_ids", "publish_checkpoints", "publish_on_feed"]

CHECKPOINT_KEY = "election:"


@dataclass(frozen=True, slots=True)
class FeedOutcome:
    """What publishing did: how many checkpoints went out, where, and why none did (if so)."""

    published: int
    feed: str
    error: str | None = None


def published_checkpoint_ids(log: EventLog, log_id: str) -> set[str]:
    """The ``CheckpointSigned`` event ids of the checkpoints of ``log_id`` the feed already holds."""
    codec = feed_codec()
    fingerprints = {info.fingerprint for info in codec.schemas() if info.type == CheckpointPublished.TYPE}
    part = partition_for(CHECKPOINT_KEY, log.partitions)
    start = {p: mark for p, mark in log.high_watermarks().items() if p != part}
    held: set[str] = set()
    for rec in log.read(start):
        if rec.position.partition != part or rec.value[2:10] not in fingerprints:
            continue
        payload = codec.decode(rec.value).payload
        if isinstance(payload, CheckpointPublished) and payload.log_id == log_id:
            held.add(payload.checkpoint_event_id)
    return held


def publish_checkpoints(log: EventLog, checkpoints: Sequence[SignedCheckpoint], log_id: str) -> int:
    """Append the checkpoints the feed does not hold yet, oldest first; returns how many."""
    held = published_checkpoint_ids(log, log_id)
    unique = {s.event_id: s for s in checkpoints if s.event_id and s.event_id not in held}
    missing = sorted(unique.values(), key=lambda s: (s.checkpoint.tree_size, s.checkpoint.timestamp_micros))
    codec = feed_codec()
    records = []
    for signed in missing:
        event = checkpoint_feed_event(signed, log_id)
        value = codec.encode(event)
        records.append(PendingRecord(event.key, event.event_id, value, event_headers(event, value, ACTOR)))
    if records:
        log.append_batch(records)
    return len(records)


def publish_on_feed(settings: Settings, checkpoints: Sequence[SignedCheckpoint], log_id: str) -> FeedOutcome:
    """Open the results feed and publish; a feed that cannot be reached is reported, not raised."""
    name = results_log_name(settings)
    try:
        log = open_results_log(settings)
    except (LogError, OSError) as exc:
        return FeedOutcome(0, name, str(exc))
    try:
        return FeedOutcome(publish_checkpoints(log, checkpoints, log_id), name)
    except (LogError, OSError) as exc:
        return FeedOutcome(0, name, str(exc))
    finally:
        log.close()
