"""A data directory copied or moved keeps working: the projection knows its log by the log's own id."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

from ledger.log.sqlite import SqliteLog


def test_a_moved_or_copied_data_directory_just_works(ops: ModuleType, tmp_path: Path) -> None:
    first = tmp_path / "site-a"
    first.mkdir()
    token = json.loads(ops.ok(ops.run(["credentials", "issue", "--official", "Op", "--json"], cwd=first)).stdout)["token"]
    ops.ok(ops.run(["simulate", "write", "--units", "8", "--token", token], cwd=first))
    ops.ok(ops.run(["project", "--until-caught-up", "-q"], cwd=first))
    tally = ops.ok(ops.run(["tally", "--json"], cwd=first)).stdout
    log_id = SqliteLog(first / "caucus-data" / "log.sqlite3", read_only=True).log_id
    assert log_id and json.loads(ops.ok(ops.run(["projections", "--json"], cwd=first)).stdout)[0]["source"] == f"log:{log_id}"
    moved = tmp_path / "elsewhere" / "site-b"
    moved.parent.mkdir()
    shutil.move(first, moved)
    copied = tmp_path / "copy"
    shutil.copytree(moved, copied)
    for root in (moved, copied):
        ops.ok(ops.run(["project", "--until-caught-up", "-q"], cwd=root))
        assert ops.ok(ops.run(["tally", "--json"], cwd=root)).stdout == tally
        ops.ok(ops.run(["--data-dir", str(root / "caucus-data"), "project", "--until-caught-up", "-q"], cwd=tmp_path))
