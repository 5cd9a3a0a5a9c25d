"""``caucus define | open | report | correct | toss``, ``caucus spool``, ``caucus credentials``,
``caucus intake`` and ``caucus serve intake``.

Each submitting command builds the same JSON document the HTTP service takes (or reads it from a file
or stdin), and hands it to the intake verbatim, so a refused input is recorded exactly as it was given.
Exit codes: 0 accepted (also "duplicate" and "spooled"), 1 refused, 2 operational error (log lost,
store unreadable, bad usage).

Without ``--key`` the idempotency key is derived from the command and the sender, so running the same
command twice records it once; pass ``--key`` to choose one (e.g. the worksheet number).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from ledger.cli_output import emit, fail, settings_of
from ledger.config import Settings
from ledger.events import Channel
from ledger.log.port import LogError
from producers.commands import CommandKind, derive_key, load_json
from producers.credentials import AuthFailure, Credential, CredentialError, CredentialStore
from producers.intake import SNAPSHOT_EVERY, Intake
from producers.outcomes import Outcome, Receipt, Submission
from producers.spool import SpoolError

__all__ = ["register", "credential_store"]

_CHANNELS = ("app", "phone", "paper")

TokenOption = typer.Option(None, "--token", envvar="CAUCUS_TOKEN", help="Your credential (env CAUCUS_TOKEN).", show_default=False)
CredentialsOption = typer.Option(
    None, "--credentials", envvar="CAUCUS_CREDENTIALS", help="Credential store file (default: <data dir>/credentials.json)."
)
KeyOption = typer.Option(None, "--key", help="Idempotency key (default: derived from the command and the sender).")
ChannelOption = typer.Option("phone", "--channel", help="How the result reached you: app, phone or paper.")
ElectionOption = typer.Option(None, "--election", help="Election id (default: the election holding the unit).")
OccurredOption = typer.Option(None, "--occurred-at", help="When it happened at the caucus, ISO 8601 with offset.")
JsonOption = typer.Option(False, "--json", help="Print the receipt or the errors as JSON.")
_JSON_HINT = " (an error as {\"error\": {...}} on stderr)"
SpoolJson = typer.Option(False, "--json", help="Print the spool's state as JSON" + _JSON_HINT + ".")
FlushJson = typer.Option(False, "--json", help="Print what was forwarded as JSON" + _JSON_HINT + ".")
IssueJson = typer.Option(False, "--json", help="Print the credential and its token as JSON" + _JSON_HINT + ".")
ListJson = typer.Option(False, "--json", help="Print the credentials as a JSON list" + _JSON_HINT + ".")
RevokeJson = typer.Option(False, "--json", help="Print the revoked credential as JSON" + _JSON_HINT + ".")
StatusJson = typer.Option(False, "--json", help="Print the intake's status as JSON" + _JSON_HINT + ".")
RebuildJson = typer.Option(False, "--json", help="Print what the rebuild did as JSON" + _JSON_HINT + ".")
UnitOption = typer.Option(None, "--unit", help="The reporting unit id.")
FirstOption = typer.Option(None, "--first", help="First alignment: CANDIDATE=N (repeat, or comma-separate).")
FinalOption = typer.Option(None, "--final", help="Final alignment: CANDIDATE=N.")
AttendanceOption = typer.Option(None, "--attendance", help="T, the attendees counted at the start (if not given at opening).")
DelegatesOption = typer.Option(None, "--delegates", help="County delegates awarded: CANDIDATE=N.")
WorksheetOption = typer.Option(None, "--worksheet", help="Photo of the signed worksheet: its SHA-256 is recorded.")
DigestOption = typer.Option(None, "--worksheet-digest", help="sha256:<hex> of the worksheet photo.")


def credential_store(settings: Settings, path: Path | None) -> CredentialStore:
    return CredentialStore(path or settings.credentials or settings.data_dir / "credentials.json")


def _group(app: typer.Typer, name: str, help_text: str) -> typer.Typer:
    """A sub-command group, shared with other packages that add to it (``serve``)."""
    for info in app.registered_groups:
        if info.name == name and info.typer_instance is not None:
            return info.typer_instance
    group = typer.Typer(help=help_text, no_args_is_help=True)
    app.add_typer(group, name=name)
    return group


# -- helpers --------------------------------------------------------------------------------------------


def _counts(values: list[str] | None, option: str) -> dict[str, Any] | None:
    """``--final Sanders=12 --final Biden=3`` or ``--final Sanders=12,Biden=3``. Values that are not
    whole numbers are passed on as text so the intake refuses (and records) them with its own message."""
    if not values:
        return None
    out: dict[str, Any] = {}
    for value in values:
        for item in value.split(","):
            if not item.strip():
                continue
            name, sep, count = item.partition("=")
            if not sep or not name.strip():
                raise typer.BadParameter(f"{item!r}: give CANDIDATE=COUNT", param_hint=option)
            text = count.strip()
            out[name.strip()] = int(text) if re.fullmatch(r"-?\d+", text) else text
    return out


def _names(values: list[str] | None) -> list[str]:
    return [n.strip() for v in values or [] for n in v.split(",") if n.strip()]


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


# -- registration ----------------------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    spool_app = _group(app, "spool", "The local spool of events accepted while the log was unreachable.")
    cred_app = _group(app, "credentials", "Issue, list and revoke the credentials of chairs and officials.")
    intake_app = _group(app, "intake", "The intake's state: status and rebuild from the log.")
    serve_app = _group(app, "serve", "Run a service.")

    @app.command("define")
    def define(
        ctx: typer.Context,
        source: str = typer.Argument(..., help="The election as JSON (a file, or - for stdin)."),
        key: Optional[str] = KeyOption,
        token: Optional[str] = TokenOption,
        credentials: Optional[Path] = CredentialsOption,
        channel: str = typer.Option("app", "--channel", help="app, phone or paper."),
        as_json: bool = JsonOption,
    ) -> None:
        """Define an election: candidates, counties with exact SDE ratios ("n/d"), units, rule set. Needs an official."""
        _submit(ctx, CommandKind.DEFINE, text=_read_source(source), data=None, unit_id=None, key=key, token=token,
                credentials=credentials, channel=channel, as_json=as_json)

    @app.command("open")
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

    @app.command("report")
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
        """Report a unit's result: first and final alignment, optionally attendance and delegates awarded."""
        if source and any(v is not None for v in (first, final, attendance, delegates, worksheet, worksheet_digest, reporter)):
            raise fail("give the report either as JSON (FILE or -) or with options, not both")
        text = _read_source(source) if source else None
        data = None
        if text is None:
            if first is None or final is None:
                raise fail("give the report as JSON (FILE or -) or with --first and --final")
            data = {
                **_result_fields(first, final, attendance, delegates, worksheet, worksheet_digest),
                "reporter": reporter,
                "election_id": election,
                "occurred_at": occurred_at,
            }
        _submit(ctx, CommandKind.REPORT, text=text, data=data, unit_id=unit, key=key, token=token,
                credentials=credentials, channel=channel, as_json=as_json)

    @app.command("correct")
    def correct(
        ctx: typer.Context,
        source: Optional[str] = typer.Argument(None, help="The correction as JSON (a file, or - for stdin); or use the options."),
        unit: Optional[str] = UnitOption,
        supersedes: Optional[str] = typer.Option(None, "--supersedes", help="Event id of the result being replaced."),
        reason: Optional[str] = typer.Option(None, "--reason", help="Why the result changes."),
        authority: Optional[str] = typer.Option(None, "--authority", help="Who decided the correction."),
        stage: Optional[str] = typer.Option(None, "--stage", help="review, recanvass or recount."),
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
        options = (supersedes, reason, authority, stage, first, final, attendance, delegates, worksheet, worksheet_digest)
        if source and any(v is not None for v in options):
            raise fail("give the correction either as JSON (FILE or -) or with options, not both")
        text = _read_source(source) if source else None
        data = None
        if text is None:
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

    @app.command("toss")
    def toss(
        ctx: typer.Context,
        unit: str = typer.Argument(..., help="The reporting unit id."),
        contenders: list[str] = typer.Option(..., "--contender", help="A tied group (repeat, or comma-separate)."),
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
            "contenders": _names(contenders),
            "seats": seats,
            "winners": _names(winners),
            "method": method,
            "caller": caller,
            "witnesses": _names(witnesses),
            "reason": reason,
            "supersedes": supersedes,
            "election_id": election,
            "occurred_at": occurred_at,
        }
        _submit(ctx, CommandKind.TOSS, text=None, data=data, unit_id=unit, key=key, token=token,
                credentials=credentials, channel=channel, as_json=as_json)

    # -- spool ----------------------------------------------------------------------------------------

    @spool_app.command("status")
    def spool_status(ctx: typer.Context, as_json: bool = SpoolJson) -> None:
        """How many accepted events wait in the spool for the log."""
        intake = Intake.for_settings(settings_of(ctx))
        try:
            data = intake.spool.status()
        except SpoolError as exc:
            raise fail(str(exc)) from exc
        emit(data, as_json, lambda: typer.echo(f"{data['pending']} event(s) waiting in {data['path']}"
                                              + (f" (oldest {data['oldest']})" if data["oldest"] else "")))

    @spool_app.command("flush")
    def spool_flush(ctx: typer.Context, as_json: bool = FlushJson) -> None:
        """Forward spooled events to the log, in order; exit 2 if some remain because it is still unreachable."""
        try:
            with Intake.for_settings(settings_of(ctx)) as intake:
                report = intake.flush()
        except (LogError, SpoolError) as exc:
            raise fail(str(exc)) from exc
        data = report.to_json()
        emit(data, as_json, lambda: typer.echo(
            f"forwarded {report.forwarded}, refused on arrival {report.rejected}, already in the log "
            f"{report.already_present}, still waiting {report.remaining}" + (f" ({report.error})" if report.error else "")))
        if report.remaining:
            raise typer.Exit(2)

    # -- credentials ----------------------------------------------------------------------------------

    @cred_app.command("issue")
    def cred_issue(
        ctx: typer.Context,
        unit: Optional[str] = typer.Option(None, "--unit", help="Issue a chair's credential for this unit."),
        official: Optional[str] = typer.Option(None, "--official", help="Issue an official's credential to this person."),
        name: Optional[str] = typer.Option(None, "--name", help="The chair's name (for --unit)."),
        election: Optional[str] = typer.Option(
            None, "--election", help="The election the chair reports for (for --unit). Without it the credential "
            "is refused once a second election has the same unit id."),
        credentials: Optional[Path] = CredentialsOption,
        as_json: bool = IssueJson,
    ) -> None:
        """Issue a credential. The token is printed once and not stored: hand it over now."""
        if (unit is None) == (official is None):
            raise fail("give exactly one of --unit UNIT or --official NAME")
        if election is not None and unit is None:
            raise fail("--election scopes a chair's credential: give it with --unit")
        store = credential_store(settings_of(ctx), credentials)
        try:
            cred, token = store.issue("chair" if unit else "official", unit_id=unit, name=official or name,
                                      election_id=election)
        except CredentialError as exc:
            raise fail(str(exc)) from exc
        data = {**cred.public(), "token": token}

        def human() -> None:
            typer.echo(f"issued {cred.role} credential {cred.cred_id} ({cred.actor})")
            typer.echo(f"token (shown once): {token}")

        emit(data, as_json, human)

    @cred_app.command("list")
    def cred_list(ctx: typer.Context, credentials: Optional[Path] = CredentialsOption, as_json: bool = ListJson) -> None:
        """List credentials (never their secrets)."""
        store = credential_store(settings_of(ctx), credentials)
        try:
            creds = store.list()
        except CredentialError as exc:
            raise fail(str(exc)) from exc
        data = [c.public() for c in creds]

        def human() -> None:
            if not creds:
                typer.echo(f"no credentials in {store.path}; issue one with `caucus credentials issue --unit UNIT` "
                           "or `--official NAME`")
            for c in creds:
                typer.echo(f"{c.cred_id}  {c.role:<8} {c.actor:<40} issued {c.issued_at}"
                           + (f"  REVOKED {c.revoked_at}" if c.revoked_at else ""))

        emit(data, as_json, human)

    @cred_app.command("revoke")
    def cred_revoke(
        ctx: typer.Context,
        cred_id: str = typer.Argument(..., help="The credential id (as `credentials list` shows it)."),
        credentials: Optional[Path] = CredentialsOption,
        as_json: bool = RevokeJson,
    ) -> None:
        """Revoke a credential; its token stops working at once. Exit 2 if there is no such credential."""
        try:
            cred = credential_store(settings_of(ctx), credentials).revoke(cred_id)
        except KeyError:
            raise fail(f"no credential {cred_id!r} (`caucus credentials list` shows their ids)") from None
        except CredentialError as exc:
            raise fail(str(exc)) from exc
        emit(cred.public(), as_json, lambda: typer.echo(f"revoked {cred.cred_id} ({cred.actor}) at {cred.revoked_at}"))

    # -- intake state ---------------------------------------------------------------------------------

    @intake_app.command("status")
    def intake_status(ctx: typer.Context, as_json: bool = StatusJson) -> None:
        """Where the intake's state stands against the log, and the spool."""
        try:
            with Intake.for_settings(settings_of(ctx)) as intake:
                data = intake.status()
        except (LogError, SpoolError) as exc:
            raise fail(str(exc)) from exc

        def human() -> None:
            spool = data["spool"]
            typer.echo(f"log:         {data['log']} ({'reachable' if data['reachable'] else 'NOT reachable'})")
            if data["log_lost"]:
                typer.echo(f"LOG LOST:    {data['log_lost']}")
            elif data["last_log_error"]:
                typer.echo(f"last error:  {data['last_log_error']}")
            typer.echo(f"events:      {data['events_applied']:,} applied"
                       + (f", up to {', '.join(f'{p}:{o}' for p, o in data['positions'].items())}" if data["positions"] else ""))
            typer.echo(f"elections:   {', '.join(data['elections']) or 'none defined yet'}")
            typer.echo(f"spool:       {spool['pending']} event(s) waiting in {spool['path']}"
                       + (f" (oldest {spool['oldest']})" if spool.get("oldest") else ""))

        emit(data, as_json, human)

    @intake_app.command("rebuild")
    def intake_rebuild(ctx: typer.Context, as_json: bool = RebuildJson) -> None:
        """Drop the intake's snapshot and fold the whole log again (after a log was lost and refilled)."""
        intake = Intake.for_settings(settings_of(ctx))
        try:
            data = intake.rebuild()
        except (LogError, SpoolError) as exc:
            raise fail(str(exc)) from exc
        finally:
            intake.close()
        emit(data, as_json, lambda: typer.echo(f"rebuilt from {data['events_applied']} events in {data['seconds']} s"))

    # -- HTTP service ---------------------------------------------------------------------------------

    @serve_app.command("intake")
    def serve_intake(
        ctx: typer.Context,
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        port: int = typer.Option(8080, "--port", help="Port to listen on."),
        credentials: Optional[Path] = CredentialsOption,
        retry_seconds: float = typer.Option(5.0, "--retry-seconds", help="How often to retry forwarding the spool."),
    ) -> None:
        """The HTTP intake (OpenAPI docs at /docs). Chairs and officials authenticate with a bearer token.

        Also serves /metrics (Prometheus), /health (the intake's status) and /ready (200 only while the
        log is reachable and not lost)."""
        import uvicorn

        from producers.http import create_app

        settings = settings_of(ctx)
        try:
            intake = Intake.for_settings(settings).start()
        except (LogError, SpoolError) as exc:
            raise fail(str(exc)) from exc
        try:
            app_ = create_app(intake, credential_store(settings, credentials), retry_seconds=retry_seconds)
            typer.echo(f"intake for {settings.describe_log()} on http://{host}:{port} (API docs /docs; /metrics, /health, "
                       "/ready); stop with Ctrl-C", err=True)
            # log_config=None: uvicorn's messages go through the ledger's logging (--log-level, --log-format)
            uvicorn.run(app_, host=host, port=port, log_config=None)
        finally:
            intake.close()

