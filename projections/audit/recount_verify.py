#!/usr/bin/env python3
"""Verify a Caucus Ledger recount package with nothing but this file, Python 3.9+ and ``cryptography``.

This script is copied into every recount package as ``verify.py``; it imports nothing from the ledger,
so an auditor can read all of it. Run it in the package directory (or pass the directory):

    python3 verify.py [PACKAGE_DIR] [--public-key KEY.pem]

For every event in the package it checks that

1. the event's Avro bytes hash to the leaf its inclusion proof starts from (RFC 9162:
   ``SHA-256(0x00 || bytes)``);
2. the audit path leads from that leaf to its partition's root, and the partition's head
   (``u32 partition || u64 size || root``) leads to the root of roots, and both the partition's size and
   root are the ones written in the signed checkpoint;
3. the checkpoint's Ed25519 signature verifies with the public key (``--public-key``: one you obtained
   independently, which is what makes the check meaningful; by default the package's
   ``public-key.pem``, whose key id is printed so you can compare it with the published one);
4. the Avro bytes decode, with the writer schema named by their fingerprint (the schema file's
   CRC-64-AVRO fingerprint is recomputed), to the same event the ``.json`` file shows;
5. nothing is left out: ``partitions/P.records`` holds every record of each partition that holds the
   package's units (Kafka's murmur2 partitioner over the unit id says which) or its election, up to the
   checkpoint; their hashes must rebuild the signed root of that partition, so they are all of them,
   and every record among them that belongs to a unit of the package (or is election-wide for its
   election) must be one of the package's events;

and that every file still has the SHA-256 the manifest lists, and that the manifest carries the
checkpoint key's signature (``manifest.sig``): that binds the derived files (the paper trail, the tallies)
to the signer. A package made without that key has no ``manifest.sig``; its derived files are then
bound to nothing, and the package is reported INCOMPLETE (recompute the trail with the ledger).

Exit status: 0 everything verifies; 1 something does not (each failure is printed); 2 the package is
incomplete (events without a proof, e.g. newer than the last checkpoint) but nothing failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

CHECKPOINT_MAGIC = b"caucus-ledger/checkpoint/v1\n"
MANIFEST_CONTEXT = b"caucus-ledger recount manifest v1\n"
AVRO_MAGIC = b"\xc3\x01"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

# -- RFC 9162 Merkle tree hashing and inclusion proofs ----------------------------------------------


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_from_inclusion(leaf: bytes, index: int, size: int, path: list[bytes]) -> bytes | None:
    """RFC 9162 section 2.1.3.2: the root an audit path proves a leaf hash into (None if malformed)."""
    if not 0 <= index < size or len(leaf) != 32 or any(len(p) != 32 for p in path):
        return None
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def merkle_root(leaves: list[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    level = list(leaves)
    while len(level) > 1:
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def murmur2(data: bytes) -> int:
    """Kafka's default partitioner hash (org.apache.kafka.common.utils.Utils.murmur2), unsigned."""
    m, h = 0x5BD1E995, (0x9747B28C ^ len(data)) & 0xFFFFFFFF
    for i in range(len(data) // 4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = len(data) & ~3
    extra = len(data) % 4
    if extra >= 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for(key: str, partitions: int) -> int:
    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % partitions


def read_records(data: bytes) -> list[bytes]:
    """``u32 big-endian length || bytes``, repeated."""
    out, pos = [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise Problem("a record's length is cut off")
        n = struct.unpack(">I", data[pos : pos + 4])[0]
        if pos + 4 + n > len(data):
            raise Problem("a record is cut off")
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out


def head_entry(partition: int, size: int, root: bytes) -> bytes:
    return struct.pack(">I", partition) + struct.pack(">Q", size) + root


# -- the signed checkpoint ---------------------------------------------------------------------------


class Problem(Exception):
    pass


def parse_checkpoint(data: bytes) -> dict[str, Any]:
    """The canonical checkpoint bytes: header, u64 time, u16+scope, u16+key id, u32 partitions,
    partitions x (u64 size, 32-byte root), u64 tree size, 32-byte root of roots (all big-endian)."""
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if pos + n > len(data):
            raise Problem("the signed checkpoint bytes are truncated")
        out = data[pos : pos + n]
        pos += n
        return out

    if take(len(CHECKPOINT_MAGIC)) != CHECKPOINT_MAGIC:
        raise Problem("the signed bytes are not a caucus-ledger checkpoint")
    time_micros = struct.unpack(">Q", take(8))[0]
    scope = take(struct.unpack(">H", take(2))[0]).decode("utf-8")
    key_id = take(struct.unpack(">H", take(2))[0]).decode("ascii")
    count = struct.unpack(">I", take(4))[0]
    sizes, roots = [], []
    for _ in range(count):
        sizes.append(struct.unpack(">Q", take(8))[0])
        roots.append(take(32))
    tree_size = struct.unpack(">Q", take(8))[0]
    root = take(32)
    if pos != len(data):
        raise Problem("bytes trail the signed checkpoint")
    heads = [leaf_hash(head_entry(i, n, r)) for i, (n, r) in enumerate(zip(sizes, roots))]
    if merkle_root(heads) != root or sum(sizes) != tree_size:
        raise Problem("the checkpoint's root of roots or tree size does not follow from its partition heads")
    return {"time_micros": time_micros, "scope": scope, "key_id": key_id, "sizes": sizes, "roots": roots,
            "tree_size": tree_size, "root": root}


def _unhex(text: str) -> bytes:
    try:
        return bytes.fromhex(text)
    except ValueError:
        return b""


def load_public_key(path: Path) -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = path.read_bytes()
    text = data.strip()
    if len(text) == 64:
        return bytes.fromhex(text.decode("ascii"))
    key = serialization.load_pem_public_key(data)
    if not isinstance(key, Ed25519PublicKey):
        raise Problem(f"{path} is not an Ed25519 public key")
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def signature_ok(public_key: bytes, signature: bytes, message: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


# -- Avro: single-object encoding, fingerprints and a small binary decoder ---------------------------

_CRC64_EMPTY = 0xC15D213AA4D7A795
_CRC64_TABLE = []
for _i in range(256):
    _fp = _i
    for _ in range(8):
        _fp = (_fp >> 1) ^ (_CRC64_EMPTY & -(_fp & 1))
    _CRC64_TABLE.append(_fp)


def avro_fingerprint(canonical: str) -> bytes:
    """CRC-64-AVRO (Rabin) of a schema's parsing canonical form, little-endian (as the Avro
    specification's single-object encoding writes it)."""
    fp = _CRC64_EMPTY
    for b in canonical.encode("utf-8"):
        fp = (fp >> 8) ^ _CRC64_TABLE[(fp ^ b) & 0xFF]
    return fp.to_bytes(8, "little")


class _Reader:
    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise Problem("the Avro body is truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def long(self) -> int:
        shift = result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
            if shift > 70:
                raise Problem("an Avro varint is too long")


def _decode(schema: Any, r: _Reader, named: dict[str, Any]) -> Any:
    if isinstance(schema, list):
        index = r.long()
        if not 0 <= index < len(schema):
            raise Problem(f"Avro union branch {index} does not exist")
        return _decode(schema[index], r, named)
    if isinstance(schema, str):
        if schema == "null":
            return None
        if schema == "boolean":
            return r.take(1) != b"\x00"
        if schema in ("int", "long"):
            return r.long()
        if schema == "float":
            return struct.unpack("<f", r.take(4))[0]
        if schema == "double":
            return struct.unpack("<d", r.take(8))[0]
        if schema == "bytes":
            return r.take(r.long())
        if schema == "string":
            return r.take(r.long()).decode("utf-8")
        if schema in named:
            return _decode(named[schema], r, named)
        raise Problem(f"unknown Avro type {schema!r}")
    kind = schema["type"]
    if kind == "record":
        named[schema["name"]] = schema
        return {f["name"]: _decode(f["type"], r, named) for f in schema["fields"]}
    if kind == "enum":
        named[schema["name"]] = schema
        return schema["symbols"][r.long()]
    if kind == "fixed":
        named[schema["name"]] = schema
        return r.take(schema["size"])
    if kind in ("array", "map"):
        out: Any = [] if kind == "array" else {}
        while True:
            count = r.long()
            if count == 0:
                return out
            if count < 0:
                count = -count
                r.long()  # block size in bytes
            for _ in range(count):
                if kind == "array":
                    out.append(_decode(schema["items"], r, named))
                else:
                    key = r.take(r.long()).decode("utf-8")
                    out[key] = _decode(schema["values"], r, named)
    return _decode(kind, r, named)


def decode_single_object(data: bytes, schemas: dict[bytes, Any]) -> dict[str, Any]:
    if data[:2] != AVRO_MAGIC or len(data) < 10:
        raise Problem("not an Avro single-object record (no C3 01 marker)")
    schema = schemas.get(data[2:10])
    if schema is None:
        raise Problem(f"written with schema {data[2:10].hex()}, which the package does not include")
    r = _Reader(data, 10)
    record = _decode(schema, r, {})
    if r.pos != len(data):
        raise Problem(f"{len(data) - r.pos} bytes trail the Avro record")
    return record


def _micros(text: str) -> int:
    delta = datetime.fromisoformat(text) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def compare_with_json(record: dict[str, Any], shown: dict[str, Any]) -> list[str]:
    """Where the decoded bytes and the JSON rendering disagree."""
    out = []
    env = record.get("envelope", {})
    for name, value in env.items():
        if name not in shown:
            out.append(f"the JSON lacks envelope field {name}")
            continue
        seen = shown[name]
        if name in ("occurred_at", "recorded_at"):
            seen = _micros(seen)
        if seen != value:
            out.append(f"envelope field {name}: bytes say {value!r}, JSON says {shown[name]!r}")
    payload = shown.get("payload", {})
    for name, value in record.items():
        if name == "envelope":
            continue
        if _jsonable(value) != payload.get(name):
            out.append(f"payload field {name}: bytes say {_jsonable(value)!r}, JSON says {payload.get(name)!r}")
    return out


# -- the package -------------------------------------------------------------------------------------


def verify(package: Path, public_key_path: Path | None = None, out: Any = sys.stdout) -> int:
    def say(line: str) -> None:
        print(line, file=out)

    failures: list[str] = []
    try:
        manifest_bytes = (package / "manifest.json").read_bytes()
        manifest = json.loads(manifest_bytes.decode("utf-8"))
    except (OSError, ValueError) as exc:
        say(f"FAIL  manifest.json cannot be read: {exc}")
        return 1

    _check_files(package, manifest, failures)
    schemas = _load_schemas(package, failures)
    checkpoint = None
    public_key = None
    cp_file: dict[str, Any] = {}
    if manifest.get("checkpoint") is not None:
        checkpoint, public_key, cp_file = _check_checkpoint(package, public_key_path, failures, say)
    unbound = False
    if public_key is not None and checkpoint is not None:
        unbound = _manifest_unsigned(package, manifest_bytes, public_key, failures, say)

    unproven = []
    proven = 0
    for item in manifest["events"]:
        outcome = _check_event(package, item, schemas, checkpoint, cp_file, failures, say)
        if outcome == "unproven":
            unproven.append(f"{item['position']} {item['type']} {item['event_id']}")
        elif outcome == "proven":
            proven += 1

    if checkpoint is not None:
        failures.extend(_omissions(package, manifest, checkpoint, schemas, say))
    return _verdict(len(manifest["events"]), proven, unproven, unbound, failures, say)


def _check_files(package: Path, manifest: dict[str, Any], failures: list[str]) -> None:
    for name, digest in sorted(manifest.get("files", {}).items()):
        path = package / name
        if not path.is_file():
            failures.append(f"{name}: missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            failures.append(f"{name}: its SHA-256 differs from the manifest's (the file was changed)")


def _load_schemas(package: Path, failures: list[str]) -> dict[bytes, Any]:
    schemas: dict[bytes, Any] = {}
    for path in sorted((package / "schemas").glob("*.avsc")):
        canonical = path.read_text(encoding="utf-8").strip()
        fp = avro_fingerprint(canonical)
        # The Avro specification writes the fingerprint little-endian; records written by early versions of
        # the ledger carry it reversed. Either order identifies the schema; the file name is the records' order.
        if path.stem not in (fp.hex(), fp[::-1].hex()):
            failures.append(f"schemas/{path.name}: its CRC-64-AVRO fingerprint is {fp.hex()}, not the one in its name")
            continue
        schemas[bytes.fromhex(path.stem)] = json.loads(canonical)
    return schemas


def _check_checkpoint(
    package: Path, public_key_path: Path | None, failures: list[str], say: Any
) -> tuple[dict[str, Any] | None, bytes | None, dict[str, Any]]:
    """Checks 3: the checkpoint, the public key, and the signature; returns what later checks use."""
    checkpoint = None
    public_key = None
    cp_file: dict[str, Any] = {}
    signed_bytes = b""
    try:
        cp_file = json.loads((package / "checkpoint.json").read_text(encoding="utf-8"))
        signed_bytes = bytes.fromhex(cp_file["signed_bytes"])
        checkpoint = parse_checkpoint(signed_bytes)
    except (OSError, ValueError, KeyError, Problem) as exc:
        failures.append(f"checkpoint.json: {exc}")
    key_file = public_key_path or package / "public-key.pem"
    try:
        public_key = load_public_key(key_file)
    except Exception as exc:  # noqa: BLE001 - any unreadable key is a failure to report
        failures.append(f"{key_file}: cannot read the public key: {exc}")
    if checkpoint is not None and public_key is not None:
        kid = hashlib.sha256(public_key).hexdigest()[:16]
        say(f"public key {public_key.hex()} (key id {kid}) from {key_file}")
        if kid != checkpoint["key_id"]:
            failures.append(f"the checkpoint names key {checkpoint['key_id']}, not the given key {kid}")
        elif not signature_ok(public_key, _unhex(cp_file.get("signature", "")), signed_bytes):
            failures.append("the checkpoint's Ed25519 signature does not verify with the public key")
        else:
            when = EPOCH + timedelta(microseconds=checkpoint["time_micros"])
            say(f"checkpoint signed {when.isoformat()}: {checkpoint['tree_size']} records in "
                f"{len(checkpoint['sizes'])} partitions, root {checkpoint['root'].hex()}: signature OK")
    return checkpoint, public_key, cp_file


def _manifest_unsigned(package: Path, manifest_bytes: bytes, public_key: bytes, failures: list[str], say: Any) -> bool:
    """Whether the package has no manifest.sig (its derived files are then bound to nothing)."""
    try:
        sig = bytes.fromhex((package / "manifest.sig").read_text(encoding="utf-8").strip())
    except FileNotFoundError:
        return True
    except (OSError, ValueError) as exc:
        failures.append(f"manifest.sig cannot be read: {exc}")
        return False
    if signature_ok(public_key, sig, MANIFEST_CONTEXT + manifest_bytes):
        say("manifest signed with the checkpoint's key: every file it lists is as the signer wrote it")
    else:
        failures.append("manifest.json is not the one the checkpoint's key signed (manifest.sig): a file was changed")
    return False


def _check_event(
    package: Path, item: dict[str, Any], schemas: dict[bytes, Any], checkpoint: dict[str, Any] | None,
    cp_file: dict[str, Any], failures: list[str], say: Any,
) -> str:
    """Checks 1, 2 and 4 for one event: "proven", "unproven" (no proof in the package) or "failed"."""
    label = f"{item['position']} {item['type']} {item['event_id']}"
    try:
        raw = (package / item["avro"]).read_bytes()
        shown = json.loads((package / item["json"]).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        failures.append(f"{label}: {exc}")
        return "failed"
    try:
        record = decode_single_object(raw, schemas)
        problems = compare_with_json(record, shown)
    except (Problem, ValueError, IndexError, KeyError, TypeError, struct.error) as exc:
        failures.append(f"{label}: the bytes cannot be read as the event its JSON shows: {exc}")
    else:
        for problem in problems:
            failures.append(f"{label}: {problem}")
        env = record.get("envelope", {})
        if env.get("event_id") != item["event_id"] or env.get("unit_id") != item["unit_id"]:
            failures.append(f"{label}: the bytes are event {env.get('event_id')} of unit {env.get('unit_id')!r}")
    if item.get("proof") is None:
        return "unproven"
    try:
        proof = json.loads((package / item["proof"]).read_text(encoding="utf-8"))
        path_hashes = [bytes.fromhex(h) for h in proof["audit_path"]]
        head_hashes = [bytes.fromhex(h) for h in proof["head"]["audit_path"]]
    except (OSError, ValueError, KeyError) as exc:
        failures.append(f"{label}: its proof cannot be read: {exc}")
        return "failed"
    leaf = leaf_hash(raw)
    if leaf.hex() != proof["leaf_hash"]:
        failures.append(f"{label}: its bytes hash to leaf {leaf.hex()[:16]}..., the proof is for {proof['leaf_hash'][:16]}...")
        return "failed"
    if checkpoint is None:
        failures.append(f"{label}: no readable checkpoint to prove against")
        return "failed"
    if proof.get("checkpoint", {}).get("signed_bytes") != cp_file.get("signed_bytes"):
        failures.append(f"{label}: the proof is against another checkpoint than checkpoint.json")
        return "failed"
    p = proof["partition"]
    size = proof["tree_size"]
    if p >= len(checkpoint["sizes"]) or checkpoint["sizes"][p] != size:
        failures.append(f"{label}: partition {p} size {size} is not the signed one")
        return "failed"
    root = root_from_inclusion(leaf, proof["leaf_index"], size, path_hashes)
    if root is None or root != checkpoint["roots"][p]:
        failures.append(f"{label}: the audit path does not lead to partition {p}'s signed root")
        return "failed"
    head = leaf_hash(head_entry(p, size, root))
    top = root_from_inclusion(head, p, len(checkpoint["sizes"]), head_hashes)
    if top != checkpoint["root"]:
        failures.append(f"{label}: partition {p}'s head does not lead to the signed root of roots")
        return "failed"
    say(f"OK  {label}: leaf {proof['leaf_index']} of {size} in partition {p}")
    return "proven"


def _verdict(total: int, proven: int, unproven: list[str], unbound: bool, failures: list[str], say: Any) -> int:
    for label in unproven:
        say(f"UNPROVEN  {label}: no checkpoint covered it when the package was made")
    for failure in failures:
        say(f"FAIL  {failure}")
    if failures:
        say(f"NOT VERIFIED: {len(failures)} problem(s); {proven} of {total} events proven")
        return 1
    if unproven:
        say(f"INCOMPLETE: {proven} of {total} events proven, {len(unproven)} without a proof")
        return 2
    if unbound:
        say(f"INCOMPLETE: all {total} events are proven, but the manifest is not signed (no manifest.sig): the paper "
            "trail and tallies are bound to nothing; recompute them with the ledger")
        return 2
    say(f"VERIFIED: all {total} events are in the log the signed checkpoint covers, their JSON matches their bytes, "
        "and the package leaves out no event of its units up to that checkpoint")
    return 0


def _omissions(package: Path, manifest: dict[str, Any], checkpoint: dict[str, Any], schemas: dict[bytes, Any], say: Any) -> list[str]:
    """Check 5 of the module docstring: every record of the units' partitions is accounted for."""
    count = len(checkpoint["sizes"])
    election = manifest.get("election_id", "")
    units = {u["unit_id"] for u in manifest.get("units", [])}
    listed = {item["position"] for item in manifest["events"]}
    needed = {partition_for(u, count): f"unit {u}" for u in sorted(units)}
    needed.setdefault(partition_for(f"election:{election}", count), f"election {election}")
    for item in manifest["events"]:
        needed.setdefault(int(item["position"].split(":")[0]), f"event {item['event_id']}")
    failures = []
    for p, why in sorted(needed.items()):
        path = package / "partitions" / f"{p}.records"
        try:
            records = read_records(path.read_bytes())
        except (OSError, Problem) as exc:
            failures.append(f"partition {p} (of {why}) is not in the package ({exc}): that nothing of it was left out cannot be shown")
            continue
        size = checkpoint["sizes"][p]
        if len(records) != size or merkle_root([leaf_hash(r) for r in records]) != checkpoint["roots"][p]:
            failures.append(f"partitions/{p}.records: its {len(records)} records do not rebuild the signed root of partition {p} ({size} records)")
            continue
        left_out = 0
        for offset, raw in enumerate(records):
            try:
                env = decode_single_object(raw, schemas).get("envelope", {})
            except (Problem, ValueError, IndexError, KeyError, TypeError, struct.error):
                continue  # not an event of this catalogue: a unit's event would decode
            unit, eid = env.get("unit_id", ""), env.get("election_id", "")
            ours = (unit in units and eid in (election, "")) or (unit == "" and eid == election)
            if ours and f"{p}:{offset}" not in listed:
                left_out += 1
                failures.append(f"{p}:{offset} {env.get('event_id')}: an event of {'unit ' + unit if unit else 'the election'} "
                                "that the package leaves out")
        if not left_out:
            say(f"OK  partition {p}: all {size} records present; every event of the package's units in it is listed")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Verify a Caucus Ledger recount package.")
    here = str(Path(__file__).resolve().parent)
    parser.add_argument("package", nargs="?", default=here, help="package directory (default: this script's)")
    parser.add_argument("--public-key", type=Path, default=None, help="Ed25519 public key (PEM or 64 hex digits) obtained independently")
    args = parser.parse_args(argv)
    return verify(Path(args.package), args.public_key)


if __name__ == "__main__":
    sys.exit(main())
