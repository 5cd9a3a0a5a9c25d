"""The Kafka adapter: the log as one topic, keyed by reporting unit (kafka-python).

Kafka's own rules are in ``KafkaLog`` (``_log.py``). Tansu, the broker used in development, answers some
requests differently from Kafka (DESIGN.md, "the broker and its quirks"); each workaround has one home,
whose docstring says what it works around and what to remove on a real Kafka:

- ``_topic_guard.py``: a topic is auto-created with 4 partitions as soon as any client names it, and a
  restarted broker forgets every topic: the topic is checked before a consumer or producer touches it,
  and put back when a restarted broker re-created it on its own.
- ``_watermarks.py``: ListOffsets (``end_offsets``, ``seek_to_end``, ``offsets_for_times``) answers wrongly:
  high watermarks come from fetch responses.
- ``_producer.py``: the broker refuses the idempotent producer's epoch bump after a restart: the
  producer is replaced and the failed records sent again.
- ``_recent_ids.py``: transactions cannot give exactly-once (aborted records are delivered): appends
  are deduped by event id, trusting a remembered position only while the log still holds it.

The rest: ``_topics.py`` creates topics explicitly and checks their partition count; ``_client.py``
passes an operator's client properties to every client and keeps the ones the ledger owns; ``_identity.py``
keeps the log's id in the ``<topic>.meta`` topic; ``_group.py`` positions a group consumer from the store.
"""

from ledger.log.kafka._client import KNOWN, OWNED, normalise_options
from ledger.log.kafka._group import SeekToStored
from ledger.log.kafka._identity import META_SUFFIX, meta_topic
from ledger.log.kafka._log import DEFAULT_PARTITIONS, KafkaLog
from ledger.log.kafka._topics import TopicError, TopicPartitionMismatch, provision_topic, topic_partitions

__all__ = [
    "DEFAULT_PARTITIONS",
    "KNOWN",
    "META_SUFFIX",
    "OWNED",
    "KafkaLog",
    "SeekToStored",
    "TopicError",
    "TopicPartitionMismatch",
    "meta_topic",
    "normalise_options",
    "provision_topic",
    "topic_partitions",
]
