"""Create the ledger's topics explicitly and check their partition count.

Why: events are keyed by reporting unit, and a unit's partition is ``hash(key) % partitions``; a topic with
another partition count sends the same precinct elsewhere. Auto-created topics get the broker's default
(4 on Tansu), so topics are always created here, "already exists" is fine, and the count is verified.
``retention.ms=-1`` asks for infinite retention (the log is the system of record); brokers that ignore
topic configs, like Tansu, keep everything in memory anyway.

Uses the kafka-python 3 admin API (topics passed as a dict).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError, TopicAlreadyExistsError, for_code

__all__ = ["TopicError", "TopicPartitionMismatch", "provision_topic", "topic_partitions"]

_UNKNOWN_TOPIC_OR_PARTITION = 3
_LEADER_NOT_AVAILABLE = 5
_METADATA_WAIT_S = 5.0


class TopicError(RuntimeError):
    """A topic is missing or could not be described."""


class TopicPartitionMismatch(TopicError):
    """The topic exists with another partition count than the one the ledger needs."""


@contextmanager
def _admin(bootstrap: str, client_options: Mapping[str, Any] | None = None) -> Iterator[KafkaAdminClient]:
    """An admin client; ``client_options`` are the cluster's client properties (security, SASL, TLS),
    already checked by ``normalise_options`` (``_client.py``)."""
    known = KafkaAdminClient.DEFAULT_CONFIG
    options = {k: v for k, v in (client_options or {}).items() if k in known}
    admin = KafkaAdminClient(**{"client_id": "caucus-infra", **options, "bootstrap_servers": bootstrap})
    try:
        yield admin
    finally:
        admin.close()


def _describe_partitions(admin: KafkaAdminClient, name: str, wait_s: float) -> int:
    """Partition count from metadata, retrying briefly while a new topic propagates (real clusters)."""
    deadline = time.monotonic() + wait_s
    while True:
        (topic,) = admin.describe_topics([name])
        code = topic["error_code"]
        if code == 0 and topic["partitions"]:
            return len(topic["partitions"])
        if code not in (0, _UNKNOWN_TOPIC_OR_PARTITION, _LEADER_NOT_AVAILABLE) or time.monotonic() >= deadline:
            if code == _UNKNOWN_TOPIC_OR_PARTITION:
                raise TopicError(f"topic {name!r} does not exist")
            raise TopicError(f"cannot describe topic {name!r}: {for_code(code).__name__} (error code {code})")
        time.sleep(0.1)


def topic_partitions(bootstrap: str, name: str, *, client_options: Mapping[str, Any] | None = None) -> int:
    """The partition count of an existing topic; TopicError if it does not exist (it is not auto-created)."""
    with _admin(bootstrap, client_options) as admin:
        return _describe_partitions(admin, name, wait_s=0.0)


def provision_topic(
    bootstrap: str, name: str, partitions: int = 8, replication: int = 1, *, client_options: Mapping[str, Any] | None = None,
    configs: Mapping[str, str] | None = None,
) -> int:
    """Create ``name`` with ``partitions`` partitions unless it exists, check the count, return it.
    ``configs`` are topic configs given at creation (e.g. ``cleanup.policy=compact``), beside
    ``retention.ms=-1``; a topic that exists keeps its own.

    Idempotent. Raises TopicPartitionMismatch, naming both counts, if the topic exists with another count.
    """
    if partitions < 1 or replication < 1:
        raise ValueError(f"partitions and replication must be >= 1 (got {partitions}, {replication})")
    spec = {name: {"num_partitions": partitions, "replication_factor": replication,
                   "configs": {"retention.ms": "-1", **(configs or {})}}}
    with _admin(bootstrap, client_options) as admin:
        try:
            admin.create_topics(spec)
        except TopicAlreadyExistsError:
            pass
        except KafkaError as exc:
            raise TopicError(f"cannot create topic {name!r} on {bootstrap}: {exc}") from exc
        actual = _describe_partitions(admin, name, wait_s=_METADATA_WAIT_S)
    if actual != partitions:
        raise TopicPartitionMismatch(
            f"topic {name!r} on {bootstrap} has {actual} partitions, but {partitions} are required; "
            f"events keyed by unit would land in other partitions. Recreate the topic with {partitions} "
            f"partitions (or point the ledger at a topic that has them); it was not changed."
        )
    return actual
