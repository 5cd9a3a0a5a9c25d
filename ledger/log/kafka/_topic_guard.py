"""Keeping the log's topic there, with the ledger's partition count, before any client names it.

The quirks it works around (DESIGN.md): Tansu creates a missing topic with 4 partitions as soon as a
client names it (produce, fetch, metadata for that topic), even when the client says not to, and a
restarted Tansu has forgotten every topic. So ``ensure`` runs before a consumer or a new producer
touches the topic (one metadata round trip, about 1 ms, when all is well), creates it when it is
missing, and a topic this instance knew that comes back with fewer partitions and no records is
deleted and provisioned again (``_recreated_after_loss``: Kafka never removes partitions, so it can
only be a re-creation).

On a real Kafka with ``auto.create.topics.enable=false`` and durable storage, ``ensure`` is needed once,
when the log is opened, and ``_recreated_after_loss`` never finds anything to do: both the calls before
each consumer and the re-creation can be removed there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka import KafkaAdminClient
from kafka import errors as kafka_errors

from ledger.log.kafka._client import Endpoint
from ledger.log.kafka._topics import TopicError, TopicPartitionMismatch, provision_topic
from ledger.log.port import LogError, LogMissingError

__all__ = ["TopicGuard"]

_UNKNOWN_TOPIC_OR_PARTITION = 3
_LEADER_NOT_AVAILABLE = 5

log = logging.getLogger("ledger.log.kafka")


class TopicGuard:
    """The admin client of one log and what it knows of the log's topic.

    ``probe_marks(count)`` is the high watermark of each of the first ``count`` partitions, read from
    offset 0 (a fetch snapshot); ``drop_producer()`` lets go of the log's idle producer, the client
    that keeps a lost topic in its metadata and so keeps making the broker re-create it."""

    def __init__(
        self,
        endpoint: Endpoint,
        admin: KafkaAdminClient,
        *,
        partitions: int,
        replication: int,
        client_options: Mapping[str, Any],
        read_only: bool,
        probe_marks: Callable[[int], dict[int, int]],
        drop_producer: Callable[[], None],
        topic_configs: Mapping[str, str] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.admin = admin
        self.admin_lock = threading.Lock()
        self._partitions = partitions
        self._replication = replication
        self._client_options = client_options
        self._read_only = read_only
        self._probe_marks = probe_marks
        self._drop_producer = drop_producer
        self._topic_configs = dict(topic_configs or {})
        self._verified = False  # this instance has seen the topic with our partition count

    def close(self) -> None:
        try:
            self.admin.close()
        except Exception:  # noqa: BLE001 -- closing a client to a vanished broker must not raise
            pass

    def _provision(self) -> None:
        provision_topic(self.endpoint.bootstrap, self.endpoint.topic, self._partitions, self._replication,
                        client_options=self._client_options, configs=self._topic_configs)

    def ensure(self) -> None:
        """Check the topic exists with our partition count; create it if it is missing."""
        topic, bootstrap = self.endpoint.topic, self.endpoint.bootstrap
        for _attempt in range(3):
            desc = self._describe_topic()
            code = desc["error_code"]
            count = len(desc["partitions"] or [])
            if code == 0 and count == self._partitions:
                self._verified = True
                return
            if code == 0 and count:
                if self._recreated_after_loss(count):
                    return
                raise LogError(
                    f"topic {topic!r} on {bootstrap} has {count} partitions, not {self._partitions}: "
                    f"events keyed by unit would land in other partitions. A topic the ledger created with "
                    f"--partitions {count} needs that setting on every command (CAUCUS_PARTITIONS={count}); if a "
                    f"broker that lost its data auto-created the topic, delete it and let the ledger create it again."
                )
            if code not in (0, _UNKNOWN_TOPIC_OR_PARTITION, _LEADER_NOT_AVAILABLE):
                raise LogError(f"cannot describe topic {topic!r} on {bootstrap}: error code {code}")
            if self._read_only:
                raise LogMissingError(
                    f"no topic {topic!r} on {bootstrap}: nothing has been recorded there yet, or "
                    "--topic / CAUCUS_TOPIC names another topic (a reader does not create it)"
                )
            try:
                self._provision()
                log.info("created topic %r on %s with %d partitions", topic, bootstrap, self._partitions)
                self._verified = True
                return
            except TopicPartitionMismatch:
                continue  # a client made the broker auto-create it meanwhile: look again
            except (TopicError, kafka_errors.KafkaError, OSError) as exc:
                raise self.endpoint.unavailable("create topic", exc) from exc
        raise LogError(
            f"topic {topic!r} on {bootstrap} keeps being created with another partition count "
            f"than {self._partitions} while the ledger provisions it"
        )

    def _recreated_after_loss(self, count: int) -> bool:
        """Put back a topic that a restarted broker re-created on its own, if that is provably what
        happened: this instance saw it with our partition count, now it has fewer and holds nothing.
        Tansu re-creates a lost topic with 4 partitions as soon as an idle producer, which keeps the
        topic in its metadata, reconnects; without this the producer could never recover."""
        if not self._verified or count >= self._partitions or self._read_only:
            return False
        if any(self._probe_marks(count).values()):
            return False
        # Our own idle producer is the client that keeps re-creating the topic (its metadata names it):
        # let it go first; the next append makes a new one.
        self._drop_producer()
        deadline = time.monotonic() + self.endpoint.timeout
        while True:
            try:
                with self.admin_lock:
                    self.admin.delete_topics([self.endpoint.topic], timeout_ms=self.endpoint.ms, raise_errors=False)
                self._provision()
                log.warning("topic %r on %s came back with %d partitions and no records (the broker lost it); "
                            "created it again with %d", self.endpoint.topic, self.endpoint.bootstrap, count,
                            self._partitions)
                return True
            except TopicPartitionMismatch:
                if time.monotonic() > deadline:  # a client keeps re-creating it
                    return False
            except (TopicError, kafka_errors.KafkaError, OSError) as exc:
                raise self.endpoint.unavailable("re-create topic", exc) from exc

    def _describe_topic(self) -> dict[str, Any]:
        """Topic metadata, retrying while the admin client reconnects (after a broker restart its first
        request fails with NodeNotReadyError); LogUnavailableError once ``timeout`` has passed."""
        deadline = time.monotonic() + self.endpoint.timeout
        delay = 0.01
        while True:
            try:
                with self.admin_lock:
                    (desc,) = self.admin.describe_topics([self.endpoint.topic])
                return desc  # type: ignore[no-any-return]
            except (kafka_errors.RetriableError, kafka_errors.NodeNotReadyError, OSError) as exc:
                if time.monotonic() + delay > deadline:
                    raise self.endpoint.unavailable("describe topic", exc) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
