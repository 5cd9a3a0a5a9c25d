"""What a reader sees beside a record's value, and what holds it: the leaf covers the value; the key
and the derived headers are checked against it (``test_insider_rewrite``); the log's append time is
held to the signed checkpoints' times (``ledger.integrity.append_times``); the writer header by the
column roots a checkpoint signs (``ledger.integrity.columns``), which the signer's record and the
witnesses (directory and URL) hold too, so a key holder who re-signs a rewritten writer is caught."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledger.integrity.append_times import TOLERANCE_MS

Site = Any  # the conftest's ``Site``
MINUTES = 60_000


def _set_time(db: Path, tamper: Any, partition: int, offset: int, ms: int) -> None:
    tamper.in_place(db, ('UPDATE log_records SET timestamp_ms = ? WHERE partition = ? AND "offset" = ?', (ms, partition, offset)))


def test_an_append_time_moved_across_a_checkpoint_is_found(checkpointed: Any, tamper: Any, tmp_path: Path) -> None:
    _, report = checkpointed.verify()
    assert report.ok, report.findings
    first, second = (s.checkpoint for s in report.checkpoints)
    # A partition with records appended between the two checkpoints.
    p = next(q for q in range(first.partitions) if 0 < first.partition_sizes[q] < second.partition_sizes[q])
    covered, later = first.partition_sizes[p] - 1, first.partition_sizes[p]
    t1 = first.timestamp_micros // 1000

    backdated = checkpointed.copy_to(tmp_path / "backdated")
    _set_time(backdated.log_path, tamper, p, later, t1 - 10 * MINUTES)  # "it was in before the first checkpoint"
    _, bad = backdated.verify()
    assert [(f.kind, str(f.position)) for f in bad.findings] == [("append-time", f"{p}:{later}")], bad.findings
    assert "before checkpoint" in bad.findings[0].message and "does not cover it" in bad.findings[0].message

    postdated = checkpointed.copy_to(tmp_path / "postdated")
    _set_time(postdated.log_path, tamper, p, covered, second.timestamp_micros // 1000 + 10 * MINUTES)
    _, bad = postdated.verify()
    assert [(f.kind, str(f.position)) for f in bad.findings] == [("append-time", f"{p}:{covered}")], bad.findings
    assert "which covers it" in bad.findings[0].message

    # Within the tolerance around the checkpoints nothing can tell (the bound is the checkpoints' spacing).
    nudged = checkpointed.copy_to(tmp_path / "nudged")
    _set_time(nudged.log_path, tamper, p, later, t1 - TOLERANCE_MS // 2)
    assert nudged.verify()[1].ok


def test_an_append_time_taken_away_is_found(checkpointed: Any, tamper: Any, tmp_path: Path) -> None:
    """A time of 0 or less reads as "this log records no time", which the check leaves alone: set on a
    few records of a log that records one for every record, it freed them of the check unseen."""
    _, report = checkpointed.verify()
    first = report.checkpoints[0].checkpoint
    p = next(q for q in range(first.partitions) if first.partition_sizes[q] >= 2)
    blanked = checkpointed.copy_to(tmp_path / "blanked")
    _set_time(blanked.log_path, tamper, p, 0, 0)
    _set_time(blanked.log_path, tamper, p, 1, -1)
    _, bad = blanked.verify()
    assert [(f.kind, str(f.position)) for f in bad.findings] == [("append-time", f"{p}:0")], bad.findings
    assert "taken away" in bad.findings[0].message and "1 more record" in bad.findings[0].message


def test_caucus_verify_finds_a_backdated_record(tmp_path: Path, site_at: Callable[[Path], Site]) -> None:
    site = site_at(tmp_path)
    site.run("demo")
    db = sqlite3.connect(site.data / "log.sqlite3")
    try:
        db.execute("DROP TRIGGER log_records_no_update")
        seq, partition, offset, ms = db.execute(
            'SELECT seq, partition, "offset", timestamp_ms FROM log_records ORDER BY seq DESC LIMIT 1').fetchone()
        db.execute("UPDATE log_records SET timestamp_ms = ? WHERE seq = ?", (ms - 60 * MINUTES, seq))
        db.commit()
    finally:
        db.close()
    found = json.loads(site.run("verify", "--public-key", site.public_key, "--json", code=1).stdout)["findings"]
    assert [(f["kind"], f["position"]) for f in found] == [("append-time", f"{partition}:{offset}")], found


def test_a_changed_writer_header_is_found(tmp_path: Path, site_at: Callable[[Path], Site]) -> None:
    """The writer is not in the value: the checkpoint signs the roots of a tree over it (``columns``)."""
    site = site_at(tmp_path)
    site.run("demo")
    db = sqlite3.connect(site.data / "log.sqlite3")
    try:
        db.execute("DROP TRIGGER log_records_no_update")
        seq, partition, offset, headers = db.execute(
            'SELECT seq, partition, "offset", headers FROM log_records WHERE instr(CAST(headers AS TEXT), \'caucus-writer\') > 0 '
            "ORDER BY seq LIMIT 1").fetchone()
        changed = {**json.loads(headers), "caucus-writer": "official:someone-else"}
        db.execute("UPDATE log_records SET headers = ? WHERE seq = ?", (json.dumps(changed), seq))
        db.commit()
    finally:
        db.close()
    found = json.loads(site.run("verify", "--public-key", site.public_key, "--json", code=1).stdout)["findings"]
    # the column roots the checkpoint signed, and the seal the intake put on the record (over its writer)
    assert [(f["kind"], f["position"]) for f in found] == [("headers", f"{partition}:0"), ("writer", f"{partition}:{offset}")], found
    assert "writer" in found[0]["message"] and "does not match the record's writer" in found[1]["message"]


def test_logs_checkpointed_before_column_roots_still_verify(checkpointed: Any) -> None:
    """A checkpoint without column roots (version 2, as every one made before) is checked as before."""
    from ledger.codec import default_codec
    from ledger.log.sqlite import SqliteLog

    codec = default_codec()
    with SqliteLog(checkpointed.log_path) as log:
        signed = [codec.decode(rec.value) for rec in log.read() if b"caucus checkpoint" in rec.value]
    assert len(signed) == 2 and all(e.payload.column_roots and e.payload.column_signature for e in signed)
    assert checkpointed.verify()[1].ok


def _rewrite_a_writer(site: Site, reseal: Callable[..., int]) -> None:
    """The insider's edit of a header only: one record's writer changed and sealed again with the
    signing key they hold, the last checkpoint's event (no checkpoint covers it, so the value trees keep
    their roots) cut, the checkpoint store deleted."""
    db = sqlite3.connect(site.data / "log.sqlite3")
    try:
        db.execute("DROP TRIGGER log_records_no_update")
        db.execute("DROP TRIGGER log_records_no_delete")
        seq, headers = db.execute("SELECT seq, headers FROM log_records WHERE instr(CAST(headers AS TEXT), "
                                  "'caucus-writer') > 0 ORDER BY seq LIMIT 1 OFFSET 3").fetchone()
        db.execute("UPDATE log_records SET headers = ? WHERE seq = ?",
                   (json.dumps({**json.loads(headers), "caucus-writer": "system:intake (really: an official)"}), seq))
        assert reseal(db, site.keys / "checkpoint-key.pem", f"seq = {seq}") == 1
        cut = db.execute("DELETE FROM log_records WHERE seq = (SELECT MAX(seq) FROM log_records WHERE "
                         "instr(value, CAST('caucus checkpoint' AS BLOB)) > 0)").rowcount
        assert cut == 1
        db.commit()
    finally:
        db.close()
    (site.data / "checkpoints.sqlite3").unlink()


def test_a_key_holder_who_rewrites_a_writer_and_re_signs_is_caught_by_the_witnesses(
    tmp_path: Path, site_at: Callable[[Path], Site], serve_witness: Callable[..., Any], reseal: Callable[..., int]
) -> None:
    site = site_at(tmp_path / "operator")
    site.run("demo")  # one checkpoint, its event the last record of its partition
    served = serve_witness(tmp_path / "newsroom", site.public_key)
    for witness in (str(site.witness), served.url):
        site.run("witness", witness, "--public-key", site.public_key)

    _rewrite_a_writer(site, reseal)
    refused = site.run("checkpoint", code=1)  # the signer's record holds the column roots it signed
    assert "REFUSED TO SIGN" in refused.stderr and "(the writer)" in refused.stderr
    (site.keys / "checkpoint-key.signed.json").unlink()
    site.run("checkpoint")
    site.run("verify", "--public-key", site.public_key)  # a genuine signature over the rewritten headers
    for witness in (str(site.witness), served.url):
        caught = site.run("verify", "--public-key", site.public_key, "--against", witness, "--json", code=1)
        found = json.loads(caught.stdout)["findings"]
        assert [f["kind"] for f in found] == ["witness"] and "(the writer)" in found[0]["message"], found
        refused = site.run("witness", witness, "--public-key", site.public_key, code=1)
        assert "REFUSED TO COSIGN" in refused.stderr and "headers" in refused.stderr, refused.stderr


def test_checkpoints_of_the_same_size_and_millisecond_are_held_to_as_well() -> None:
    """Two signers at the same moment sign the same sizes in the same millisecond: the append-time check
    orders them by size and time alone and holds the records to both."""
    from ledger.integrity.append_times import append_time_problems
    from ledger.integrity.checkpoints import Checkpoint, sign_checkpoint
    from ledger.integrity.keys import generate_key

    key = generate_key()
    at_ms = 1_700_000_000_000

    def signed(event_id: str) -> Any:
        cp = Checkpoint(scope="caucus.events", timestamp_micros=at_ms * 1000, key_id=key.key_id,
                        partition_sizes=(2,), partition_roots=(bytes(32),))
        return sign_checkpoint(cp, key, event_id=event_id)

    both = [signed("a"), signed("b")]
    assert append_time_problems(0, [at_ms - 5, at_ms - 1, at_ms + 10], both) == []
    problems = append_time_problems(0, [at_ms - 5, at_ms + TOLERANCE_MS + 1, at_ms + 10], both)
    assert [i for i, _ in problems] == [1], problems
    problems = append_time_problems(0, [at_ms - 5, at_ms - 1, at_ms - TOLERANCE_MS - 1], both)
    assert [i for i, _ in problems] == [2], problems
    assert append_time_problems(0, [0, -1, 0], both) == [], "a log that records no time is not held to it"
    assert [i for i, _ in append_time_problems(0, [at_ms - 5, 0, at_ms + 10], both)] == [1]
