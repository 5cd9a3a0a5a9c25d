"""Client settings for a production Kafka cluster: security, SASL, TLS, and any other client property.

The ledger builds three kinds of kafka-python clients (producer, consumer, admin) and sets the
properties its guarantees rest on itself (idempotence, acks, manual offsets, no topic
auto-creation). Everything else an operator's cluster may need (``security_protocol``,
``sasl_mechanism``, ``ssl_cafile``, timeouts, ``client_id``...) comes from the configuration and is
passed to each client that knows the property. A property no client knows, or one the ledger must
own, is refused when the configuration is read, naming it and saying why, rather than surfacing as a
``TypeError`` deep in a client constructor.

Property names are kafka-python's (``sasl_plain_username``); the Java client's dotted spelling
(``sasl.plain.username``) is accepted and translated.

``Endpoint`` is where a log lives and how long any wait may take: every client call goes through
``Endpoint.call``, so an unreachable broker is always a LogUnavailableError naming the bootstrap address,
and a property the client refuses is a LogError naming it, never a hang or a client's own exception.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import errors as kafka_errors

from ledger.log.port import LogError, LogUnavailableError

__all__ = ["OWNED", "normalise_options", "options_for", "KNOWN", "Endpoint", "UNREACHABLE_ERRORS"]

UNREACHABLE_ERRORS = (kafka_errors.KafkaTimeoutError, kafka_errors.KafkaConnectionError)

_T = TypeVar("_T")

KNOWN: frozenset[str] = frozenset(KafkaProducer.DEFAULT_CONFIG) | frozenset(KafkaConsumer.DEFAULT_CONFIG) | frozenset(
    KafkaAdminClient.DEFAULT_CONFIG
)

OWNED: Mapping[str, str] = {
    "bootstrap_servers": "give the cluster with `kafka` (--kafka, CAUCUS_KAFKA)",
    "group_id": "the projection runner's group is `caucus project --group`",
    "enable_auto_commit": "positions are committed with the projection, and mirrored to the group after each batch",
    "auto_offset_reset": "a position the broker no longer holds must be reported as a lost log, never skipped",
    "enable_idempotence": "appends rely on the idempotent producer",
    "acks": "an event is accepted only once every in-sync replica has it (acks=all)",
    "allow_auto_create_topics": "topics are created explicitly with the ledger's partition count",
    "key_serializer": "records are bytes the ledger encodes",
    "value_serializer": "records are bytes the ledger encodes",
    "key_deserializer": "records are bytes the ledger decodes",
    "value_deserializer": "records are bytes the ledger decodes",
    "partitioner": "the partition is chosen by the ledger (murmur2 of the unit id), the same as the embedded log",
    "kafka_client": "not a property that can be given as text",
    "selector": "not a property that can be given as text",
    "metric_reporters": "not a property that can be given as text",
    "ssl_context": "give ssl_cafile, ssl_certfile and ssl_keyfile instead",
    "sasl_oauth_token_provider": "not a property that can be given as text",
}


def normalise_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Client properties with kafka-python names; ValueError naming the first unusable one."""
    out: dict[str, Any] = {}
    for raw, value in options.items():
        name = str(raw).strip().replace(".", "_").replace("-", "_")
        if name in OWNED:
            raise ValueError(f"client property {raw!r} cannot be set: {OWNED[name]}")
        if name not in KNOWN:
            raise ValueError(f"client property {raw!r} is not a kafka-python client property (e.g. security_protocol, "
                             "sasl_mechanism, ssl_cafile, request_timeout_ms)")
        if isinstance(value, (dict, list)):
            raise ValueError(f"client property {raw!r} must be a single value, not {type(value).__name__}")
        out[name] = value
    return out


def options_for(client: type, options: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of ``options`` that ``client`` (KafkaProducer, KafkaConsumer, KafkaAdminClient) knows."""
    known = client.DEFAULT_CONFIG  # type: ignore[attr-defined]
    return {k: v for k, v in options.items() if k in known}


@dataclass(frozen=True)
class Endpoint:
    """A topic on a cluster and the bound on every wait (``timeout``, seconds): what errors name."""

    bootstrap: str
    topic: str
    timeout: float

    @property
    def ms(self) -> int:
        return int(self.timeout * 1000)

    def unavailable(self, what: str, exc: BaseException) -> LogUnavailableError:
        return LogUnavailableError(
            f"the Kafka broker at {self.bootstrap} is unavailable ({what}, topic {self.topic!r}, "
            f"timeout {self.timeout:g} s): {type(exc).__name__}: {exc}"
        )

    def call(self, what: str, fn: Callable[[], _T]) -> _T:
        """Run a client call, turning "cannot reach the broker" into LogUnavailableError and a client
        configuration the client refuses into LogError naming it."""
        try:
            return fn()
        except UNREACHABLE_ERRORS as exc:
            raise self.unavailable(what, exc) from exc
        except OSError as exc:
            raise self.unavailable(what, exc) from exc
        except (kafka_errors.KafkaConfigurationError, kafka_errors.UnsupportedVersionError, AssertionError) as exc:
            raise LogError(f"the Kafka client settings for {self.bootstrap} were refused ({what}): "
                           f"{type(exc).__name__}: {exc}") from exc
