"""Headers on every record: what a record is, for tools that do not decode Avro.

A Kafka operator's tools (kcat, a mirror, a dead-letter router, a lag monitor) see headers without
the schema catalogue, so each record says what it holds: its event type, the writer schema's
fingerprint (the same 8 bytes the single-object encoding carries, as hex), the election and unit it
belongs to, the content type, and who wrote it to the log (the intake's actor for commands, the
importer, or the official who appended it directly). The record's value stays the only truth: the
headers are derived from it (the writer excepted) and nothing reads them back to decide anything.
"""

from __future__ import annotations

from typing import Any

from ledger.codec import MAGIC
from ledger.events import Event
from ledger.log.port import Headers

__all__ = ["CONTENT_TYPE", "DERIVED", "WRITER", "UNPUBLISHED_IMPORT", "event_headers", "header_map", "writer_of",
           "is_direct_writer", "is_imported_history"]

CONTENT_TYPE = "application/vnd.caucus.event+avro; encoding=single-object"
EVENT_TYPE, FINGERPRINT, ELECTION, UNIT, CONTENT, WRITER = (
    "caucus-event-type", "caucus-schema-fingerprint", "caucus-election", "caucus-unit", "content-type", "caucus-writer",
)
DERIVED = frozenset({EVENT_TYPE, FINGERPRINT, ELECTION, UNIT, CONTENT})
"""Headers that say again what the record's value says: a log that stores records itself (the embedded
one) need not keep them; only the writer is not in the value."""


def event_headers(event: Event[Any], value: bytes, writer: str = "") -> Headers:
    """The headers of one encoded event (``value`` as the codec wrote it)."""
    env = event.envelope
    fingerprint = value[len(MAGIC) : len(MAGIC) + 8].hex() if value.startswith(MAGIC) else ""
    headers: list[tuple[str, bytes]] = [
        (EVENT_TYPE, event.type.encode()),
        (FINGERPRINT, fingerprint.encode()),
        (ELECTION, env.election_id.encode()),
        (UNIT, env.unit_id.encode()),
        (CONTENT, CONTENT_TYPE.encode()),
    ]
    if writer:
        headers.append((WRITER, writer.encode()))
    return tuple(headers)


def header_map(headers: Headers) -> dict[str, str]:
    """Headers as text, for printing (a repeated name keeps its last value)."""
    return {name: value.decode("utf-8", errors="replace") for name, value in headers}


def writer_of(headers: Headers) -> str:
    """Who wrote a record to the log, from its ``caucus-writer`` header ("" for a record without one)."""
    return header_map(headers).get(WRITER, "")


UNPUBLISHED_IMPORT = "import-of-unpublished-files:"
"""The writer prefix of records the importer took from files that are not the published ones: direct
writes (``is_direct_writer``), of a history whose times are its own (``is_imported_history``)."""


def is_imported_history(writer: str) -> bool:
    """Whether ``writer`` is an importer: its records carry the times of the history it imports, which
    are no clock of this ledger's to judge."""
    return writer.startswith(("importer:", UNPUBLISHED_IMPORT))


def is_direct_writer(writer: str) -> bool:
    """Whether ``writer`` put its record on the log without the intake's checks: an official's
    ``caucus log append`` or ``caucus simulate write``, not the intake (``system:``) nor the importer
    of the published releases (an import of other files names itself otherwise, and is one). The
    event's actor is then only what the writer typed, so the trail shows the writer beside it and the
    audit names the record."""
    return bool(writer) and not writer.startswith(("system:", "importer:"))
