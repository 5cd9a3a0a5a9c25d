"""An insider rewrites history and re-signs it: what catches them.

The attack (issue: checkpoints an insider can't rewrite): flip a recorded event, cut the
``CheckpointSigned`` events out of the log, delete ``checkpoints.sqlite3``, run ``caucus checkpoint``.
With the signing key in the data directory the fresh checkpoint vouched for the rewritten history and
``caucus verify`` passed, even with the public key pinned. Now:

* the key lives outside the data directory (the key home), with a record of what it signed: an
  insider who can rewrite the data directory but not the key home is refused a new signature (and an
  event they change no longer matches the seal the intake put on it);
* a key holder who also deletes that record can sign again, and ``verify --public-key`` cannot tell
  (the signature is genuine), but a witness (``caucus witness``, another party's directory) that
  cosigned an earlier checkpoint refuses to cosign the rewrite, and ``verify --against`` fails.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Site = Any  # the conftest's ``Site``: a data directory and a key home, driven through the ``caucus`` command

@pytest.fixture
def site(tmp_path: Path, site_at: Callable[[Path], Site]) -> Site:
    s = site_at(tmp_path)
    s.run("demo")  # records a caucus night and signs a checkpoint
    return s


def test_the_signing_key_lives_outside_the_data_directory(site: Site) -> None:
    assert (site.keys / "checkpoint-key.pem").is_file()
    assert not (site.data / "checkpoint-key.pem").exists()
    assert (site.data / "checkpoint-key.pub").read_bytes() == (site.keys / "checkpoint-key.pub").read_bytes()
    assert oct((site.keys / "checkpoint-key.pem").stat().st_mode & 0o777) == "0o600"
    signed = json.loads((site.keys / "checkpoint-key.signed.json").read_text())
    assert len(signed["logs"]) == 1


def test_an_insider_without_the_key_home_is_refused_a_signature(site: Site) -> None:
    site.rewrite()
    refused = site.run("checkpoint", code=1)
    assert "REFUSED TO SIGN" in refused.stderr
    assert "the history was rewritten" in refused.stderr or "records were removed" in refused.stderr
    # and the flipped event no longer matches the seal the intake put on it
    found = json.loads(site.run("verify", "--public-key", site.public_key, "--json", code=1).stdout)["findings"]
    assert [f["kind"] for f in found] == ["writer"] and "does not match" in found[0]["message"], found


def test_an_insider_who_reorders_events_is_refused_by_the_signers_record(site: Site) -> None:
    site.rewrite(swap=True)  # every seal still holds: the signer's record of what it signed refuses
    refused = site.run("checkpoint", code=1)
    assert "REFUSED TO SIGN" in refused.stderr
    assert "the history was rewritten" in refused.stderr or "records were removed" in refused.stderr


def test_a_key_holder_who_also_erases_the_signers_record_is_caught_by_the_witness(site: Site) -> None:
    cosigned = json.loads(site.run("witness", str(site.witness), "--public-key", site.public_key, "--json").stdout)
    assert cosigned["tree_size"] > 0
    agreed = site.run("verify", "--public-key", site.public_key, "--against", str(site.witness))
    assert f"witness:     {site.witness}: this log extends the last checkpoint it cosigned" in agreed.stdout, agreed.stdout
    agreed_json = json.loads(site.run("verify", "--public-key", site.public_key, "--against", str(site.witness), "--json").stdout)
    assert agreed_json["witnesses"] == [{"witness": str(site.witness), "ok": True, "problems": []}]

    site.rewrite(reseal=site.keys / "checkpoint-key.pem")  # the key holder seals the flipped event again
    (site.keys / "checkpoint-key.signed.json").unlink()
    site.run("checkpoint")  # the key holder re-signs the rewritten history
    site.run("verify", "--public-key", site.public_key)  # a genuine signature: the key alone cannot tell

    caught = site.run("verify", "--public-key", site.public_key, "--against", str(site.witness), "--json", code=1)
    found = json.loads(caught.stdout)["findings"]
    assert [f["kind"] for f in found] == ["witness"] and "rewritten" in found[0]["message"]
    assert [w["ok"] for w in json.loads(caught.stdout)["witnesses"]] == [False]
    refused = site.run("witness", str(site.witness), "--public-key", site.public_key, code=1)
    assert "REFUSED TO COSIGN" in refused.stderr


def test_the_witness_follows_a_log_that_only_grows_and_spots_another_log(
    site: Site, tmp_path: Path, site_at: Callable[[Path], Site]
) -> None:
    site.run("witness", str(site.witness), "--public-key", site.public_key)
    site.run("simulate", "write", "--units", "5", "--token", _official(site))
    site.run("checkpoint")
    grown = json.loads(site.run("witness", str(site.witness), "--public-key", site.public_key, "--json").stdout)
    assert len((site.witness / "witnessed.jsonl").read_text().splitlines()) == 2
    site.run("verify", "--against", str(site.witness))

    (tmp_path / "other").mkdir()
    other = site_at(tmp_path / "other")
    other.env["CAUCUS_KEY_HOME"] = str(site.keys)  # the same signer, another log
    other.run("demo")
    shutil.rmtree(site.data)
    shutil.copytree(other.data, site.data)
    swapped = site.run("verify", "--against", str(site.witness), "--json", code=1)
    problems = json.dumps(json.loads(swapped.stdout)["findings"])
    assert "another log" in problems and grown["log_id"] in problems


def _official(site: Site) -> str:
    issued = json.loads(site.run("credentials", "issue", "--official", "Pat", "--json").stdout)
    return str(issued["token"])


def test_columns_beside_the_value_are_checked_against_it(site: Site) -> None:
    """The Merkle leaf is the stored value; the key and the headers that repeat the value are checked
    against it, so editing them is found too."""
    db = sqlite3.connect(site.data / "log.sqlite3")
    try:
        db.execute("DROP TRIGGER log_records_no_update")
        rows = db.execute('SELECT seq, partition, "offset", key FROM log_records ORDER BY seq LIMIT 2 OFFSET 5').fetchall()
        (seq1, p1, o1, key1), (seq2, p2, o2, _) = rows
        db.execute("UPDATE log_records SET key = ? WHERE seq = ?", (key1 + "x", seq1))
        db.execute("UPDATE log_records SET headers = ? WHERE seq = ?", (json.dumps({"caucus-unit": "999999"}), seq2))
        db.commit()
    finally:
        db.close()
    found = json.loads(site.run("verify", "--public-key", site.public_key, "--json", code=1).stdout)["findings"]
    columns = {f["position"]: f["message"] for f in found if f["kind"] == "column"}
    assert set(columns) == {f"{p1}:{o1}", f"{p2}:{o2}"}, found
    assert "key" in columns[f"{p1}:{o1}"] and "caucus-unit '999999'" in columns[f"{p2}:{o2}"]
