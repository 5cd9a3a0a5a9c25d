"""Tampering with the embedded log is detected and located (see conftest.py for how it is simulated)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from ledger.codec import default_codec
from ledger.integrity.checkpoints import Checkpoint, sign_checkpoint
from ledger.integrity.issue import RefusedToSign, issue_checkpoint
from ledger.integrity.keys import SigningKey
from ledger.integrity.proofs import ProofError, check_proof, prove_event
from ledger.integrity.store import STORE_FILE, SqliteCheckpointStore
from ledger.integrity.verify import Report, trusted_checkpoints, verify_scan
from ledger.integrity.scan import scan_log
from ledger.log.partitioning import partition_for
from ledger.log.port import Position
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog


def _covered(ledger: Any, which: int = -1) -> tuple[int, ...]:
    """Partition sizes of a stored checkpoint (default: the latest)."""
    store = ledger.store()
    try:
        rows = store.checkpoints()
    finally:
        store.close()
    return rows[which].signed.checkpoint.partition_sizes


def _busiest(ledger: Any) -> int:
    sizes = _covered(ledger, 0)
    return max(range(len(sizes)), key=lambda p: sizes[p])


def _kinds_at(report: Report, position: Position) -> set[str]:
    return {f.kind for f in report.findings if f.position == position}


def test_an_intact_log_verifies(checkpointed: Any) -> None:
    scan, report = checkpointed.verify()
    assert report.ok, report.findings
    assert len(report.checkpoints) == 2
    assert report.records == 112  # 110 events and 2 checkpoint events
    assert sum(report.uncovered.values()) == 11  # 10 events and the last checkpoint's own event
    assert report.first_bad is None


def test_changing_one_byte_of_one_event_is_found_at_its_position(checkpointed: Any, tamper: Any, flip: Callable[[bytes, bytes], bytes], tmp_path: Path) -> None:
    p = _busiest(checkpointed)
    twin = checkpointed.copy_to(tmp_path / "twin")
    # Offset 3 holds a ResultReported or TieBroken from the first checkpoint's range.
    value = tamper.value_at(twin.log_path, p, 3)
    assert b"chair-" in value
    changed = flip(value, b"ia-2020")
    assert len(changed) == len(value) and sum(a != b for a, b in zip(changed, value)) == 1
    tamper.in_place(twin.log_path, ('UPDATE log_records SET value=? WHERE partition=? AND "offset"=?', (changed, p, 3)))
    _, report = twin.verify()
    assert not report.ok
    assert report.first_bad == Position(p, 3)
    (finding,) = [f for f in report.findings if f.position == Position(p, 3)]
    assert finding.kind == "altered"
    assert "now reads as" in finding.message  # still valid Avro: only the hash tells


def test_a_changed_byte_that_breaks_the_encoding_is_reported_as_undecodable(checkpointed: Any, tamper: Any, tmp_path: Path) -> None:
    p = _busiest(checkpointed)
    twin = checkpointed.copy_to(tmp_path / "twin")
    value = tamper.value_at(twin.log_path, p, 1)
    broken = value[:4] + bytes([value[4] ^ 0xFF]) + value[5:]  # inside the schema fingerprint
    tamper.in_place(twin.log_path, ('UPDATE log_records SET value=? WHERE partition=? AND "offset"=?', (broken, p, 1)))
    _, report = twin.verify()
    assert report.first_bad == Position(p, 1)
    assert any("no longer decodes" in f.message for f in report.findings)


def test_deleting_a_row_in_place_leaves_a_hole_that_is_reported(checkpointed: Any, tamper: Any, tmp_path: Path) -> None:
    p = _busiest(checkpointed)
    twin = checkpointed.copy_to(tmp_path / "twin")
    tamper.in_place(twin.log_path, ('DELETE FROM log_records WHERE partition=? AND "offset"=?', (p, 4)))
    _, report = twin.verify()
    assert report.first_bad == Position(p, 4)
    assert _kinds_at(report, Position(p, 4)) == {"gap", "missing"}


def test_deleting_one_event_from_a_rebuilt_log_is_found(checkpointed: Any, tamper: Any, tmp_path: Path) -> None:
    p = _busiest(checkpointed)
    forged = tmp_path / "forged.sqlite3"
    with checkpointed.log() as src, SqliteLog(forged, partitions=4) as dst:
        tamper.rebuild(src, dst, lambda parts: parts[p].pop(5))
    _, report = checkpointed.verify(log_path=forged)
    assert report.first_bad == Position(p, 5)
    assert "missing" in _kinds_at(report, Position(p, 5))
    assert not any(f.kind == "gap" for f in report.findings)  # renumbered: only the hashes tell


def test_swapping_two_events_is_found(checkpointed: Any, tamper: Any, tmp_path: Path) -> None:
    p = _busiest(checkpointed)
    forged = tmp_path / "forged.sqlite3"

    def swap(parts: dict[int, list[Any]]) -> None:
        parts[p][6], parts[p][7] = parts[p][7], parts[p][6]

    with checkpointed.log() as src, SqliteLog(forged, partitions=4) as dst:
        tamper.rebuild(src, dst, swap)
    _, report = checkpointed.verify(log_path=forged)
    assert report.first_bad == Position(p, 6)
    (finding,) = [f for f in report.findings if f.position == Position(p, 6)]
    assert finding.kind == "reordered" and "swapped" in finding.message


def test_a_fork_of_the_same_size_after_a_checkpoint_is_found(checkpointed: Any, tamper: Any, events_factory: Any, tmp_path: Path) -> None:
    """From offset 2 of one partition on, a different history with exactly as many records."""
    p = _busiest(checkpointed)
    forged = tmp_path / "forged.sqlite3"
    codec = default_codec()

    def fork(parts: dict[int, list[Any]]) -> None:
        wanted = len(parts[p]) - 2
        mine = [e for e in events_factory(400, tag="forger") if partition_for(e.key, 4) == p][:wanted]
        assert len(mine) == wanted
        parts[p][2:] = [type(parts[p][0])(e.key, e.event_id, codec.encode(e)) for e in mine]

    with checkpointed.log() as src, SqliteLog(forged, partitions=4) as dst:
        tamper.rebuild(src, dst, fork)
        assert dst.high_watermarks() == src.high_watermarks()  # same size
    _, report = checkpointed.verify(log_path=forged)
    assert report.first_bad == Position(p, 2)
    assert "altered" in _kinds_at(report, Position(p, 2))


def test_a_shorter_fork_after_a_checkpoint_is_found(checkpointed: Any, tamper: Any, tmp_path: Path) -> None:
    """Every partition cut back to fewer records than the first checkpoint covered."""
    first = _covered(checkpointed, 0)
    forged = tmp_path / "forged.sqlite3"

    def cut(parts: dict[int, list[Any]]) -> None:
        for q in parts:
            del parts[q][max(0, first[q] - 3):]

    with checkpointed.log() as src, SqliteLog(forged, partitions=4) as dst:
        tamper.rebuild(src, dst, cut)
    _, report = checkpointed.verify(log_path=forged)
    by_partition = report.first_bad_by_partition()
    for q, n in enumerate(first):
        if n:
            assert by_partition[q] == Position(q, max(0, n - 3)), (q, report.findings)
            assert "truncated" in _kinds_at(report, Position(q, max(0, n - 3)))
    # The checkpoint events went with the cut; the store still has them.
    assert sum(f.kind == "checkpoint-missing" for f in report.findings) == 2


def test_without_the_store_damage_is_located_between_two_checkpoints(checkpointed: Any, tamper: Any, flip: Any, tmp_path: Path) -> None:
    """An auditor holding only the log and the public key: the log's own checkpoint events bound the damage."""
    p = _busiest(checkpointed)
    first, second = _covered(checkpointed, 0), _covered(checkpointed, 1)
    assert second[p] > first[p] + 1
    target = first[p] + 1  # covered by the second checkpoint only
    twin = checkpointed.copy_to(tmp_path / "twin")
    value = tamper.value_at(twin.log_path, p, target)
    tamper.in_place(twin.log_path, ('UPDATE log_records SET value=? WHERE partition=? AND "offset"=?', (flip(value, b"ia-2020"), p, target)))
    _, report = twin.verify(store=False)
    (finding,) = report.findings
    assert finding.kind == "mismatch"
    assert finding.position == Position(p, first[p])  # the first record the first checkpoint did not vouch for
    assert f"{p}:{first[p]}..{p}:{second[p] - 1}" in finding.message


def test_a_store_whose_leaf_hashes_were_edited_is_caught(checkpointed: Any, tmp_path: Path) -> None:
    import sqlite3

    twin = checkpointed.copy_to(tmp_path / "twin")
    conn = sqlite3.connect(str(twin.data_dir / STORE_FILE))
    conn.execute('UPDATE checkpoint_leaves SET leaf_hash=? WHERE partition=0 AND "offset"=0', (b"\x00" * 32,))
    conn.commit()
    conn.close()
    _, report = twin.verify()
    assert [f.kind for f in report.findings] == ["store-altered"]


def test_a_wrong_key_fails_verification(checkpointed: Any, other_key: SigningKey) -> None:
    _, report = checkpointed.verify(trusted=[other_key.trusted])
    assert not report.ok
    assert [f.kind for f in report.findings] == ["signature", "signature"]
    assert all("not a trusted key" in f.message for f in report.findings)
    assert report.checkpoints == []


def test_a_checkpoint_forged_with_another_key_is_caught(checkpointed: Any, other_key: SigningKey) -> None:
    with checkpointed.log() as log:
        # A correct statement about the log, but signed with the forger's key.
        scan = scan_log(log)
        parts = [scan.parts[q] for q in range(scan.partitions)]
        statement = Checkpoint("caucus.events", 1, other_key.key_id, tuple(ps.size for ps in parts), tuple(ps.tree.root() for ps in parts))
        position = Journal(log).append(sign_checkpoint(statement, other_key, event_id="forged-1").to_event())
    _, report = checkpointed.verify()
    (finding,) = report.findings
    assert finding.kind == "signature" and finding.position == position and finding.checkpoint == "forged-1"


def test_a_fork_signed_after_the_fact_is_inconsistent_with_the_earlier_checkpoint(checkpointed: Any, tamper: Any, flip: Any, tmp_path: Path) -> None:
    """The signer is tricked into signing a rewritten log (its old checkpoints hidden from it); the
    auditor, holding the old checkpoint, finds the two checkpoints inconsistent."""
    p = _busiest(checkpointed)
    forged = tmp_path / "forged.sqlite3"
    with checkpointed.log() as src:
        checkpoint_ids = {f.signed.event_id for f in scan_log(src).checkpoints if f.signed}

    def rewrite(parts: dict[int, list[Any]]) -> None:
        for q in parts:
            parts[q][:] = [r for r in parts[q] if r.event_id not in checkpoint_ids]
        parts[p][2].value = flip(parts[p][2].value, b"ia-2020")

    with checkpointed.log() as src, SqliteLog(forged, partitions=4) as dst:
        tamper.rebuild(src, dst, rewrite)
        blank = SqliteCheckpointStore(tmp_path / "blank.sqlite3")
        later = issue_checkpoint(dst, blank, checkpointed.key, scope="caucus.events")
        blank.close()
    _, report = checkpointed.verify(log_path=forged)
    kinds = {f.kind for f in report.findings}
    assert {"checkpoint-missing", "altered", "inconsistent"} <= kinds
    assert report.first_bad == Position(p, 2)
    inconsistent = [f for f in report.findings if f.kind == "inconsistent"]
    assert any(f.checkpoint == later.signed.event_id and f"partition {p}" in f.message for f in inconsistent)


def test_checkpoint_refuses_to_sign_a_tampered_log(checkpointed: Any, tamper: Any, tmp_path: Path) -> None:
    p = _busiest(checkpointed)
    twin = checkpointed.copy_to(tmp_path / "twin")
    tamper.in_place(twin.log_path, ('DELETE FROM log_records WHERE partition=? AND "offset"=?', (p, 0)))
    with pytest.raises(RefusedToSign) as refused:
        twin.checkpoint()
    assert refused.value.report.first_bad == Position(p, 0)
    assert len(twin.store().checkpoints()) == 2


def test_every_checkpointed_event_has_an_inclusion_proof_that_verifies(checkpointed: Any, tamper: Any) -> None:
    scan, report = checkpointed.verify()
    latest = report.checkpoints[-1]
    with checkpointed.log() as log:
        records = tamper.records(log)
    proved = 0
    for p, recs in records.items():
        for offset, rec in enumerate(recs):
            if offset < latest.checkpoint.partition_sizes[p]:
                proof = prove_event(scan, rec.event_id, report.checkpoints)
                assert proof.position == Position(p, offset) and proof.tree_size == latest.checkpoint.partition_sizes[p]
                assert check_proof(proof, checkpointed.trusted) == []
                proved += 1
            else:
                with pytest.raises(ProofError, match="newer than the latest checkpoint"):
                    prove_event(scan, rec.event_id, report.checkpoints)
    assert proved == latest.checkpoint.tree_size
    with pytest.raises(ProofError, match="not in the log"):
        prove_event(scan, "00000000-0000-0000-0000-000000000000", report.checkpoints)


def test_a_proof_fails_for_a_changed_event_and_under_a_wrong_key(checkpointed: Any, tamper: Any, flip: Any, other_key: SigningKey, tmp_path: Path) -> None:
    p = _busiest(checkpointed)
    with checkpointed.log() as log:
        target = tamper.records(log)[p][3]
    twin = checkpointed.copy_to(tmp_path / "twin")
    value = tamper.value_at(twin.log_path, p, 3)
    tamper.in_place(twin.log_path, ('UPDATE log_records SET value=? WHERE partition=? AND "offset"=?', (flip(value, b"ia-2020"), p, 3)))
    scan, _ = twin.verify()
    store = twin.store()
    checkpoints = trusted_checkpoints(scan, store.checkpoints(), twin.trusted)
    store.close()
    proof = prove_event(scan, target.event_id, checkpoints)
    problems = check_proof(proof, twin.trusted)
    assert len(problems) == 1 and "audit path" in problems[0]
    intact_scan, _ = checkpointed.verify()
    good = prove_event(intact_scan, target.event_id, checkpoints)
    assert check_proof(good, checkpointed.trusted) == []
    assert any("not a trusted key" in p for p in check_proof(good, [other_key.trusted]))


def test_verify_scan_without_any_checkpoint_reports_holes_only(ledger: Any, tamper: Any) -> None:
    ledger.append(30)
    p = partition_for("IA-000", 4)
    tamper.in_place(ledger.log_path, ('DELETE FROM log_records WHERE partition=? AND "offset"=?', (p, 1)))
    scan, report = ledger.verify(store=False, trusted=[])
    assert [f.kind for f in report.findings] == ["gap"] and report.first_bad == Position(p, 1)
    assert verify_scan(scan, [], {}, []).findings == report.findings


def test_two_signers_at_once_leave_a_log_that_verifies(ledger: Any) -> None:
    import threading

    ledger.append(50)
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def sign() -> None:
        barrier.wait()
        try:
            ledger.checkpoint()  # each signer opens its own log and store connections
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=sign) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _, report = ledger.verify()
    assert report.ok, report.findings
    assert len(report.checkpoints) == 3
