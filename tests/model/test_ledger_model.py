"""The ledger against an independent model of it (``reference_model.py``), by hypothesis.

A state machine sends arbitrary interleavings of commands through the real intake, from the senders a
caucus night has (officials, chairs scoped to an election, chairs whose credential names only a unit,
forged and missing tokens): two elections sharing unit ids, openings, reports, corrections, coin
tosses and redraws, idempotent retries and conflicting ones, refusals of every kind before and after a
unit's result, malformed bodies, and certification written straight to the log. It projects with the
real ``caucus project`` at random points, rebuilds with ``caucus replay``, reads ``tally --as-of`` at
earlier log positions, and compares every unit's tally, each election's state sums and, at the end,
every unit's trail with what the model says. The model predicts acceptance itself: a command the model
thinks should be refused but the intake accepts (or the reverse) fails the run.

The default run is small (``MODEL_EXAMPLES`` overrides it); the ``slow`` set runs a larger budget on the
embedded backends and on Kafka + PostgreSQL.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test
import typer.testing
from typer.testing import CliRunner

import ledger.cli
from ledger.events import Channel, ResultsCertified, new_event
from ledger.journal import Journal
from producers.commands import CommandKind
from producers.credentials import CredentialStore
from producers.intake import Intake, Submission

_spec = importlib.util.spec_from_file_location("reference_model", Path(__file__).with_name("reference_model.py"))
assert _spec is not None and _spec.loader is not None
model = importlib.util.module_from_spec(_spec)
sys.modules["reference_model"] = model
_spec.loader.exec_module(model)

CANDIDATES = model.CANDIDATES
ELECTIONS = model.ELECTIONS
UNIT_IDS = ("U1", "U2", "U3", "U4")
MALFORMED = (
    b"",
    b"{",
    b"[]",
    b"null",
    b"\xff\xfe not utf-8",
    b"[" * 5000 + b"]" * 5000,
    b'{"unit_id": "\\ud800", "first_alignment": {}}',
    b'{"unit_id": "U1", "unit_id": "U2"}',
    b'{"unit_id": "U1", "attendance": NaN}',
    b'{"unit_id": "U1", "attendance": 1e999}',
)
SENDERS = ("official", "chair", "chair", "chair", "unscoped", "other_unit", "other_election", "forged", "none")


def _awards_nobody(eid: str, uid: str, body: dict[str, Any], reported: dict[str, int] | None) -> bool:
    """RULES §7: a one-delegate unit's delegate is elected by the caucus as a whole, so an attended unit's
    result with nobody at the final alignment and no delegate on the worksheet awards it to nobody: refused."""
    unit = ELECTIONS[eid].units.get(uid)
    attended = max(body["attendance"], sum(body["first_alignment"].values())) > 0
    return (unit is not None and unit.delegates == 1 and reported is None and attended
            and not any(body["final_alignment"].values()))


@dataclass
class Backend:
    """Where a run keeps its log and store: ``args`` are the global options every command gets."""

    name: str
    make: Callable[[contextlib.ExitStack, Path], list[str]]
    consumer: tuple[str, ...] = ()  # options of `project` and `replay` (a Kafka group joins in ~half its session timeout)


def _embedded(stack: contextlib.ExitStack, data: Path) -> list[str]:
    return []


def _kafka_backend(bootstrap: str, pg_server: str) -> Backend:
    from infra.postgres import temporary_database
    from ledger.log.kafka import provision_topic

    def make(stack: contextlib.ExitStack, data: Path) -> list[str]:
        topic = f"model-{uuid.uuid4().hex[:8]}"
        provision_topic(bootstrap, topic, partitions=4)
        dsn = stack.enter_context(temporary_database("model", pg_server))
        return ["--kafka", bootstrap, "--topic", topic, "--database", dsn, "--partitions", "4"]

    return Backend("kafka+postgres", make, ("--session-timeout-ms", "2000"))


_BUILT: list[Any] = []


@contextlib.contextmanager
def _built_once() -> Any:
    """Let the runner invoke the ``caucus`` tree built on the first call, not one built per call."""
    if not _BUILT:
        ledger.cli._register_commands()
        _BUILT.append(typer.testing._get_command(ledger.cli.app))
    saved = typer.testing._get_command
    typer.testing._get_command = lambda app: _BUILT[0]  # type: ignore[assignment]
    try:
        yield
    finally:
        typer.testing._get_command = saved


class LedgerMachine(RuleBasedStateMachine):
    backend: Backend = Backend("embedded", _embedded)
    verbose = bool(os.environ.get("MODEL_VERBOSE"))

    def __init__(self) -> None:
        super().__init__()
        self.stack = contextlib.ExitStack()
        self.root = Path(tempfile.mkdtemp(prefix="ledger-model-"))
        self.stack.callback(shutil.rmtree, self.root, True)
        self.data = self.root / "data"
        self.args = ["--data-dir", str(self.data), *self.backend.make(self.stack, self.data)]
        self.runner = CliRunner()
        from ledger.settings import load_settings

        flags: dict[str, Any] = {"data_dir": self.data}
        for opt, name in (("--kafka", "kafka"), ("--topic", "topic"), ("--database", "database"), ("--partitions", "partitions")):
            if opt in self.args:
                flags[name] = self.args[self.args.index(opt) + 1]
        self.settings = load_settings(flags, env={}).settings
        self.store = CredentialStore(self.data / "credentials.json")
        self.official_token = self.store.issue("official", name="Model Official")[1]
        self.tokens: dict[tuple[str, str, str], str] = {}
        self.intake = Intake.for_settings(self.settings).start()
        self.stack.callback(self.intake.close)
        self.ledger = model.Ledger()
        self.accepted: list[tuple[CommandKind, bytes, str, str]] = []  # kind, body, token, key
        self.snapshots: list[tuple[str, Any]] = []
        self.projected = False
        self.steps: list[str] = []

    def teardown(self) -> None:
        try:
            if self.ledger.defined:
                self._project()
                self._compare_tallies()
                self._compare_trails()
        finally:
            self.stack.close()

    # -- plumbing ----------------------------------------------------------------------------------------

    def _note(self, text: str) -> None:
        self.steps.append(text)
        if self.verbose:
            print(text)

    def _cli(self, *args: str) -> tuple[int, Any]:
        # typer rebuilds the whole click tree on every invoke (about 40 ms); the model runs thousands.
        with _built_once():
            result = self.runner.invoke(ledger.cli.app, [*self.args, *args], env={"CAUCUS_TOKEN": ""})
        assert "Traceback" not in result.output, result.output
        try:
            return result.exit_code, json.loads(result.stdout)
        except ValueError:
            return result.exit_code, result.output

    def _token(self, kind: str, eid: str, uid: str) -> str | None:
        """The token of a sender of ``kind`` as seen from a command for (eid, uid)."""
        if kind == "official":
            return self.official_token
        if kind == "none":
            return None
        if kind == "forged":
            return "ckl_deadbeef_" + "x" * 43
        if kind == "other_election":
            eid = "B" if eid == "A" else "A"
        if kind == "other_unit":
            uid = "U2" if uid == "U1" else "U1"
        scope = "" if kind == "unscoped" else eid
        if (scope, uid, kind) not in self.tokens:
            self.tokens[(scope, uid, kind)] = self.store.issue("chair", unit_id=uid, election_id=scope or None)[1]
        return self.tokens[(scope, uid, kind)]

    def _sender_may(self, kind: str, eid: str | None, uid: str, *, chair_allowed: bool = True) -> bool:
        """Whether this sender may send this unit command into the election it resolves to."""
        if kind == "official":
            return True
        if not chair_allowed or kind in ("none", "forged", "other_unit", "other_election"):
            return False
        if kind == "unscoped":
            return len(self.ledger.holders(uid)) == 1
        return True  # a chair scoped to exactly (eid, uid)

    def _as_credential_says(self, named: str | None, uid: str, eid: str | None, sender: str) -> tuple[str | None, str]:
        """A scoped chair's command that names no election is about the election its credential names
        (the intake's rule): (the election it goes to, or None, and the sender as seen from there). The
        credential is the one ``_token`` issues for ``eid or "A"`` (the other election's for
        ``other_election``), so such a chair reports into its own election even where the unit is in both."""
        if named is not None or sender not in ("chair", "other_election"):
            return eid, sender
        base = eid or "A"
        scope = base if sender == "chair" else ("B" if base == "A" else "A")
        goes = scope if scope in self.ledger.defined and uid in ELECTIONS[scope].units else None
        return goes, "chair"

    def _resolve(self, named: str | None, uid: str) -> str | None:
        if named is not None:
            return named if named in self.ledger.defined and uid in ELECTIONS[named].units else None
        holders = self.ledger.holders(uid)
        return holders[0] if len(holders) == 1 else None

    def _submit(self, kind: CommandKind, body: dict[str, Any] | bytes, token: str | None) -> Any:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        sender = self.store.authenticate(token)
        outcome = self.intake.submit(Submission(kind, raw, sender, Channel.APP))
        if outcome.accepted and not isinstance(body, bytes) and outcome.to_json().get("status") != "duplicate":
            self.accepted.append((kind, raw, token or "", str(body.get("idempotency_key", ""))))
        return outcome

    def _expect(self, outcome: Any, accepted: bool, what: str) -> dict[str, Any]:
        shown = outcome.to_json()
        self._note(f"{what} -> {shown.get('status')} {[e.get('code') for e in shown.get('errors', [])]}")
        assert outcome.accepted == accepted, f"{what}: the model expected {'acceptance' if accepted else 'a refusal'}, got {shown}"
        return dict(shown)

    # -- commands -----------------------------------------------------------------------------------------

    @initialize(elections=st.sampled_from([("A",), ("B",), ("A", "B"), ("B", "A")]))
    def start(self, elections: tuple[str, ...]) -> None:
        for eid in elections:
            self.define(eid)

    @precondition(lambda self: len(self.ledger.defined) < len(ELECTIONS))
    @rule(data=st.data())
    def define_next(self, data: st.DataObject) -> None:
        self.define(data.draw(st.sampled_from(sorted(set(ELECTIONS) - self.ledger.defined)), label="election"))

    @precondition(lambda self: bool(self.ledger.defined))
    @rule(data=st.data())
    def define_again(self, data: st.DataObject) -> None:
        self.define(data.draw(st.sampled_from(sorted(self.ledger.defined)), label="election"))

    def define(self, eid: str) -> None:
        body = {**ELECTIONS[eid].to_json(), "idempotency_key": f"define-{eid}-{uuid.uuid4().hex[:6]}"}
        fresh = eid not in self.ledger.defined
        self._expect(self._submit(CommandKind.DEFINE, body, self.official_token), fresh, f"define {eid}")
        self.ledger.defined.add(eid)

    def _target(self, data: st.DataObject) -> tuple[str | None, str, str | None]:
        """(named election or None, unit, the election it resolves to or None)."""
        named = data.draw(st.sampled_from(["A", "B", "A", "B", None, "X"]), label="election")
        uid = data.draw(st.sampled_from(UNIT_IDS + ("U9",)), label="unit")
        return named, uid, self._resolve(named, uid)

    def _counts(self, data: st.DataObject, delegates: int) -> dict[str, Any]:
        """A result that keeps the lock rule (§4.2) and admits nobody new (§4.4)."""
        if data.draw(st.integers(0, 2), label="tie-prone") == 0:
            # Equal groups, everyone aligned: equal remainders or equal leaders, so a tie, most of the time.
            size = data.draw(st.integers(1, 12), label="group size")
            groups = data.draw(st.sets(st.sampled_from(CANDIDATES), min_size=2), label="equal groups")
            counts = {c: size if c in groups else 0 for c in CANDIDATES}
            return {"attendance": size * len(groups), "first_alignment": counts, "final_alignment": dict(counts)}
        # Small, often equal numbers: equal remainders and equal leaders (ties) come up often.
        sizes = st.one_of(st.sampled_from([0, 2, 4, 5, 6, 10]), st.integers(0, 25))
        first = {c: data.draw(sizes, label=f"first {c}") for c in CANDIDATES}
        attendance = sum(first.values()) + data.draw(st.integers(0, 3), label="unaligned")
        attendance = max(attendance, 1)
        bar = model.threshold(delegates, attendance)
        viable = [c for c in CANDIDATES if first[c] >= bar and first[c] > 0]
        pool = sum(first[c] for c in CANDIDATES if c not in viable)
        final = {}
        for c in CANDIDATES:
            joined = data.draw(st.integers(0, pool), label=f"joins {c}")
            pool -= joined
            final[c] = (first[c] if c in viable else 0) + joined
        return {"attendance": attendance, "first_alignment": first, "final_alignment": final}

    def _result(self, body: dict[str, Any], reported: dict[str, int] | None) -> Any:
        return model.Result(body["attendance"], dict(body["first_alignment"]), dict(body["final_alignment"]), reported)

    def _with_reported(self, data: st.DataObject, body: dict[str, Any], eid: str | None, uid: str) -> dict[str, int] | None:
        """Sometimes the worksheet's delegates, as the rules give them, when no tie is open."""
        if eid is None or not data.draw(st.booleans(), label="delegates reported"):
            return None
        unit = self.ledger.unit(eid, uid)
        alloc = model.allocate(ELECTIONS[eid].units[uid].delegates, self._result(body, None), unit.settled())
        if alloc.pending:
            return None
        if not any(alloc.cds.values()) and ELECTIONS[eid].units[uid].delegates == 1:
            # §7: a one-delegate unit must award its delegate; with nobody at the final alignment the
            # rules name no winner, so the worksheet has nothing the rules would accept.
            return None
        body["delegates_reported"] = {c: n for c, n in alloc.cds.items() if n}
        return dict(alloc.cds)

    @rule(data=st.data())
    def open_unit(self, data: st.DataObject) -> None:
        named, uid, eid = self._target(data)
        sender = data.draw(st.sampled_from(SENDERS), label="sender")
        body: dict[str, Any] = {"unit_id": uid, "attendance": data.draw(st.integers(1, 80)), "idempotency_key": uuid.uuid4().hex}
        if named:
            body["election_id"] = named
        token = self._token(sender, eid or named or "A", uid)
        eid, seen_as = self._as_credential_says(named, uid, eid, sender)
        # RULES §2: a unit opens before it reports; an opening after its result is refused.
        ok = (eid is not None and self._sender_may(seen_as, eid, uid) and not self.ledger.unit(eid, uid).opened
              and self.ledger.unit(eid, uid).result is None)
        self._expect(self._submit(CommandKind.OPEN, body, token), ok, f"open {named}/{uid} by {sender}")
        if ok:
            assert eid is not None
            self.ledger.unit(eid, uid).opened = True
            self.ledger.unit(eid, uid).trail.append("UnitOpened")

    @rule(data=st.data())
    def report(self, data: st.DataObject) -> None:
        named, uid, eid = self._target(data)
        self._report(named, uid, eid, data.draw(st.sampled_from(SENDERS), label="sender"), data)

    def _report(self, named: str | None, uid: str, eid: str | None, sender: str, data: st.DataObject) -> None:
        goes, _ = self._as_credential_says(named, uid, eid, sender)  # the counts are drawn for the unit they go to
        delegates = ELECTIONS[goes].units[uid].delegates if goes else 4
        body = {"unit_id": uid, **self._counts(data, delegates), "idempotency_key": uuid.uuid4().hex}
        if named:
            body["election_id"] = named
        self.send_report(named, uid, eid, sender, body, self._with_reported(data, body, goes, uid))

    def send_report(self, named: str | None, uid: str, eid: str | None, sender: str, body: dict[str, Any],
                    reported: dict[str, int] | None) -> None:
        """Send one report and hold the ledger's answer to the model's (also what the kept examples call)."""
        token = self._token(sender, eid or named or "A", uid)
        eid, seen_as = self._as_credential_says(named, uid, eid, sender)
        ok = (eid is not None and self._sender_may(seen_as, eid, uid) and self.ledger.unit(eid, uid).result is None
              and not _awards_nobody(eid, uid, body, reported))
        shown = self._expect(self._submit(CommandKind.REPORT, body, token), ok, f"report {named}/{uid} by {sender}: {body}")
        if ok:
            assert eid is not None
            unit = self.ledger.unit(eid, uid)
            unit.result, unit.result_event = self._result(body, reported), shown["event_id"]
            unit.trail.append("ResultReported")

    @precondition(lambda self: bool(self.ledger.defined))
    @rule(data=st.data())
    def report_valid(self, data: st.DataObject) -> None:
        """A report from someone who may send it, for a unit of a defined election (the common case)."""
        eid = data.draw(st.sampled_from(sorted(self.ledger.defined)), label="election")
        uid = data.draw(st.sampled_from(sorted(ELECTIONS[eid].units)), label="unit")
        sender = data.draw(st.sampled_from(["official", "chair", "chair", "unscoped"]), label="sender")
        named = eid if data.draw(st.booleans(), label="names its election") else None
        self._report(eid if named else None, uid, self._resolve(named, uid), sender, data)

    @rule(data=st.data())
    def report_invalid(self, data: st.DataObject) -> None:
        """Counts no caucus can produce, from a sender who may report: refused whatever the unit's state."""
        named, uid, eid = self._target(data)
        body = {"unit_id": uid, **self._counts(data, 4), "idempotency_key": uuid.uuid4().hex}
        if named:
            body["election_id"] = named
        flaw = data.draw(st.sampled_from(["negative", "unknown candidate", "overcount", "final above T", "float"]))
        if flaw == "negative":
            body["first_alignment"]["Adams"] = -1
        elif flaw == "unknown candidate":
            body["final_alignment"]["Zed"] = 1
        elif flaw == "overcount":
            body["attendance"] = sum(body["first_alignment"].values()) - 1
            body["first_alignment"]["Baker"] += 0 if body["attendance"] >= 0 else 2
        elif flaw == "final above T":
            body["final_alignment"]["Clark"] += body["attendance"] + 1
        else:
            body["attendance"] = 10.5
        self._expect(self._submit(CommandKind.REPORT, body, self.official_token), False, f"report {flaw} {named}/{uid}")

    @rule(data=st.data(), kind=st.sampled_from(list(CommandKind)), body=st.sampled_from(MALFORMED))
    def malformed(self, data: st.DataObject, kind: CommandKind, body: bytes) -> None:
        sender = data.draw(st.sampled_from(SENDERS), label="sender")
        self._expect(self._submit(kind, body, self._token(sender, "A", "U1")), False, f"malformed {kind} {body[:20]!r}")

    def _units_with_results(self) -> list[tuple[str, str]]:
        return sorted(k for k, u in self.ledger.units.items() if u.result is not None)

    @precondition(lambda self: bool(self._units_with_results()))
    @rule(data=st.data())
    def correct(self, data: st.DataObject) -> None:
        eid, uid = data.draw(st.sampled_from(self._units_with_results()), label="unit")
        unit = self.ledger.unit(eid, uid)
        which = data.draw(st.sampled_from(["current", "current", "stale", "unknown"]), label="supersedes")
        if which == "stale" and not unit.superseded:
            which = "current"
        target = {"current": unit.result_event, "stale": sorted(unit.superseded)[0] if unit.superseded else "",
                  "unknown": str(uuid.uuid4())}[which]
        sender = data.draw(st.sampled_from(["official", "official", "chair", "none"]), label="sender")
        body = {"unit_id": uid, "election_id": eid, **self._counts(data, ELECTIONS[eid].units[uid].delegates),
                "idempotency_key": uuid.uuid4().hex, "supersedes": target, "reason": "recanvass found an error",
                "authority": "State Central Committee", "stage": "recanvass"}
        reported = self._with_reported(data, body, eid, uid)
        ok = which == "current" and sender == "official" and not _awards_nobody(eid, uid, body, reported)
        shown = self._expect(self._submit(CommandKind.CORRECT, body, self._token(sender, eid, uid)), ok,
                             f"correct {eid}/{uid} ({which}) by {sender}: {body}")
        if ok:
            assert unit.result_event is not None
            unit.superseded.add(unit.result_event)
            unit.result, unit.result_event = self._result(body, reported), shown["event_id"]
            unit.trail.append("ResultCorrected")

    @rule(data=st.data())
    def toss(self, data: st.DataObject) -> None:
        named, uid, eid = self._target(data)
        open_ties: list[Any] = []
        if eid is not None and self.ledger.unit(eid, uid).result is not None:
            unit = self.ledger.unit(eid, uid)
            res = unit.result
            open_ties = model.allocate(ELECTIONS[eid].units[uid].delegates, model.Result(res.attendance, res.first, res.final, None), unit.settled()).pending
        if open_ties and data.draw(st.booleans(), label="the open tie"):
            contenders, seats = sorted(open_ties[0][0]), open_ties[0][1]
        else:
            contenders = sorted(data.draw(st.sets(st.sampled_from(CANDIDATES), min_size=2), label="contenders"))
            seats = data.draw(st.integers(1, len(contenders) - 1), label="seats")
        winners = data.draw(st.permutations(contenders), label="winners")[:seats]
        sender = data.draw(st.sampled_from(["official", "official", "official", "chair"]), label="sender")
        tie = (frozenset(contenders), seats)
        standing = self.ledger.unit(eid, uid).tosses.get(tie) if eid else None
        redraw = standing is not None and data.draw(st.booleans(), label="redraw")
        body: dict[str, Any] = {"unit_id": uid, "contenders": contenders, "seats": seats, "winners": list(winners),
                                "method": "coin" if len(contenders) == 2 else "lots", "caller": "Adams captain",
                                "idempotency_key": uuid.uuid4().hex}
        if named:
            body["election_id"] = named
        if redraw:
            assert standing is not None
            body["supersedes"] = standing[0]
            body["reason"] = data.draw(st.sampled_from(["", "the coin fell off the table"]), label="reason")
        ok = eid is not None and sender == "official" and (standing is None or (redraw and bool(body["reason"])))
        if ok:  # a redraw too: against a result without its tie it would decide nothing and unsettle the tie
            assert eid is not None
            ok = self._a_tie_of_the_result(eid, uid, tie)
        shown = self._expect(self._submit(CommandKind.TOSS, body, self._token(sender, eid or "A", uid)), ok,
                             f"toss {named}/{uid} {contenders} seats={seats} winners={winners} redraw={redraw} by {sender}")
        if ok:
            assert eid is not None
            self.ledger.unit(eid, uid).tosses[tie] = (shown["event_id"], tuple(winners))
            self.ledger.unit(eid, uid).trail.append("TieBroken")

    def _a_tie_of_the_result(self, eid: str, uid: str, tie: Any) -> bool:
        """RULES §2, §6: before its result a unit may toss for any tie; once it has a result, only for one
        that result calls for."""
        unit = self.ledger.unit(eid, uid)
        if unit.result is None:
            return True
        res = unit.result
        plain = model.Result(res.attendance, res.first, res.final, None)
        return tie in model.ties_of_result(ELECTIONS[eid].units[uid].delegates, plain, unit.settled())

    def _open_ties(self) -> list[tuple[str, str, Any]]:
        found = []
        for (eid, uid), unit in sorted(self.ledger.units.items()):
            if unit.result is not None and unit.result.reported is None:
                for tie in model.allocate(ELECTIONS[eid].units[uid].delegates, unit.result, unit.settled()).pending:
                    found.append((eid, uid, tie))
        return found

    def _settled_ties(self) -> list[tuple[str, str, Any]]:
        return [(eid, uid, tie) for (eid, uid), unit in sorted(self.ledger.units.items()) for tie in sorted(unit.tosses, key=str)]

    @precondition(lambda self: bool(self._open_ties() or self._settled_ties()))
    @rule(data=st.data())
    def toss_a_real_tie(self, data: st.DataObject) -> None:
        """An official tosses for a tie the unit really has, or tosses again for one already settled
        (refused unless it is a redraw with a reason, of a tie the current result has)."""
        eid, uid, (group, seats) = data.draw(st.sampled_from(self._open_ties() + self._settled_ties()), label="tie")
        contenders = sorted(group)
        winners = data.draw(st.permutations(contenders), label="winners")[:seats]
        unit = self.ledger.unit(eid, uid)
        standing = unit.tosses.get((group, seats))
        body: dict[str, Any] = {"unit_id": uid, "election_id": eid, "contenders": contenders, "seats": seats,
                                "winners": list(winners), "method": "coin" if len(contenders) == 2 else "lots",
                                "caller": "Baker captain", "idempotency_key": uuid.uuid4().hex}
        redraw = standing is not None and data.draw(st.booleans(), label="redraw")
        if redraw:
            assert standing is not None
            body["supersedes"] = standing[0]
            body["reason"] = "the coin rolled under a chair"
        ok = (standing is None or redraw) and self._a_tie_of_the_result(eid, uid, (group, seats))
        shown = self._expect(self._submit(CommandKind.TOSS, body, self.official_token), ok,
                             f"toss {eid}/{uid} {contenders} seats={seats} winners={winners} redraw={redraw}")
        if ok:
            unit.tosses[(group, seats)] = (shown["event_id"], tuple(winners))
            unit.trail.append("TieBroken")

    @precondition(lambda self: bool(self.accepted))
    @rule(data=st.data(), same=st.booleans())
    def retry(self, data: st.DataObject, same: bool) -> None:
        """A sender who did not hear the answer sends again: the same command is a duplicate, another
        command under the same key a conflict; neither changes anything."""
        kind, raw, token, key = data.draw(st.sampled_from(self.accepted), label="retried")
        body = raw
        if not same:
            changed = json.loads(raw)
            if "name" in changed:
                changed["name"] += " (again)"
            elif "caller" in changed:
                changed["caller"] += " (again)"
            else:
                changed["attendance"] += 1
            body = json.dumps(changed).encode()
        shown = self._expect(self._submit(kind, body, token or None), same, f"retry {kind} {key} same={same}")
        if same:
            assert shown["status"] == "duplicate", shown

    @precondition(lambda self: bool(self.ledger.defined - self.ledger.certified))
    @rule(data=st.data())
    def certify(self, data: st.DataObject) -> None:
        """The party certifies an election (written straight to the log, as the canvass does)."""
        eid = data.draw(st.sampled_from(sorted(self.ledger.defined - self.ledger.certified)), label="election")
        journal = Journal(self.intake_log(), writer="official:Model Official")
        try:
            journal.append(new_event(ResultsCertified("State Central Committee"), election_id=eid,
                                     actor="official:Model Official", channel=Channel.APP))
        finally:
            journal.close()
        self.ledger.certify(eid)
        self._note(f"certify {eid}")

    def intake_log(self) -> Any:
        from ledger.config import open_log

        return open_log(self.settings)

    # -- reading ------------------------------------------------------------------------------------------

    def _project(self) -> None:
        code, shown = self._cli("project", "--until-caught-up", "--quiet", "--no-feed", "--group", f"g-{self.root.name}",
                                *self.backend.consumer)
        assert code == 0, shown
        self.projected = True

    @precondition(lambda self: bool(self.ledger.defined))
    @rule()
    def project_and_compare(self) -> None:
        self._note("project")
        self._project()
        self._compare_tallies()

    @precondition(lambda self: bool(self.ledger.defined))
    @rule()
    def replay_and_compare(self) -> None:
        self._note("replay")
        self._project()  # replay refuses to start before there is a serving set
        code, shown = self._cli("replay", "--quiet", "--no-feed", *self.backend.consumer)
        assert code == 0, shown
        self._compare_tallies()

    @precondition(lambda self: bool(self.ledger.defined))
    @rule()
    def remember_position(self) -> None:
        """Keep the log's end positions and what the model says then, for a later ``--as-of``."""
        log = self.intake_log()
        try:
            ends = log.high_watermarks()
        finally:
            log.close()
        self.snapshots.append((",".join(f"{p}:{o}" for p, o in sorted(ends.items())), self.ledger.snapshot()))

    @precondition(lambda self: bool(self.snapshots))
    @rule(data=st.data())
    def as_of(self, data: st.DataObject) -> None:
        positions, then = data.draw(st.sampled_from(self.snapshots), label="as of")
        self._note(f"as of {positions}")
        self._compare_tallies(then, ("--as-of", positions))  # replayed from the log: no projection needed

    # -- comparing ----------------------------------------------------------------------------------------

    def _compare_tallies(self, expected: Any = None, extra: tuple[str, ...] = ()) -> None:
        expected = expected or self.ledger
        for eid in sorted(expected.defined):
            units: dict[str, dict[str, Any]] = {}
            for county in ELECTIONS[eid].ratios:
                code, shown = self._cli("tally", "--election", eid, "--county", county, "--json", *extra)
                assert code == 0, shown
                units.update({u["unit_id"]: u for u in shown["units"]})
            for uid in ELECTIONS[eid].units:
                want = expected.unit_tally(eid, uid)
                got = units.get(uid)
                if want is None:
                    assert got is None or not got["reporting"], f"{eid}/{uid} should not be reporting: {got}\n{self._steps()}"
                    continue
                assert got is not None and got["reporting"], f"{eid}/{uid} should be reporting: {got}\n{self._steps()}"
                self._same_unit(eid, uid, want, got)
            code, shown = self._cli("tally", "--election", eid, "--json", *extra)
            assert code == 0, shown
            state = shown["state"]
            sums = expected.state_sums(eid)
            seen = {
                "units_reporting": state["units_reporting"],
                "cds": state["cds"],
                "first": state["first"],
                "final": state["final"],
                "sde": {c: Fraction(v) for c, v in state["sde_exact"].items()},
            }
            assert seen == sums, f"state of {eid}: ledger {seen}, model {sums}\n{self._steps()}"

    def _same_unit(self, eid: str, uid: str, want: dict[str, Any], got: dict[str, Any]) -> None:
        seen = {
            "first": got["first"],
            "final": got["final"],
            "cds_computed": got["cds_computed"],
            "cds": got["cds"],
            "pending": sorted((sorted(p["contenders"]), p["seats"]) for p in got["pending"]),
            "sde": {c: Fraction(v) for c, v in got["sde"].items()},
            "certified": got["status"] == "certified",
        }
        assert seen == want, f"{eid}/{uid}: ledger {seen}, model {want}\n{self._steps()}"

    def _compare_trails(self) -> None:
        for (eid, uid), unit in sorted(self.ledger.units.items()):
            if not unit.trail:
                continue
            code, shown = self._cli("trail", uid, "--election", eid, "--json")
            assert code == 0, shown
            kinds = [e["type"] for e in shown["events"] if e["type"] in ("UnitOpened", "ResultReported", "ResultCorrected", "TieBroken")]
            assert kinds == unit.trail, f"trail of {eid}/{uid}: ledger {kinds}, model {unit.trail}\n{self._steps()}"
            want = self.ledger.unit_tally(eid, uid)
            if want is not None:
                self._same_unit(eid, uid, want, shown["events"][-1]["tally"] | {"status": shown["events"][-1]["tally"]["status"]})

    def _steps(self) -> str:
        return "steps:\n  " + "\n  ".join(self.steps[-60:])


def _run(machine: type[LedgerMachine], examples: int, steps: int) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=int(os.environ.get("MODEL_EXAMPLES", examples)),
            stateful_step_count=steps,
            deadline=None,
            derandomize=not os.environ.get("MODEL_RANDOM"),
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.reuse, Phase.generate] if os.environ.get("MODEL_NO_SHRINK") else list(Phase),
        ),
    )


def test_the_ledger_agrees_with_the_model_on_the_embedded_backends() -> None:
    _run(LedgerMachine, 12, 18)


@pytest.mark.slow
def test_the_ledger_agrees_with_the_model_on_the_embedded_backends_at_length() -> None:
    _run(LedgerMachine, 300, 30)


@pytest.mark.slow
def test_the_ledger_agrees_with_the_model_on_kafka_and_postgres(kafka_bootstrap: str, pg_server: str) -> None:
    class OnKafka(LedgerMachine):
        backend = _kafka_backend(kafka_bootstrap, pg_server)

    _run(OnKafka, 40, 20)


# -- minimal examples the model found, kept as regular tests --------------------------------------------------


def _kept_example(elections: tuple[str, ...], reports: list[tuple[str, str, dict[str, Any], dict[str, int] | None]]) -> None:
    """Replay a minimal failing example: define ``elections``, send each (election, unit, counts, delegates
    reported) as the unit's official would, then compare tallies and trails with the model (teardown)."""
    machine = LedgerMachine()
    try:
        machine.start(elections)
        for eid, uid, counts, reported in reports:
            body: dict[str, Any] = {"unit_id": uid, "election_id": eid, **counts, "idempotency_key": uuid.uuid4().hex}
            if reported is not None:
                body["delegates_reported"] = {c: n for c, n in reported.items() if n}
            machine.send_report(eid, uid, eid, "official", body, reported)
        machine._project()
        for eid, uid, _, _ in reports:
            code, shown = machine._cli("tally", "--election", eid, "--unit", uid, "--json")
            assert code == 0, shown
            assert shown["unit"]["problems"] == [], shown["unit"]["problems"]
    finally:
        machine.teardown()


def test_kept_example_nobody_viable_at_the_final_count_reports_no_delegates() -> None:
    """The intake refused the only legal worksheet (DELEGATE_TOTAL "0 delegates reported for a unit that
    elects 7") of a unit where nobody was in a group at the final count: §4.3, no delegate can be awarded."""
    nobody = {"Adams": 0, "Baker": 0, "Clark": 0}
    _kept_example(("A", "B"), [("B", "U1", {"attendance": 1, "first_alignment": nobody, "final_alignment": nobody}, dict(nobody))])


def test_kept_example_every_group_left_before_the_final_count() -> None:
    """The same in a unit electing 5 whose groups, none of them viable, all went home before the final
    count: the tally shows no delegates, as the model does."""
    first = {"Adams": 1, "Baker": 2, "Clark": 0}
    nobody = {"Adams": 0, "Baker": 0, "Clark": 0}
    _kept_example(("A",), [("A", "U2", {"attendance": 30, "first_alignment": first, "final_alignment": nobody}, dict(nobody))])

