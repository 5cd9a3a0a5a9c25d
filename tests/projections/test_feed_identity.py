"""A results feed has an id of its own, and a subscriber group resumes only on the feed it followed.

After a memory-only broker restarted empty, the results topic is made again and refilled by a replay;
a group's stored positions are then positions in another feed, and resuming from them skipped records
without a word. The feed, opened to publish, now gets an id as the event log does, and a group that
followed a feed with an id refuses one with another id or none (exit 3, as a lost log)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ledger.backends import backends_for
from ledger.config import Settings
from ledger.log.kafka import provision_topic
from projections.feed_subscribers import CheckpointMismatch, SubscriberCheckpoint


def test_a_kafka_results_feed_opened_to_publish_gets_an_id_readers_see(kafka_bootstrap: str, unique_topic: str,
                                                                       tmp_path: Path) -> None:
    settings = replace(Settings(data_dir=tmp_path), kafka=kafka_bootstrap, topic=unique_topic, partitions=4)
    provision_topic(kafka_bootstrap, unique_topic, 4)
    publisher = backends_for(settings).open_results_log()
    try:
        feed_id = publisher.log_id
    finally:
        publisher.close()
    assert feed_id is not None
    reader = backends_for(settings).open_results_log(read_only=True)
    try:
        assert reader.log_id == feed_id
    finally:
        reader.close()


def test_a_group_that_followed_a_feed_with_an_id_refuses_another_or_none(tmp_path: Path) -> None:
    checkpoint = SubscriberCheckpoint(tmp_path / "subscribers.sqlite3", "news")
    checkpoint.save("feed-1", {0: 11, 1: 12}, {("e", "unit", "P1"): 3})
    assert checkpoint.load("feed-1")[0] == {0: 11, 1: 12}
    for other in ("feed-2", None):
        with pytest.raises(CheckpointMismatch, match="another results feed"):
            checkpoint.load(other)
