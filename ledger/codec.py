"""Avro single-object encoding of events.

Every record is ``C3 01`` + the writer schema's 8-byte CRC-64-AVRO fingerprint (little endian) + the
Avro body. A consumer therefore never needs to be told which schema wrote a record: it looks the
fingerprint up, and fastavro resolves that writer schema to the consumer's reader schema, so events
written by an older or newer producer still decode. Schemas are parsed once, when the catalogue is
loaded; the hot path is a dictionary lookup and one call of a reader compiled for the writer schema.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from importlib import resources
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from ledger.avro_reader import NotCompiled, compile_reader
from ledger.deferred_event import DeferredEvent
from ledger.event_build import builders_for
from ledger.events import PAYLOAD_TYPES, Channel, Envelope, Event, Payload

__all__ = ["MAGIC", "CodecError", "SchemaInfo", "Codec", "default_codec", "load_catalogue"]

MAGIC = b"\xc3\x01"
NAMESPACE = "caucus.v1"


class CodecError(ValueError):
    """Bytes that are not an event this catalogue knows, with the reason spelled out."""


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    type: str
    version: int
    fingerprint: bytes
    parsed: Any
    canonical: str


def _expand(node: Any, named: Mapping[str, Any], seen: set[str]) -> Any:
    """Inline shared named types (Envelope, Ratio, ...) at their first use, so each event schema
    stands alone and its fingerprint covers everything a reader needs."""
    if isinstance(node, str):
        full = node if "." in node else f"{NAMESPACE}.{node}"
        if full in named and full not in seen:
            seen.add(full)
            return _expand(named[full], named, seen)
        return node
    if isinstance(node, list):
        return [_expand(item, named, seen) for item in node]
    if isinstance(node, dict):
        if node.get("type") in ("record", "enum", "fixed") and "name" in node:
            name = node["name"] if "." in node["name"] else f"{node.get('namespace', NAMESPACE)}.{node['name']}"
            seen.add(name)
        return {k: (_expand(v, named, seen) if k in ("type", "fields", "items", "values") else v) for k, v in node.items()}
    return node


def load_catalogue(types: Mapping[str, Any] | None = None) -> dict[tuple[str, int], dict[str, Any]]:
    """Read every versioned .avsc shipped in ``ledger/schemas/v<N>/`` and expand shared types.

    Files whose name is not an event type (Envelope, Ratio, ...) are shared named types: a schema
    of version N may use the shared types of version N or, failing that, of an earlier version.
    ``types`` names the event types to return (default: the ledger's ``PAYLOAD_TYPES``; the results
    feed passes its own, see ``projections.feed_events``).
    """
    event_types = PAYLOAD_TYPES if types is None else types
    root = resources.files("ledger") / "schemas"
    versions = sorted(int(p.name[1:]) for p in root.iterdir() if p.name.startswith("v") and p.name[1:].isdigit())
    named: dict[str, Any] = {}
    schemas: dict[tuple[str, int], dict[str, Any]] = {}
    for version in versions:
        raw: dict[str, Any] = {}
        for path in (root / f"v{version}").iterdir():
            if path.name.endswith(".avsc"):
                raw[path.name[: -len(".avsc")]] = json.loads(path.read_text(encoding="utf-8"))
        for name, schema in raw.items():
            if name not in event_types:
                named[f"{NAMESPACE}.{name}"] = schema
        for name, schema in raw.items():
            if name in event_types:
                schemas[(name, version)] = _expand(schema, named, set())
    return schemas


class Codec:
    """Encodes events with the current schema of their type; decodes any registered writer version."""

    def __init__(
        self, schemas: Mapping[tuple[str, int], Mapping[str, Any]], *, payload_types: Mapping[str, type[Payload]] | None = None
    ) -> None:
        self._payload_types = PAYLOAD_TYPES if payload_types is None else payload_types
        self._by_fingerprint: dict[bytes, SchemaInfo] = {}
        self._reversed_fingerprint: dict[bytes, SchemaInfo] = {}
        self._writers: dict[str, SchemaInfo] = {}
        self._readers: dict[str, SchemaInfo] = {}
        self._compiled: dict[bytes, Callable[[bytes], Event[Any]] | None] = {}  # by marker + fingerprint
        self._heads: dict[bytes, tuple[str, Callable[[bytes], DeferredEvent]] | None] = {}  # the same, payload deferred
        for (type_name, version), schema in sorted(schemas.items()):
            self.register(type_name, version, schema)

    def register(self, type_name: str, version: int, schema: Mapping[str, Any], *, reader: bool | None = None) -> SchemaInfo:
        """Add a schema version. The highest version of a type is the one written and read into,
        unless ``reader`` says otherwise (an older service reading newer data)."""
        parsed = parse_schema(dict(schema))
        canonical = to_parsing_canonical_form(parsed)
        # fastavro gives the fingerprint's bytes little-endian already, the order the specification's
        # header uses (``"int"`` -> C3 01 8F 5C 39 3F 1A D5 75 72).
        fp = bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
        info = SchemaInfo(type_name, version, fp, parsed, canonical)
        existing = self._by_fingerprint.get(fp)
        if existing is not None and (existing.type, existing.version) != (type_name, version):
            raise CodecError(f"schema {type_name} v{version} has the same fingerprint as {existing.type} v{existing.version}")
        self._by_fingerprint[fp] = info
        self._reversed_fingerprint[fp[::-1]] = info  # records written before the byte order was fixed
        current = self._writers.get(type_name)
        if current is None or version >= current.version:
            self._writers[type_name] = info
        if reader or (reader is None and (type_name not in self._readers or version >= self._readers[type_name].version)):
            self._readers[type_name] = info
        self._compiled.clear()
        self._heads.clear()
        return info

    def use_reader(self, type_name: str, version: int) -> None:
        """Read ``type_name`` into the given registered version (for services on an older catalogue)."""
        for info in self._by_fingerprint.values():
            if info.type == type_name and info.version == version:
                self._readers[type_name] = info
                self._compiled.clear()
                self._heads.clear()
                return
        raise CodecError(f"no schema {type_name} v{version} is registered")

    def schemas(self) -> Iterable[SchemaInfo]:
        return self._by_fingerprint.values()

    def writer_for(self, type_name: str) -> SchemaInfo:
        try:
            return self._writers[type_name]
        except KeyError:
            raise CodecError(f"event type {type_name!r} is not in the catalogue") from None

    # -- records (dict level): what schema evolution is about ------------------------------------

    def encode_record(self, type_name: str, record: Mapping[str, Any], *, version: int | None = None) -> bytes:
        info = self.writer_for(type_name) if version is None else self._find(type_name, version)
        out = io.BytesIO()
        out.write(MAGIC)
        out.write(info.fingerprint)
        try:
            schemaless_writer(out, info.parsed, record)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise CodecError(f"{type_name} v{info.version} does not fit its schema: {exc}") from exc
        return out.getvalue()

    def decode_record(self, data: bytes) -> tuple[SchemaInfo, SchemaInfo, dict[str, Any]]:
        """Return (writer schema, reader schema, record resolved to the reader schema)."""
        if len(data) < 10:
            raise CodecError(f"record is {len(data)} bytes; an event needs at least 10 (marker, fingerprint, body)")
        if data[:2] != MAGIC:
            raise CodecError(f"record does not start with the Avro single-object marker C3 01 (found {data[:2].hex(' ').upper()})")
        writer = self._by_fingerprint.get(bytes(data[2:10])) or self._reversed_fingerprint.get(bytes(data[2:10]))
        if writer is None:
            raise CodecError(f"unknown schema fingerprint {bytes(data[2:10]).hex()}: written by a schema this catalogue does not have")
        reader = self._readers[writer.type]
        buf = io.BytesIO(data)
        buf.seek(10)
        try:
            record = schemaless_reader(buf, writer.parsed, reader.parsed if reader is not writer else None)
        except Exception as exc:  # fastavro raises many kinds on truncated or corrupt bodies
            raise CodecError(f"corrupt {writer.type} v{writer.version} body: {type(exc).__name__}: {exc}") from exc
        if buf.tell() != len(data):
            raise CodecError(f"corrupt {writer.type} v{writer.version} record: {len(data) - buf.tell()} trailing bytes")
        if not isinstance(record, dict):
            raise CodecError(f"corrupt {writer.type} record: body is not a record")
        return writer, reader, record

    def _find(self, type_name: str, version: int) -> SchemaInfo:
        for info in self._by_fingerprint.values():
            if info.type == type_name and info.version == version:
                return info
        raise CodecError(f"no schema {type_name} v{version} is registered")

    # -- events -------------------------------------------------------------------------------------

    def encode(self, event: Event[Any]) -> bytes:
        payload = event.payload
        writer = self.writer_for(payload.TYPE)
        env = event.envelope
        record = payload.to_avro()
        record["envelope"] = {
            "event_id": env.event_id,
            "type": payload.TYPE,
            "schema_version": writer.version,
            "election_id": env.election_id,
            "unit_id": env.unit_id,
            "occurred_at": env.occurred_at,
            "recorded_at": env.recorded_at,
            "actor": env.actor,
            "channel": env.channel.value,
            "idempotency_key": env.idempotency_key,
        }
        return self.encode_record(payload.TYPE, record)

    def decode(self, data: bytes) -> Event[Any]:
        """The event a record holds. Records whose writer schema is the reader schema are read by a
        reader compiled for that schema (``ledger.avro_reader``) straight into the event's classes
        (``ledger.event_build``); anything it does not accept, and every other record, takes the
        generic path (``decode_generic``), which gives the same event or names what is wrong."""
        if type(data) is not bytes:
            data = bytes(data)
        head = data[:10]
        read = self._compiled[head] if head in self._compiled else self._compile(head)
        if read is not None:
            try:
                return read(data)
            except Exception:  # noqa: BLE001 - the generic path says what is wrong, or reads it
                pass
        return self.decode_generic(data)

    def decode_deferred(self, data: bytes, types: AbstractSet[str]) -> Event[Any]:
        """The event a record holds, as ``decode`` gives it, except that an event of one of ``types``
        decodes its payload when the payload is first read (``ledger.deferred_event``). The whole
        record is checked now all the same, so a record ``decode`` refuses is refused here."""
        return self.decode_deferred_all((data,), types)[0]

    def decode_deferred_all(self, values: Iterable[bytes], types: AbstractSet[str]) -> list[Event[Any]]:
        """``decode_deferred`` of each record, in one loop with its lookups bound once (a rebuild's
        chunk). The first record refused raises its ``CodecError``, as ``decode_deferred`` would."""
        heads, compile_head, decode = self._heads, self._compile_head, self.decode
        out: list[Event[Any]] = []
        add = out.append
        for data in values:
            if type(data) is not bytes:
                data = bytes(data)
            head = data[:10]
            entry = heads[head] if head in heads else compile_head(head)
            if entry is not None and entry[0] in types:
                try:
                    add(entry[1](data))
                    continue
                except Exception:  # noqa: BLE001 - decode refuses it by name
                    pass
            add(decode(data))
        return out

    def _compile_head(self, head: bytes) -> tuple[str, Callable[[bytes], DeferredEvent]] | None:
        """The envelope-only reader for records starting with ``head``, where ``decode`` has a
        compiled reader for them (the same schemas, the same checks); it returns the deferred event."""
        entry: tuple[str, Callable[[bytes], DeferredEvent]] | None = None
        if (self._compiled[head] if head in self._compiled else self._compile(head)) is not None:
            writer = self._by_fingerprint[head[2:]]
            build = builders_for(writer.type, self._payload_types[writer.type], writer.parsed)
            finish = DeferredEvent.maker(writer.type, self.decode)
            entry = (writer.type, compile_reader(writer.parsed, start=10, build=build, head_only=True, finish=finish))
        if len(head) == 10 and len(self._heads) < 1024:
            self._heads[head] = entry
        return entry

    def _compile(self, head: bytes) -> Callable[[bytes], Event[Any]] | None:
        """The compiled reader for records starting with ``head`` (marker and fingerprint), or None
        where the generic path reads them: an unknown head, a writer resolved to another reader
        version, a schema the compiler leaves to fastavro. Compiled once per head."""
        writer = self._by_fingerprint.get(head[2:]) if head[:2] == MAGIC else None
        read: Callable[[bytes], Event[Any]] | None = None
        if writer is not None and self._readers.get(writer.type) is writer:
            build = builders_for(writer.type, self._payload_types[writer.type], writer.parsed)
            if build is not None:
                try:
                    read = compile_reader(writer.parsed, start=10, build=build)
                except NotCompiled:
                    read = None
        if len(head) == 10 and len(self._compiled) < 1024:  # junk heads are not remembered without end
            self._compiled[head] = read
        return read

    def decode_generic(self, data: bytes) -> Event[Any]:
        """fastavro's generic reader and the dataclasses' constructors: every writer version, and
        the errors that name what is wrong with a record."""
        writer, _reader, record = self.decode_record(data)
        try:
            env = record["envelope"]
            envelope = Envelope(
                event_id=env["event_id"],
                election_id=env["election_id"],
                unit_id=env["unit_id"],
                occurred_at=_as_datetime(env["occurred_at"]),
                recorded_at=_as_datetime(env["recorded_at"]),
                actor=env["actor"],
                channel=Channel(env["channel"]),
                idempotency_key=env["idempotency_key"],
            )
            payload: Payload = self._payload_types[writer.type].from_avro(record)
        except (KeyError, ValueError, TypeError) as exc:
            raise CodecError(f"{writer.type} v{writer.version} record does not make an event: {exc}") from exc
        return Event(envelope, payload)


def _as_datetime(value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a timestamp, got {type(value).__name__}")
    return value


@lru_cache(maxsize=1)
def default_codec() -> Codec:
    """The catalogue shipped with this package, parsed once per process."""
    return Codec(load_catalogue())
