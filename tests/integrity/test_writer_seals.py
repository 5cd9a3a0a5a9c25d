"""A record that claims the intake or the importer as its writer must carry their seal
(``ledger.integrity.writer_seals``): a made-up correction put in the log under ``system:intake`` is
named by ``caucus verify`` (under later checkpoints too), warned of by ``caucus checkpoint`` and listed by
``caucus audit``
(``FORGED_WRITER``), on the embedded log and on a Kafka topic."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledger.codec import default_codec
from ledger.events import Event, ResultReported
from ledger.integrity.keys import generate_key
from ledger.integrity.verify import verify_log
from ledger.integrity.writer_seals import SEAL, Sealer, forged_writers, seal_problem
from ledger.journal import Journal
from ledger.log.port import PendingRecord, Position
from ledger.log.sqlite import SqliteLog
from ledger.record_headers import WRITER

Site = Any  # the conftest's ``Site``
VALUE = b"\x00the record's value"


def _headers(writer: str, sealer: Sealer | None = None, value: bytes = VALUE) -> tuple[tuple[str, bytes], ...]:
    base = ((WRITER, writer.encode()),) if writer else ()
    return (*base, sealer.seal(writer, value)) if sealer else base


def test_a_seal_vouches_for_its_writer_and_value_and_nothing_else() -> None:
    key, other = generate_key(), generate_key()
    sealer = Sealer(key)
    sealed = _headers("system:intake", sealer)
    assert seal_problem(sealed, VALUE, [key.trusted]) is None
    assert "does not match" in (seal_problem(sealed, VALUE + b"!", [key.trusted]) or "")
    moved = ((WRITER, b"importer:idp2020 (x)"), sealed[1])  # the seal kept, the writer changed
    assert "does not match" in (seal_problem(moved, VALUE, [key.trusted]) or "")
    assert "not a trusted key" in (seal_problem(sealed, VALUE, [other.trusted]) or "")
    assert seal_problem(_headers("system:intake"), VALUE, [key.trusted]) == "unsealed"
    for text in (b"ed25519 abc", b"rsa k sig", f"ed25519 {key.key_id} not*base64".encode()):
        assert seal_problem(((WRITER, b"system:intake"), (SEAL, text)), VALUE, [key.trusted]) not in (None, "unsealed")


def test_unsealed_claims_are_named_once_the_log_holds_a_seal() -> None:
    key = generate_key()
    sealer = Sealer(key)
    at = [Position(0, i) for i in range(5)]
    unsealed = [(at[0], _headers("system:intake"), VALUE), (at[1], _headers(""), VALUE),
                (at[2], _headers("importer:idp2020 (ia)"), VALUE), (at[3], _headers("official:ann"), VALUE)]
    assert forged_writers(unsealed, [key.trusted]) == []  # a log from before seals: nothing to hold them to
    log = [*unsealed, (at[4], _headers("system:intake", sealer), VALUE)]
    named = forged_writers(log, [key.trusted])
    assert [(f.position, f.writer, f.problem) for f in named] == [
        (at[0], "system:intake", "unsealed"), (at[1], "", "unsealed"), (at[2], "importer:idp2020 (ia)", "unsealed")]
    assert "no seal" in named[0].message  # a direct write names its writer: the audit lists it as DIRECT_WRITE
    assert [f.position for f in forged_writers(log, None)] == [at[0], at[1], at[2]]  # no keys: the unsealed claims
    stranger = generate_key()
    bad = [(at[4], _headers("system:intake", Sealer(stranger)), VALUE)]
    assert [f.problem for f in forged_writers(bad, [key.trusted])] == [
        f"its seal is by key {stranger.key_id}, which is not a trusted key"]


def _forge(log_path: Path, writer: str | None, *, seal_of_another: bool = False) -> str:
    """The insider's forgery: a copy of the log's last report under a new event id, appended to the
    file (its triggers refuse only UPDATE and DELETE), claiming ``writer``; returns its position."""
    log = SqliteLog(log_path)
    try:
        journal = Journal(log, writer=writer or "")
        reports = [e for e in journal.read() if isinstance(e.event.payload, ResultReported)]
        last = reports[-1]
        event: Event[Any] = dataclasses.replace(last.event, envelope=dataclasses.replace(last.event.envelope,
                                                                                         event_id=str(uuid.uuid4())))
        if not seal_of_another:
            return str(journal.append(event))
        copied = tuple(h for h in last.headers if h[0] == SEAL)  # a real seal, lifted from another record
        assert copied and writer
        headers = ((WRITER, writer.encode()), *copied)
        return str(log.append(PendingRecord(event.key, event.event_id, default_codec().encode(event), headers)))
    finally:
        log.close()


@pytest.mark.parametrize("writer, lifted", [("system:intake", False), (None, False), ("system:intake", True)],
                         ids=["claims-the-intake", "names-no-writer", "a-seal-lifted-from-another-record"])
def test_a_record_posing_as_the_intakes_is_named_signed_over_and_audited(
    tmp_path: Path, site_at: Callable[[Path], Site], writer: str | None, lifted: bool,
) -> None:
    site = site_at(tmp_path)
    site.run("demo")
    clean = json.loads(site.run("verify", "--public-key", site.public_key, "--json").stdout)
    assert clean["findings"] == []
    rows = sqlite3.connect(site.data / "log.sqlite3").execute("SELECT headers FROM log_records").fetchall()
    assert sum(SEAL.encode() in bytes(h or b"") for (h,) in rows) >= 100  # the demo's intake sealed its records

    position = _forge(site.data / "log.sqlite3", writer, seal_of_another=lifted)
    found = json.loads(site.run("verify", "--public-key", site.public_key, "--json", code=1).stdout)["findings"]
    assert [(f["kind"], f["position"]) for f in found] == [("writer", position)], found
    assert "FORGED_WRITER" in found[0]["message"]
    assert ("does not match" if lifted else "carries no seal") in found[0]["message"]

    # Signed as what the log holds (a refusal would let one appended record stop checkpoints for good),
    # with the record named; verify names it still, under the checkpoint.
    signed = site.run("checkpoint", "--json")
    assert [f["position"] for f in json.loads(signed.stdout)["forged_writers"]] == [position]
    assert "warning: FORGED_WRITER" in signed.stderr
    found = json.loads(site.run("verify", "--public-key", site.public_key, "--json", code=1).stdout)["findings"]
    assert [(f["kind"], f["position"]) for f in found] == [("writer", position)], found

    site.run("project", "--until-caught-up")
    audit = json.loads(site.run("audit", "--json", code=1).stdout)
    forged = [f for f in audit["findings"] if f["code"] == "FORGED_WRITER"]
    assert [(f["status"], f["severity"]) for f in forged] == [(f"record {position}", "error")], forged


def test_a_forged_record_on_a_kafka_topic_is_named(kafka_bootstrap: str, unique_topic: str,
                                                   events_factory: Callable[..., list[Event[Any]]]) -> None:
    kafka = pytest.importorskip("ledger.log.kafka")
    kafka.provision_topic(kafka_bootstrap, unique_topic, partitions=4)
    log = kafka.KafkaLog(kafka_bootstrap, unique_topic, partitions=4)
    key = generate_key()
    try:
        sealed = Journal(log, writer="system:intake", seal=Sealer(key).seal)
        sealed.append_batch(events_factory(30))
        _, report = verify_log(log, None, [key.trusted])
        assert report.ok, report.findings
        forged_at = Journal(log, writer="system:intake").append(events_factory(1, start=30, tag="forger")[0])
        _, report = verify_log(log, None, [key.trusted])
        assert [(f.kind, f.position) for f in report.findings] == [("writer", forged_at)], report.findings
        _, report = verify_log(log, None, [generate_key().trusted])  # sealed by a key this verifier does not trust
        assert {f.kind for f in report.findings} == {"writer"} and len(report.findings) == 30
    finally:
        log.close()


def test_a_spool_line_written_by_another_hand_is_refused_not_sealed(tmp_path: Path, site_at: Callable[[Path], Site]) -> None:
    """The spool lies in the data directory: a correction written into it, forwarded as the intake's,
    would reach the log sealed. Its line carries no seal of the intake's, so it is recorded as refused."""
    from ledger.render import event_to_json

    site = site_at(tmp_path)
    site.run("demo")
    log = SqliteLog(site.data / "log.sqlite3")
    try:
        last = [e for e in Journal(log).read() if isinstance(e.event.payload, ResultReported)][-1].event
    finally:
        log.close()
    planted = dataclasses.replace(last, envelope=dataclasses.replace(last.envelope, event_id=str(uuid.uuid4()),
                                                                     idempotency_key=f"planted-{uuid.uuid4()}"))
    spool = next((site.data / "intake").rglob("state.json")).parent / "spool.jsonl"
    line = {"kind": "event", "spooled_at": "2020-02-04T01:00:00+00:00", "event": event_to_json(planted), "generation": 0, "basis": {}}
    spool.write_text(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n")

    flushed = json.loads(site.run("spool", "flush", "--json").stdout)
    assert (flushed["forwarded"], flushed["rejected"], flushed["remaining"]) == (0, 1, 0), flushed
    tail = [json.loads(x) for x in site.run("log", "tail", "-n", "3", "--json").stdout.splitlines()]
    assert planted.event_id not in {t["event_id"] for t in tail}
    refusal = tail[-1]
    assert refusal["type"] == "SubmissionRejected" and "NOT_SPOOLED_HERE" in json.dumps(refusal["payload"]), refusal
    assert json.loads(site.run("verify", "--public-key", site.public_key, "--json").stdout)["findings"] == []


def test_a_sealed_spool_keeps_its_own_lines_and_only_those(tmp_path: Path) -> None:
    from producers.spool import Spool

    sealer = Sealer(generate_key())
    spool = Spool(tmp_path / "spool.jsonl", sealer.seal)
    events = [e for e in _events(2)]
    for event in events:
        spool.add(event)
    forged = {"kind": "forwarded", "event_id": events[0].event_id, "position": None, "outcome": "appended", "note": "", "at": "x"}
    with (tmp_path / "spool.jsonl").open("a") as fh:
        fh.write(json.dumps(forged) + "\n")  # "it reached the log": written by another hand, it forwards nothing
    reread = Spool(tmp_path / "spool.jsonl", sealer.seal).pending()
    assert [(i.event.event_id, i.sealed) for i in reread] == [(e.event_id, True) for e in events]
    lines = (tmp_path / "spool.jsonl").read_text().splitlines()
    edited = json.loads(lines[1])
    edited["event"]["actor"] = "someone-else"
    (tmp_path / "spool.jsonl").write_text("\n".join([lines[0], json.dumps(edited)]) + "\n")
    assert [i.sealed for i in Spool(tmp_path / "spool.jsonl", sealer.seal).pending()] == [True, False]
    assert [i.sealed for i in Spool(tmp_path / "spool.jsonl", Sealer(generate_key()).seal).pending()] == [False, False]


def _events(n: int) -> list[Event[Any]]:
    from ledger.events import Channel, Result, new_event

    return [new_event(ResultReported(Result({"A": 5 + i}, {"A": 5 + i}, attendance=5 + i), reporter="chair"),
                      election_id="e", unit_id=f"U{i}", actor="chair", channel=Channel.APP) for i in range(n)]


def test_a_writer_that_only_looks_like_the_intake_is_a_claim() -> None:
    from ledger.integrity.writer_seals import claims_trusted_writer

    for posing in ("System:intake", " system:intake", "system :intake", "IMPORTER:idp2020", "None", "", "null"):
        assert claims_trusted_writer(posing), posing
    for official in ("official:ann", "Ann Example", "import-of-unpublished-files: (ia; not as published: x.csv)"):
        assert not claims_trusted_writer(official), official


def test_an_audit_without_a_key_says_the_seals_went_unchecked(tmp_path: Path, site_at: Callable[[Path], Site]) -> None:
    site = site_at(tmp_path)
    site.run("demo")
    site.run("project", "--until-caught-up")
    checked = json.loads(site.run("audit", "--json").stdout)
    assert checked["writer_seals"] == "checked"
    site.env["CAUCUS_KEY_HOME"] = str(tmp_path / "no-keys")
    (site.data / "checkpoint-key.pub").unlink()
    unchecked = site.run("audit")
    assert "writer seals: not checked: no public key" in unchecked.stdout, unchecked.stdout


def test_a_checkpoint_from_another_key_home_leaves_the_published_key_alone(tmp_path: Path,
                                                                          site_at: Callable[[Path], Site]) -> None:
    """The data directory's checkpoint-key.pub is what an auditor with no key home trusts. Another
    operator's `caucus checkpoint` (a key home of its own) is refused, since the log's seals are not by
    its key; it used to replace that file all the same, and then `verify` called every record forged."""
    site = site_at(tmp_path)
    site.run("demo")
    site.run("checkpoint")
    published = (site.data / "checkpoint-key.pub").read_bytes()
    site.env["CAUCUS_KEY_HOME"] = str(tmp_path / "another-operator")
    refused = site.run("checkpoint", code=1)
    assert "REFUSED TO SIGN" in refused.stdout
    assert "holds key" in refused.stderr and "--public-key" in refused.stderr, refused.stderr
    assert (site.data / "checkpoint-key.pub").read_bytes() == published
    site.env["CAUCUS_KEY_HOME"] = str(tmp_path / "auditor-without-keys")
    verified = site.run("verify")
    assert "OK: every checkpointed record matches" in verified.stdout, verified.stdout
    # Trusted for earlier checkpoints and seals, the other key signs, and still leaves the file alone.
    site.env["CAUCUS_KEY_HOME"] = str(tmp_path / "another-operator")
    signed = site.run("checkpoint", "--public-key", site.public_key)
    assert "was left as it is" in signed.stderr, signed.stderr
    assert (site.data / "checkpoint-key.pub").read_bytes() == published


def test_a_planted_spool_line_displaces_no_sealed_one_and_a_scalar_line_is_a_spool_error(tmp_path: Path) -> None:
    from producers.spool import Spool, SpoolError
    from ledger.render import event_to_json

    sealer = Sealer(generate_key())
    spool = Spool(tmp_path / "spool.jsonl", sealer.seal)
    genuine = _events(1)[0]
    spool.add(genuine)
    twin = dataclasses.replace(genuine, envelope=dataclasses.replace(genuine.envelope, actor="mallory"))
    line = {"kind": "event", "spooled_at": "x", "event": event_to_json(twin), "generation": 0, "basis": {}}
    with (tmp_path / "spool.jsonl").open("a") as fh:
        fh.write(json.dumps(line) + "\n")  # same event id, other content, no seal
    [kept] = Spool(tmp_path / "spool.jsonl", sealer.seal).pending()
    assert (kept.event.envelope.actor, kept.sealed) == (genuine.envelope.actor, True)
    with (tmp_path / "spool.jsonl").open("a") as fh:
        fh.write("123\n")
    with pytest.raises(SpoolError, match="line 3 is not a spool record"):
        Spool(tmp_path / "spool.jsonl", sealer.seal).pending()


def test_a_key_home_that_cannot_hold_the_key_is_named_with_what_to_set(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A key home that is a file: `caucus checkpoint` said only "File exists", where the writers named the
    key home and the setting. Both now say where and what to set, and neither writes anything."""
    from ledger.integrity.keys import KeyFileError, resolve_signing_key
    from ledger.integrity.writer_seals import sealer_for

    home = tmp_path / "not-a-directory"
    home.write_text("")
    monkeypatch.setenv("CAUCUS_KEY_HOME", str(home))
    monkeypatch.delenv("CAUCUS_CHECKPOINT_KEY", raising=False)
    data = tmp_path / "data"
    data.mkdir()
    for make in (lambda: resolve_signing_key(None, data), lambda: sealer_for(None, data)):
        with pytest.raises(KeyFileError) as caught:
            make()
        assert str(home) in str(caught.value) and "set CAUCUS_KEY_HOME" in str(caught.value), caught.value
    assert "seal what they write" in str(caught.value)
    assert list(data.iterdir()) == []


def test_the_recount_signer_is_the_key_checkpoints_use_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``held_signing_key`` follows ``resolve_signing_key``'s choice and never falls back to another key: a
    configured key that cannot be used leaves the manifest unsigned, not signed by the key home's."""
    from ledger.integrity.keys import PRIVATE_KEY_FILE, held_signing_key, load_or_create_signing_key

    home, data = tmp_path / "home", tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("CAUCUS_KEY_HOME", str(home))
    monkeypatch.delenv("CAUCUS_CHECKPOINT_KEY", raising=False)
    assert held_signing_key(None, data) is None and not home.exists()  # none made
    home_key, _ = load_or_create_signing_key(home)
    held = held_signing_key(None, data)
    assert held is not None and held.key_id == home_key.key_id
    assert held_signing_key(tmp_path / "missing.pem", data) is None  # not the key home's in its place
    own, _ = load_or_create_signing_key(data)  # a data directory's own key comes first, as for checkpoints
    held = held_signing_key(None, data)
    assert held is not None and held.key_id == own.key_id and (data / PRIVATE_KEY_FILE).exists()


def test_a_writer_sealing_with_another_key_than_the_published_one_is_warned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The importer or intake of another key home seals with its own key while the data directory's
    ``checkpoint-key.pub`` (what a verifier with no key home trusts) holds the first one: what it writes
    is FORGED_WRITER to that verifier, and it said nothing."""
    from ledger.integrity.keys import PUBLIC_KEY_FILE, load_or_create_signing_key, write_public_key
    from ledger.integrity.writer_seals import sealer_for

    data = tmp_path / "data"
    data.mkdir()
    first, _ = load_or_create_signing_key(tmp_path / "first-home")
    write_public_key(first, data / PUBLIC_KEY_FILE)
    published = (data / PUBLIC_KEY_FILE).read_bytes()
    monkeypatch.setenv("CAUCUS_KEY_HOME", str(tmp_path / "second-home"))
    monkeypatch.delenv("CAUCUS_CHECKPOINT_KEY", raising=False)
    with caplog.at_level("WARNING"):
        sealer = sealer_for(None, data)
    assert sealer.key.key_id != first.key_id and (data / PUBLIC_KEY_FILE).read_bytes() == published
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert first.key_id in warned and sealer.key.key_id in warned and "both public keys" in warned, warned
    caplog.clear()
    monkeypatch.setenv("CAUCUS_KEY_HOME", str(tmp_path / "first-home"))
    with caplog.at_level("WARNING"):
        assert sealer_for(None, data).key.key_id == first.key_id
    assert not [r for r in caplog.records if "writer seals" in r.getMessage()]


def test_first_writers_with_different_keys_racing_publish_one_key_and_the_others_are_told(tmp_path: Path) -> None:
    """Publishing was "if absent, write": two first writers could both find no file, both write, and the
    one whose key was overwritten believed it published (no warning). Now exactly one publishes."""
    import threading

    from ledger.integrity.keys import PUBLIC_KEY_FILE, load_or_create_signing_key, load_trusted_key, publish_public_key

    keys = [load_or_create_signing_key(tmp_path / f"home-{i}")[0] for i in range(12)]
    data = tmp_path / "data"
    data.mkdir()
    start, answers = threading.Barrier(len(keys)), {}

    def publish(i: int) -> None:
        start.wait()
        answers[i] = publish_public_key(keys[i], data)

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(len(keys))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    published = load_trusted_key(data / PUBLIC_KEY_FILE)
    winners = [i for i, warning in answers.items() if warning is None]
    assert len(winners) == 1 and keys[winners[0]].public_key == published.public_key, answers
    assert all(published.key_id in (w or "") for i, w in answers.items() if i not in winners)
    assert sorted(p.name for p in data.iterdir()) == [PUBLIC_KEY_FILE]  # no temporary file left


def test_publishing_works_where_the_file_system_has_no_hard_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is linked into place; a file system without hard links (vfat, some network mounts) answers
    the link with EPERM: the file is then created exclusively, still never replacing another key."""
    import errno
    import os as os_module

    from ledger.integrity.keys import PUBLIC_KEY_FILE, load_or_create_signing_key, load_trusted_key, publish_public_key

    def no_links(*_args: object, **_kw: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os_module, "link", no_links)
    data = tmp_path / "data"
    data.mkdir()
    first, _ = load_or_create_signing_key(tmp_path / "first")
    second, _ = load_or_create_signing_key(tmp_path / "second")
    assert publish_public_key(first, data) is None
    assert first.key_id in (publish_public_key(second, data) or "")
    assert load_trusted_key(data / PUBLIC_KEY_FILE).public_key == first.public_key
    assert sorted(p.name for p in data.iterdir()) == [PUBLIC_KEY_FILE]
