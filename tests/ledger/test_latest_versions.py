"""The latest view never goes backwards when its copies carry versions (``ledger.log.latest``): two
writers whose copies of one key arrive newest first leave the newest, in both adapters; an equal
version replaces (a republish, at its new position); copies without versions keep the last-wins rule;
an embedded view written before versions existed gets the column."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ledger.log.latest import CopyLatest, LatestView
from ledger.log.memory import MemoryLog, forget
from ledger.log.port import PendingRecord, Position
from ledger.log.sqlite_latest import SqliteLatest


def _rec(value: str) -> PendingRecord:
    return PendingRecord("k", f"id-{value}", value.encode(), (("caucus-writer", b"test"),))


@pytest.fixture(params=["sqlite", "copies"])
def open_view(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], LatestView]]:
    if request.param == "sqlite":
        yield lambda: SqliteLatest(tmp_path / "results.sqlite3")
    else:
        name = f"latest-{tmp_path}"
        yield lambda: CopyLatest(MemoryLog(name, partitions=2))
        forget(name)


def test_an_older_copy_put_last_does_not_replace_a_newer_one(open_view: Callable[[], LatestView]) -> None:
    a, b = open_view(), open_view()
    b.put([_rec("new")], [Position(0, 7)], ["state:e1"], [12])
    a.put([_rec("old")], [Position(0, 8)], ["state:e1"], [11])  # the lagging writer, last
    kept = a.snapshot().records["state:e1"]
    assert (kept.value, kept.position) == (b"new", Position(0, 7))
    a.put([_rec("again")], [Position(1, 3)], ["state:e1"], [12])  # republished at the same version
    snap = b.snapshot()
    assert (snap.records["state:e1"].value, snap.records["state:e1"].position) == (b"again", Position(1, 3))
    assert snap.records["state:e1"].headers == (("caucus-writer", b"test"),)


def test_copies_without_versions_keep_the_last(open_view: Callable[[], LatestView]) -> None:
    view = open_view()
    view.put([_rec("first")], [Position(0, 1)], ["k"], [5])
    view.put([_rec("second")], [Position(0, 2)], ["k"])
    view.put([_rec("third")], [Position(0, 3)], ["k"])
    assert view.snapshot().records["k"].value == b"third"


def test_an_embedded_view_from_before_versions_gets_the_column(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute('CREATE TABLE latest_records (key TEXT PRIMARY KEY, event_id TEXT NOT NULL, partition INTEGER NOT NULL, '
                     '"offset" INTEGER NOT NULL, value BLOB NOT NULL, timestamp_ms INTEGER NOT NULL, headers BLOB)')
        conn.execute("INSERT INTO latest_records VALUES ('k', 'id-0', 0, 0, x'30', 0, NULL)")
    conn.close()
    view = SqliteLatest(path)
    view.put([_rec("new")], [Position(0, 4)], ["k"], [3])
    view.put([_rec("old")], [Position(0, 5)], ["k"], [2])
    assert view.snapshot().records["k"].value == b"new"
    view.close()
