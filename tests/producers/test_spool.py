"""When the log is out of reach, accepted commands wait in a durable spool and reach the log later:
in order, once each, nothing lost. Over the embedded log (its file locked by another writer) and the
real broker (stopped mid-run; it comes back empty, which the intake must report)."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ledger.events import Channel, ResultCorrected, ResultReported, SubmissionRejected, UnitOpened, new_event
from ledger.journal import Journal, LoggedEvent
from ledger.log.port import EventLog, LogError, LogLostError, LogUnavailableError
from producers.commands import CommandKind
from producers.credentials import Credential, CredentialStore
from producers.intake import Intake, Outcome, Receipt, Refusal, Submission
from producers.spool import Spool, SpoolError

Send = Callable[..., Outcome]


@contextmanager
def _locked_sqlite(path: Path) -> Iterator[None]:
    """Another writer holds the embedded log's write lock: appends fail, reads still work."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@pytest.fixture
def outage(log_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], Any]:
    """``with outage():`` makes the log unreachable for the block (Kafka: the broker is stopped, and
    comes back empty, as Tansu does; the topic is provisioned again as an operator would)."""
    if log_kind == "embedded":
        return lambda: _locked_sqlite(tmp_path / "log.sqlite3")
    broker = request.getfixturevalue("broker")
    topic = request.getfixturevalue("unique_topic")

    @contextmanager
    def stopped() -> Iterator[None]:
        from ledger.log.kafka import provision_topic

        broker.stop()
        try:
            yield
        finally:
            broker.start()
            provision_topic(broker.bootstrap, topic, partitions=4)

    return stopped


def _counts(events: list[LoggedEvent]) -> dict[str, int]:
    seen: dict[str, int] = {}
    for le in events:
        seen[le.event.event_id] = seen.get(le.event.event_id, 0) + 1
    return seen


def _flush_into_the_lost_log(intake: Intake, match: str) -> None:
    """A flush of the spool once the broker is back (empty) must refuse, naming the lost log. Its client
    may take a few catch-up timeouts to reach the restarted broker on a loaded machine: until it does,
    a flush forwards nothing and says the log is out of reach, which is asserted each time."""
    deadline = time.monotonic() + 60
    while True:
        try:
            report = intake.flush()
        except LogError as exc:
            assert re.search(match, str(exc)), str(exc)
            return
        assert report.forwarded == 0 and report.remaining == 3, f"forwarded into the log the broker came back with: {report}"
        assert time.monotonic() < deadline, f"the restarted broker was never reached: {report}"


def test_spooled_while_down_forwarded_once_when_back(
    log_kind: str, defined: Outcome, send: Send, intake: Intake, chair: Credential, fm5: dict[str, Any],
    outage: Callable[[], Any], logged: Callable[[], list[LoggedEvent]], connect: Callable[[], EventLog]
) -> None:  # fmt: skip
    report = send(CommandKind.REPORT, json.dumps(fm5), chair, unit="FM5", key="fm5")
    assert isinstance(report, Receipt) and report.status == "accepted"
    e01 = {"first_alignment": {"Biden": 40, "Sanders": 35, "Warren": 25},
           "final_alignment": {"Biden": 40, "Sanders": 35, "Warren": 25}, "delegates_reported": {"Biden": 2, "Sanders": 2, "Warren": 1}}  # fmt: skip
    fix = {**fm5, "supersedes": report.event_id, "reason": "typo", "authority": "IDP", "stage": "review",
           "delegates_reported": {"Biden": 3, "Buttigieg": 5, "Sanders": 4}, "worksheet_digest": "sha256:" + "ab" * 32}  # fmt: skip
    before = logged()
    with outage():
        spooled = send(CommandKind.REPORT, json.dumps(e01), unit="E01", key="e01")
        corrected = send(CommandKind.CORRECT, json.dumps(fix), unit="FM5", key="fm5-fix")
        retry = send(CommandKind.REPORT, json.dumps(e01), unit="E01", key="e01")
        second = send(CommandKind.REPORT, json.dumps(e01), unit="E01", key="e01-again")
        assert isinstance(spooled, Receipt) and spooled.status == "spooled" and spooled.position is None
        assert isinstance(corrected, Receipt) and corrected.status == "spooled"
        assert isinstance(retry, Receipt) and (retry.status, retry.event_id) == ("duplicate", spooled.event_id)
        # validated against the log plus the spool: the spooled report counts
        assert isinstance(second, Refusal) and second.errors[0].code == "ALREADY_REPORTED" and second.recorded == "spool"
        pending = [item.event.event_id for item in intake.spool.pending()]
        assert pending == [spooled.event_id, corrected.event_id, second.rejection_event_id]
        # the spool file holds one line per record, each with the whole event
        lines = intake.spool.path.read_text().splitlines()
        assert [json.loads(line)["event"]["event_id"] for line in lines] == pending
        still_down = intake.flush()
        assert still_down.remaining == 3 and still_down.forwarded == 0
    if log_kind == "kafka":
        # The broker came back empty. The spool is not forwarded into it: its events were judged against
        # the log that was lost, and would land without the definition and the report they rest on.
        _flush_into_the_lost_log(intake, match="lost.*3 spooled event")
        assert [item.event.event_id for item in intake.spool.pending()] == pending and logged() == []
        # until a rebuild it confirms no receipt either (one of the lost log's could name a vanished event)
        with pytest.raises(LogError, match="lost"):
            send(CommandKind.OPEN, json.dumps({"attendance": 10}), unit="E10", key="after")
        with pytest.raises(LogError, match="lost"):
            intake.lookup("fm5")
        # the operator restores the log from a copy and rebuilds; the spool is then judged against it
        restored = Journal(connect())
        try:
            restored.append_batch([le.event for le in before])
        finally:
            restored.close()
        assert intake.rebuild()["spooled_waiting"] == 3
    flushed = intake.flush()
    assert (flushed.forwarded, flushed.remaining, flushed.error) == (3, 0, None)
    assert intake.flush().forwarded == 0  # nothing twice
    events = logged()
    counts = _counts(events)
    assert all(counts.get(eid) == 1 for eid in pending), counts
    order = [le.event.event_id for le in sorted(events, key=lambda le: le.position) if le.event.event_id in pending]
    fm5_part = [le for le in events if le.event.unit_id == "FM5"]
    assert [type(le.event.payload) for le in sorted(fm5_part, key=lambda le: le.position.offset)][-1] is ResultCorrected
    assert set(order) == set(pending)
    assert not intake.spool.path.exists() and list((intake.spool.path.parent / "archive").iterdir())
    found = intake.lookup("e01")
    assert isinstance(found, Receipt) and found.status == "accepted" and found.position is not None
    assert counts[report.event_id] == 1
    after = send(CommandKind.OPEN, json.dumps({"attendance": 10}), unit="E10", key="after")
    assert isinstance(after, Receipt) and after.status == "accepted"


@pytest.mark.parametrize("log_kind", ["embedded"])
def test_next_command_forwards_the_spool_first(defined: Outcome, send: Send, intake: Intake, fm5: dict[str, Any],
                                               tmp_path: Path, logged: Callable[[], list[LoggedEvent]]) -> None:  # fmt: skip
    intake.retry_after = 0  # try the log on every command (the default waits a little after a failure)
    with _locked_sqlite(tmp_path / "log.sqlite3"):
        spooled = send(CommandKind.OPEN, json.dumps({"attendance": 91}), unit="FM5", key="open")
    assert isinstance(spooled, Receipt) and spooled.status == "spooled"
    report = send(CommandKind.REPORT, json.dumps(fm5), unit="FM5", key="report")
    assert isinstance(report, Receipt) and report.status == "accepted"
    by_id = {le.event.event_id: le.position for le in logged()}
    assert by_id[spooled.event_id] < by_id[report.event_id]  # same unit, same partition, spool first
    assert len(intake.spool) == 0


@pytest.mark.parametrize("log_kind", ["embedded"])
def test_a_spooled_event_that_clashes_on_arrival_is_recorded_as_refused(
    defined: Outcome, send: Send, intake: Intake, make_intake: Callable[..., Intake], official: Credential,
    fm5: dict[str, Any], tmp_path: Path, logged: Callable[[], list[LoggedEvent]]
) -> None:  # fmt: skip
    with _locked_sqlite(tmp_path / "log.sqlite3"):
        spooled = send(CommandKind.REPORT, json.dumps(fm5), unit="FM5", key="mine")
    assert isinstance(spooled, Receipt) and spooled.status == "spooled"
    other = make_intake(tmp_path / "other-intake")  # another intake reports the same unit meanwhile
    theirs = other.submit(Submission(CommandKind.REPORT, json.dumps(fm5), official, Channel.PHONE, unit_id="FM5", idempotency_key="theirs"))
    assert isinstance(theirs, Receipt) and theirs.status == "accepted"
    report = intake.flush()
    assert (report.forwarded, report.rejected, report.remaining) == (0, 1, 0)
    events = logged()
    assert spooled.event_id not in {le.event.event_id for le in events}
    refusals = [le.event.payload for le in events if isinstance(le.event.payload, SubmissionRejected)]
    assert [e.code for e in refusals[-1].errors] == ["ALREADY_REPORTED"]
    assert json.loads(refusals[-1].raw_input)["event_id"] == spooled.event_id  # the whole spooled event, kept
    found = intake.lookup("mine")
    assert isinstance(found, Refusal) and found.errors[0].code == "ALREADY_REPORTED"
    assert sum(isinstance(le.event.payload, ResultReported) for le in events) == 1


def test_spool_file_rules(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.jsonl")
    events = [new_event(UnitOpened(n), election_id="e", unit_id=f"u{n}", actor="a", channel=Channel.APP) for n in range(3)]
    for event in events:
        spool.add(event)
    # a write torn by a crash (never acknowledged) is ignored, and the next record starts on a new line
    with open(spool.path, "ab") as out:
        out.write(b'{"kind": "event", "event": {"trunc')
    fresh = Spool(spool.path)
    assert [i.event for i in fresh.pending()] == events and fresh.ignored_partial_line
    late = new_event(UnitOpened(9), election_id="e", unit_id="u9", actor="a", channel=Channel.APP)
    fresh.add(late)
    assert [i.event for i in Spool(spool.path).pending()] == [*events, late]
    fresh.mark_forwarded(events[1].event_id, None, "appended")
    assert [i.event.event_id for i in Spool(spool.path).pending()] == [events[0].event_id, events[2].event_id, late.event_id]
    for event in (events[0], events[2], late):
        fresh.mark_forwarded(event.event_id, None, "appended")
    assert not spool.path.exists() and len(list((tmp_path / "archive").iterdir())) == 1
    # damage in the middle is not ignored
    spool.path.write_text('{"kind": "event", "spooled_at": "x", "event": {}}\nnot json\n')
    with pytest.raises(SpoolError, match="line 1"):
        Spool(spool.path).pending()


def _switchable_log(tmp_path: Path) -> tuple[dict[str, bool], Callable[[], EventLog]]:
    """An embedded log whose opening fails while ``down["now"]`` (as a locked file or a gone broker does)."""
    from ledger.log.sqlite import SqliteLog

    down = {"now": False}

    def connect() -> EventLog:
        if down["now"]:
            raise LogUnavailableError("test: the log is down")
        return SqliteLog(tmp_path / "log.sqlite3", partitions=4)

    return down, connect


def _submitter(sender: Credential) -> Callable[[Intake, CommandKind, dict[str, Any], str | None, str], Outcome]:
    def submit(intake: Intake, kind: CommandKind, data: dict[str, Any], unit: str | None, key: str) -> Outcome:
        return intake.submit(Submission(kind, json.dumps(data), sender, unit_id=unit, idempotency_key=key))

    return submit


def _opened_once_back(tmp_path: Path, down: dict[str, bool], connect: Callable[[], EventLog],
                      submit: Callable[..., Outcome]) -> list[Any]:
    """The log back: the unit L-E01 that could not be judged while it was down is opened; the log's events."""
    from ledger.log.sqlite import SqliteLog

    down["now"] = False
    back = Intake(connect, tmp_path / "intake", name="t").start()
    opened = submit(back, CommandKind.OPEN, {"attendance": 5}, "L-E01", "open-later")
    assert isinstance(opened, Receipt) and opened.accepted, opened
    back.close()
    return [le.event for le in Journal(SqliteLog(tmp_path / "log.sqlite3")).read()]


def test_an_intake_started_while_the_log_is_down_works_from_snapshot_and_spool(
    tmp_path: Path, official: Credential, election: dict[str, Any]
) -> None:
    """The CLI case: a new process, the log out of reach. It validates against the snapshot its last
    run left, spools, and a later run (or flush) forwards."""
    from ledger.log.sqlite import SqliteLog

    down, connect = _switchable_log(tmp_path)
    submit = _submitter(official)

    first = Intake(connect, tmp_path / "intake", name="t").start()
    assert submit(first, CommandKind.DEFINE, election, None, "define-ia-test").accepted
    first.close()  # leaves a snapshot
    down["now"] = True
    offline = Intake(connect, tmp_path / "intake", name="t").start()
    spooled = submit(offline, CommandKind.OPEN, {"attendance": 5}, "E01", "o")
    assert isinstance(spooled, Receipt) and spooled.status == "spooled"
    unknown = submit(offline, CommandKind.OPEN, {"attendance": 5}, "ZZZ", "z")
    assert isinstance(unknown, Refusal) and unknown.errors[0].code == "UNKNOWN_UNIT"  # validated from the snapshot
    offline.close()
    restarted = Intake(connect, tmp_path / "intake", name="t").start()  # still down: picks up the spool
    assert len(restarted.spool) == 2
    dup = submit(restarted, CommandKind.OPEN, {"attendance": 5}, "E01", "o")
    assert isinstance(dup, Receipt) and (dup.status, dup.event_id) == ("duplicate", spooled.event_id)
    again = submit(restarted, CommandKind.OPEN, {"attendance": 6}, "E01", "o2")
    assert isinstance(again, Refusal) and again.errors[0].code == "ALREADY_OPENED"  # the spooled open counts
    down["now"] = False
    assert restarted.flush().forwarded == 3
    restarted.close()
    ids = [le.event.event_id for le in Journal(SqliteLog(tmp_path / "log.sqlite3")).read()]
    assert spooled.event_id in ids and len(ids) == len(set(ids)) == 4


def test_spool_flush_keeps_the_spool_for_a_lost_log_until_it_is_restored_and_rebuilt(tmp_path: Path) -> None:
    """Through the command line, each step a process of its own: the embedded log replaced by an empty
    file (as a memory-only broker comes back empty). ``spool flush`` exits 3 and keeps the event; after
    the log is restored from a copy (``log tail`` into ``log append``) and ``intake rebuild``, the flush
    forwards it, after the definition and the report it rests on."""
    import shutil

    from ledger.events import Result
    from ledger.settings import load_settings
    from ledger.log.sqlite import SqliteLog
    from producers.credentials import CredentialStore
    from tests.producers.test_direct_writes import ELECTION, _caucus

    data, copy = tmp_path / "data", tmp_path / "copy"
    _, token = CredentialStore(data / "credentials.json").issue("official", name="Bob")
    (tmp_path / "el.json").write_text(json.dumps(ELECTION))
    for args in (["define", str(tmp_path / "el.json")],
                 ["report", "--unit", "P3", "--attendance", "60", "--first", "A=60", "--final", "A=60", "--key", "p3"],
                 ["intake", "rebuild"]):  # fmt: skip
        done = _caucus(data, *args, token=token)
        assert done.returncode == 0, done.stderr
    # an accepted report that waits in the spool (as one kept while the log was out of reach)
    waiting = new_event(ResultReported(Result({"A": 30, "B": 30}, {"A": 30, "B": 30}, attendance=60), reporter="chair"),
                        election_id="e", unit_id="P4", actor="official:Bob#1", channel=Channel.APP, idempotency_key="p4")
    # and one for a unit the lost log had been redefined with, which the older copy restored below lacks
    gone = new_event(ResultReported(Result({"A": 30, "B": 30}, {"A": 30, "B": 30}, attendance=60), reporter="chair"),
                     election_id="e", unit_id="P5", actor="official:Bob#1", channel=Channel.APP, idempotency_key="p5")
    spool = Intake.for_settings(load_settings({"data_dir": data}, env={}).settings).spool
    spool.add(waiting)
    spool.add(gone)
    copy.mkdir()
    shutil.move(str(data / "log.sqlite3"), copy / "log.sqlite3")
    for extra in ("-wal", "-shm"):
        (data / f"log.sqlite3{extra}").unlink(missing_ok=True)
    SqliteLog(data / "log.sqlite3").close()  # a new, empty log in its place

    lost = _caucus(data, "spool", "flush", token=token)
    assert lost.returncode == 3 and "2 spooled event(s) stay in the spool" in lost.stderr, lost.stderr
    assert "caucus intake rebuild" in lost.stderr
    assert json.loads(_caucus(data, "spool", "status", "--json").stdout)["pending"] == 2

    history = tmp_path / "history.jsonl"
    history.write_text(_caucus(copy, "log", "tail", "-n", "0", "--json").stdout)
    assert _caucus(data, "log", "append", str(history), token=token).returncode == 0
    rebuilt = _caucus(data, "intake", "rebuild", "--json")
    assert rebuilt.returncode == 0 and json.loads(rebuilt.stdout)["spooled_waiting"] == 2, rebuilt.stderr
    flushed = _caucus(data, "spool", "flush", "--json")
    report = json.loads(flushed.stdout)
    assert flushed.returncode == 0 and (report["forwarded"], report["rejected"]) == (1, 1), flushed.stdout + flushed.stderr
    logged = [json.loads(line) for line in _caucus(data, "log", "tail", "-n", "0", "--json").stdout.splitlines()]
    refused = [e for e in logged if e["type"] == "SubmissionRejected" and e["unit_id"] == "P5"]
    assert len(refused) == 1 and "UNKNOWN_UNIT" in json.dumps(refused[0]["payload"]), refused
    assert _caucus(data, "project", "--until-caught-up", "-q").returncode == 0
    tally = json.loads(_caucus(data, "tally", "--unit", "P4", "--json").stdout)
    assert tally["unit"]["status"] == "reported", tally


def test_a_flush_from_a_snapshot_older_than_the_spool_does_not_forward_into_an_emptied_log(
    tmp_path: Path, official: Credential, election: dict[str, Any]
) -> None:
    """The service judged and spooled a report against a log holding the election; the log then came
    back empty (a memory-only broker). A flush from another process, whose snapshot was taken while
    the log was still empty, finds nothing amiss in the log itself: the spooled report's own basis
    (the positions and events it was judged after) must stop it, and keep it, until a rebuild."""
    from ledger.log.sqlite import SqliteLog
    from producers.intake import IntakeLogLost

    down = {"now": False}
    path = tmp_path / "log.sqlite3"

    def connect() -> SqliteLog:
        if down["now"]:
            raise LogUnavailableError("test: the log is down")
        return SqliteLog(path, partitions=4)

    def submit(intake: Intake, kind: CommandKind, data: dict[str, Any], unit: str | None, key: str) -> Outcome:
        return intake.submit(Submission(kind, json.dumps(data), official, unit_id=unit, idempotency_key=key))

    import shutil

    early = Intake(connect, tmp_path / "intake", name="t").start()
    early.close()  # a snapshot of the empty log, which the flushing process will still have
    shutil.copy(early.snapshot_path, tmp_path / "older-snapshot")
    seen = early.snapshot_path.with_name(early.snapshot_path.name + ".seen")
    shutil.copy(seen, tmp_path / "older-seen")
    service = Intake(connect, tmp_path / "intake", name="t").start()
    assert submit(service, CommandKind.DEFINE, election, None, "define-ia-test").accepted
    assert submit(service, CommandKind.OPEN, {"attendance": 5}, "E01", "o").accepted
    service.close()
    down["now"] = True
    offline = Intake(connect, tmp_path / "intake", name="t").start()
    report = {"first_alignment": {"Biden": 5}, "final_alignment": {"Biden": 5}}
    spooled = submit(offline, CommandKind.REPORT, report, "E01", "r")
    assert isinstance(spooled, Receipt) and spooled.status == "spooled"
    offline.close()
    # The service saves its snapshot seldom, and what it last saw only when it stops: killed, it leaves both older
    shutil.copy(tmp_path / "older-snapshot", early.snapshot_path)
    current_seen = seen.read_bytes()
    shutil.copy(tmp_path / "older-seen", seen)
    for extra in ("", "-wal", "-shm"):  # back, but empty
        (tmp_path / f"log.sqlite3{extra}").unlink(missing_ok=True)
    SqliteLog(path, partitions=4).close()
    down["now"] = False
    flusher = Intake(connect, tmp_path / "intake", name="t").start()
    with pytest.raises(IntakeLogLost, match="judged against"):
        flusher.flush()
    assert [i.event.event_id for i in flusher.spool.pending()] == [spooled.event_id]
    assert list(SqliteLog(path).read()) == []  # nothing forwarded, nothing refused into the empty log
    flusher.close()
    seen.write_bytes(current_seen)  # what the offline intake saw when it stopped: the start itself finds the loss
    with pytest.raises(LogLostError):
        Intake(connect, tmp_path / "intake", name="t").start()
    assert list(SqliteLog(path).read()) == []
    flusher.close()


def _lagging_offline_intake(tmp_path: Path, official: Credential, election: dict[str, Any]
                            ) -> tuple[dict[str, bool], Callable[[], EventLog], Callable[..., Outcome], Intake]:
    """An intake started while the log is down, whose snapshot lacks the second election (ia-later, units
    L-*) that an earlier run read: (the log's switch, its opener, the official's submit, that intake)."""
    from producers.intake import SNAPSHOT_EVERY

    down, connect = _switchable_log(tmp_path)
    submit = _submitter(official)
    first = Intake(connect, tmp_path / "intake", name="t").start()
    assert submit(first, CommandKind.DEFINE, election, None, "define-ia-test").accepted
    first.close()  # a snapshot holding the first election
    second_election = {**election, "election_id": "ia-later", "idempotency_key": "define-2",
                       "units": [{**u, "unit_id": f"L-{u['unit_id']}"} for u in election["units"]]}
    later = Intake(connect, tmp_path / "intake", name="t").start()
    assert submit(later, CommandKind.DEFINE, second_election, None, "define-2").accepted
    later.close(snapshot_after=SNAPSHOT_EVERY)  # as a CLI run: the snapshot is not saved, what was read is noted
    down["now"] = True
    return down, connect, submit, Intake(connect, tmp_path / "intake", name="t").start()


def test_an_intake_whose_snapshot_lags_what_was_read_does_not_refuse_while_the_log_is_down(
    tmp_path: Path, official: Credential, election: dict[str, Any]
) -> None:
    """A CLI run saves its snapshot only every SNAPSHOT_EVERY events, and notes what it read of the log
    beside it. A later run started while the log was down judged against that older snapshot: a report
    for a unit of an election defined after it was refused as UNKNOWN_UNIT, and that false refusal was
    spooled and forwarded into the log for good. Now such a run refuses nothing (nothing is recorded,
    the sender hears why); what it accepts is spooled and checked again when forwarded."""
    down, connect, submit, offline = _lagging_offline_intake(tmp_path, official, election)
    with pytest.raises(LogUnavailableError, match="cannot refuse a command now"):
        submit(offline, CommandKind.OPEN, {"attendance": 5}, "L-E01", "open-later")
    with pytest.raises(LogUnavailableError, match="lacks 1 event"):
        submit(offline, CommandKind.OPEN, {"attendance": 5}, "NOPE", "open-nope")
    spooled = submit(offline, CommandKind.OPEN, {"attendance": 5}, "E01", "open-first")
    assert isinstance(spooled, Receipt) and spooled.status == "spooled", "what it accepts is still spooled"
    assert len(offline.spool) == 1, "no refusal was spooled"
    offline.close()
    events = _opened_once_back(tmp_path, down, connect, submit)
    assert not [e for e in events if isinstance(e.payload, SubmissionRejected)], "no refusal reached the log"
    assert [e.unit_id for e in events if isinstance(e.payload, UnitOpened)] == ["E01", "L-E01"]


def test_an_intake_whose_state_lags_still_refuses_what_rests_on_the_sender_alone(
    tmp_path: Path, official: Credential, chair: Credential, store: CredentialStore, election: dict[str, Any]
) -> None:
    """An intake whose state lags the log (its log out of reach) refuses nothing that could rest on events it
    has not seen. A bad token or another unit's chair is refused whatever the log holds: such a command was
    answered "send it again once the log is back" (exit 2 / 503), and its sender met the refusal only then.
    Now it is refused at once, the refusal spooled and forwarded as any offline refusal."""
    down, connect, submit, offline = _lagging_offline_intake(tmp_path, official, election)
    with pytest.raises(LogUnavailableError, match="cannot refuse a command now"):
        submit(offline, CommandKind.OPEN, {"attendance": 5}, "L-E01", "open-later")  # the state does lag
    forged = store.authenticate("ckl_nobody_secret")
    bad_token = offline.submit(Submission(CommandKind.OPEN, json.dumps({"attendance": 5}), forged, unit_id="E01",
                                          idempotency_key="open-forged"))
    assert isinstance(bad_token, Refusal) and bad_token.category == "unauthenticated", bad_token
    wrong_unit = _submitter(chair)(offline, CommandKind.OPEN, {"attendance": 5}, "E01", "open-wrong")
    assert isinstance(wrong_unit, Refusal) and wrong_unit.category == "forbidden", wrong_unit
    assert bad_token.recorded == wrong_unit.recorded == "spool" and len(offline.spool) == 2
    offline.close()
    events = _opened_once_back(tmp_path, down, connect, submit)
    refused = [e.payload for e in events if isinstance(e.payload, SubmissionRejected)]
    assert sorted(p.errors[0].code for p in refused) == ["UNAUTHENTICATED", "WRONG_UNIT"], refused


@pytest.mark.parametrize("running", [True, False], ids=["running intake", "intake started while down"])
def test_an_intake_does_not_refuse_after_a_direct_write_it_has_not_read(
    tmp_path: Path, official: Credential, election: dict[str, Any], running: bool
) -> None:
    """``caucus log append`` (or the importer) defined a second election after the intake's last read;
    then the log went out of reach. A report for a unit of that election was refused UNKNOWN_UNIT and
    the refusal forwarded into the log for good. The direct write leaves the lock's mark, and an intake
    whose mark moved since its last read (or since the state it started from) refuses nothing."""
    from ledger.events import ElectionDefined
    from ledger.log.sqlite import SqliteLog
    from producers.intake_lock import DirectoryLock

    down, connect = _switchable_log(tmp_path)
    submit = _submitter(official)
    intake = Intake(connect, tmp_path / "intake", name="t").start()
    assert submit(intake, CommandKind.DEFINE, election, None, "define-ia-test").accepted
    if not running:
        intake.close()
    lock = DirectoryLock(tmp_path / "intake")
    with lock.held():  # as producers.direct_writes.intake_turn: append under the intake's lock, then mark
        first = next(le.event for le in Journal(SqliteLog(tmp_path / "log.sqlite3")).read())
        avro = first.payload.to_avro()
        avro["units"] = [{**u, "unit_id": f"L-{u['unit_id']}"} for u in avro["units"]]
        defined = new_event(ElectionDefined.from_avro(avro), election_id="ia-later", actor="official:direct",
                            channel=first.envelope.channel)
        Journal(SqliteLog(tmp_path / "log.sqlite3")).append(defined)
        lock.wrote()
    lock.close()
    down["now"] = True
    if running:  # its open log goes out of reach too, as a broker gone would (connect() now fails)
        assert intake._journal is not None
        intake._journal.close()
        intake._journal = None
    offline = intake if running else Intake(connect, tmp_path / "intake", name="t").start()
    with pytest.raises(LogUnavailableError, match="written since this intake last read it"):
        submit(offline, CommandKind.OPEN, {"attendance": 5}, "L-E01", "open-later")
    assert len(offline.spool) == 0
    offline.close()
    events = _opened_once_back(tmp_path, down, connect, submit)
    assert not [e for e in events if isinstance(e.payload, SubmissionRejected)]


def test_the_seen_file_of_another_log_gives_neither_its_positions_nor_its_mark(tmp_path: Path) -> None:
    """An offline intake judges whether its log was written since it last read it by the mark kept in the
    seen file. The mark was taken from a seen file of another log (the positions were not), so a data
    directory moved to another log compared that log's lock with the old log's mark."""
    import json

    from producers.intake_lock import DirectoryLock
    from producers.intake_snapshot import SnapshotFile

    lock = DirectoryLock(tmp_path)
    with lock.held():
        lock.wrote()  # the mark this intake last left
    mark = lock.last_seen
    old = SnapshotFile(tmp_path / "state.json", "log-a")
    old.seen_path.write_text(json.dumps({"log": "log-a", "generation": 0, "seen": {"0": [3, "e3"]}, "mark": mark.hex()}))
    assert old._read_seen(0) == ({0: (3, "e3")}, mark)
    other = SnapshotFile(tmp_path / "state.json", "log-b")
    assert other._read_seen(0) == ({}, b"")
    started = DirectoryLock(tmp_path)  # an intake of log-b that has not read it: any mark counts as moved
    assert other.unseen({}, 0, started, "down") is not None
    assert old.unseen({0: 3}, 0, started, "down") is None
    lock.close()
    started.close()
