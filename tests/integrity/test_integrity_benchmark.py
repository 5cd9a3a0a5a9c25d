"""How fast tamper evidence is: leaves hashed per second, and the time to verify a 100k-event log.

Run the figures with ``pytest tests/integrity/test_integrity_benchmark.py --benchmark-enable -s``
(100,000 events; ``CAUCUS_BENCH_EVENTS`` changes the size). In the normal suite (benchmarks
disabled) the same code runs once on 2,000 events, as a check that it works.

Printed side by side from one run, so they compare: reading the log alone, decoding every record
(what a projection pays), hashing every record into a leaf, building the trees, and a full ``verify``
(scan + hash + trees + two checkpoints: signatures, roots, consistency proofs, leaf hashes from the
store).
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

import pytest

from ledger.codec import default_codec
from ledger.integrity.issue import issue_checkpoint
from ledger.integrity.keys import generate_key
from ledger.integrity.merkle import MerkleTree
from ledger.integrity.store import SqliteCheckpointStore
from ledger.integrity.verify import verify_log
from ledger.log.sqlite import SqliteLog


@pytest.fixture(scope="module")
def big_ledger(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, events_factory: Any, append: Any) -> dict[str, Any]:
    enabled = bool(request.config.getoption("benchmark_enable")) or not request.config.getoption("benchmark_disable")
    n = int(os.environ.get("CAUCUS_BENCH_EVENTS", "100000")) if enabled else 2000
    root = tmp_path_factory.mktemp("bench")
    key = generate_key()
    log = SqliteLog(root / "log.sqlite3", partitions=8)
    store = SqliteCheckpointStore(root / "checkpoints.sqlite3")
    half = n // 2
    for start in range(0, n, 10_000):
        append(log, events_factory(min(10_000, n - start), start=start))
        if start + 10_000 >= half > start:
            issue_checkpoint(log, store, key, scope="bench")
    began = time.perf_counter()
    issue_checkpoint(log, store, key, scope="bench")
    issue_seconds = time.perf_counter() - began
    return {"log": log, "store": store, "key": key, "events": n, "issue_seconds": issue_seconds}


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:>12,.0f}/s  ({seconds * 1000:8.1f} ms)"


def test_hashing_and_verifying_a_large_log(big_ledger: dict[str, Any], benchmark: Any) -> None:
    log: SqliteLog = big_ledger["log"]
    values = [rec.value for rec in log.read()]
    records = len(values)
    assert records == big_ledger["events"] + 2

    t = time.perf_counter()
    for _ in log.read():
        pass
    read_s = time.perf_counter() - t

    codec = default_codec()
    t = time.perf_counter()
    for v in values:
        codec.decode(v)
    decode_s = time.perf_counter() - t

    sha256 = hashlib.sha256
    t = time.perf_counter()
    leaves = [sha256(b"\x00" + v).digest() for v in values]
    hash_s = time.perf_counter() - t

    t = time.perf_counter()
    tree = MerkleTree(leaves)
    tree.root()
    tree_s = time.perf_counter() - t

    def verify() -> Any:
        return verify_log(log, big_ledger["store"], [big_ledger["key"].trusted])[1]

    report = benchmark.pedantic(verify, rounds=3 if not benchmark.disabled else 1, iterations=1)
    assert report.ok and len(report.checkpoints) == 2
    t = time.perf_counter()
    verify()
    verify_s = time.perf_counter() - t

    print(f"\n{records:,} records of {sum(map(len, values)) / records:.0f} B on average (SQLite log, 8 partitions)")
    print(f"  read the log           {_rate(records, read_s)}")
    print(f"  decode every record    {_rate(records, decode_s)}")
    print(f"  hash leaves            {_rate(records, hash_s)}")
    print(f"  build one tree         {_rate(records, tree_s)}")
    print(f"  caucus verify (all)    {_rate(records, verify_s)}")
    print(f"  caucus checkpoint      {_rate(records, big_ledger['issue_seconds'])}  (audit + sign + append + store)")
