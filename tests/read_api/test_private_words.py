"""Public answers hide the server's data directory, database and brokers (``projections.read_api.private``)."""

from __future__ import annotations

import json
from pathlib import Path

from ledger.config import Settings
from projections.read_api.private import private_words, scrubbed


def test_paths_database_and_brokers_are_hidden_and_nothing_else_changes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    hide = private_words(Settings(data_dir=data, database="postgresql://caucus:secret@db.internal:5432/ledger",
                                  kafka="k1.internal:9092,k2.internal:9092"))
    answer = {"a": {"description": f"projection tally v1 in sqlite:{data}/store.sqlite3, recomputed"},
              "b": [f"in postgresql://caucus@db.internal:5432/ledger, then {data}", "1/3 of /database and data"],
              "c": "broker k2.internal:9092 did not answer", "n": 3}
    shown = scrubbed(answer, hide)
    text = json.dumps(shown)
    assert json.loads(text) == shown  # scrubbed in place: the document stays whole
    assert str(tmp_path) not in text and "db.internal" not in text and "k2.internal" not in text and "secret" not in text
    assert shown["a"]["description"] == "projection tally v1 in sqlite:<data dir>/store.sqlite3, recomputed"
    assert shown["b"] == ["in <database>, then <data dir>", "1/3 of /database and data"] and shown["n"] == 3


def test_a_short_data_directory_hides_only_whole_paths() -> None:
    """A data directory called ``data``, ``/data`` or ``/`` must not eat words, ``/database`` or fractions."""
    for data_dir in ("data", "/data", "/"):
        hide = private_words(Settings(data_dir=Path(data_dir)))
        text = "the data in /database is 2/3 of /data2"
        assert hide(text) == text, data_dir
    assert private_words(Settings(data_dir=Path("/data")))("sqlite:/data/store.sqlite3") == "sqlite:<data dir>/store.sqlite3"
