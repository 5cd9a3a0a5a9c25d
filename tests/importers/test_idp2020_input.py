"""Messy and broken input: what is cleaned, what is reported, when the command fails."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ledger.log.sqlite import SqliteLog
from producers.importers.cli import register
from producers.importers.idp2020.delegates import fit_satellite, precinct_delegates, satellite_table_delegates
from producers.importers.idp2020.text import decode_name, name_key, parse_sde

FIRST_RELEASE = "idp_results_2020-02-07T0113Z.csv"


def test_names_are_decoded_however_often_they_were_escaped() -> None:
    assert decode_name("Carroll Ward Three &amp;amp; S1/2 Maple River Twp") == "Carroll Ward Three & S1/2 Maple River Twp"
    assert name_key("Pottawattamie", "Council Bluff  04") == name_key("Pottawattamie ", "Council Bluff 04")
    assert name_key("Guthrie ", "X\r") == ("guthrie", "x")


def test_sde_values_lose_their_float_noise() -> None:
    assert parse_sde("0.15690000000000004") == Decimal("0.1569")
    assert parse_sde("0") == Decimal("0.0000")
    with pytest.raises(ValueError, match="not a number"):
        parse_sde("n/a")


def test_precinct_cds_come_back_from_sdes() -> None:
    cds, misfits = precinct_delegates({"Biden": Decimal("0.4200"), "Buttigieg": Decimal("0.7000"), "Sanders": Decimal("0.5600")},
                                      Fraction(21, 150))  # RULES.md §13 E06, Lee FM5
    assert (cds, misfits) == ({"Biden": 3, "Buttigieg": 5, "Sanders": 4}, [])
    assert precinct_delegates({"Biden": Decimal("0.5000")}, Fraction(21, 150))[1] == ["Biden"]


def test_satellite_fit_recovers_d_and_weight() -> None:
    fit = fit_satellite({"Sanders": Decimal("0.5416"), "Warren": Decimal("0.2166"), "Uncommitted": Decimal(0)}, 65)
    assert fit is not None and fit.delegates == {"Sanders": 5, "Warren": 2, "Uncommitted": 0}  # RULES.md §13 E07
    assert fit.unit_delegates == 7 == satellite_table_delegates(65) and fit.note is None
    low, high = fit.weight_bounds(7)
    assert low < Fraction(65 * 11, 943) < high  # 65 of the CD2 pool's 943 attendees × 11 SDE
    # Washington DC IBEW: 100 attendees (table: 8) but 9 CDs reported, SDEs per CD ≈ 0.0421
    dc = fit_satellite({"Biden": Decimal("0.0842"), "Buttigieg": Decimal("0.0842"), "Sanders": Decimal("0.0421"),
                        "Warren": Decimal("0.1685")}, 100)  # fmt: skip
    assert dc is not None and dc.delegates == {"Biden": 2, "Buttigieg": 2, "Sanders": 1, "Warren": 4}
    assert dc.unit_delegates == 9 and dc.table_delegates == 8 and dc.note
    low, high = dc.weight_bounds(8)
    assert low < Fraction(100 * 4, 1187) < high  # shared over the 8 the table gives
    assert fit_satellite({"A": Decimal("0.0100"), "B": Decimal("0.0333")}, 10) is None


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    register(app)
    return app


def _data_copy(iowa_dir: Path, tmp: Path, edit=None, drop: str | None = None) -> Path:
    """A data directory of links to the real files, with one release rewritten or one file missing."""
    data = tmp / "data"
    data.mkdir()
    for source in iowa_dir.iterdir():
        if source.name == drop:
            continue
        if edit is not None and source.name == FIRST_RELEASE:
            (data / source.name).write_text(edit(source.read_text(encoding="utf-8")), encoding="utf-8")
        else:
            (data / source.name).symlink_to(source)
    return data


def _run(data: Path, log_dir: Path, *extra: str):
    return CliRunner().invoke(_app(), ["import", "idp2020", "--data", str(data), "--json", *extra],
                              env={"CAUCUS_DATA_DIR": str(log_dir), "CAUCUS_KAFKA": ""})  # fmt: skip


def _summary(output: str) -> dict:
    return json.loads(output[output.index("{") :])


def test_unmappable_unit_is_reported_and_the_rest_imported(iowa_dir: Path, tmp_path: Path) -> None:
    def add_unknown_unit(text: str) -> str:
        rows = [f"Adair,Nowhere &amp;amp; Gone 99,{c},{m},1" for c in ("Bennet", "Biden", "Bloomberg", "Buttigieg", "Delaney",
                "Gabbard", "Klobuchar", "Patrick", "Sanders", "Steyer", "Warren", "Yang", "Other", "Uncommitted")
                for m in ("expression_1", "expression_2", "sde")]  # fmt: skip
        return text.replace("\n", "\r\n") + "\r\n".join(rows) + "\r\nAdair,1NW ADAIR,Mayor,sde,1\r\n"

    result = _run(_data_copy(iowa_dir, tmp_path, edit=add_unknown_unit), tmp_path / "log")
    assert result.exit_code == 0, result.output
    summary = _summary(result.output)
    messages = [f"{i['where']}: {i['message']}" for i in summary["issues"] if i["severity"] == "warning"]
    assert any("Nowhere & Gone 99" in m and "no VAN id" in m for m in messages), messages
    assert any("'Mayor'" in m for m in messages), messages
    assert summary["events"]["ResultReported"] == 1765 and summary["appended"] == sum(summary["events"].values())


def test_a_missing_file_is_named_and_nothing_is_opened_or_created(iowa_dir: Path, tmp_path: Path) -> None:
    """A file that is not there is an operational error (exit 2, as for every command), named, with no
    log made for an import that could not run."""
    result = _run(_data_copy(iowa_dir, tmp_path, drop="idp_apportionment.csv"), tmp_path / "log")
    assert result.exit_code == 2, result.output
    error = json.loads(result.stderr)["error"]
    assert "idp_apportionment.csv" in error["message"] and "1 of the 6 files" in error["message"], error
    assert "iowa2020_precincts.csv" not in error["message"]
    assert not (tmp_path / "log").exists()


def test_a_data_directory_that_is_not_there_is_not_called_a_file(tmp_path: Path) -> None:
    """A mistyped --data said "not a directory", which reads as "a file is there": it is not there at all."""
    missing = _run(tmp_path / "nowhere", tmp_path / "log")
    assert missing.exit_code == 2 and "--data" in missing.stderr and "does not exist" in missing.stderr, missing.output
    (tmp_path / "file").write_text("x")
    a_file = _run(tmp_path / "file", tmp_path / "log")
    assert a_file.exit_code == 2 and "is a file, not a directory" in a_file.stderr, a_file.output
    assert not (tmp_path / "log").exists()


@pytest.mark.parametrize("name", ["idp_apportionment.csv", "iowa2020_precincts.csv", FIRST_RELEASE])
def test_a_byte_that_is_not_utf8_is_named_with_its_file_and_nothing_is_appended(iowa_dir: Path, tmp_path: Path,
                                                                                name: str) -> None:
    """A damaged file (or one saved in another encoding) used to end the import in an internal error."""
    data = _data_copy(iowa_dir, tmp_path, drop=name)
    lines = (iowa_dir / name).read_bytes().split(b"\n")
    for line in (1, 150):  # the header (no "header lacks" besides), and a row a block of text after it
        damaged = [*lines[: line - 1], lines[line - 1][:3] + b"\xe9" + lines[line - 1][3:], *lines[line:]]
        (data / name).write_bytes(b"\n".join(damaged))
        result = _run(data, tmp_path / "log")
        assert result.exit_code == 1, result.output
        errors = [i for i in _summary(result.output)["issues"] if i["severity"] == "error"]
        assert [e["where"] for e in errors] == [f"{name}:{line}"], errors
    assert "not UTF-8" in errors[0]["message"] and "0xe9" in errors[0]["message"], errors
    assert _summary(result.output)["appended"] == 0
    with SqliteLog(tmp_path / "log" / "log.sqlite3") as log:
        assert sum(log.high_watermarks().values()) == 0


def test_dry_run_appends_nothing(iowa_dir: Path, tmp_path: Path) -> None:
    result = _run(iowa_dir, tmp_path / "log", "--dry-run")
    assert result.exit_code == 0
    summary = _summary(result.output)
    assert summary["dry_run"] and summary["appended"] == 0 and summary["units_defined"] == 1765
    assert not (tmp_path / "log" / "log.sqlite3").exists()


def test_the_import_takes_the_intakes_turn_and_marks_its_writes(iowa_dir: Path, tmp_path: Path) -> None:
    """An intake whose queued command shares a catch-up that began before the import must read on first:
    the import leaves the mark every writer without an intake leaves, or the intake judges a report
    against a log without the imported one and records a second result for the unit."""
    from ledger.backends import backends_for
    from ledger.config import Settings
    from producers.intake_lock import DirectoryLock

    log_dir = tmp_path / "log"
    lock = DirectoryLock(backends_for(Settings.from_env({"CAUCUS_DATA_DIR": str(log_dir)})).intake_dir())
    try:
        arrived = time.monotonic()
        with lock.held():
            lock.read_began(time.monotonic())  # a catch-up that read the (empty) log after the command arrived
            assert lock.covers(arrived)
        result = _run(iowa_dir, log_dir)
        assert result.exit_code == 0, result.output
        with lock.held():
            assert not lock.covers(arrived), "the import's appends left no mark: a queued command would skip them"
    finally:
        lock.close()


def _writers(log_dir: Path) -> set[str]:
    from ledger.record_headers import writer_of

    log = SqliteLog(log_dir / "log.sqlite3")
    try:
        return {writer_of(rec.headers) for rec in log.read()}
    finally:
        log.close()


def test_files_that_are_not_the_published_releases_import_as_direct_writes(iowa_dir: Path, tmp_path: Path) -> None:
    """A copy with one count changed imports as readily as the releases; its records must not carry the
    importer's name, which says "as published", but a writer that makes them direct writes (listed by
    the audit as DIRECT_WRITE), and the summary says which file differs."""
    from ledger.record_headers import is_direct_writer

    published = _run(iowa_dir, tmp_path / "published")
    assert published.exit_code == 0, published.output
    assert not any("differs from the published file" in i["message"] for i in _summary(published.output)["issues"])
    assert {is_direct_writer(w) for w in _writers(tmp_path / "published")} == {False}

    changed = _run(_data_copy(iowa_dir, tmp_path, edit=lambda text: text.replace("\n", "\r\n")), tmp_path / "changed")
    assert changed.exit_code == 0, changed.output
    warned = [i for i in _summary(changed.output)["issues"] if "differs from the published file" in i["message"]]
    assert [i["where"] for i in warned] == [FIRST_RELEASE]
    writers = _writers(tmp_path / "changed")
    assert writers and all(is_direct_writer(w) and FIRST_RELEASE in w for w in writers)
