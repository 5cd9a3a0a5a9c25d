"""The README.md of a recount package: what is inside, how to verify it, and what it does not prove.

Its own module because it is text for the people who receive the package (a courthouse, a campaign's
lawyers), written from the manifest, and changes for other reasons than the package's contents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from projections.audit.recount import PackageResult

__all__ = ["package_readme"]


def package_readme(manifest: dict[str, Any], result: PackageResult) -> str:
    c = result.checkpoint
    units = manifest["units"]
    lines = [
        f"# Recount package: {', '.join((u['name'] or u['unit_id']) for u in units[:3])}{' and others' if len(units) > 3 else ''}",
        "",
        f"Election `{manifest['election_id']}` (rule set {manifest['rule_set']}); made {manifest['created_at']} "
        f"from {manifest['log'] or 'the ledger log'} ({manifest['log_records']} records).",
        "",
        "## Units",
        "",
        "| unit | name | county | events | CDs as tallied now |",
        "|---|---|---|---|---|",
    ]
    for u in units:
        final = u["final"]
        cds = "not reporting" if final is None else ", ".join(f"{k} {v}" for k, v in final["cds"].items() if v) or "none"
        lines.append(f"| {u['unit_id']} | {u['name'] or ''} | {u['county'] or ''} | {len(u['events'])} | {cds} |")
    lines += ["", "## How to verify", ""]
    if c is None:
        lines += [
            "**No signed checkpoint covered these events when the package was made**, so it holds no inclusion",
            "proofs. `verify.py` still checks that each event's JSON matches its bytes, and reports INCOMPLETE.",
            "",
        ]
    lines += [
        "You need Python 3.9 or newer and the `cryptography` package (`pip install cryptography`). Nothing",
        "else: `verify.py` is short, imports nothing from the ledger, and is meant to be read.",
        "",
        "```",
        "python3 verify.py --public-key PARTY_KEY.pem   # the key you obtained from the party yourself",
        "python3 verify.py                              # or the key in this package (compare its key id!)",
        "```",
        "",
        "It prints `VERIFIED` and exits 0 when, for every event:",
        "",
        "1. `SHA-256(0x00 || bytes of events/P-OFFSET.avro)` is the leaf hash its proof starts from (RFC 9162);",
        "2. the proof's audit path leads from that leaf to the root of the event's partition, and the partition's",
        "   head (`u32 partition || u64 size || root`, hashed as a leaf) leads to the root of roots, with size and root",
        "   exactly as written in the signed checkpoint bytes (`checkpoint.json`, field `signed_bytes`);",
        "3. the Ed25519 signature over those bytes verifies with the public key;",
        "4. the Avro bytes, decoded with the schema their fingerprint names (`schemas/`), say the same as the",
        "   event's `.json` file.",
        "",
        "It also checks every file against the SHA-256 listed in `manifest.json`. The manifest is not signed: this",
        "catches damage to the derived files (`units/*/trail.*`, `tallies.csv`), not forgery. Those are computed by",
        "the ledger's caucus math from the events; recompute them with `caucus trail UNIT` on a copy of the log.",
        "",
        "What the package does not prove: that the log holds no *other* event about these units. Inclusion proofs",
        "show that these events are in the signed log; to see that none is missing, verify the whole log against",
        "the same checkpoint (`caucus verify --public-key KEY`) and list the unit's events (`caucus trail UNIT`).",
        "",
    ]
    if c is not None:
        k = c.checkpoint
        lines += [
            "## The checkpoint",
            "",
            f"- signed {k.time.isoformat()} by key id `{k.key_id}` (public key `{c.public_key.hex()}`)",
            f"- covers {k.tree_size} records in {k.partitions} partitions; root of roots `{k.root_hash.hex()}`",
            f"- recorded in the log as event `{c.event_id}`{'' if c.position is None else f' at {c.position}'}",
            "",
        ]
    lines += [
        "## Files",
        "",
        "- `events/P-OFFSET.avro`: the event exactly as the log stores it (Avro single-object encoding: `C3 01`,",
        "  the writer schema's 8-byte fingerprint, the body); `P-OFFSET.json`: the same event, readable.",
        "- `proofs/P-OFFSET.json`: its inclusion proof (leaf index, audit path, partition root, head path, checkpoint).",
        "- `units/UNIT/trail.md` and `trail.json`: every event of the unit in log order, with actor, channel, times,",
        "  reason, what it changed and the tally after it; `tallies.csv`: the tally after each event, per candidate.",
        "- `checkpoint.json`, `public-key.pem`, `schemas/`, `manifest.json`, `verify.py`.",
        "",
    ]
    if result.unproven:
        lines += [f"**{len(result.unproven)} event(s) have no proof** (newer than the checkpoint): "
                  + ", ".join(str(e.position) for e in result.unproven[:20]), ""]
    return "\n".join(lines)
