"""The compiled decoder (``ledger.avro_reader`` + ``ledger.event_build``) gives exactly what the generic
path (fastavro + the dataclasses' constructors) gives: the same events, field for field and in the
same order, for generated events of every type and every schema version, and the same refusal for
bytes that are not an event."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.avro_reader import NotCompiled, compile_reader
from ledger.codec import Codec, CodecError, default_codec, load_catalogue
from ledger.events import (
    PAYLOAD_TYPES,
    Channel,
    CheckpointSigned,
    CorrectionStage,
    County,
    ElectionDefined,
    Event,
    Payload,
    Problem,
    Result,
    ResultCorrected,
    ResultReported,
    ResultsCertified,
    SatelliteGroup,
    SubmissionRejected,
    TieBroken,
    TieMethod,
    UnitDefinition,
    UnitOpened,
    new_event,
)

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=70)
names = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
int32 = st.integers(-(2**31), 2**31 - 1)
counts = st.dictionaries(names, st.one_of(st.integers(0, 300), int32), max_size=15)
ratios = st.fractions(min_value=0, max_value=10**6, max_denominator=10**9)
blobs = st.binary(max_size=80)
times = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC))
problems = st.lists(st.builds(Problem, text, text, text), max_size=3).map(tuple)
results = st.builds(Result, counts, counts, st.none() | int32, st.none() | counts, st.none() | text)
strs = st.lists(text, max_size=4).map(tuple)

payloads: st.SearchStrategy[Payload] = st.one_of(
    st.builds(ElectionDefined, text, text, strs,
              st.lists(st.builds(County, text, text, ratios), max_size=3).map(tuple),
              st.lists(st.builds(UnitDefinition, text, text, text, st.none() | int32, st.none() | text,
                                 st.none() | text, st.none() | ratios), max_size=3).map(tuple),
              st.lists(st.builds(SatelliteGroup, text, text, ratios, st.none() | int32), max_size=2).map(tuple)),
    st.builds(UnitOpened, st.none() | int32),
    st.builds(ResultReported, results, text, problems),
    st.builds(ResultCorrected, results, text, text, text, st.sampled_from(CorrectionStage), problems),
    st.builds(TieBroken, strs, int32, strs, st.sampled_from(TieMethod), text, strs, text, text),
    st.builds(SubmissionRejected, text, text, problems, text, blobs),
    st.builds(ResultsCertified, text, text),
    st.builds(CheckpointSigned, st.integers(0, 2**62), blobs, text, blobs, blobs, text,
              st.lists(st.integers(0, 2**40), max_size=4).map(tuple), st.lists(blobs, max_size=4).map(tuple),
              st.integers(0, 2**62), st.lists(blobs, max_size=3).map(tuple), blobs),
)

events = st.builds(
    lambda payload, election, unit, actor, channel, key, occurred, recorded, event_id: new_event(
        payload, election_id=election, unit_id=unit, actor=actor, channel=channel, idempotency_key=key,
        occurred_at=occurred, recorded_at=recorded, event_id=event_id),
    payloads, text, text, text, st.sampled_from(Channel), st.none() | text, times, times, st.uuids().map(str),
)

OLDER_VERSIONS: dict[str, dict[int, tuple[str, ...]]] = {
    # type: {older version: the fields it does not have}
    "TieBroken": {1: ("supersedes",)},
    "SubmissionRejected": {1: ("raw_bytes",)},
    "CheckpointSigned": {1: ("partition_sizes", "partition_roots", "timestamp_micros", "column_roots",
                             "column_signature"),
                         2: ("column_roots", "column_signature")},
}


def same(fast: Event[Any], generic: Event[Any]) -> None:
    """Equal, and equal in every detail equality forgets (the order of the alignment maps, time zones)."""
    assert fast == generic
    assert repr(fast) == repr(generic)
    assert type(fast.payload) is type(generic.payload)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
def test_the_compiled_path_gives_the_generic_paths_event(ev: Event[Any]) -> None:
    codec = default_codec()
    data = codec.encode(ev)
    assert codec._compile(data[:10]) is not None, f"{ev.type} is read by a compiled reader"
    same(codec.decode(data), codec.decode_generic(data))
    assert codec.encode(codec.decode(data)) == data


@settings(max_examples=200, deadline=None)
@given(events, st.data())
def test_records_of_older_versions_decode_as_before(ev: Event[Any], data: st.DataObject) -> None:
    codec = default_codec()
    versions = OLDER_VERSIONS.get(ev.type)
    if not versions:
        return
    version = data.draw(st.sampled_from(sorted(versions)))
    record = codec.decode_record(codec.encode(ev))[2]
    for name in versions[version]:
        del record[name]
    old = codec.encode_record(ev.type, record, version=version)
    same(codec.decode(old), codec.decode_generic(old))


def outcome(decode: Any, data: bytes) -> Any:
    try:
        return ("event", repr(decode(data)))
    except CodecError as exc:
        return ("refused", str(exc))


@settings(max_examples=300, deadline=None)
@given(events, st.data())
def test_damaged_records_get_the_generic_paths_answer(ev: Event[Any], data: st.DataObject) -> None:
    """A flipped byte, cut or extended record: decoded alike or refused with the same words."""
    codec = default_codec()
    good = codec.encode(ev)
    how = data.draw(st.sampled_from(["flip", "cut", "extend"]))
    if how == "flip":
        at = data.draw(st.integers(10, len(good) - 1))
        bad = good[:at] + bytes([data.draw(st.integers(0, 255))]) + good[at + 1:]
    elif how == "cut":
        bad = good[: data.draw(st.integers(10, len(good) - 1))]
    else:
        bad = good + data.draw(st.binary(min_size=1, max_size=4))
    from projections.batch_fold import DEFERRED

    assert outcome(codec.decode, bad) == outcome(codec.decode_generic, bad)
    assert outcome(lambda d: codec.decode_deferred(d, DEFERRED), bad) == outcome(codec.decode_generic, bad)


def test_a_reader_on_an_older_catalogue_reads_through_the_generic_path() -> None:
    """Records resolved to another reader version are never read by the writer's compiled reader."""
    codec = Codec(load_catalogue())
    codec.use_reader("TieBroken", 1)
    ev = new_event(TieBroken(("a", "b"), 1, ("a",), TieMethod.LOTS, "a", supersedes="x"), election_id="e",
                   unit_id="u", actor="a", channel=Channel.PAPER)
    data = codec.encode(ev)
    assert codec._compile(data[:10]) is None
    assert codec.decode(data).payload == TieBroken(("a", "b"), 1, ("a",), TieMethod.LOTS, "a")


def test_schemas_the_compiler_does_not_know_are_left_to_fastavro() -> None:
    decimal = {"type": "record", "name": "x.D", "fields": [
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}}]}
    try:
        compile_reader(decimal)
    except NotCompiled as exc:
        assert "decimal" in str(exc)
    else:
        raise AssertionError("a decimal was compiled")


def test_every_event_type_is_compiled() -> None:
    codec = default_codec()
    compiled = {info.type for info in codec.schemas() if codec._compile(b"\xc3\x01" + info.fingerprint) is not None}
    assert compiled == set(PAYLOAD_TYPES)


# ------------------------------------------------------------------------------------- folds alike
candidates = st.sampled_from(["a", "b", "c", "d"])
unit_payloads: st.SearchStrategy[Payload] = st.one_of(
    st.builds(UnitOpened, st.none() | st.integers(0, 500)),
    st.builds(ResultReported, st.builds(Result, st.dictionaries(candidates, st.integers(0, 200)),
                                        st.dictionaries(candidates, st.integers(0, 200)), st.none() | st.integers(0, 900)),
              text),
    st.builds(ResultCorrected, st.builds(Result, st.dictionaries(candidates, st.integers(0, 200)),
                                         st.dictionaries(candidates, st.integers(0, 200))),
              st.uuids().map(str), text, text, st.sampled_from(CorrectionStage)),
    st.builds(TieBroken, st.lists(candidates, min_size=2, max_size=3, unique=True).map(tuple), st.integers(1, 2),
              st.lists(candidates, max_size=2, unique=True).map(tuple), st.sampled_from(TieMethod), text),
    st.builds(SubmissionRejected, text, text, problems, text),
    st.builds(ResultsCertified, text),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(unit_payloads, times), min_size=1, max_size=25), st.data())
def test_a_fold_of_deferred_events_is_byte_for_byte_the_fold_of_decoded_ones(
    history: list[tuple[Payload, datetime]], data: st.DataObject
) -> None:
    """The batch folder decodes results with their payload deferred; the unit's state it folds is
    the state the generic path folds, to the byte, however the events are cut into runs."""
    from projections.batch_fold import DEFERRED
    from projections.reducers import UnitFold

    codec = default_codec()
    records = [codec.encode(new_event(p, election_id="e", unit_id="u", actor="x", channel=Channel.APP, recorded_at=at))
               for p, at in history]
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(records) - 1)), max_size=4)))
    generic, deferred = UnitFold(None), UnitFold(None)
    for run in [records[a:b] for a, b in zip([0, *cuts], [*cuts, len(records)], strict=True) if records[a:b]]:
        generic.add([codec.decode_generic(r) for r in run])
        deferred.add([codec.decode_deferred(r, DEFERRED) for r in run])
    assert deferred.state().dumps() == generic.state().dumps()


def test_a_deferred_event_is_the_event() -> None:
    from projections.batch_fold import DEFERRED

    codec = default_codec()
    ev = new_event(ResultReported(Result({"b": 2, "a": 1}, {"a": 3}), "r"), election_id="e", unit_id="u", actor="x",
                   channel=Channel.PHONE)
    data = codec.encode(ev)
    lazy = codec.decode_deferred(data, DEFERRED)
    assert type(lazy) is not Event and lazy.type == "ResultReported"
    assert lazy == ev and ev == lazy and repr(lazy) == repr(ev)
    damaged = data[:-1] + b"\x7f"
    try:
        codec.decode(damaged)
    except CodecError as exc:
        refused = str(exc)
    else:
        raise AssertionError("the damaged record decoded")
    try:
        codec.decode_deferred(damaged, DEFERRED)
    except CodecError as exc:
        assert str(exc) == refused
    else:
        raise AssertionError("a damaged record was deferred instead of refused")


@settings(max_examples=300, deadline=None)
@given(events, st.data())
def test_a_head_only_reader_refuses_what_the_full_reader_refuses_for_every_type(ev: Event[Any], data: st.DataObject) -> None:
    """Every type deferred (not only the batch folder's two), so each schema's walk past the fields it
    does not build (maps, arrays, unions, enums, fixed, bytes) is held to the full reader's answer."""
    codec = default_codec()
    good = codec.encode(ev)
    every = frozenset(PAYLOAD_TYPES)
    lazy = codec.decode_deferred(good, every)
    assert type(lazy) is not Event
    same(lazy, codec.decode_generic(good))
    at = data.draw(st.integers(10, len(good)))
    bad = good[:at] + data.draw(st.binary(max_size=3)) + good[at + data.draw(st.integers(0, 3)):]
    assert outcome(lambda d: codec.decode_deferred(d, every), bad) == outcome(codec.decode_generic, bad)
