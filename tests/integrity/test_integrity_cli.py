"""``caucus checkpoint``, ``caucus verify`` and ``caucus prove``: output and exit status (0 ok, 1
tampering, 2 could not check), run through the commands' own ``register``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from ledger.log.partitioning import partition_for
from projections.audit.cli import register


@pytest.fixture
def caucus(ledger: Any) -> Any:
    app = typer.Typer()
    register(app)
    runner = CliRunner()

    def run(*args: str, data_dir: Path | None = None, env: dict[str, str] | None = None) -> Any:
        environment = {
            "CAUCUS_DATA_DIR": str(data_dir or ledger.data_dir),
            "CAUCUS_PARTITIONS": "4",
            "CAUCUS_CHECKPOINT_KEY": "",
            "CAUCUS_CHECKPOINT_PUBLIC_KEY": "",
            "CAUCUS_KAFKA": "",
            "CAUCUS_DATABASE": "",
        }
        environment.update(env or {})
        return runner.invoke(app, list(args), env=environment)

    return run


def test_checkpoint_then_verify_then_prove(ledger: Any, caucus: Any) -> None:
    events = ledger.append(25)
    done = caucus("checkpoint", "--json")
    assert done.exit_code == 0, done.output
    # This ledger keeps its key in the data directory, as before the key home: it still signs, warning.
    assert "beside the log it vouches for" in done.stderr
    signed = json.loads(done.stdout)
    assert signed["tree_size"] == 25 and len(signed["partition_sizes"]) == 4 and len(signed["signature"]) == 128

    verified = caucus("verify", "--json")
    assert verified.exit_code == 0, verified.output
    report = json.loads(verified.stdout)
    assert report["ok"] and report["checkpoints_verified"] == 1 and report["first_bad_position"] is None
    assert report["records"] == 26 and report["records_not_yet_checkpointed"] == 1

    proof = caucus("prove", events[7].event_id, "--json")
    assert proof.exit_code == 0, proof.output
    p = json.loads(proof.stdout)
    assert p["verified"] and p["event_id"] == events[7].event_id
    assert p["checkpoint"]["signature"] == signed["signature"] and p["checkpoint"]["public_key"] == signed["public_key"]
    assert p["tree_size"] == signed["partition_sizes"][p["partition"]] and p["leaf_index"] < p["tree_size"]
    assert all(len(h) == 64 for h in p["audit_path"])

    human = caucus("prove", events[7].event_id)
    assert human.exit_code == 0 and "VERIFIED" in human.output
    # By its position, as `caucus trail` and `log tail` print it: the same proof, of the same event.
    at = caucus("prove", p["position"], "--json")
    assert at.exit_code == 0, at.output
    assert json.loads(at.stdout) == p
    nowhere = caucus("prove", f"{p['partition']}:99999")
    assert nowhere.exit_code == 2 and "no record is at" in nowhere.output, nowhere.output


def test_verify_reports_the_first_bad_position_and_exits_1(ledger: Any, caucus: Any, tamper: Any, flip: Any, tmp_path: Path) -> None:
    ledger.append(25)
    assert caucus("checkpoint").exit_code == 0
    twin = ledger.copy_to(tmp_path / "twin")
    part = partition_for("IA-000", 4)  # holds at least IA-000's two events
    value = tamper.value_at(twin.log_path, part, 1)
    tamper.in_place(twin.log_path, ('UPDATE log_records SET value=? WHERE partition=? AND "offset"=?', (flip(value, b"ia-2020"), part, 1)))
    result = caucus("verify", "--json", data_dir=twin.data_dir)
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert not report["ok"] and report["first_bad_position"] == f"{part}:1"
    assert report["findings"][0]["kind"] == "altered"
    human = caucus("verify", data_dir=twin.data_dir)
    assert human.exit_code == 1 and f"first bad position {part}:1" in human.output
    refused = caucus("checkpoint", data_dir=twin.data_dir)
    assert refused.exit_code == 1 and "REFUSED TO SIGN" in refused.output


def test_a_wrong_public_key_fails_verification(ledger: Any, caucus: Any, other_key: Any, tmp_path: Path) -> None:
    ledger.append(10)
    assert caucus("checkpoint").exit_code == 0
    pub = tmp_path / "other.pub"
    pub.write_bytes(other_key.trusted.pem())
    result = caucus("verify", "--public-key", str(pub), "--json")
    assert result.exit_code == 1
    assert [f["kind"] for f in json.loads(result.stdout)["findings"]] == ["signature"]
    events = ledger.append(1, start=50)
    assert caucus("prove", events[0].event_id, "--public-key", str(pub)).exit_code == 2  # nothing trusted to prove against


def test_operational_problems_exit_2(ledger: Any, caucus: Any, tmp_path: Path) -> None:
    ledger.append(5)
    assert caucus("checkpoint").exit_code == 0
    missing_key = caucus("verify", "--public-key", str(tmp_path / "nope.pub"))
    assert missing_key.exit_code == 2 and "does not exist" in missing_key.output
    unknown = caucus("prove", "no-such-event")
    assert unknown.exit_code == 2 and "not in the log" in unknown.output
    pending = ledger.append(1, start=40)[0]
    not_yet = caucus("prove", pending.event_id)
    assert not_yet.exit_code == 2 and "caucus checkpoint" in not_yet.output
    # An auditor's copy of the log without any key to check its checkpoints with.
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy2(ledger.log_path, bare / "log.sqlite3")
    (tmp_path / "no-key-home").mkdir()
    no_key = caucus("verify", data_dir=bare, env={"CAUCUS_KEY_HOME": str(tmp_path / "no-key-home")})
    assert no_key.exit_code == 2 and "--public-key" in no_key.output
    # With the public key the log alone verifies (its own CheckpointSigned events).
    (bare / "given.pub").write_bytes(ledger.key.trusted.pem())
    assert caucus("verify", "--public-key", str(bare / "given.pub"), data_dir=bare).exit_code == 0


def test_require_checkpoint_fails_a_log_with_none_verified(ledger: Any, caucus: Any, tmp_path: Path) -> None:
    ledger.append(6)
    pub = tmp_path / "given.pub"
    pub.write_bytes(ledger.key.trusted.pem())
    lenient = caucus("verify", "--public-key", str(pub), "--json")
    assert lenient.exit_code == 0 and json.loads(lenient.stdout)["checkpoints_verified"] == 0
    human = caucus("verify", "--public-key", str(pub))  # not an "OK" that nothing backs
    assert human.exit_code == 0 and "NOTHING TO VERIFY YET" in human.stdout and "OK:" not in human.stdout, human.stdout
    strict = caucus("verify", "--public-key", str(pub), "--require-checkpoint")
    assert strict.exit_code == 1 and "no signed checkpoint verified" in strict.output
    assert caucus("checkpoint").exit_code == 0
    assert caucus("verify", "--public-key", str(pub), "--require-checkpoint").exit_code == 0


def test_the_checkpoint_store_can_live_in_postgresql(ledger: Any, caucus: Any, pg_dsn: str) -> None:
    ledger.append(12)
    env = {"CAUCUS_DATABASE": pg_dsn}
    assert caucus("checkpoint", env=env).exit_code == 0
    ledger.append(3, start=12)
    assert caucus("checkpoint", env=env).exit_code == 0
    result = caucus("verify", "--json", env=env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["checkpoints_verified"] == 2 and report["store"].startswith("postgresql://")
    assert not (ledger.data_dir / "checkpoints.sqlite3").exists()


def test_a_log_made_with_other_partitions_needs_no_repeat_of_the_setting(ledger: Any, caucus: Any) -> None:
    """The log here has 4 partitions. A command not told a count keeps the log's; one told another
    count is refused, and the log is left as it was."""
    ledger.append(5)
    told_otherwise = caucus("checkpoint", env={"CAUCUS_PARTITIONS": "8"})
    assert told_otherwise.exit_code == 2
    assert "has 4 partitions, not 8" in told_otherwise.output
    assert ledger.log().partitions == 4
    not_told = caucus("checkpoint", "--json", env={"CAUCUS_PARTITIONS": ""})
    assert not_told.exit_code == 0, not_told.output
    assert len(json.loads(not_told.stdout)["partition_sizes"]) == 4


def test_verify_of_a_log_that_is_gone_while_checkpoints_vouch_for_one_is_a_lost_log(ledger: Any, caucus: Any) -> None:
    """With no checkpoint signed, a missing log is "nothing recorded yet" (exit 2). With checkpoints signed
    over a log here, its absence is a lost history, exit 3, and the message names what vouched for it."""
    empty = caucus("verify", data_dir=ledger.data_dir.parent / "nothing-here")
    assert empty.exit_code == 2
    ledger.append(5)
    assert caucus("checkpoint").exit_code == 0
    for suffix in ("", "-wal", "-shm"):
        ledger.data_dir.joinpath(f"log.sqlite3{suffix}").unlink(missing_ok=True)
    gone = caucus("verify")
    assert gone.exit_code == 3, gone.output
    assert "holds 1 checkpoint(s) signed over a log here" in gone.output and "is gone" in gone.output


def test_checkpoint_of_a_place_with_no_log_signs_nothing_and_makes_nothing(ledger: Any, caucus: Any, tmp_path: Path) -> None:
    """A mistyped --data-dir is "nothing recorded there" (exit 2), as ``project`` says, not a new empty log
    signed (which a later ``verify`` there would count as verified); a log gone while checkpoints vouch
    for one is a lost log (exit 3), and is not made again either."""
    nowhere = tmp_path / "typo"
    empty = caucus("checkpoint", data_dir=nowhere)
    assert empty.exit_code == 2 and "no event log at" in empty.output, empty.output
    assert not nowhere.exists()
    ledger.append(5)
    assert caucus("checkpoint").exit_code == 0
    for suffix in ("", "-wal", "-shm"):
        ledger.data_dir.joinpath(f"log.sqlite3{suffix}").unlink(missing_ok=True)
    gone = caucus("checkpoint")
    assert gone.exit_code == 3 and "is gone" in gone.output, gone.output
    assert not ledger.data_dir.joinpath("log.sqlite3").exists()
