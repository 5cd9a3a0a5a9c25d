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


def test_diff_of_the_serving_projection_against_another_or_a_shorter_log_exits_3(ops: ModuleType, tmp_path: Path) -> None:
    """`tally` and `project` exit 3 for a projection of another log, or of records the log no longer
    holds; `caucus diff live log` compared the two histories instead ("EQUAL", or "400 of 400 units
    differ"). A set named by version may still be one of another log (what `replay --new-log` retired)."""
    site = tmp_path / "site"
    site.mkdir()
    token = json.loads(ops.ok(ops.run(["credentials", "issue", "--official", "Op", "--json"], cwd=site)).stdout)["token"]
    ops.ok(ops.run(["simulate", "write", "--units", "8", "--token", token], cwd=site))
    ops.ok(ops.run(["project", "--until-caught-up", "-q"], cwd=site))
    ops.ok(ops.run(["diff", "live", "log"], cwd=site))
    data = site / "caucus-data"
    for name in ("log.sqlite3", "log.sqlite3-wal", "log.sqlite3-shm"):
        (data / name).unlink(missing_ok=True)
    ops.ok(ops.run(["simulate", "write", "--units", "8", "--token", token], cwd=site))  # the same events, a new log
    other = ops.run(["diff", "live", "log"], cwd=site)
    assert other.returncode == 3 and "another log" in other.stderr, other.stderr
    assert ops.run(["tally"], cwd=site).returncode == 3
