"""The codec: every event type round-trips, schemas evolve both ways, bad bytes are refused by name,
and the same event always has the same bytes."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import pytest

from ledger.codec import MAGIC, Codec, CodecError, default_codec, load_catalogue
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

ELECTION = "ia-dem-2020"
OCCURRED = datetime(2020, 2, 3, 19, 42, 7, 123456, tzinfo=UTC)
RECORDED = datetime(2020, 2, 3, 19, 42, 9, 654321, tzinfo=UTC)

FIRST = {"buttigieg": 61, "sanders": 58, "warren": 37, "biden": 22, "klobuchar": 19, "yang": 4}
FINAL = {"buttigieg": 79, "sanders": 66, "warren": 41, "klobuchar": 15}
RESULT = Result(FIRST, FINAL, attendance=201, delegates_reported={"buttigieg": 3, "sanders": 2, "warren": 1},
                worksheet_digest="sha256:5f1c0e9b2d7a4c3e8f6b1a0d9c8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e")


def payloads() -> list[Payload]:
    """One realistic instance of every payload class."""
    return [
        ElectionDefined(
            name="2020 Iowa Democratic Caucuses",
            rule_set="idp-2020",
            candidates=("bennet", "biden", "buttigieg", "klobuchar", "sanders", "steyer", "warren", "yang"),
            counties=(
                County("polk", "Polk", Fraction(3, 2)),
                County("adair", "Adair", Fraction(7, 3)),
            ),
            units=(
                UnitDefinition("polk-dm-1", "Des Moines 1", "polk", delegates=6, short_name="DM-1",
                               sde_weight=Fraction(9, 4)),
                UnitDefinition("adair-greenfield", "Greenfield", "adair", delegates=4),
                UnitDefinition("sat-glasgow", "Glasgow, Scotland", "polk", delegates=None,
                               satellite_group="international"),
            ),
            satellite_groups=(SatelliteGroup("international", "International satellites", Fraction(1, 8), 300),),
        ),
        UnitOpened(attendance=201),
        ResultReported(RESULT, reporter="chair:polk-dm-1",
                       warnings=(Problem("first_alignment.yang", "below_viability", "yang is below 15% and realigned"),)),
        ResultCorrected(
            result=Result(FIRST, {**FINAL, "buttigieg": 78}, attendance=201),
            supersedes="0b6c3f5e-9a4d-4f1e-8c2b-7d6a5e4f3c2b",
            reason="math worksheet transposed two digits",
            authority="IDP recanvass committee",
            stage=CorrectionStage.RECANVASS,
        ),
        TieBroken(contenders=("sanders", "warren"), seats=1, winners=("sanders",), method=TieMethod.COIN,
                  caller="warren", witnesses=("precinct secretary", "observer: Des Moines Register"),
                  reason="last delegate tied at 0.5 remainder"),
        SubmissionRejected(
            command="report-result",
            raw_input='{"unit": "polk-dm-1", "final_alignment": {"sanders": -3}}',
            errors=(Problem("final_alignment.sanders", "negative_count", "a head count cannot be negative (got -3)"),),
            sender="phone:+15155550100",
        ),
        ResultsCertified(authority="IDP State Central Committee", statement="Certified after recanvass."),
        CheckpointSigned(tree_size=1765, root_hash=bytes(range(32)), key_id="idp-2020-k1",
                         public_key=bytes(range(32, 64)), signature=bytes(range(64)), scope=f"election:{ELECTION}"),
    ]


def event(payload: Payload, **overrides: Any) -> Event[Any]:
    fields: dict[str, Any] = {
        "election_id": ELECTION,
        "unit_id": "polk-dm-1",
        "actor": "chair:polk-dm-1",
        "channel": Channel.APP,
        "occurred_at": OCCURRED,
        "recorded_at": RECORDED,
        "event_id": "3f2a1b0c-8d7e-4f6a-9b5c-4d3e2f1a0b9c",
    }
    fields.update(overrides)
    return new_event(payload, **fields)


def rabin64(canonical: str) -> int:
    """CRC-64-AVRO written from the specification, independent of fastavro."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in canonical.encode("utf-8"):
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


# ----------------------------------------------------------------------------------------- round trips
def test_the_examples_cover_every_event_type() -> None:
    assert {type(p) for p in payloads()} == set(PAYLOAD_TYPES.values())


@pytest.mark.parametrize("payload", payloads(), ids=lambda p: p.TYPE)
def test_every_event_type_round_trips(payload: Payload) -> None:
    codec = default_codec()
    original = event(payload)
    data = codec.encode(original)
    decoded = codec.decode(data)
    assert decoded == original
    assert type(decoded.payload) is type(payload)
    assert decoded.envelope.occurred_at == OCCURRED and decoded.envelope.recorded_at == RECORDED
    assert codec.encode(decoded) == data


def test_election_wide_events_use_the_election_key_and_round_trip() -> None:
    certified = event(ResultsCertified(authority="IDP State Central Committee"), unit_id="", channel="system")
    decoded = default_codec().decode(default_codec().encode(certified))
    assert decoded == certified
    assert decoded.key == f"election:{ELECTION}"


def test_header_is_the_avro_single_object_header() -> None:
    codec = default_codec()
    data = codec.encode(event(payloads()[2]))
    info = codec.writer_for("ResultReported")
    assert data[:2] == MAGIC
    assert data[2:10] == rabin64(info.canonical).to_bytes(8, "little") == info.fingerprint
    # the specification's own vector: "int" has fingerprint 0x7275d51a3f395c8f, header 8F 5C ... 72
    assert rabin64('"int"') == 8247732601305521295
    assert rabin64('"int"').to_bytes(8, "little").hex() == "8f5c393f1ad57572"


def test_records_written_with_the_fingerprint_reversed_still_decode() -> None:
    codec = default_codec()
    original = event(payloads()[2])
    data = codec.encode(original)
    legacy = data[:2] + data[2:10][::-1] + data[10:]
    assert codec.decode(legacy) == original


# ----------------------------------------------------------------------------------------- evolution
def result_reported_v2() -> dict[str, Any]:
    """ResultReported v2: adds how many worksheet photos the chair attached (default 0)."""
    schema = copy.deepcopy(load_catalogue()[("ResultReported", 1)])
    schema["fields"].append({"name": "photo_count", "type": "int", "default": 0})
    return schema


def test_v1_bytes_decode_under_a_v2_reader() -> None:
    original = event(payloads()[2])
    v1_bytes = Codec(load_catalogue()).encode(original)
    new = Codec(load_catalogue())
    new.register("ResultReported", 2, result_reported_v2())

    writer, reader, record = new.decode_record(v1_bytes)
    assert (writer.version, reader.version) == (1, 2)
    assert record["photo_count"] == 0  # the default fills what v1 never wrote
    assert record["reporter"] == "chair:polk-dm-1"
    assert new.decode(v1_bytes) == original


def test_v2_bytes_decode_under_a_v1_reader_into_the_v1_dataclass() -> None:
    original = event(payloads()[2])
    new = Codec(load_catalogue())
    new.register("ResultReported", 2, result_reported_v2())
    v2_bytes = new.encode(original)
    _, _, written = new.decode_record(v2_bytes)
    assert written["envelope"]["schema_version"] == 2
    v2_bytes = new.encode_record("ResultReported", {**written, "photo_count": 3})

    old = Codec(load_catalogue())
    old.register("ResultReported", 2, result_reported_v2())
    old.use_reader("ResultReported", 1)
    writer, reader, record = old.decode_record(v2_bytes)
    assert (writer.version, reader.version) == (2, 1)
    assert "photo_count" not in record
    decoded = old.decode(v2_bytes)
    assert type(decoded.payload) is ResultReported
    assert decoded == original


def test_a_reader_without_the_writer_schema_refuses_by_fingerprint() -> None:
    new = Codec(load_catalogue())
    info = new.register("ResultReported", 2, result_reported_v2())
    v2_bytes = new.encode(event(payloads()[2]))
    with pytest.raises(CodecError, match=f"unknown schema fingerprint {info.fingerprint.hex()}"):
        default_codec().decode(v2_bytes)


def test_use_reader_names_a_version_that_is_not_registered() -> None:
    with pytest.raises(CodecError, match="no schema ResultReported v7 is registered"):
        Codec(load_catalogue()).use_reader("ResultReported", 7)


# ----------------------------------------------------------------------------------------- bad bytes
@pytest.fixture
def good() -> tuple[Event[Any], bytes]:
    original = event(payloads()[2])
    return original, default_codec().encode(original)


def test_unknown_fingerprint_is_refused(good: tuple[Event[Any], bytes]) -> None:
    _, data = good
    with pytest.raises(CodecError, match="unknown schema fingerprint 0000000000000000: written by a schema"):
        default_codec().decode(data[:2] + bytes(8) + data[10:])


def test_wrong_marker_is_refused(good: tuple[Event[Any], bytes]) -> None:
    _, data = good
    with pytest.raises(CodecError, match=r"single-object marker C3 01 \(found C3 02\)"):
        default_codec().decode(b"\xc3\x02" + data[2:])
    with pytest.raises(CodecError, match=r"marker C3 01 \(found 7B 22\)"):
        default_codec().decode(b'{"event_id": "not avro"}')


def test_truncated_records_are_refused(good: tuple[Event[Any], bytes]) -> None:
    _, data = good
    with pytest.raises(CodecError, match="record is 7 bytes; an event needs at least 10"):
        default_codec().decode(data[:7])
    with pytest.raises(CodecError, match="corrupt ResultReported v1 body: EOFError"):
        default_codec().decode(data[:-3])
    with pytest.raises(CodecError, match="corrupt ResultReported v1 body"):
        default_codec().decode(data[:10])


def test_corrupted_bodies_are_refused(good: tuple[Event[Any], bytes]) -> None:
    original, data = good
    at = data.index(original.event_id.encode())
    with pytest.raises(CodecError, match="corrupt ResultReported v1 body: UnicodeDecodeError"):
        default_codec().decode(data[:at] + b"\xff" + data[at + 1 :])
    with pytest.raises(CodecError, match="corrupt ResultReported v1 body: EOFError: Expected -64 bytes"):
        default_codec().decode(data[:10] + b"\x7f" + data[11:])  # event id length becomes -64
    with pytest.raises(CodecError, match="corrupt ResultReported v1 record: 2 trailing bytes"):
        default_codec().decode(data + b"\x00\x00")


def test_a_record_that_does_not_fit_its_schema_is_refused_when_encoding() -> None:
    with pytest.raises(CodecError, match="ResultReported v1 does not fit its schema"):
        default_codec().encode_record("ResultReported", {"reporter": 5})


# ----------------------------------------------------------------------------------------- canonical
def test_same_event_same_bytes_whatever_the_dict_order() -> None:
    forward = Result(FIRST, FINAL, attendance=201, delegates_reported={"buttigieg": 3, "sanders": 2})
    backward = Result(
        dict(reversed(list(FIRST.items()))),
        dict(reversed(list(FINAL.items()))),
        attendance=201,
        delegates_reported={"sanders": 2, "buttigieg": 3},
    )
    assert list(FINAL) != list(reversed(FINAL))  # the two inputs really list candidates differently
    a = default_codec().encode(event(ResultReported(forward, reporter="chair")))
    b = default_codec().encode(event(ResultReported(backward, reporter="chair")))
    assert a == b
    corrected_a = default_codec().encode(event(ResultCorrected(forward, "x", "r", "a", CorrectionStage.REVIEW)))
    corrected_b = default_codec().encode(event(ResultCorrected(backward, "x", "r", "a", CorrectionStage.REVIEW)))
    assert corrected_a == corrected_b


@pytest.mark.parametrize(
    ("payload", "v2_default"),
    [
        (TieBroken(("B", "A"), 1, ("A",), TieMethod.COIN, caller="B", witnesses=("w",), reason="last seat"), {"supersedes": ""}),
        (SubmissionRejected("report", '{"a": 1}', (Problem("a", "UNKNOWN_FIELD", "no"),), "chair"), {"raw_bytes": b""}),
    ],
    ids=["TieBroken", "SubmissionRejected"],
)
def test_records_written_by_the_v1_schemas_still_decode(payload: Payload, v2_default: dict[str, Any]) -> None:
    """TieBroken and SubmissionRejected gained a field in v2; logs written before hold v1 records."""
    codec = default_codec()
    assert codec.writer_for(payload.TYPE).version == 2
    current = codec.encode(event(payload))
    record = codec.decode_record(current)[2]
    for name in v2_default:
        del record[name]
    old = codec.encode_record(payload.TYPE, record, version=1)
    writer, reader, _ = codec.decode_record(old)
    assert (writer.version, reader.version) == (1, 2) and old != current
    assert codec.decode(old) == event(payload), "v1 bytes read as the v2 event with the new field's default"
