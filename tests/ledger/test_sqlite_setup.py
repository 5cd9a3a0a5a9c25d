"""Several processes may create the same embedded file at the same moment (two signers, a runner
and a query starting together): every opener must wait its turn, never fail with "database is locked"."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.integrity.store import SqliteCheckpointStore
from ledger.log.sqlite import SqliteLog
from projections.stores.sqlite import SqliteStore

OPENERS: dict[str, Callable[[Path], Any]] = {
    "log": lambda p: SqliteLog(p, partitions=4),
    "checkpoints": SqliteCheckpointStore,
    "projections": SqliteStore,
}


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_many_openers_of_one_new_file_all_succeed(kind: str, tmp_path: Path) -> None:
    opener = OPENERS[kind]
    for round_ in range(8):
        path = tmp_path / f"{kind}-{round_}.sqlite3"
        barrier = threading.Barrier(6)
        errors: list[BaseException] = []
        opened: list[Any] = []

        def open_it() -> None:
            barrier.wait()
            try:
                handle = opener(path)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return
            opened.append(handle)
            handle.close()  # in its own thread: a connection belongs to the thread that made it

        threads = [threading.Thread(target=open_it) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"round {round_}: {errors}"
        assert len(opened) == 6
