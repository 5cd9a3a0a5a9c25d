"""``caucus recount-package``: the package verifies with nothing but its own ``verify.py`` (run here as a
separate process), and stops verifying when any one byte of its evidence is changed."""

from __future__ import annotations

import csv
import io
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastavro.schema import fingerprint

from ledger.codec import default_codec
from ledger.events import Result, ResultReported
from ledger.integrity.keys import generate_key
from projections.audit import recount_verify

Run = Callable[..., Any]


def _verify(package: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The package's own script in a fresh interpreter, run from inside the package."""
    return subprocess.run([sys.executable, "verify.py", *args], cwd=package, capture_output=True, text=True, timeout=120)


@pytest.fixture
def signed(caucus: Run) -> Run:
    """The synthetic ledger with a signed checkpoint over all of it (key generated in the data directory)."""
    done = caucus("checkpoint", "--json")
    assert done.exit_code == 0, done.output
    return caucus


def _package(caucus: Run, out: Path, *args: str) -> dict[str, Any]:
    made = caucus("recount-package", *args, "--out", str(out), "--json")
    assert made.exit_code == 0, made.output
    return json.loads(made.stdout)


def test_package_of_one_unit_verifies_standalone(signed: Run, ledger: Any, tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    summary = _package(signed, pkg, "corrected")
    assert summary["units"] == ["corrected"] and summary["events"] == 3 and summary["proven"] == 3
    done = _verify(pkg)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "VERIFIED: all 3 events" in done.stdout and "signature OK" in done.stdout
    # With the key obtained independently (the data directory's public key), as the README advises.
    independent = _verify(pkg, "--public-key", str(ledger.data_dir / "checkpoint-key.pub"))
    assert independent.returncode == 0, independent.stdout
    # A key that did not sign the checkpoint.
    other = tmp_path / "other.pem"
    other.write_bytes(generate_key().trusted.pem())
    wrong = _verify(pkg, "--public-key", str(other))
    assert wrong.returncode == 1 and "names key" in wrong.stdout


def test_package_contents(signed: Run, tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    _package(signed, pkg, "Precinct corrected")  # by name
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert [e["type"] for e in manifest["events"]] == ["ElectionDefined", "ResultReported", "ResultCorrected"]
    for e in manifest["events"]:
        raw = (pkg / e["avro"]).read_bytes()
        assert raw[:2] == b"\xc3\x01"
        assert default_codec().decode(raw).event_id == e["event_id"]
        shown = json.loads((pkg / e["json"]).read_text())
        assert shown["event_id"] == e["event_id"] and shown["position"] == e["position"]
        proof = json.loads((pkg / e["proof"]).read_text())
        assert proof["event_id"] == e["event_id"] and proof["position"] == e["position"]
    trail = json.loads((pkg / "units" / "corrected" / "trail.json").read_text())
    steps = trail["events"]
    assert [s["type"] for s in steps] == ["ResultReported", "ResultCorrected"]
    assert steps[1]["details"]["reason"].startswith("worksheet recheck") and steps[1]["details"]["stage"] == "recanvass"
    assert steps[1]["actor"] == "county chair" and steps[1]["channel"] == "paper"
    assert "CDs A: 3 -> 2" in steps[1]["changes"]
    assert [s["tally"]["cds"]["A"] for s in steps] == [3, 2]
    rows = list(csv.DictReader(io.StringIO((pkg / "units" / "corrected" / "tallies.csv").read_text())))
    a_rows = [r for r in rows if r["candidate"] == "A"]
    assert [(r["type"], r["cds"], r["sde"]) for r in a_rows] == [("ResultReported", "3", "0.9000"), ("ResultCorrected", "2", "0.6000")]
    md = (pkg / "units" / "corrected" / "trail.md").read_text()
    assert "ResultCorrected" in md and "county chair via paper" in md
    readme = (pkg / "README.md").read_text()
    assert "python3 verify.py" in readme and "does not prove" in readme
    assert set(manifest["files"]) >= {"README.md", "verify.py", "checkpoint.json", "public-key.pem"}


def _flip_hex(text: str) -> str:
    return text[:-1] + ("0" if text[-1] != "0" else "1")


@pytest.mark.parametrize("target", ["avro", "proof", "signature", "json", "trail", "schema"])
def test_one_changed_byte_is_caught(signed: Run, tmp_path: Path, target: str) -> None:
    pkg = tmp_path / "pkg"
    _package(signed, pkg, "corrected")
    report = json.loads((pkg / "manifest.json").read_text())["events"][1]
    if target == "avro":
        path = pkg / report["avro"]
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    else:
        path = {
            "proof": pkg / report["proof"],
            "signature": pkg / "checkpoint.json",
            "json": pkg / report["json"],
            "trail": pkg / "units" / "corrected" / "trail.md",
            "schema": next((pkg / "schemas").glob("*.avsc")),
        }[target]
        text = path.read_text()
        old = {
            "proof": lambda: json.loads(text)["audit_path"][0],
            "signature": lambda: json.loads(text)["signature"],
            "json": lambda: '"actor": "chair"',
            "trail": lambda: "ResultReported",
            "schema": lambda: '"string"',
        }[target]()
        new = _flip_hex(old) if target in ("proof", "signature") else old[:-2] + chr(ord(old[-2]) ^ 1) + old[-1]
        assert old in text and len(new) == len(old) and new != old
        path.write_text(text.replace(old, new, 1))
    done = _verify(pkg)
    assert done.returncode == 1, done.stdout
    assert "NOT VERIFIED" in done.stdout and "FAIL" in done.stdout


def test_county_package(signed: Run, tmp_path: Path, aud: ModuleType) -> None:
    pkg = tmp_path / "birch"
    summary = _package(signed, pkg, "--county", "birch")
    birch = sorted(s.unit_id for s in aud.UNITS if s.county == "birch")
    assert sorted(summary["units"]) == birch
    assert summary["events"] == 1 + len(birch) + 1  # the definition, one report each, one correction
    done = _verify(pkg)
    assert done.returncode == 0, done.stdout
    assert all((pkg / "units" / u / "trail.json").is_file() for u in birch)


def test_without_a_checkpoint(caucus: Run, tmp_path: Path) -> None:
    refused = caucus("recount-package", "corrected", "--out", str(tmp_path / "p1"))
    assert refused.exit_code == 2 and "caucus checkpoint" in refused.output
    made = caucus("recount-package", "corrected", "--out", str(tmp_path / "p2"), "--allow-unproven")
    assert made.exit_code == 0, made.output
    done = _verify(tmp_path / "p2")
    assert done.returncode == 2 and "INCOMPLETE" in done.stdout and "UNPROVEN" in done.stdout


def test_events_newer_than_the_checkpoint(signed: Run, ledger: Any, aud: ModuleType, tmp_path: Path) -> None:
    again = aud.make_event(ResultReported(Result({"A": 1}, {"A": 1}), reporter="chair"), "corrected", aud.T_DAY3)
    ledger.append([again])
    refused = signed("recount-package", "corrected", "--out", str(tmp_path / "p1"))
    assert refused.exit_code == 2 and "newer than the latest checkpoint" in refused.output
    summary = _package(signed, tmp_path / "p2", "corrected", "--allow-unproven")
    assert summary["events"] == 4 and len(summary["unproven"]) == 1
    done = _verify(tmp_path / "p2")
    assert done.returncode == 2 and "3 of 4 events proven" in done.stdout


def test_operational_errors(signed: Run, tmp_path: Path) -> None:
    assert signed("recount-package", "nowhere", "--out", str(tmp_path / "x")).exit_code == 2
    assert signed("recount-package", "--out", str(tmp_path / "x")).exit_code == 2
    assert signed("recount-package", "tie", "--county", "ash", "--out", str(tmp_path / "x")).exit_code == 2
    _package(signed, tmp_path / "p", "tie")
    busy = signed("recount-package", "tie", "--out", str(tmp_path / "p"))
    assert busy.exit_code == 2 and "not empty" in busy.output
    _package(signed, tmp_path / "p", "TIE", "--force")  # by short name, into the same directory
    (tmp_path / "f").write_text("")
    for out, said in ((tmp_path / "f", "is a file, not a directory"), (tmp_path / "f" / "p", "cannot be made")):
        refused = signed("recount-package", "tie", "--out", str(out))
        assert refused.exit_code == 2 and f"--out {out}" in refused.output and said in refused.output, refused.output


def test_the_verifier_reads_avro_like_the_codec(ledger: Any) -> None:
    """The standalone decoder and fingerprint agree with fastavro on every event of the synthetic log."""
    codec = default_codec()
    schemas = {}
    for info in codec.schemas():
        assert recount_verify.avro_fingerprint(info.canonical).hex() == fingerprint(info.canonical, "CRC-64-AVRO")
        schemas[info.fingerprint] = json.loads(info.canonical)
    from ledger.render import event_to_json

    for event in ledger.events:
        raw = codec.encode(event)
        record = recount_verify.decode_single_object(raw, schemas)
        assert record["envelope"]["event_id"] == event.event_id
        assert recount_verify.compare_with_json(record, event_to_json(event)) == []


def test_copied_verifier_is_the_module(signed: Run, tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    _package(signed, pkg, "tie")
    assert (pkg / "verify.py").read_bytes() == Path(recount_verify.__file__).read_bytes()


def test_records_with_the_fingerprint_in_the_other_byte_order(signed: Run, ledger: Any, aud: ModuleType, tmp_path: Path) -> None:
    """Records written before the codec's fingerprint byte order was fixed still package and verify."""
    from ledger.codec import CodecError
    from ledger.log.port import PendingRecord

    event = aud.make_event(ResultReported(Result({"A": 4}, {"A": 4}), reporter="old app"), "legacy", aud.T_DAY3)
    raw = bytearray(default_codec().encode(event))
    raw[2:10] = raw[2:10][::-1]
    try:
        default_codec().decode(bytes(raw))
    except CodecError:
        pytest.skip("this codec reads the fingerprint in one byte order only")
    log = ledger.log()
    try:
        log.append(PendingRecord(event.key, event.event_id, bytes(raw)))
    finally:
        log.close()
    assert signed("checkpoint").exit_code == 0
    _package(signed, tmp_path / "pkg", "legacy")
    done = _verify(tmp_path / "pkg")
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("remove", ["proofs", "checkpoint.json", "schemas"])
def test_missing_evidence_fails_without_a_traceback(signed: Run, tmp_path: Path, remove: str) -> None:
    pkg = tmp_path / "pkg"
    _package(signed, pkg, "corrected")
    target = pkg / remove
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    done = _verify(pkg)
    assert done.returncode == 1, done.stdout
    assert "NOT VERIFIED" in done.stdout and "Traceback" not in done.stderr


def _rehash(pkg: Path, manifest: dict[str, Any]) -> None:
    """What a careless or dishonest packager does after editing: rehash every file into the unsigned manifest."""
    manifest["files"] = {
        str(path.relative_to(pkg)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(pkg.rglob("*")) if path.is_file() and path.name != "manifest.json"
    }
    (pkg / "manifest.json").write_text(json.dumps(manifest))


def test_a_package_that_leaves_out_an_event_is_caught(signed: Run, tmp_path: Path) -> None:
    """Removing the unit's ResultReported (its files and its manifest entries, manifest rehashed) used to
    leave a package that said VERIFIED for the events it still held."""
    pkg = tmp_path / "pkg"
    _package(signed, pkg, "corrected")
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert manifest["partitions"], manifest.keys()
    dropped = next(e for e in manifest["events"] if e["type"] == "ResultReported")
    for key in ("avro", "json", "proof"):
        (pkg / dropped[key]).unlink()
    manifest["events"] = [e for e in manifest["events"] if e is not dropped]
    for unit in manifest["units"]:
        unit["events"] = [f for f in unit["events"] if f != dropped["avro"]]
    _rehash(pkg, manifest)
    done = _verify(pkg)
    assert done.returncode == 1, done.stdout
    assert f"{dropped['position']} {dropped['event_id']}: an event of unit corrected that the package leaves out" in done.stdout

    # Dropping the partition file as well does not help: the unit's partition must be there.
    (pkg / "partitions" / f"{dropped['position'].split(':')[0]}.records").unlink()
    manifest["partitions"] = []
    _rehash(pkg, manifest)
    done = _verify(pkg)
    assert done.returncode == 1 and "that nothing of it was left out cannot be shown" in done.stdout, done.stdout


def test_the_verifier_partitions_like_the_log() -> None:
    from ledger.log.partitioning import partition_for

    for key in ("946620", "corrected", "election:iowa-2020-dem-caucus", "", "ü-7", "x" * 37):
        for n in (1, 4, 8, 13):
            assert recount_verify.partition_for(key, n) == partition_for(key, n)


def test_derived_files_are_bound_by_the_signed_manifest(signed: Run, tmp_path: Path) -> None:
    """tallies.csv edited and the unsigned manifest rehashed used to verify; the manifest is signed now."""
    pkg = tmp_path / "pkg"
    _package(signed, pkg, "corrected")
    assert _verify(pkg).returncode == 0
    manifest = json.loads((pkg / "manifest.json").read_text())
    tallies = next(pkg.glob("units/*/tallies.csv"))
    tallies.write_text(tallies.read_text() + "99,forged,row\n")
    _rehash(pkg, manifest)
    done = _verify(pkg)
    assert done.returncode == 1 and "manifest.json is not the one the checkpoint's key signed" in done.stdout, done.stdout

    # Made without the key: nothing binds the trail, so it is not called VERIFIED.
    unsigned = tmp_path / "unsigned"
    _package(signed, unsigned, "corrected")
    (unsigned / "manifest.sig").unlink()
    done = _verify(unsigned)
    assert done.returncode == 2 and "the manifest is not signed" in done.stdout, done.stdout
