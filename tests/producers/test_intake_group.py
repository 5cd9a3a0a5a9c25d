"""Group commit: commands queued on the intake's lock are decided in one turn and appended together,
and each hears exactly what it would have heard one by one; a failed append acknowledges none of them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ledger.events import Channel
from ledger.journal import Journal
from ledger.log.port import EventLog, LogError, LogUnavailableError, PendingRecord, Position
from ledger.log.sqlite import SqliteLog
from producers.commands import CommandKind
from producers.credentials import Credential, CredentialStore
from producers.intake import Intake, Outcome, Receipt, Refusal, Submission

from .conftest import ELECTION, FM5_REPORT, PARTITIONS

E10_REPORT = {"first_alignment": {"Biden": 30, "Warren": 20}, "final_alignment": {"Biden": 30, "Warren": 20},
              "attendance": 50}


class Appends:
    """The test's log, counting ``append_batch`` calls; with ``fail_after`` set, the next batch writes that
    many records and then fails with ``failure``: as an unreachable broker would, unless a test says
    otherwise (a plain ``LogError``: a broker refusing a record)."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.batches: list[int] = []
        self.fail_after: int | None = None
        self.failure: LogError = LogUnavailableError("the broker went away mid-batch (test)")

    def append_batch(self, records: Sequence[PendingRecord]) -> list[Position]:
        self.batches.append(len(records))
        if self.fail_after is not None:
            self.log.append_batch(records[: self.fail_after])
            raise self.failure
        return self.log.append_batch(records)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.log, name)


@pytest.fixture
def open_log(log_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[str], EventLog]]:
    """``open_log(name)``: a connection to the test's log called ``name`` (a file, or a topic)."""
    opened: list[EventLog] = []
    if log_kind == "kafka":
        from ledger.log.kafka import KafkaLog, provision_topic

        bootstrap, base = request.getfixturevalue("kafka_bootstrap"), request.getfixturevalue("unique_topic")

    def connect(name: str) -> EventLog:
        if log_kind == "embedded":
            log: EventLog = SqliteLog(tmp_path / f"{name}.sqlite3", partitions=PARTITIONS, timeout=0.2)
        else:
            provision_topic(bootstrap, f"{base}-{name}", partitions=PARTITIONS)
            log = KafkaLog(bootstrap, f"{base}-{name}", partitions=PARTITIONS, timeout=3.0)
        opened.append(log)
        return log

    yield connect
    for log in opened:
        try:
            log.close()
        except Exception:  # noqa: BLE001 - already closed by the intake
            pass


@pytest.fixture
def people(tmp_path: Path) -> tuple[Credential, Credential]:
    store = CredentialStore(tmp_path / "credentials.json")
    return store.issue("official", name="Pat Official")[0], store.issue("chair", unit_id="FM5")[0]


def _intake(open_log: Callable[[str], EventLog], name: str, tmp_path: Path, official: Credential) -> tuple[Intake, Appends]:
    log = Appends(open_log(name))
    intake = Intake(lambda: log, tmp_path / f"intake-{name}", name=name).start()  # type: ignore[arg-type,return-value]
    defined = intake.submit(Submission(CommandKind.DEFINE, json.dumps(ELECTION), official))
    assert defined.accepted, defined
    return intake, log


def _mixed(official: Credential, chair: Credential) -> list[Submission]:
    """Valid commands, repeats and clashes among themselves, and invalid ones, in one order."""
    fm5, other = json.dumps(FM5_REPORT), json.dumps({**FM5_REPORT, "attendance": 92})

    def sub(kind: CommandKind, body: str, unit: str, key: str | None, sender: Credential = official) -> Submission:
        return Submission(kind, body, sender, Channel.APP, unit_id=unit, idempotency_key=key)

    return [
        sub(CommandKind.REPORT, fm5, "FM5", "r1", chair),  # accepted
        sub(CommandKind.REPORT, fm5, "FM5", "r1", chair),  # a retry inside the group: the first one's receipt
        sub(CommandKind.REPORT, other, "FM5", "r1", chair),  # the key again, other content: IDEMPOTENCY_CONFLICT
        sub(CommandKind.REPORT, fm5, "FM5", "r2"),  # a second result for the unit: ALREADY_REPORTED
        sub(CommandKind.OPEN, json.dumps({"attendance": 50}), "E01", "o1"),  # accepted
        sub(CommandKind.OPEN, json.dumps({"attendance": 51}), "E01", "o2"),  # ALREADY_OPENED
        sub(CommandKind.REPORT, "{", "E10", "bad"),  # not JSON
        sub(CommandKind.REPORT, json.dumps(E10_REPORT), "E10", "r3", chair),  # not the chair's unit: forbidden
        sub(CommandKind.REPORT, json.dumps(E10_REPORT), "E10", "r3"),  # accepted: the key was only refused
        sub(CommandKind.OPEN, json.dumps({"attendance": 50}), "E10", "o3"),  # opened after its result
        sub(CommandKind.OPEN, json.dumps({"attendance": 50}), "E01", "o1"),  # o1 again: the receipt, now positioned
    ]


def _spelled(outcomes: Sequence[Outcome]) -> list[tuple[Any, ...]]:
    """Outcomes without what differs from log to log (event ids, offsets): a duplicate names the index of
    the command whose event it repeats; where an event went is only "somewhere" or "nowhere"."""
    index: dict[str, int] = {}
    spelled: list[tuple[Any, ...]] = []
    for i, outcome in enumerate(outcomes):
        if isinstance(outcome, Receipt):
            if outcome.status != "duplicate":
                index[outcome.event_id] = i
            spelled.append((outcome.status, index.get(outcome.event_id), outcome.event_type, outcome.unit_id,
                            outcome.idempotency_key, outcome.position is not None, [w.code for w in outcome.warnings]))
        else:
            assert isinstance(outcome, Refusal)
            spelled.append(("rejected", outcome.category, [(e.field, e.code) for e in outcome.errors], outcome.recorded,
                            outcome.position is not None, outcome.idempotency_key))
    return spelled


def _logged(log: EventLog) -> list[tuple[str, str, str]]:
    """The log's events as (type, unit, key) in order per partition (refusals' keys carry their event ids)."""
    events = sorted(Journal(log).read(), key=lambda e: (e.position.partition, e.position.offset))
    return [(e.event.type, e.event.envelope.unit_id, e.event.envelope.idempotency_key.split(":")[-1]) for e in events]


@pytest.mark.parametrize("log_kind", ["embedded", "kafka"])
def test_a_group_hears_what_one_by_one_hears(
    open_log: Callable[[str], EventLog], tmp_path: Path, people: tuple[Credential, Credential]
) -> None:
    official, chair = people
    alone, alone_log = _intake(open_log, "alone", tmp_path, official)
    grouped, grouped_log = _intake(open_log, "grouped", tmp_path, official)
    try:
        subs = _mixed(official, chair)
        expected = [alone.submit(sub) for sub in subs]
        assert len(alone_log.batches) == 1 + sum(1 for o in expected if not (isinstance(o, Receipt) and o.status == "duplicate"))

        answers: list[Outcome | None] = [None] * len(subs)
        with grouped._locked():  # every command queues while the lock is held, then one turn decides them all
            threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, grouped.submit(subs[i])))
                       for i in range(len(subs))]
            for i, thread in enumerate(threads):
                thread.start()
                deadline = time.monotonic() + 10
                while len(grouped._queue) <= i:  # in order: the group is judged in arrival order
                    assert time.monotonic() < deadline, "a submission never queued"
                    time.sleep(0.001)
        for thread in threads:
            thread.join(timeout=30)
        assert grouped_log.batches == [1, 9], "one append for the definition, one for the whole group"
        assert all(a is not None for a in answers)
        assert _spelled(answers) == _spelled(expected)  # type: ignore[arg-type]
        assert answers[-1].position == answers[4].position is not None  # type: ignore[union-attr]
        assert _logged(grouped_log.log) == _logged(alone_log.log)
        for key in ("r1", "o1", "r3"):
            assert grouped.state.claim(key) is not None and grouped.state.claim(key).position is not None  # type: ignore[union-attr]
        for unit in ("FM5", "E01", "E10"):
            mine, theirs = grouped.state.unit("ia-test", unit), alone.state.unit("ia-test", unit)
            assert (mine.attendance, mine.result) == (theirs.attendance, theirs.result), unit
    finally:
        alone.close()
        grouped.close()


@pytest.mark.parametrize("log_kind", ["embedded", "kafka"])
def test_an_append_that_fails_mid_group_acknowledges_none_of_it(
    open_log: Callable[[str], EventLog], tmp_path: Path, people: tuple[Credential, Credential]
) -> None:
    official, chair = people
    intake, log = _intake(open_log, "failing", tmp_path, official)
    try:
        subs = _mixed(official, chair)
        log.fail_after = 4  # the broker takes four of the group's nine records, then goes away
        slots = [intake._queue.add(sub, time.monotonic()) for sub in subs]
        with intake._locked():
            intake._commit(intake._queue.take())
        answers = [slot.result() for slot in slots]
        assert log.batches[-1] == 9
        for answer in answers:  # nobody hears "accepted": kept in the spool, as one alone would be
            assert (answer.status in ("spooled", "duplicate") if isinstance(answer, Receipt) else answer.recorded == "spool"), answer
            assert answer.position is None, answer
        assert [a.status for a in answers if isinstance(a, Receipt)] == ["spooled", "duplicate", "spooled", "spooled", "duplicate"]
        for key in ("r1", "o1", "r3"):
            assert intake.state.claim(key) is None, "the log's state holds nothing of a failed append"
        assert len(intake.spool.pending()) == 9

        log.fail_after = None
        report = intake.flush()
        assert (report.forwarded, report.already_present, report.remaining) == (5, 4, 0), report
        kept = _logged(log.log)
        assert len(kept) == 10 and len(set(kept)) == 10, "each of the group's events is in the log once"
        assert all(intake.state.claim(key) is not None for key in ("r1", "o1", "r3"))
    finally:
        intake.close()


@pytest.mark.parametrize("log_kind", ["embedded", "kafka"])
def test_a_command_after_a_part_written_group_is_judged_against_what_was_written(
    open_log: Callable[[str], EventLog], tmp_path: Path, people: tuple[Credential, Credential]
) -> None:
    """An append that fails after writing part of its group leaves events in the log that the intake's
    state does not hold; a command that arrived before that turn's catch-up must not share it, or a second
    result for the unit is accepted."""
    official, _ = people
    intake, log = _intake(open_log, "refusing", tmp_path, official)
    log.failure = LogError("the broker refused a record (test)")
    try:
        def report(key: str) -> Submission:
            return Submission(CommandKind.REPORT, json.dumps(FM5_REPORT), official, Channel.APP, unit_id="FM5",
                              idempotency_key=key)

        early = time.monotonic()  # this command arrived before the failing turn's catch-up began
        log.fail_after = 1
        failed = [intake._queue.add(report("r1"), time.monotonic()),
                  intake._queue.add(Submission(CommandKind.OPEN, json.dumps({"attendance": 50}), official, Channel.APP,
                                               unit_id="E01", idempotency_key="o1"), time.monotonic())]
        with intake._locked():
            intake._commit(intake._queue.take())
        assert all(slot.error is not None for slot in failed), "nobody hears accepted"
        log.fail_after = None
        late = intake._queue.add(report("r2"), early)
        with intake._locked():
            intake._commit(intake._queue.take())
        outcome = late.result()
        assert isinstance(outcome, Refusal) and outcome.errors[0].code == "ALREADY_REPORTED", outcome
        fm5 = [e for e in Journal(log.log).read() if e.event.type == "ResultReported" and e.event.envelope.unit_id == "FM5"]
        assert len(fm5) == 1, "one result for the unit in the log"
    finally:
        intake.close()


@pytest.mark.parametrize("log_kind", ["embedded"])
def test_a_command_whose_turn_could_not_be_taken_is_not_written_later(
    open_log: Callable[[str], EventLog], tmp_path: Path, people: tuple[Credential, Credential], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its sender heard an error: a later turn must not take the command from the queue and write it."""
    official, _ = people
    intake, log = _intake(open_log, "lockless", tmp_path, official)
    try:
        def no_lock() -> Any:
            raise OSError("the lock file cannot be opened (test)")

        monkeypatch.setattr(intake, "_locked", no_lock)
        with pytest.raises(OSError):
            intake.submit(Submission(CommandKind.OPEN, json.dumps({"attendance": 50}), official, Channel.APP,
                                     unit_id="E01", idempotency_key="o1"))
        monkeypatch.undo()
        assert len(intake._queue) == 0
        assert intake.submit(Submission(CommandKind.DEFINE, json.dumps(ELECTION), official)).accepted  # a later turn
        assert intake.state.claim("o1") is None and log.batches == [1], "the refused sender's command was not written"
    finally:
        intake.close()
