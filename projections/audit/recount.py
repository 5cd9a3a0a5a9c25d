"""Recount packages: everything about one unit (or a county's units) that an outsider needs to check it.

Why a package and not a query: a recount happens away from the ledger (a courthouse, a campaign's
lawyers). The package carries the evidence itself: each event's bytes exactly as the log stores them,
an RFC 9162 inclusion proof of each against the latest signed checkpoint, that checkpoint and its public
key, the same events as JSON, the paper trail (every event in log order, what it changed and the tally
after it) and a standalone ``verify.py`` that checks bytes, proofs and signature with only ``hashlib``
and ``cryptography``. Everything is taken from one scan of the log, so proofs, events and tallies
describe the same log.

Layout of a package::

    README.md            what is inside and how to verify it
    verify.py            the standalone verifier (``projections/audit/recount_verify.py``)
    manifest.json        units, events (file names, positions, proofs), the checkpoint, SHA-256 of every file
    manifest.sig         the checkpoint key's Ed25519 signature of manifest.json (when the packager holds
                         that key): it binds the derived files (paper trail, tallies) to the signer
    checkpoint.json      the signed checkpoint: canonical bytes, signature, public key
    public-key.pem       the key the checkpoint was verified with when the package was made
    schemas/FP.avsc      the writer schema of each event, by CRC-64-AVRO fingerprint (canonical form)
    events/P-OFFSET.avro an event's bytes as stored; .json the same event rendered (ledger.render)
    proofs/P-OFFSET.json its inclusion proof
    partitions/P.records every record of partition P up to the checkpoint (u32 length + bytes each), for
                         each partition holding the units' events or the election's: verify.py hashes
                         them to the signed root, so it knows every record there, and finds any event of
                         the units the package does not list (an omission no proof of inclusion shows)
    units/UNIT/trail.json, trail.md, tallies.csv   the paper trail and the tally after each event

The election's definition (``ElectionDefined``) and other election-wide events of the unit's election
are included too: D, the SDE ratios and the rule set come from them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ledger.codec import Codec, CodecError, default_codec
from ledger.events import Event, utc_now
from ledger.integrity.checkpoints import SignedCheckpoint
from ledger.integrity.keys import SigningKey, TrustedKey
from ledger.integrity.proofs import InclusionProof, check_proof
from ledger.integrity.scan import LogScan, scan_log
from ledger.integrity.store import CheckpointStore
from ledger.integrity.verify import trusted_checkpoints
from ledger.log.partitioning import partition_for
from ledger.log.port import EventLog, Position
from ledger.render import event_to_json
from projections.reducers import ElectionState, apply_election, is_election_event
from projections.tally import ElectionContext, election_context
from projections.audit.recount_readme import package_readme
from projections.audit.recount_trail import unit_trail

__all__ = ["RecountError", "PackagedEvent", "PackageResult", "build_package", "VERIFY_SCRIPT"]

VERIFY_SCRIPT = "recount_verify.py"
FORMAT = "caucus-ledger recount package v1"
MANIFEST_CONTEXT = b"caucus-ledger recount manifest v1\n"
"""Prefixed to manifest.json before signing, so the signature cannot be passed off as a checkpoint's."""


class RecountError(LookupError):
    """No package can be made as asked (unknown unit or county, nothing to prove against)."""


@dataclass(frozen=True)
class PackagedEvent:
    position: Position
    leaf_index: int
    event: Event[Any]
    raw: bytes
    proof: InclusionProof | None
    duplicate: bool = False

    @property
    def stem(self) -> str:
        return f"{self.position.partition}-{self.position.offset:09d}"


@dataclass
class PackageResult:
    out: Path
    election_id: str
    units: list[str]
    events: list[PackagedEvent]
    checkpoint: SignedCheckpoint | None
    files: dict[str, str] = field(default_factory=dict)

    @property
    def unproven(self) -> list[PackagedEvent]:
        return [e for e in self.events if e.proof is None]

    def to_json(self) -> dict[str, Any]:
        c = self.checkpoint
        return {
            "out": str(self.out),
            "election_id": self.election_id,
            "units": self.units,
            "events": len(self.events),
            "proven": len(self.events) - len(self.unproven),
            "unproven": [str(e.position) for e in self.unproven],
            "checkpoint": None if c is None else {"event_id": c.event_id, "time": c.checkpoint.time.isoformat(),
                                                  "tree_size": c.checkpoint.tree_size, "key_id": c.checkpoint.key_id},
            "files": len(self.files),
        }


# -- reading the log once ------------------------------------------------------------------------------


@dataclass
class _Indexed:
    elections: dict[str, ElectionState]
    election_events: dict[str, list[tuple[int, int]]]  # election id -> (partition, leaf index)
    unit_events: dict[str, list[tuple[int, int]]]


def _index(scan: LogScan, codec: Codec) -> _Indexed:
    """Fold election-wide events and note where each unit's events are (decoding every record once)."""
    elections: dict[str, ElectionState] = {}
    election_events: dict[str, list[tuple[int, int]]] = {}
    unit_events: dict[str, list[tuple[int, int]]] = {}
    seen: set[str] = set()
    for p in range(scan.partitions):
        for i, value in enumerate(scan.parts[p].values):
            try:
                event = codec.decode(value)
            except CodecError as exc:
                raise RecountError(f"the record at {p}:{scan.parts[p].offsets[i]} cannot be decoded: {exc}") from exc
            if is_election_event(event):
                eid = event.envelope.election_id
                if not eid:
                    continue  # checkpoints and other log-wide records
                election_events.setdefault(eid, []).append((p, i))
                if event.event_id not in seen:
                    seen.add(event.event_id)
                    elections[eid] = apply_election(elections.get(eid), event)
            else:
                unit_events.setdefault(event.unit_id, []).append((p, i))
    return _Indexed(elections, election_events, unit_events)


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _resolve_units(ix: _Indexed, unit: str | None, county: str | None, election_id: str | None) -> tuple[str, list[str]]:
    defined = {e: s for e, s in ix.elections.items() if s.definition is not None}
    if election_id is not None and election_id not in defined:
        raise RecountError(f"election {election_id!r} is not defined in the log")
    pool = {election_id: defined[election_id]} if election_id else defined
    if county is not None:
        hits = []
        for eid, s in pool.items():
            assert s.definition is not None
            for c in s.definition.counties:
                if c.county_id == county or _norm(c.name) == _norm(county):
                    hits.append((eid, c.county_id))
        if not hits:
            raise RecountError(f"no county {county!r} in the elections of the log")
        if len(hits) > 1:
            raise RecountError(f"{county!r} names several counties ({', '.join(f'{e}/{c}' for e, c in hits)}); give --election")
        eid, cid = hits[0]
        definition = pool[eid].definition
        assert definition is not None
        return eid, [u.unit_id for u in definition.units if u.county_id == cid]
    assert unit is not None
    hits = []
    for eid, s in pool.items():
        assert s.definition is not None
        for u in s.definition.units:
            if unit == u.unit_id or _norm(unit) in (_norm(u.name), _norm(u.short_name or "")):
                hits.append((eid, u.unit_id))
    if not hits and unit in ix.unit_events:
        return (election_id or next(iter(pool), "")), [unit]
    if not hits:
        raise RecountError(f"no unit {unit!r} (by id, name or short name) in the log")
    exact = [h for h in hits if h[1] == unit]
    if exact:
        hits = exact
    if len(hits) > 1:
        raise RecountError(f"{unit!r} names several units: {', '.join(u for _, u in hits[:10])}; give the unit id")
    return hits[0][0], [hits[0][1]]


def _proof(scan: LogScan, p: int, index: int, event: Event[Any], signed: SignedCheckpoint | None) -> InclusionProof | None:
    if signed is None or index >= signed.checkpoint.partition_sizes[p]:
        return None
    tree = scan.parts[p].tree
    size = signed.checkpoint.partition_sizes[p]
    return InclusionProof(
        event_id=event.event_id,
        event_type=event.type,
        position=Position(p, scan.parts[p].offsets[index]),
        leaf_index=index,
        leaf_hash=tree.leaf(index),
        tree_size=size,
        audit_path=tuple(tree.inclusion_proof(index, size)),
        partition_root=signed.checkpoint.partition_roots[p],
        head_path=tuple(signed.checkpoint.head_tree().inclusion_proof(p)),
        signed=signed,
    )


# -- writing -------------------------------------------------------------------------------------------


_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def _safe(name: str) -> str:
    return _SAFE.sub("_", name) or "_"


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def build_package(
    log: EventLog,
    out: Path,
    *,
    unit: str | None = None,
    county: str | None = None,
    election_id: str | None = None,
    checkpoint_store: CheckpointStore | None = None,
    trusted: Sequence[TrustedKey] = (),
    require_proofs: bool = True,
    rule_set: str | None = None,
    log_name: str = "",
    codec: Codec | None = None,
    overwrite: bool = False,
    signing_key: SigningKey | None = None,
) -> PackageResult:
    """Write the recount package of ``unit`` (id, name or short name) or of every unit of ``county``.

    Proofs are made against the latest checkpoint signed by one of ``trusted`` (from the store and the
    log's own records). With ``require_proofs`` a package is refused when there is no such checkpoint or
    when it does not cover every event; without, such events are packaged unproven (``verify.py`` then
    says INCOMPLETE).
    """
    if (unit is None) == (county is None):
        raise RecountError("name either a unit or a county")
    codec = codec or default_codec()
    scan = scan_log(log, codec)
    ix = _index(scan, codec)
    chosen, unit_ids = _resolve_units(ix, unit, county, election_id)
    if not unit_ids:
        raise RecountError(f"county {county!r} has no reporting units in the definition")
    signed = _latest_trusted(scan, checkpoint_store, trusted, require_proofs)
    per_unit, everything = _collect(scan, ix, codec, chosen, unit_ids, signed)
    _check_proofs(everything, trusted, require_proofs)

    try:
        if out.exists() and not out.is_dir():
            raise RecountError(f"--out {out} is a file, not a directory; choose a new directory")
        if out.exists() and any(out.iterdir()) and not overwrite:
            raise RecountError(f"{out} exists and is not empty; choose a new directory (or --force)")
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a parent that is a file, a directory this user may not write in
        raise RecountError(f"--out {out}: the package's directory cannot be made ({exc.strerror or exc})") from exc
    files: dict[str, bytes] = {}
    ctx = election_context(ix.elections.get(chosen), chosen, rule_set=rule_set)
    partition_files = _evidence_files(files, scan, codec, everything, signed, chosen, unit_ids)
    units_meta = _unit_files(files, unit_ids, per_unit, ctx)
    if signed is not None:
        files["checkpoint.json"] = _dumps(_checkpoint_json(signed)).encode()
        files["public-key.pem"] = TrustedKey(signed.public_key).pem()
    files["verify.py"] = resources.files("projections.audit").joinpath(VERIFY_SCRIPT).read_bytes()

    manifest = _manifest(log_name, scan, chosen, ctx, units_meta, everything, signed, partition_files)
    result = PackageResult(out, chosen, unit_ids, everything, signed)
    files["README.md"] = package_readme(manifest, result).encode()
    manifest["files"] = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}
    files["manifest.json"] = _dumps(manifest).encode()
    if signing_key is not None and signed is not None and signing_key.public_key == signed.public_key:
        files["manifest.sig"] = (signing_key.sign(MANIFEST_CONTEXT + files["manifest.json"]).hex() + "\n").encode()
    for name, data in files.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (out / "verify.py").chmod(0o755)
    result.files = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    return result


def _latest_trusted(
    scan: LogScan, checkpoint_store: CheckpointStore | None, trusted: Sequence[TrustedKey], require_proofs: bool
) -> SignedCheckpoint | None:
    """The newest checkpoint a trusted key signed: what every proof in the package leads to."""
    rows = checkpoint_store.checkpoints() if checkpoint_store is not None else []
    signed = None
    if trusted:
        valid = trusted_checkpoints(scan, rows, trusted)
        signed = valid[-1] if valid else None
    if signed is None and require_proofs:
        why = "no public key to trust was given" if not trusted else "no checkpoint signed by a trusted key covers the log"
        raise RecountError(f"cannot prove the events: {why}; run `caucus checkpoint` first, or package without proofs (--allow-unproven)")
    return signed


def _collect(
    scan: LogScan, ix: _Indexed, codec: Codec, chosen: str, unit_ids: list[str], signed: SignedCheckpoint | None
) -> tuple[dict[str, list[PackagedEvent]], list[PackagedEvent]]:
    """The election's events and each unit's, decoded and proven; a second copy of an event is marked."""

    def packaged(p: int, i: int, seen: set[str]) -> PackagedEvent:
        event = codec.decode(scan.parts[p].values[i])
        dup = event.event_id in seen
        seen.add(event.event_id)
        return PackagedEvent(Position(p, scan.parts[p].offsets[i]), i, event, scan.parts[p].values[i],
                             _proof(scan, p, i, event, signed), dup)  # fmt: skip

    seen: set[str] = set()
    election_pe = [packaged(p, i, seen) for p, i in ix.election_events.get(chosen, [])]
    per_unit: dict[str, list[PackagedEvent]] = {}
    for uid in unit_ids:
        locs = sorted(ix.unit_events.get(uid, []))
        per_unit[uid] = [pe for pe in (packaged(p, i, seen) for p, i in locs) if pe.event.envelope.election_id in (chosen, "")]
    return per_unit, election_pe + [pe for uid in unit_ids for pe in per_unit[uid]]


def _check_proofs(everything: list[PackagedEvent], trusted: Sequence[TrustedKey], require_proofs: bool) -> None:
    missing = [pe for pe in everything if pe.proof is None]
    if missing and require_proofs:
        raise RecountError(
            f"{len(missing)} event(s) are newer than the latest checkpoint (first: {missing[0].position}); "
            "run `caucus checkpoint` to cover them, or package without proofs (--allow-unproven)"
        )
    for pe in everything:
        if pe.proof is not None:
            problems = check_proof(pe.proof, trusted)
            if problems:
                raise RecountError(f"the proof of {pe.position} does not verify: {'; '.join(problems)}")


def _evidence_files(
    files: dict[str, bytes], scan: LogScan, codec: Codec, everything: list[PackagedEvent],
    signed: SignedCheckpoint | None, chosen: str, unit_ids: list[str],
) -> list[dict[str, Any]]:
    """Events, proofs, writer schemas and whole partitions into ``files``; return the partition files."""
    schemas: dict[str, str] = {}
    by_fp = {info.fingerprint: info for info in codec.schemas()}
    for pe in everything:
        files[f"events/{pe.stem}.avro"] = pe.raw
        files[f"events/{pe.stem}.json"] = _dumps(event_to_json_at(pe)).encode()
        if pe.proof is not None:
            files[f"proofs/{pe.stem}.json"] = _dumps(pe.proof.to_json()).encode()
        # Named by the bytes the record carries: records written before the codec's fingerprint byte
        # order was fixed carry it reversed, and verify.py accepts either order.
        header = bytes(pe.raw[2:10])
        info = by_fp.get(header) or by_fp.get(header[::-1])
        if info is not None:
            schemas[header.hex()] = info.canonical
    partition_files = []
    if signed is not None:
        wanted = {pe.position.partition for pe in everything}
        wanted |= {partition_for(uid, scan.partitions) for uid in unit_ids}
        wanted.add(partition_for(f"election:{chosen}", scan.partitions))
        for p in sorted(wanted):
            size = signed.checkpoint.partition_sizes[p]
            values = scan.parts[p].values[:size]
            files[f"partitions/{p}.records"] = b"".join(len(v).to_bytes(4, "big") + v for v in values)
            partition_files.append({"partition": p, "file": f"partitions/{p}.records", "records": size})
            for value in values:
                header = bytes(value[2:10])
                info = by_fp.get(header) or by_fp.get(header[::-1])
                if info is not None:
                    schemas[header.hex()] = info.canonical
    for fp, canonical in schemas.items():
        files[f"schemas/{fp}.avsc"] = (canonical + "\n").encode()
    return partition_files


def _unit_files(
    files: dict[str, bytes], unit_ids: list[str], per_unit: dict[str, list[PackagedEvent]], ctx: ElectionContext
) -> list[dict[str, Any]]:
    """Each unit's paper trail and tallies into ``files``; return what the manifest says of each unit."""
    units_meta = []
    for uid in unit_ids:
        doc, md, tallies = unit_trail(uid, per_unit[uid], ctx)
        folder = f"units/{_safe(uid)}"
        files[f"{folder}/trail.json"] = _dumps(doc).encode()
        files[f"{folder}/trail.md"] = md.encode()
        files[f"{folder}/tallies.csv"] = tallies.encode()
        final = doc["final_tally"]
        units_meta.append({
            "unit_id": uid, "name": doc["name"], "county": doc["county"], "folder": folder,
            "events": [f"events/{pe.stem}.avro" for pe in per_unit[uid]],
            "final": None if final is None else {"status": final["status"], "stage": final["stage"],
                                                 "cds": final["cds"], "sde": final["sde_display"]},
        })
    return units_meta


def _checkpoint_json(signed: SignedCheckpoint) -> dict[str, Any]:
    c = signed.checkpoint
    return {
        "event_id": signed.event_id, "position": None if signed.position is None else str(signed.position),
        "time": c.time.isoformat(), "scope": c.scope, "key_id": c.key_id, "tree_size": c.tree_size,
        "root_hash": c.root_hash.hex(), "partition_sizes": list(c.partition_sizes),
        "partition_roots": [r.hex() for r in c.partition_roots], "signed_bytes": c.to_bytes().hex(),
        "signature": signed.signature.hex(), "public_key": signed.public_key.hex(),
    }


def _manifest(
    log_name: str, scan: LogScan, chosen: str, ctx: ElectionContext, units_meta: list[dict[str, Any]],
    everything: list[PackagedEvent], signed: SignedCheckpoint | None, partition_files: list[dict[str, Any]],
) -> dict[str, Any]:
    """manifest.json without its file digests (they are added once every other file is made)."""
    return {
        "format": FORMAT,
        "created_at": utc_now().replace(microsecond=0).isoformat(),
        "log": log_name,
        "log_records": scan.records,
        "election_id": chosen,
        "rule_set": ctx.rule_set_name,
        "units": units_meta,
        "events": [
            {"position": str(pe.position), "leaf_index": pe.leaf_index, "event_id": pe.event.event_id,
             "type": pe.event.type, "unit_id": pe.event.unit_id, "recorded_at": pe.event.recorded_at.isoformat(),
             "duplicate": pe.duplicate, "avro": f"events/{pe.stem}.avro", "json": f"events/{pe.stem}.json",
             "proof": None if pe.proof is None else f"proofs/{pe.stem}.json"}
            for pe in everything
        ],
        "checkpoint": None if signed is None else {"event_id": signed.event_id, "time": signed.checkpoint.time.isoformat(),
                                                   "key_id": signed.checkpoint.key_id, "file": "checkpoint.json"},
        "partitions": partition_files,
        "files": {},
    }


def event_to_json_at(pe: PackagedEvent) -> dict[str, Any]:
    data = event_to_json(pe.event)
    data["position"] = str(pe.position)
    return data
