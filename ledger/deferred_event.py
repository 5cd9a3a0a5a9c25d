"""An event whose payload is decoded when it is first read.

Why: a rebuild folds hundreds of results per unit and reads the payload of only the one that stands
at the end of a batch (``projections.reducers.UnitFold``); building the others (two alignment maps,
a dozen candidates each) was most of a rebuild's time. The record has been checked in full when the
event is made (``Codec.decode_deferred``), so decoding the payload later refuses nothing.

It is an ``Event`` in every way a reader can tell (same envelope, same ``type``, same payload when
read), and it keeps its record's bytes until then: a fold holds at most two events per unit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ledger.events import Envelope, Event, Payload

__all__ = ["DeferredEvent"]

_slot = Event.__dict__["payload"]
_set_envelope = Event.__dict__["envelope"].__set__
_new = object.__new__


class DeferredEvent(Event[Any]):
    __slots__ = ("_type", "_data", "_decode")

    _type: str
    _data: bytes
    _decode: Callable[[bytes], Event[Any]]

    @classmethod
    def maker(cls, type_name: str, decode: Callable[[bytes], Event[Any]]) -> Callable[[Envelope, bytes], DeferredEvent]:
        """What makes the deferred events of one type and decoder from an envelope and the record's
        bytes; the compiled head reader calls it once per record (``avro_reader.compile_reader``'s
        ``finish``), so the slots' own setters are bound once here."""
        set_type, set_data, set_decode = (cls.__dict__[name].__set__ for name in ("_type", "_data", "_decode"))

        def make(envelope: Envelope, data: bytes) -> DeferredEvent:
            event = _new(cls)
            _set_envelope(event, envelope)
            set_type(event, type_name)
            set_data(event, data)
            set_decode(event, decode)
            return event

        return make

    @property  # type: ignore[override]
    def payload(self) -> Payload:
        try:
            payload: Payload = _slot.__get__(self, Event)
        except AttributeError:
            payload = self._decode(self._data).payload
            _slot.__set__(self, payload)
        return payload

    @property
    def type(self) -> str:
        return self._type

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.envelope, self.payload) == (other.envelope, other.payload)

    def __hash__(self) -> int:
        return hash((self.envelope, self.payload))

    def __repr__(self) -> str:
        return f"Event(envelope={self.envelope!r}, payload={self.payload!r})"
