"""``caucus define | open | report | correct | toss``: submitting commands through the intake.

``register`` adds the operators' commands too (``caucus spool``, ``caucus credentials``, ``caucus intake``
and ``caucus serve intake``, in ``producers.admin_cli``), so one call gives the whole producer side.

Each submitting command builds the same JSON document the HTTP service takes (or reads it from a file
or stdin), and hands it to the intake verbatim, so a refused input is recorded exactly as it was given.
Exit codes: 0 accepted (also "duplicate" and "spooled"), 1 refused, 2 operational error (log lost,
store unreadable, bad usage).

Without ``--key`` the idempotency key is derived from the command and the sender, so running the same
command twice records it once; pass ``--key`` to choose one (e.g. the worksheet number).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from ledger.cli_output import emit, fail, settings_of
from ledger.events import Channel
from ledger.log.port import LogError
from producers.commands import CommandKind, derive_key, load_json
from producers.admin_cli import CredentialsOption, credential_store
from producers.admin_cli import register as register_admin
from producers.credentials import AuthFailure, Credential, CredentialError
from producers.intake import SNAPSHOT_EVERY, Intake
from producers.outcomes import Outcome, Receipt, Submission
from producers.spool import SpoolError

__all__ = ["register"]

_CHANNELS = ("app", "phone", "paper")

TokenOption = typer.Option(None, "--token", envvar="CAUCUS_TOKEN", help="Your credential (env CAUCUS_TOKEN).", show_default=False)
KeyOption = typer.Option(None, "--key", help="Idempotency key (default: derived from the command and the sender).")
ChannelOption = typer.Option("phone", "--channel", help="How the command reached you: app, phone or paper.")
ElectionOption = typer.Option(None, "--election", help="Election id (default: the election holding the unit); given as JSON, the election_id field.")
OccurredOption = typer.Option(None, "--occurred-at", help="When it happened at the caucus, ISO 8601 with offset; given as JSON, the occurred_at field.")
JsonOption = typer.Option(False, "--json", help="Print the receipt or the errors as JSON.")
UnitOption = typer.Option(None, "--unit", help="The reporting unit id.")
FirstOption = typer.Option(None, "--first", help='First alignment: CANDIDATE=N (repeat, or comma-separate; a name holding a comma in double quotes: \'"Smith, J"=3\').')
FinalOption = typer.Option(None, "--final", help="Final alignment: CANDIDATE=N (as --first).")
AttendanceOption = typer.Option(None, "--attendance", help="T, the attendees counted at the start (if not given at opening).")
DelegatesOption = typer.Option(None, "--delegates", help="County delegates awarded: CANDIDATE=N (as --first).")
WorksheetOption = typer.Option(None, "--worksheet", help="Photo of the signed worksheet: its SHA-256 is recorded.")
DigestOption = typer.Option(None, "--worksheet-digest", help="sha256:<hex> of the worksheet photo.")


# -- helpers --------------------------------------------------------------------------------------------


def _items(value: str, option: str) -> list[str]:
    """One option value's comma-separated items, read as a CSV line: a candidate name may hold a comma
    (the JSON form takes any name), so such a name is given in double quotes, ``"Smith, J"=3``, a quote
    inside it doubled. A quote left open is refused, not read up to the end of the value."""
    if value.count('"') % 2:
        raise typer.BadParameter(f"{value!r}: a double quote is not closed (a quote inside a quoted name is doubled)", param_hint=option)
    # skipinitialspace: "A=5, B=3", spaces after a comma only separate
    return next(csv.reader([value], skipinitialspace=True), [])


def _counts(values: list[str] | None, option: str) -> dict[str, Any] | None:
    """``--final Sanders=12 --final Biden=3`` or ``--final Sanders=12,Biden=3``. Values that are not
    whole numbers are passed on as text so the intake refuses (and records) them with its own message."""
    if not values:
        return None
    out: dict[str, Any] = {}
    for value in values:
        for item in _items(value, option):
            if not item.strip():  # "A=1,,B=2": a count left out, not a separator to skip
                raise typer.BadParameter(f"{value!r}: an empty item between commas; give CANDIDATE=COUNT,...", param_hint=option)
            name, sep, count = item.rpartition("=")  # the count is after the last "=": a name may hold one
            if not sep or not name.strip():
                raise typer.BadParameter(f"{item!r}: give CANDIDATE=COUNT", param_hint=option)
            if name != name.strip():
                # "A =5" is not silently the candidate "A": a name is taken exactly as the JSON form takes it.
                raise typer.BadParameter(f"{item!r}: the candidate name {name!r} has spaces around it", param_hint=option)
            if name in out:
                # The JSON form refuses a repeated key (DUPLICATE_KEY); the options must not keep "the last one".
                raise typer.BadParameter(f"candidate {name!r} is given more than once", param_hint=option)
            text = count.strip()
            # ASCII digits only, as in the JSON form: int() also reads "١٠" (Arabic-Indic ten), which the intake refuses
            out[name] = int(text) if re.fullmatch(r"-?[0-9]+", text) else text
    return out


def _names(values: list[str] | None, option: str) -> list[str]:
    return [n.strip() for v in values or [] for n in _items(v, option) if n.strip()]


def _read_source(source: str) -> bytes:
    """The input's bytes, undecoded: the intake judges (and records) them exactly as they are, so a
    file that is not UTF-8 is refused and kept like any other bad input."""
    if source == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise fail(f"cannot read {source}: {exc}") from exc


def _digest_of(path: Path) -> str:
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise fail(f"cannot read the worksheet image {path}: {exc}") from exc


def _print(outcome: Outcome, as_json: bool) -> None:
    data = outcome.to_json()

    def human() -> None:
        if isinstance(outcome, Receipt):
            where = f"at {data['position']}" if data["position"] else "in the local spool (log unreachable; forwarded later)"
            typer.echo(f"{outcome.status}: {outcome.event_type} {outcome.event_id} {where}")
            typer.echo(f"  key {outcome.idempotency_key}")
            for w in outcome.warnings:
                typer.echo(f"  warning {w.field}: {w.code}: {w.message}")
        else:
            typer.echo(f"refused ({outcome.category}); recorded as {outcome.rejection_event_id} in the {outcome.recorded}")
            for e in outcome.errors:
                typer.echo(f"  {e.field}: {e.code}: {e.message}")

    emit(data, as_json, human)


def _submit(
    ctx: typer.Context,
    kind: CommandKind,
    *,
    text: str | bytes | None,
    data: dict[str, Any] | None,
    unit_id: str | None,
    key: str | None,
    token: str | None,
    credentials: Path | None,
    channel: str,
    as_json: bool,
) -> None:
    """Send one command through the intake and exit with 0 (accepted), 1 (refused) or 2 (error)."""
    if channel not in _CHANNELS:
        raise fail(f"--channel must be one of {', '.join(_CHANNELS)}, got {channel!r}")
    settings = settings_of(ctx)
    try:
        sender: Credential | AuthFailure = credential_store(settings, credentials).authenticate(token or settings.token)
    except CredentialError as exc:
        raise fail(str(exc)) from exc
    if text is None:
        body = {k: v for k, v in (data or {}).items() if v is not None}
        text = json.dumps(body, sort_keys=True)
    if key is None:
        loaded, problems = load_json(text)
        if not problems and isinstance(loaded, dict) and "idempotency_key" not in loaded:
            who = sender.actor if isinstance(sender, Credential) else "anonymous"
            key = derive_key(kind, {**loaded, "unit_id": loaded.get("unit_id", unit_id)}, who)
    intake = Intake.for_settings(settings)
    try:
        intake.start()
        outcome = intake.submit(
            Submission(kind, text, sender, Channel(channel), unit_id=unit_id, idempotency_key=key, via="cli")
        )
    except (LogError, SpoolError, OSError) as exc:
        raise fail(str(exc)) from exc
    finally:
        intake.close(snapshot_after=SNAPSHOT_EVERY)
    _print(outcome, as_json)
    if not outcome.accepted:
        raise typer.Exit(1)


def _json_or_options(what: str, source: str | None, options: dict[str, Any]) -> None:
    """A command given as JSON takes its fields from the JSON alone: an option beside it (``--election``,
    ``--occurred-at``) was silently left out, and the report went to the JSON's election, or was
    refused as naming none. ``--unit``, ``--key``, ``--channel`` and ``--token`` go with either."""
    given = [flag for flag, value in options.items() if value is not None]
    if source and given:
        raise fail(f"give the {what} either as JSON (FILE or -) or with options, not both: {', '.join(given)} "
                   "given beside the JSON (put those fields in the JSON instead)")


def _result_fields(
    first: list[str] | None,
    final: list[str] | None,
    attendance: int | None,
    delegates: list[str] | None,
    worksheet: Path | None,
    worksheet_digest: str | None,
) -> dict[str, Any]:
    return {
        "first_alignment": _counts(first, "--first"),
        "final_alignment": _counts(final, "--final"),
        "attendance": attendance,
        "delegates_reported": _counts(delegates, "--delegates"),
        "worksheet_digest": _digest_of(worksheet) if worksheet is not None else worksheet_digest,
    }


# -- commands --------------------------------------------------------------------------------------------


def define(
    ctx: typer.Context,
    source: str = typer.Argument(..., help="The election as JSON (a file, or - for stdin)."),
    key: Optional[str] = KeyOption,
    token: Optional[str] = TokenOption,
    credentials: Optional[Path] = CredentialsOption,
    channel: str = typer.Option("app", "--channel", help="app, phone or paper."),
    as_json: bool = JsonOption,
) -> None:
    """Define an election: candidates, counties with exact SDE ratios ("n/d"), units, rule set. Needs an official.

    \b
    The JSON, e.g.:
      {"election_id": "ia-2020", "name": "Iowa 2020", "rule_set": "idp-2020",
       "candidates": ["Biden", "Sanders", "Uncommitted"],
       "counties": [{"county_id": "lee", "name": "Lee", "sde_ratio": "21/150"}],
       "units": [{"unit_id": "P3", "name": "Precinct 3",
                  "county_id": "lee", "delegates": 6}]}

    A satellite names its group instead of delegates ("satellite_group"; the groups in "satellite_groups", each
    with "group_id", "name", "sde_pool", "attendance_base"). A ratio may also be {"numerator": n, "denominator": d},
    as `caucus log tail --json` prints a definition. Every field, as JSON Schema: the /docs page of the HTTP intake
    (`caucus serve intake`)."""
    _submit(ctx, CommandKind.DEFINE, text=_read_source(source), data=None, unit_id=None, key=key, token=token,
            credentials=credentials, channel=channel, as_json=as_json)


def open_unit(
    ctx: typer.Context,
    unit: str = typer.Argument(..., help="The reporting unit id."),
    attendance: Optional[int] = typer.Option(None, "--attendance", help="T: eligible attendees counted at the start."),
    election: Optional[str] = ElectionOption,
    occurred_at: Optional[str] = OccurredOption,
    key: Optional[str] = KeyOption,
    token: Optional[str] = TokenOption,
    credentials: Optional[Path] = CredentialsOption,
    channel: str = ChannelOption,
    as_json: bool = JsonOption,
) -> None:
    """Open a unit's caucus and record its attendance."""
    data = {"attendance": attendance, "election_id": election, "occurred_at": occurred_at}
    _submit(ctx, CommandKind.OPEN, text=None, data=data, unit_id=unit, key=key, token=token,
            credentials=credentials, channel=channel, as_json=as_json)


def report(
    ctx: typer.Context,
    source: Optional[str] = typer.Argument(None, help="The report as JSON (a file, or - for stdin); or use the options."),
    unit: Optional[str] = UnitOption,
    first: Optional[list[str]] = FirstOption,
    final: Optional[list[str]] = FinalOption,
    attendance: Optional[int] = AttendanceOption,
    delegates: Optional[list[str]] = DelegatesOption,
    worksheet: Optional[Path] = WorksheetOption,
    worksheet_digest: Optional[str] = DigestOption,
    reporter: Optional[str] = typer.Option(None, "--reporter", help="Who filled in the worksheet (default: you)."),
    election: Optional[str] = ElectionOption,
    occurred_at: Optional[str] = OccurredOption,
    key: Optional[str] = KeyOption,
    token: Optional[str] = TokenOption,
    credentials: Optional[Path] = CredentialsOption,
    channel: str = ChannelOption,
    as_json: bool = JsonOption,
) -> None:
    """Report a unit's result: first and final alignment, optionally attendance and delegates awarded.

    As JSON (FILE, or - for stdin), the fields are those of the options:

    {"unit_id": "FM5", "first_alignment": {"Biden": 25, "Sanders": 31}, "final_alignment": {"Biden": 25,
    "Sanders": 31}, "attendance": 56, "delegates_reported": {"Biden": 2, "Sanders": 2},
    "election_id": "ia-2020", "idempotency_key": "fm5-1"}

    Only unit_id and the two alignments are required. A refused report is kept in the log with its
    problems (exit 1); an accepted one is in the tally once `caucus project` has read it."""
    _json_or_options("report", source, {"--first": first, "--final": final, "--attendance": attendance, "--delegates": delegates,
                                        "--worksheet": worksheet, "--worksheet-digest": worksheet_digest, "--reporter": reporter,
                                        "--election": election, "--occurred-at": occurred_at})
    text = _read_source(source) if source else None
    data = None
    if text is None:
        if first is None or final is None:
            missing = " and ".join(name for name, given in (("--first", first), ("--final", final)) if given is None)
            raise fail(f"give the report as JSON (FILE or -) or with --first and --final: missing {missing}")
        data = {
            **_result_fields(first, final, attendance, delegates, worksheet, worksheet_digest),
            "reporter": reporter,
            "election_id": election,
            "occurred_at": occurred_at,
        }
    _submit(ctx, CommandKind.REPORT, text=text, data=data, unit_id=unit, key=key, token=token,
            credentials=credentials, channel=channel, as_json=as_json)


def correct(
    ctx: typer.Context,
    source: Optional[str] = typer.Argument(None, help="The correction as JSON (a file, or - for stdin); or use the options."),
    unit: Optional[str] = UnitOption,
    supersedes: Optional[str] = typer.Option(None, "--supersedes", help="Event id of the result being replaced (required; `caucus trail UNIT` shows it)."),
    reason: Optional[str] = typer.Option(None, "--reason", help="Why the result changes (required)."),
    authority: Optional[str] = typer.Option(None, "--authority", help="Who decided the correction (required)."),
    stage: Optional[str] = typer.Option(None, "--stage", help="review, recanvass or recount (required)."),
    first: Optional[list[str]] = FirstOption,
    final: Optional[list[str]] = FinalOption,
    attendance: Optional[int] = AttendanceOption,
    delegates: Optional[list[str]] = DelegatesOption,
    worksheet: Optional[Path] = WorksheetOption,
    worksheet_digest: Optional[str] = DigestOption,
    election: Optional[str] = ElectionOption,
    occurred_at: Optional[str] = OccurredOption,
    key: Optional[str] = KeyOption,
    token: Optional[str] = TokenOption,
    credentials: Optional[Path] = CredentialsOption,
    channel: str = ChannelOption,
    as_json: bool = JsonOption,
) -> None:
    """Replace a unit's current result (needs an official): names the event it supersedes, why and on whose authority."""
    _json_or_options("correction", source, {
        "--supersedes": supersedes, "--reason": reason, "--authority": authority, "--stage": stage, "--first": first,
        "--final": final, "--attendance": attendance, "--delegates": delegates, "--worksheet": worksheet,
        "--worksheet-digest": worksheet_digest, "--election": election, "--occurred-at": occurred_at})
    text = _read_source(source) if source else None
    data = None
    if text is None:
        needed = {"--supersedes": supersedes, "--reason": reason, "--authority": authority, "--stage": stage,
                  "--first": first, "--final": final}
        missing = [flag for flag, value in needed.items() if value is None]
        if missing:  # a usage slip, not a submission: nothing is recorded (a refused command stays in the log)
            where = ("; --supersedes is the event id of the unit's current result, which `caucus trail UNIT` shows"
                     if "--supersedes" in missing else "")
            raise fail(f"give the correction as JSON (FILE or -) or with {', '.join(needed)}: missing {', '.join(missing)}{where}")
        data = {
            **_result_fields(first, final, attendance, delegates, worksheet, worksheet_digest),
            "supersedes": supersedes,
            "reason": reason,
            "authority": authority,
            "stage": stage,
            "election_id": election,
            "occurred_at": occurred_at,
        }
    _submit(ctx, CommandKind.CORRECT, text=text, data=data, unit_id=unit, key=key, token=token,
            credentials=credentials, channel=channel, as_json=as_json)


def toss(
    ctx: typer.Context,
    unit: str = typer.Argument(..., help="The reporting unit id."),
    contenders: list[str] = typer.Option(..., "--contender", help="A tied group (repeat, or comma-separate; a name holding a comma in double quotes)."),
    seats: int = typer.Option(1, "--seats", help="How many seats were contested."),
    winners: list[str] = typer.Option(..., "--winner", help="A group that won a seat (repeat, or comma-separate)."),
    method: str = typer.Option("coin", "--method", help="coin (two groups) or lots (three or more)."),
    caller: str = typer.Option(..., "--caller", help="Who called the toss or drew first."),
    witnesses: Optional[list[str]] = typer.Option(None, "--witness", help="A witness (repeat)."),
    reason: str = typer.Option("", "--reason", help="What the tie was about; with --supersedes, why the settled toss is replaced."),
    supersedes: Optional[str] = typer.Option(
        None, "--supersedes", help="Redraw a tie that is already settled: the event id of the toss that stands (needs --reason)."
    ),
    election: Optional[str] = ElectionOption,
    occurred_at: Optional[str] = OccurredOption,
    key: Optional[str] = KeyOption,
    token: Optional[str] = TokenOption,
    credentials: Optional[Path] = CredentialsOption,
    channel: str = ChannelOption,
    as_json: bool = JsonOption,
) -> None:
    """Record a coin toss or drawing of lots (needs an official).

    A tie is tossed once: a second toss for the same contenders and seats is refused
    (TIE_ALREADY_SETTLED), unless it redraws the standing toss with --supersedes and --reason."""
    data = {
        "contenders": _names(contenders, "--contender"),
        "seats": seats,
        "winners": _names(winners, "--winner"),
        "method": method,
        "caller": caller,
        "witnesses": _names(witnesses, "--witness"),
        "reason": reason,
        "supersedes": supersedes,
        "election_id": election,
        "occurred_at": occurred_at,
    }
    _submit(ctx, CommandKind.TOSS, text=None, data=data, unit_id=unit, key=key, token=token,
            credentials=credentials, channel=channel, as_json=as_json)


# -- registration ----------------------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    register_admin(app)
    app.command("define")(define)
    app.command("open")(open_unit)
    app.command("report")(report)
    app.command("correct")(correct)
    app.command("toss")(toss)
