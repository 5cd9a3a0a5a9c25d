"""What a reader sees beside a record's value, and what holds it: the leaf covers the value; the key
and the derived headers are checked against it (``test_insider_rewrite``); the log's append time is
held to the signed checkpoints' times (``ledger.integrity.append_times``); the writer header is held
by nothing yet, which the last test records."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

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


@pytest.mark.xfail(strict=True, reason="the writer header is covered by neither the leaf nor the checkpoint: "
                   "covering it needs a versioned leaf or a signed commitment to the columns")
def test_a_changed_writer_header_is_found(tmp_path: Path, site_at: Callable[[Path], Site]) -> None:
    site = site_at(tmp_path)
    site.run("demo")
    db = sqlite3.connect(site.data / "log.sqlite3")
    try:
        db.execute("DROP TRIGGER log_records_no_update")
        seq, headers = db.execute("SELECT seq, headers FROM log_records WHERE headers LIKE '%caucus-writer%' "
                                  "ORDER BY seq LIMIT 1").fetchone()
        changed = {**json.loads(headers), "caucus-writer": "official:someone-else"}
        db.execute("UPDATE log_records SET headers = ? WHERE seq = ?", (json.dumps(changed), seq))
        db.commit()
    finally:
        db.close()
    site.run("verify", "--public-key", site.public_key, code=1)
