"""``caucus spool``, ``caucus credentials``, ``caucus intake`` and ``caucus serve intake``: running the intake.

The operators' side of the producers, apart from the submitting commands (``producers.cli``, whose
``register`` adds these too): the spool of events accepted while the log was unreachable, the
credentials of chairs and officials, the intake's own state, and the HTTP service.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ledger.cli_output import emit, fail, settings_of
from ledger.config import Settings
from ledger.log.port import LogError, LogLostError, LogMissingError
from producers.credentials import CredentialError, CredentialStore
from producers.intake import Intake
from producers.spool import SpoolError

__all__ = ["register", "credential_store", "CredentialsOption"]

CredentialsOption = typer.Option(
    None, "--credentials", envvar="CAUCUS_CREDENTIALS", help="Credential store file (default: <data dir>/credentials.json)."
)
_JSON_HINT = " (an error as {\"error\": {...}} on stderr)"
SpoolJson = typer.Option(False, "--json", help="Print the spool's state as JSON" + _JSON_HINT + ".")
FlushJson = typer.Option(False, "--json", help="Print what was forwarded as JSON" + _JSON_HINT + ".")
IssueJson = typer.Option(False, "--json", help="Print the credential and its token as JSON" + _JSON_HINT + ".")
ListJson = typer.Option(False, "--json", help="Print the credentials as a JSON list" + _JSON_HINT + ".")
RevokeJson = typer.Option(False, "--json", help="Print the revoked credential as JSON" + _JSON_HINT + ".")
StatusJson = typer.Option(False, "--json", help="Print the intake's status as JSON" + _JSON_HINT + ".")
RebuildJson = typer.Option(False, "--json", help="Print what the rebuild did as JSON" + _JSON_HINT + ".")


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


# -- commands --------------------------------------------------------------------------------------------


def spool_status(ctx: typer.Context, as_json: bool = SpoolJson) -> None:
    """How many accepted events wait in the spool for the log."""
    intake = Intake.for_settings(settings_of(ctx), seal=None)  # reads only: no signing key needed
    try:
        data = intake.spool.status()
    except SpoolError as exc:
        raise fail(str(exc)) from exc
    emit(data, as_json, lambda: typer.echo(f"{data['pending']} event(s) waiting in {data['path']}"
                                          + (f" (oldest {data['oldest']})" if data["oldest"] else "")))


def spool_flush(ctx: typer.Context, as_json: bool = FlushJson) -> None:
    """Forward spooled events to the log, in order; exit 2 if some remain because it is still unreachable.

    Exit 3 if the log was lost (a memory-only broker restarted empty, a log file replaced): the events
    stay in the spool until the log is restored and `caucus intake rebuild` has run."""
    intake = Intake.for_settings(settings_of(ctx))
    try:
        intake.start()
        report = intake.flush()
    except LogLostError as exc:  # found by the start or by the flush: the same words either way
        raise fail(f"the log was lost: {intake.log_lost or exc}; the {len(intake.spool.pending())} spooled event(s) "
                   "stay in the spool until then") from exc
    except (LogError, SpoolError) as exc:
        raise fail(str(exc)) from exc
    finally:
        intake.close()
    data = report.to_json()
    emit(data, as_json, lambda: typer.echo(
        f"forwarded {report.forwarded}, refused on arrival {report.rejected}, already in the log "
        f"{report.already_present}, still waiting {report.remaining}" + (f" ({report.error})" if report.error else "")))
    if report.remaining:
        raise typer.Exit(2)


def cred_issue(
    ctx: typer.Context,
    unit: Optional[str] = typer.Option(None, "--unit", help="Issue a chair's credential for this unit."),
    official: Optional[str] = typer.Option(None, "--official", help="Issue an official's credential to this person."),
    name: Optional[str] = typer.Option(None, "--name", help="The chair's name (for --unit)."),
    election: Optional[str] = typer.Option(
        None, "--election", help="The election the chair reports for (for --unit). Without it, what the chair "
        "sends is refused (AMBIGUOUS_ELECTION) once a second election has the same unit id."),
    credentials: Optional[Path] = CredentialsOption,
    as_json: bool = IssueJson,
) -> None:
    """Issue a credential. The token is printed once and not stored: hand it over now.

    The unit and the election are not checked here (they may be defined later): a chair's submissions
    are refused when they name a unit or an election the log does not define (UNKNOWN_UNIT, UNKNOWN_ELECTION)."""
    if (unit is None) == (official is None):
        raise fail("give exactly one of --unit UNIT or --official NAME")
    if election is not None and unit is None:
        raise fail("--election scopes a chair's credential: give it with --unit")
    store = credential_store(settings_of(ctx), credentials)
    try:
        cred, token = store.issue("chair" if unit else "official", unit_id=unit, name=official or name,
                                  election_id=election)
    except (CredentialError, ValueError) as exc:  # a ValueError names the argument the credential cannot take
        raise fail(str(exc)) from exc
    data = {**cred.public(), "token": token}

    def human() -> None:
        typer.echo(f"issued {cred.role} credential {cred.cred_id} ({cred.actor})")
        typer.echo(f"token (shown once): {token}")

    emit(data, as_json, human)


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


def cred_revoke(
    ctx: typer.Context,
    cred_id: str = typer.Argument(..., help="The credential id (as `credentials list` shows it)."),
    credentials: Optional[Path] = CredentialsOption,
    as_json: bool = RevokeJson,
) -> None:
    """Revoke a credential; its token stops working at once. Exit 2 if there is no such credential."""
    try:
        store = credential_store(settings_of(ctx), credentials)
        already = any(c.cred_id == cred_id and c.revoked_at is not None for c in store.list())
        cred = store.revoke(cred_id)
    except KeyError:
        raise fail(f"no credential {cred_id!r} (`caucus credentials list` shows their ids)") from None
    except CredentialError as exc:
        raise fail(str(exc)) from exc
    emit(cred.public(), as_json, lambda: typer.echo(
        f"{'already revoked' if already else 'revoked'} {cred.cred_id} ({cred.actor}) at {cred.revoked_at}"))


def _embedded_log_there(settings: Settings) -> None:
    """A data directory with neither an embedded log nor intake state holds nothing to report on: a
    mistyped --data-dir was given a new, empty log (and intake state) by ``intake status``, which said
    "reachable". A log that went missing beside the intake's state is reported (lost), not refused."""
    from ledger.backends import backends_for

    backends = backends_for(settings)
    if backends.log_kind == "sqlite" and not settings.log_path.exists() and not backends.intake_dir().exists():
        try:
            backends.open_existing_log().close()  # raises the usual "no event log at ..."
        except LogMissingError as exc:
            raise fail(str(exc)) from exc


def intake_status(ctx: typer.Context, as_json: bool = StatusJson) -> None:
    """Where the intake's state stands against the log, and the spool."""
    _embedded_log_there(settings_of(ctx))
    try:
        with Intake.for_settings(settings_of(ctx), seal=None) as intake:  # reads only: no signing key needed
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


def intake_rebuild(ctx: typer.Context, as_json: bool = RebuildJson) -> None:
    """Drop the intake's snapshot and fold the whole log again (after a log was lost and refilled).

    Events spooled while the log was lost wait for this: restore the log first (`caucus log append`
    from a copy), rebuild, then flush; they are checked again for conflicts with the log as it then is."""
    _embedded_log_there(settings_of(ctx))
    intake = Intake.for_settings(settings_of(ctx), seal=None)  # writes no record: no signing key needed
    try:
        data = intake.rebuild()
    except (LogError, SpoolError) as exc:
        raise fail(str(exc)) from exc
    finally:
        intake.close()
    waiting = data["spooled_waiting"]
    emit(data, as_json, lambda: typer.echo(
        f"rebuilt from {data['events_applied']} events in {data['seconds']} s"
        + (f"; {waiting} spooled event(s) are checked against it on the next `caucus spool flush` (or by the "
           "running service)" if waiting else "")))


def serve_intake(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Port to listen on (0: any free port, printed at start)."),
    credentials: Optional[Path] = CredentialsOption,
    retry_seconds: float = typer.Option(5.0, "--retry-seconds", help="How often to retry forwarding the spool."),
) -> None:
    """The HTTP intake (OpenAPI docs at /docs). Chairs and officials authenticate with a bearer token.

    Also serves /metrics (Prometheus), /health (the intake's status) and /ready (200 only while the
    log is reachable and not lost)."""
    from ledger.http_serve import bind, port_of, serve
    from producers.http import create_app

    settings = settings_of(ctx)
    try:
        socks = bind(host, port)  # first: a port taken starts no intake
    except OSError as exc:
        raise fail(str(exc)) from exc
    try:
        intake = Intake.for_settings(settings).start()
    except (LogError, SpoolError) as exc:
        for sock in socks:
            sock.close()
        raise fail(str(exc)) from exc
    try:
        app_ = create_app(intake, credential_store(settings, credentials), retry_seconds=retry_seconds)
        typer.echo(f"intake for {settings.describe_log()} on http://{host}:{port_of(socks)} (API docs /docs; /metrics, "
                   "/health, /ready); stop with Ctrl-C", err=True)
        # httptools and uvloop are dependencies, so uvicorn's defaults parse and loop in C: about a
        # third more reports a second on Kafka than h11 and asyncio (scripts/bench_intake.py)
        started = serve(app_, socks)
    finally:
        intake.close()
    if not started:
        raise fail("the intake did not start (see the lines above)")


def register(app: typer.Typer) -> None:
    spool_app = _group(app, "spool", "The local spool of events accepted while the log was unreachable.")
    cred_app = _group(app, "credentials", "Issue, list and revoke the credentials of chairs and officials.")
    intake_app = _group(app, "intake", "The intake's state: status and rebuild from the log.")
    serve_app = _group(app, "serve", "Run a service.")
    spool_app.command("status")(spool_status)
    spool_app.command("flush")(spool_flush)
    cred_app.command("issue")(cred_issue)
    cred_app.command("list")(cred_list)
    cred_app.command("revoke")(cred_revoke)
    intake_app.command("status")(intake_status)
    intake_app.command("rebuild")(intake_rebuild)
    serve_app.command("intake")(serve_intake)
