"""``caucus audit`` (the RULES.md §12 checks over every unit) and ``caucus recount-package``.

``caucus audit`` reads the serving projection by default, ``--as-of`` a moment of the log, ``--log``
the whole log (no store needed). Exit status: 0 no finding of severity ``error`` among those shown,
1 at least one, 2 the audit could not be run.

``caucus recount-package`` writes a self-verifying package for one unit or a county (see
``projections.audit.recount``). Exit status: 0 written, 2 not written (with the reason).
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

import typer

from ledger.cli_output import emit, fail, runnable_here, settings_of
from ledger.config import Settings, open_log
from ledger.log.port import EventLog, LogError
from projections.asof import AsOfError, Cut, parse_cut, tally_as_of
from projections.audit.cli import trusted_keys as _trusted_keys
from projections.audit.checks import CSV_FIELDS, SEVERITY_ORDER, AuditFinding, AuditReport, audit_tallies
from projections.audit.record_checks import log_record_findings
from projections.audit.codes import AUDIT_CODES
from ledger.caucus_math import CaucusMathError, get_rule_set
from projections.queries import (DEFAULT_SET, NoElectionYet, QueryError, TallyView, find_county, find_unit_in, load_view, resolve_set,
                                 undefined_elections)
from projections.wiring import open_log_of, unread_events
from projections.stores.port import EventRow, ProjectionStore, StoreError
from projections.tally import ElectionContext, UnitTally, election_context

__all__ = ["register", "audit_command", "recount_package_command", "run_audit", "print_report"]

CLEAN, ERRORS, OPERATIONAL = 0, 1, 2


def register(app: typer.Typer) -> None:
    app.command("audit")(audit_command)
    app.command("recount-package")(recount_package_command)


def _choices(values: list[str] | None, allowed: tuple[str, ...], option: str) -> list[str]:
    out: list[str] = []
    for v in values or ():
        for item in v.split(","):
            item = item.strip()
            if not item:
                continue
            norm = item.upper() if option == "--code" else item.lower()
            if norm not in allowed:
                raise fail(f"{option} {item!r}: not one of {', '.join(allowed)}", OPERATIONAL)
            out.append(norm)
    return out


SEALS_UNCHECKED = ("not checked: no public key to check them with ({why}); only records claiming the intake or the "
                   "importer with no seal at all are named. Trust the signing key's public half: "
                   "CAUCUS_CHECKPOINT_PUBLIC_KEY, or the key home's checkpoint-key.pub")


def _seal_keys(settings: Settings, meta: dict[str, Any]) -> list[Any] | None:
    """The keys that check writer seals (``FORGED_WRITER``): those ``caucus verify`` would trust, or None
    when there are none at hand (the audit then names only unsealed claims, and says so in ``meta``)."""
    from ledger.integrity.keys import KeyFileError

    try:
        keys = _trusted_keys(settings, None)
        why = "none found"
    except KeyFileError as exc:
        keys, why = [], str(exc)
    meta["writer_seals"] = "checked" if keys else SEALS_UNCHECKED.format(why=why)
    return keys or None


def run_audit(
    settings: Settings,
    *,
    cut: Cut | None = None,
    whole_log: bool = False,
    election_id: str | None = None,
    rule_set: str | None = None,
) -> tuple[AuditReport, ElectionContext, list[EventRow]]:
    """The audit of the serving projection, or of the log (as of ``cut``, or whole), the election
    context it was computed under, and the events that name no election (part of no unit's state)."""
    if cut is not None or whole_log:
        log = open_log(settings, read_only=True)
        try:
            at = tally_as_of(log, cut, election_id=election_id, none_defined_ok=True)
            meta: dict[str, Any] = {"as_of": at.state.to_json()}
            records = log_record_findings(log, at.context, trusted=_seal_keys(settings, meta))
        finally:
            log.close()
        where = f"{settings.describe_log()}: " + (cut.describe() if cut is not None else "the whole log")
        report = _audit(at.context, at.units.values(), rule_set=rule_set, source=where, meta=meta)
        return _with(report, records), at.context, refused_unattributed(at.state.unaccounted())
    from projections.stores import open_store

    store = open_store(settings, read_only=True)
    read: EventLog | None = None
    try:
        try:
            view = load_view(store, election_id=election_id)
        except NoElectionYet:  # the refusals that named no election are still there to list
            view = _nothing_defined(store)
        # the record checks read the configured log: of another log (one lost and made again), or of none,
        # they would find nothing to say, and "no findings" over a projection that log no longer holds
        read = open_log_of(settings, view.set, store)
        where = f"projection {view.set.name} v{view.set.version} in {store.describe()}"
        with store.reader(view.set.set_id) as reader:
            loose = refused_unattributed(reader.unattributed(undefined_elections(reader)))
        seals: dict[str, Any] = {}
        records = log_record_findings(read, view.context, trusted=_seal_keys(settings, seals))
        unread = unread_events(read, view.positions)
    finally:
        if read is not None:
            read.close()
        store.close()
    meta = {"projection": view.meta(), "unread_records": unread, **seals}
    report = _audit(view.context, view.units.values(), rule_set=rule_set, source=where, meta=meta)
    return _with(report, records), view.context, loose


def _nothing_defined(store: ProjectionStore) -> TallyView:
    """The serving set's view while no election is defined in it: no units, an empty context (id "")."""
    info = resolve_set(store, DEFAULT_SET)
    with store.reader(info.set_id) as reader:
        positions = {p: row.next_offset for p, row in reader.positions().items()}
    return TallyView(info, election_context(None, ""), {}, positions)


def _audit(ctx: ElectionContext, tallies: Iterable[UnitTally], *, rule_set: str | None, source: str,
           meta: dict[str, Any]) -> AuditReport:
    """The §12 checks of the election, or, where none is defined yet, an empty report (election id ""):
    nothing to check, while the log's records and its refusals are still audited."""
    if not ctx.election_id:
        if rule_set is not None:
            get_rule_set(rule_set)  # nothing to check under it, but a mistyped name is still an error
        return AuditReport("", rule_set or "", source, 0, 0, [], [], meta)
    return audit_tallies(ctx, tallies, rule_set=rule_set, source=source, meta=meta)


def _with(report: AuditReport, records: list[AuditFinding]) -> AuditReport:
    """The report with the findings about how records reached the log, each among its severity."""
    order = {s: i for i, s in enumerate(SEVERITY_ORDER)}
    report.findings[:] = sorted([*report.findings, *records], key=lambda f: order.get(f.severity, len(order)))
    return report


def refused_unattributed(rows: list[EventRow]) -> list[EventRow]:
    """The records that name no election, less the signed checkpoints: a checkpoint names none, being a
    statement about the whole log, and is no submission anybody should look into. Anything else that
    names none stays listed (an audit leaves out only what it knows to be harmless)."""
    return [r for r in rows if r.type != "CheckpointSigned"]


def _unit_named(row: EventRow) -> str | None:
    """The unit a refused submission named, if any (one naming none is keyed by its election slot)."""
    return None if not row.unit_key or row.unit_key.startswith("election:") else row.unit_key


def unattributed_in(rows: list[EventRow], units: Mapping[str, Any], unit_id: str | None, county_id: str | None) -> list[EventRow]:
    """The refusals an audit filtered to a unit and/or a county shows: those naming that unit, in that
    county (both filters hold, as for the findings). A refused submission names a unit at most; one
    naming an election nobody defined is in no county (the unit ids of the audited one are not its)."""
    return [r for r in rows if (unit_id is None or r.unit_key == unit_id) and (county_id is None or (
        not r.election_id and r.unit_key in units and units[r.unit_key].county_id == county_id))]


def unattributed_json(rows: list[EventRow]) -> list[dict[str, Any]]:
    return [{"position": f"{r.partition}:{r.offset}", "event_id": r.event_id, "election_id": r.election_id or None,
             "unit_id": _unit_named(r), "type": r.type, "recorded_at": r.recorded_at} for r in rows]


def print_unattributed(rows: list[EventRow], *, as_of: bool = False) -> None:
    """Submissions refused before they named an election, or naming one nobody defined: the log keeps
    them, no tally counts them. ``as_of``: the audit is of a cut, which may come before a definition
    the log holds, so what is undefined is said of the cut."""
    if not rows:
        return
    where = "the log up to the cut" if as_of else "the log"
    by_unit: dict[str, int] = {}
    for r in rows:
        unit = _unit_named(r)
        label = "(no unit)" if unit is None else f"unit {unit}"
        if r.election_id:
            label += f" of election {r.election_id!r}, which {where} does not define"
        by_unit[label] = by_unit.get(label, 0) + 1
    typer.echo("")
    typer.echo(f"UNATTRIBUTED ({len(rows)}): events that name no election, or one {where} does not define (submissions "
               "refused before they could be attributed); kept in the log, counted by no tally")
    for label, n in sorted(by_unit.items()):
        typer.echo(f"  {label}: {n}")


def audit_command(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    as_csv: bool = typer.Option(False, "--csv", help="Print the findings as CSV."),
    severity: Optional[list[str]] = typer.Option(
        None, "--severity", help=f"Only these severities ({', '.join(SEVERITY_ORDER)}); repeatable or comma separated."
    ),
    code: Optional[list[str]] = typer.Option(
        None, "--code", help=f"Only these checks ({', '.join(AUDIT_CODES)}); repeatable or comma separated."
    ),
    as_of: Optional[str] = typer.Option(
        None, "--as-of", help="Audit the log as of a time (2020-02-08T06:28:00Z; events recorded at that time count) "
        "or of positions (3:120,5:88: the first N records of each partition named; others contribute nothing)."
    ),
    whole_log: bool = typer.Option(False, "--log", help="Audit the whole log replayed in memory instead of the projection store."),
    county: Optional[str] = typer.Option(None, "--county", help="Only the units of one county (id or name)."),
    unit: Optional[str] = typer.Option(None, "--unit", help="Only one unit (id or name)."),
    rule_set: Optional[str] = typer.Option(None, "--rule-set", help="Check under another rule set: idp-2020, idp-2016, or a variant naming the reading of an [OPEN] point, such as idp-2020\\[leftover=lots] (README: the table of options)."),
    election: Optional[str] = typer.Option(None, "--election", help="Election id, when the log holds several."),
) -> None:
    """Run the RULES.md §12 checks over every unit's current result and list the findings by severity:
    unit, county, candidate, expected vs reported, and the likely cause. A tie tossed more than once is
    reported too: TIE_REDRAWN (info) for an official's redraw, TIE_CONTRADICTED (error) for a second
    toss that was ignored (expected: the winners that stand; reported: the ignored toss's);
    TOSS_CONTRADICTED (error) for reported delegates that give a settled tie otherwise than its toss;
    TOSS_BEFORE_RESULT (warn) for a toss recorded before the unit had any result; TOSS_UNUSED (warn)
    for a standing toss the current result's allocation does not use. SDE_UNWEIGHED (error) names a unit
    whose delegates carry no SDEs (a satellite whose weight cannot be computed); CHANGED_AFTER_CERTIFICATION
    (warn) a unit whose current result was recorded after the election's certification. The audit also
    reports how records reached the log: DIRECT_WRITE for one an official wrote without the intake;
    RECORDED_OUT_OF_ORDER for one dated more than a minute before records appended ahead of it;
    OCCURRED_AFTER_RECORDED (warn) for one that says it occurred more than ten minutes after it was
    recorded; RECORDED_BEFORE_SUPERSEDED (warn) for a correction or redraw recorded before the result or
    toss it supersedes.

    Exit 0: no error among the findings shown; 1: at least one error; 2: could not audit."""
    if as_json and as_csv:
        raise fail("choose one of --json and --csv", OPERATIONAL)
    severities = _choices(severity, SEVERITY_ORDER, "--severity")
    codes = _choices(code, AUDIT_CODES, "--code")
    settings = settings_of(ctx)
    try:
        cut = parse_cut(as_of) if as_of else None
    except AsOfError as exc:
        raise fail(f"--as-of: {exc}", OPERATIONAL) from exc
    try:
        report, context, loose = run_audit(settings, cut=cut, whole_log=whole_log, election_id=election, rule_set=rule_set)
        if not context.election_id:  # no definition to look names up in: a refusal names its unit as it was sent
            if county is not None:
                raise QueryError(f"--county {county}: no election is defined, so there are no counties yet")
            county_id, unit_id = None, unit
        else:
            county_id = find_county(context, county) if county is not None else None
            unit_id = find_unit_in(context, unit, county_id, county_option=True) if unit is not None else None
    except (AsOfError, QueryError, StoreError, LogError, CaucusMathError) as exc:
        raise fail(str(exc), OPERATIONAL) from exc
    shown = report.filtered(severities, codes, county_id, unit_id)
    nothing = not context.election_id and not loose  # (before the filters: a filter may leave nothing of something)
    loose = unattributed_in(loose, getattr(context, "units", {}), unit_id, county_id)
    if nothing:  # nothing at all to audit: "no findings", exit 0, read as a clean audit
        raise fail(f"nothing to audit in {report.source}: no election is defined there, and no refused submission"
                   + (" (a cut must come after the election's definition was recorded)" if cut is not None else ""))
    if not context.election_id:  # said apart from the output: a cut before the definition looks like a clean audit
        typer.echo(f"note: no election is defined in {report.source}; only the submissions refused before they named "
                   "an election are listed", err=True)
    unread = report.meta.get("unread_records", 0)
    if unread:  # an auditor signing off on this must know what it does not cover
        typer.echo(runnable_here(f"note: the log holds {unread} record(s) the projection has not read yet; whatever they "
                                 "change is not audited here: `caucus project --until-caught-up` reads them (or audit the "
                                 "log itself with --log)"), err=True)
    if as_csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(f.csv_row() for f in shown.findings)
    else:
        data = shown.to_json()
        data["filters"] = {"severity": severities, "code": codes, "county": county_id, "unit": unit_id}
        data["unattributed"] = unattributed_json(loose)

        def human() -> None:
            print_report(shown, filtered=bool(severities or codes or county_id or unit_id), county=county_id, unit=unit_id)
            print_unattributed(loose, as_of=cut is not None)

        emit(data, as_json, human)
    raise typer.Exit(ERRORS if shown.has_errors else CLEAN)


def print_report(report: AuditReport, *, filtered: bool = False, county: str | None = None, unit: str | None = None) -> None:
    echo = typer.echo
    if not report.election_id:
        echo(f"audit: no election is defined, so no unit to check; source: {report.source}")
    else:
        echo(f"audit of {report.election_id} under {report.rule_set}; source: {report.source}")
        echo(f"units checked: {report.units_checked:,} of {report.units_defined:,} defined (the whole election); "
             f"{report.units_with_findings:,} with findings{' shown' if filtered else ''}"
             f"{f' (county {county} only)' if county else ''}{f' (unit {unit} only)' if unit else ''}")  # fmt: skip
    if report.not_checked:
        echo(f"not checked: {len(report.not_checked)} unit(s): " + "; ".join(f"{u} ({why})" for u, why in report.not_checked[:10]))
    if report.meta.get("writer_seals", "checked") != "checked":
        echo(f"writer seals: {report.meta['writer_seals']}")
    counts = report.counts()
    if not counts:
        echo("no findings")
        return
    echo("")
    wide = max(24, *(len(c) + 2 for c, _ in counts))  # the longest check name still leaves two spaces
    echo(f"  {'check':<{wide}}{'severity':<11}{'findings':>9}{'units':>7}")
    for (c, s), (n, u) in counts.items():
        echo(f"  {c:<{wide}}{s:<11}{n:>9,}{u:>7,}")
    for sev, findings in report.by_severity().items():
        echo("")
        echo(f"{sev.upper()} ({len(findings)})")
        for f in findings:
            where = f"{f.unit_id} {f.unit_name or '?'} ({f.county_name or '?'})"
            cand = f" {f.candidate}:" if f.candidate else ""
            echo(f"  {f.code:<22} {where}{cand} expected {f.expected_text or '-'}, reported {f.reported_text or '-'}")
            echo(f"      {f.message}")
            if f.likely_cause:
                echo(f"      likely cause: {f.likely_cause}")


# -- caucus recount-package ------------------------------------------------------------------------------


def recount_package_command(
    ctx: typer.Context,
    unit: Optional[str] = typer.Argument(None, help="Unit id (or its name or short name)."),
    county: Optional[str] = typer.Option(None, "--county", help="Every unit of this county (id or name) instead of one unit."),
    out: Path = typer.Option(..., "--out", help="Directory to write the package to (new or empty)."),
    public_key: Optional[list[Path]] = typer.Option(
        None, "--public-key", help="Public key(s) whose checkpoints to prove against (default: env "
        "CAUCUS_CHECKPOINT_PUBLIC_KEY, else the key home's checkpoint-key.pub (CAUCUS_KEY_HOME, default "
        "~/.config/caucus), else the data directory's, as for `caucus verify`)."
    ),
    allow_unproven: bool = typer.Option(
        False, "--allow-unproven", help="Write the package even if no checkpoint covers some events (they are marked unproven)."
    ),
    force: bool = typer.Option(False, "--force", help="Write into a directory that is not empty."),
    rule_set: Optional[str] = typer.Option(None, "--rule-set", help="Tallies in the trail under another rule set."),
    election: Optional[str] = typer.Option(None, "--election", help="Election id, when the log holds several."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary."),
) -> None:
    """Write a recount package for one unit (or a county): its events (Avro bytes and JSON), the paper
    trail with the tally after each event, inclusion proofs against the latest signed checkpoint, every
    record of the unit's partition up to it (so verify.py finds an event left out), the public key, the
    manifest signed with the checkpoint key when you hold it, a README and a standalone verify.py.

    Exit 0: written; 2: not written (with the reason)."""
    from ledger.integrity.keys import KeyFileError, held_signing_key
    from ledger.integrity.store import CheckpointStoreError
    from ledger.integrity.store import open_checkpoint_store as open_checkpoints
    from projections.audit.recount import RecountError, build_package

    if (unit is None) == (county is None):
        raise fail("name a unit (argument) or a county (--county), not both or neither", OPERATIONAL)
    settings = settings_of(ctx)
    try:
        trusted = _trusted_keys(settings, public_key)
        store = open_checkpoints(settings, create=False)
        log = open_log(settings, read_only=True)
        try:
            result = build_package(
                log, out, unit=unit, county=county, election_id=election, checkpoint_store=store, trusted=trusted,
                require_proofs=not allow_unproven, rule_set=rule_set, log_name=settings.describe_log(), overwrite=force,
                signing_key=held_signing_key(settings.checkpoint_key, settings.data_dir),
            )
        finally:
            log.close()
            if store is not None:
                store.close()
    except (RecountError, KeyFileError, CheckpointStoreError, LogError, OSError) as exc:
        raise fail(str(exc), OPERATIONAL) from exc

    def human() -> None:
        n = len(result.events)
        proven = n - len(result.unproven)
        typer.echo(f"wrote {out}: {len(result.units)} unit(s), {n} events ({proven} with inclusion proofs), {len(result.files)} files")
        if result.checkpoint is not None:
            c = result.checkpoint.checkpoint
            typer.echo(f"proved against checkpoint {result.checkpoint.event_id} ({c.time.isoformat()}, key {c.key_id})")
        if result.unproven:
            typer.echo(f"{len(result.unproven)} event(s) without proof: newer than the latest checkpoint")
        typer.echo(f"verify with: python3 {out / 'verify.py'}")

    emit(result.to_json(), as_json, human)
