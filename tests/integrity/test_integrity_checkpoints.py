"""Checkpoint format, signatures, key files, the CheckpointSigned event and the checkpoint stores."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from ledger.codec import default_codec
from ledger.events import CheckpointSigned, Channel, new_event
from ledger.integrity.checkpoints import (
    MAGIC,
    Checkpoint,
    CheckpointFormatError,
    SignedCheckpoint,
    head_entry,
    sign_checkpoint,
)
from ledger.integrity.keys import (
    KeyFileError,
    SigningKey,
    TrustedKey,
    generate_key,
    load_or_create_signing_key,
    load_signing_key,
    load_trusted_key,
)
from ledger.integrity.merkle import MerkleTree, leaf_hash, verify_inclusion
from ledger.integrity.memory_store import MemoryCheckpointStore
from ledger.integrity.memory_store import forget as forget_checkpoints
from ledger.integrity.store import CheckpointStore, PostgresCheckpointStore, SqliteCheckpointStore, CheckpointStoreError
from ledger.log.port import Position
from ledger.render import event_from_json, event_to_json


def _checkpoint(key: SigningKey, sizes: tuple[int, ...] = (3, 0, 5)) -> Checkpoint:
    roots = tuple(MerkleTree.of_entries([b"p%d-%d" % (p, i) for i in range(n)]).root() for p, n in enumerate(sizes))
    return Checkpoint("caucus.events", 1_580_778_000_123_456, key.key_id, sizes, roots)


def test_canonical_bytes_round_trip_and_are_strict() -> None:
    key = generate_key()
    c = _checkpoint(key)
    data = c.to_bytes()
    assert data.startswith(MAGIC)
    assert Checkpoint.from_bytes(data) == c
    assert c.tree_size == 8
    assert c.time.isoformat() == "2020-02-04T01:00:00.123456+00:00"
    for broken in (data[:-1], data + b"\x00", b"X" + data[1:]):
        with pytest.raises(CheckpointFormatError):
            Checkpoint.from_bytes(broken)
    # A root of roots that does not follow from the partition heads is refused.
    with pytest.raises(CheckpointFormatError, match="root of roots"):
        Checkpoint.from_bytes(data[:-1] + bytes([data[-1] ^ 1]))


def test_the_root_of_roots_is_a_tree_over_the_partition_heads() -> None:
    c = _checkpoint(generate_key())
    heads = [leaf_hash(head_entry(p, n, r)) for p, (n, r) in enumerate(zip(c.partition_sizes, c.partition_roots))]
    tree = MerkleTree(heads)
    assert c.root_hash == tree.root()
    assert verify_inclusion(heads[2], 2, 3, tree.inclusion_proof(2), c.root_hash)


def test_signatures_verify_only_with_the_signing_key_and_unchanged_bytes() -> None:
    key, other = generate_key(), generate_key()
    signed = sign_checkpoint(_checkpoint(key), key)
    assert signed.signature_problem([key.trusted]) is None
    assert "not a trusted key" in (signed.signature_problem([other.trusted]) or "")
    assert "not a trusted key" in (signed.signature_problem([]) or "")
    changed = SignedCheckpoint(_checkpoint(key, (3, 0, 6)), signed.public_key, signed.signature)
    assert "does not verify" in (changed.signature_problem([key.trusted]) or "")
    # Another key's signature over the same statement, passed off under this key's id.
    forged = SignedCheckpoint(signed.checkpoint, other.public_key, other.sign(signed.checkpoint.to_bytes()))
    assert "key id" in (forged.signature_problem([other.trusted]) or "")
    with pytest.raises(ValueError):
        sign_checkpoint(_checkpoint(key), other)


def test_the_event_round_trips_through_avro_and_json() -> None:
    key = generate_key()
    signed = sign_checkpoint(_checkpoint(key), key, event_id="0b6f6a52-3a7c-4d6e-9f55-6d1b6a0e3a11")
    event = signed.to_event()
    assert event.type == "CheckpointSigned" and event.envelope.channel is Channel.SYSTEM
    codec = default_codec()
    raw = codec.encode(event)
    back = codec.decode(raw)
    assert back == event
    assert SignedCheckpoint.from_event(back).same_statement(signed)
    assert event_from_json(json.loads(json.dumps(event_to_json(event)))) == event
    assert codec.writer_for("CheckpointSigned").version == CheckpointSigned.VERSION == 3
    assert back.payload.column_roots == signed.column_roots == () and back.payload.column_signature == b""


def test_a_version_2_checkpoint_record_still_decodes_and_is_checked_without_column_roots() -> None:
    codec = default_codec()
    key = generate_key()
    signed = sign_checkpoint(_checkpoint(key), key, event_id="0b6f6a52-3a7c-4d6e-9f55-6d1b6a0e3a12",
                             column_roots=[b"c" * 32] * _checkpoint(key).partitions)
    assert signed.columns_problem() is None
    event = signed.to_event()
    record = event.payload.to_avro()
    for name in ("column_roots", "column_signature"):
        del record[name]
    env = event.envelope
    record["envelope"] = {
        "event_id": env.event_id, "type": "CheckpointSigned", "schema_version": 2, "election_id": "", "unit_id": "",
        "occurred_at": env.occurred_at, "recorded_at": env.recorded_at, "actor": env.actor, "channel": "system",
        "idempotency_key": env.idempotency_key,
    }
    decoded = SignedCheckpoint.from_event(codec.decode(codec.encode_record("CheckpointSigned", record, version=2)))
    assert decoded.same_statement(signed) and decoded.column_roots == () and decoded.columns_problem() is None
    forged = SignedCheckpoint(signed.checkpoint, signed.public_key, signed.signature, signed.event_id, None,
                              (b"d" * 32,) * signed.checkpoint.partitions, signed.column_signature)
    assert "does not verify" in (forged.columns_problem() or "")


def test_a_version_1_checkpoint_record_still_decodes_but_cannot_be_checked() -> None:
    codec = default_codec()
    key = generate_key()
    v1 = new_event(CheckpointSigned(1, b"r" * 32, key.key_id, key.public_key, b"s" * 64, "0"), election_id="", actor="x", channel=Channel.SYSTEM)
    record = v1.payload.to_avro()
    for name in ("partition_sizes", "partition_roots", "timestamp_micros"):
        del record[name]
    env = v1.envelope
    record["envelope"] = {
        "event_id": env.event_id, "type": "CheckpointSigned", "schema_version": 1, "election_id": "", "unit_id": "",
        "occurred_at": env.occurred_at, "recorded_at": env.recorded_at, "actor": "x", "channel": "system",
        "idempotency_key": env.idempotency_key,
    }
    decoded = codec.decode(codec.encode_record("CheckpointSigned", record, version=1))
    assert decoded.payload.partition_sizes == () and decoded.payload.timestamp_micros == 0
    with pytest.raises(CheckpointFormatError, match="version 1"):
        SignedCheckpoint.from_event(decoded)


def test_inconsistent_event_fields_are_refused() -> None:
    key = generate_key()
    signed = sign_checkpoint(_checkpoint(key), key)
    payload = signed.to_payload()
    bad = CheckpointSigned(payload.tree_size + 1, payload.root_hash, payload.key_id, payload.public_key,
                           payload.signature, payload.scope, payload.partition_sizes, payload.partition_roots,
                           payload.timestamp_micros)
    with pytest.raises(CheckpointFormatError, match="do not follow"):
        SignedCheckpoint.from_event(new_event(bad, election_id="", actor="x", channel=Channel.SYSTEM))


# -- key files -----------------------------------------------------------------------------------------


def test_the_data_dir_key_is_created_once_private_and_with_its_public_half(tmp_path: Path) -> None:
    key, created = load_or_create_signing_key(tmp_path / "d")
    assert created
    pem = tmp_path / "d" / "checkpoint-key.pem"
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in pem.read_bytes()
    again, created_again = load_or_create_signing_key(tmp_path / "d")
    assert not created_again and again.public_key == key.public_key
    assert load_trusted_key(tmp_path / "d" / "checkpoint-key.pub") == key.trusted
    assert load_trusted_key(pem) == key.trusted  # the public half of a private key file


def test_key_files_that_others_can_read_or_are_not_ed25519_are_refused(tmp_path: Path) -> None:
    key, _ = load_or_create_signing_key(tmp_path)
    pem = tmp_path / "checkpoint-key.pem"
    os.chmod(pem, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_signing_key(pem)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key")
    os.chmod(junk, 0o600)
    with pytest.raises(KeyFileError):
        load_signing_key(junk)
    with pytest.raises(KeyFileError):
        load_trusted_key(junk)
    with pytest.raises(KeyFileError, match="does not exist"):
        load_trusted_key(tmp_path / "missing.pub")
    hex_file = tmp_path / "key.hex"
    hex_file.write_text(key.public_key.hex() + "\n")
    assert load_trusted_key(hex_file) == TrustedKey(key.public_key)


# -- stores --------------------------------------------------------------------------------------------


def _exercise_store(store: CheckpointStore) -> None:
    key = generate_key()
    assert store.checkpoints() == [] and store.leaves() == {}
    first = sign_checkpoint(_checkpoint(key, (2, 0, 1)), key, event_id="e1")
    first = SignedCheckpoint(first.checkpoint, first.public_key, first.signature, "e1", Position(1, 0))
    store.record(first, {0: (0, [b"a" * 32, b"b" * 32]), 2: (0, [b"c" * 32])})
    second = sign_checkpoint(_checkpoint(key, (3, 1, 1)), key, event_id="e2")
    store.record(second, {0: (2, [b"d" * 32]), 1: (0, [b"e" * 32])})
    rows = store.checkpoints()
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)
    assert [r.signed.event_id for r in rows if r.signed] == ["e1", "e2"]
    assert rows[0].signed is not None and rows[0].signed.position == Position(1, 0)
    assert rows[0].signed.same_statement(first) and rows[1].signed is not None and rows[1].signed.same_statement(second)
    assert store.leaves() == {0: [b"a" * 32, b"b" * 32, b"d" * 32], 1: [b"e" * 32], 2: [b"c" * 32]}
    # New leaf hashes must not leave a hole, overlapping ones must agree, and nothing is half-written.
    with pytest.raises(CheckpointStoreError, match="start at 5"):
        store.record(sign_checkpoint(_checkpoint(key), key, event_id="e3"), {0: (5, [b"f" * 32])})
    with pytest.raises(CheckpointStoreError, match="differs"):
        store.record(sign_checkpoint(_checkpoint(key), key, event_id="e3"), {0: (1, [b"b" * 32, b"X" * 32, b"f" * 32])})
    assert len(store.checkpoints()) == 2
    assert store.leaves()[0] == [b"a" * 32, b"b" * 32, b"d" * 32]
    # A signer that raced another brings some hashes already recorded: only the new ones are added.
    store.record(sign_checkpoint(_checkpoint(key), key, event_id="e3"), {0: (1, [b"b" * 32, b"d" * 32, b"f" * 32])})
    assert store.leaves()[0] == [b"a" * 32, b"b" * 32, b"d" * 32, b"f" * 32]


def test_the_sqlite_store_keeps_checkpoints_and_leaf_hashes(tmp_path: Path) -> None:
    store = SqliteCheckpointStore(tmp_path / "checkpoints.sqlite3")
    try:
        _exercise_store(store)
    finally:
        store.close()


def test_the_postgres_store_keeps_checkpoints_and_leaf_hashes(pg_dsn: str) -> None:
    store = PostgresCheckpointStore(pg_dsn)
    try:
        _exercise_store(store)
    finally:
        store.close()


def test_the_memory_store_keeps_checkpoints_and_leaf_hashes() -> None:
    name = f"checkpoints-{generate_key().key_id}"
    store = MemoryCheckpointStore(name)
    try:
        _exercise_store(store)
        assert len(MemoryCheckpointStore(name, create=False).checkpoints()) == 3, "shared by name within the process"
    finally:
        forget_checkpoints(name)
    with pytest.raises(CheckpointStoreError):
        MemoryCheckpointStore(name, create=False)


def test_a_statement_that_cannot_be_read_as_a_time_or_written_is_no_checkpoint() -> None:
    """A time of 2**63-1 microseconds (year 294247) or a key id no checkpoint can spell passed the parse
    and raised inside `caucus verify` and `caucus checkpoint`; now the parse refuses them, so verify
    reports a malformed checkpoint and `caucus log append` refuses the line."""
    root = bytes(32)
    with pytest.raises(CheckpointFormatError, match="readable instant"):
        Checkpoint("", (1 << 63) - 1, "0" * 16, (0,), (root,))
    with pytest.raises(CheckpointFormatError, match="cannot be written"):
        Checkpoint("", 0, "k\u00e9y", (0,), (root,))
    assert Checkpoint("scope", 0, "0" * 16, (0,), (root,)).time.year == 1970
