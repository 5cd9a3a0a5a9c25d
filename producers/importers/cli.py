"""``caucus import …``: importers as commands.

A person at a terminal gets a progress bar and a readable summary; a program gets one JSON document
(``--json``) and an exit code: 0 when everything usable was imported (what could not be mapped is
listed), 1 when the input as a whole is unusable and nothing was appended, 2 when ``--data`` is not a
directory or lacks a file the import reads (nothing is opened or created then).

No credential is needed: the importer writes only what the published releases say, with event ids
derived from them, and names itself in each record's ``caucus-writer`` header (see
``producers.direct_writes`` for the commands that do need an official). Files that are not the
published ones are imported under a writer that says so (``producers.importers.idp2020.published``).
It appends each batch in the
intake's turn and marks it, like every writer without an intake, so an intake beside it never decides
against a log the import has moved on, and waits for one batch at a time, not for the whole import.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ledger.cli_output import emit, fail, settings_of
from ledger.config import open_log
from ledger.integrity.writer_seals import sealer_for
from ledger.journal import Journal
from producers.direct_writes import intake_turn
from producers.importers.idp2020 import ELECTION_ID, ImportSummary, import_idp2020
from producers.importers.idp2020.published import PUBLISHED, UNPUBLISHED_WRITER, unpublished
from producers.importers.issues import Issue
from producers.importers.progress import progress_bar

__all__ = ["register", "import_app"]

import_app = typer.Typer(help="Import published results into the log.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``import`` command group to the ``caucus`` app."""
    app.add_typer(import_app, name="import")


@import_app.command("idp2020")
def idp2020(
    ctx: typer.Context,
    data: Path = typer.Option(..., "--data", help="Directory with the 2020 Iowa files (idp_results_*.csv, idp_apportionment.csv, iowa2020_precincts.csv, nyt_feed_*.csv)."),
    election_id: str = typer.Option(ELECTION_ID, "--election-id", help="Election id of the imported events."),
    recount_units: Optional[list[str]] = typer.Option(None, "--recount-unit", help="VAN id of a recounted unit (repeatable): its certified change is stage recount instead of recanvass."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Read and check everything, append nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Import the party's 2020 releases: the election, each unit's first report, and every change
    between releases as a correction. Re-running appends nothing new."""
    settings = settings_of(ctx)
    if not data.is_dir():
        what = "is a file, not a directory" if data.exists() else "does not exist" + (
            "" if data.is_absolute() else " (a relative path is read from the current directory)")
        raise fail(f"--data {data}: {what}; give the directory holding the 2020 Iowa files")
    missing = [name for name in PUBLISHED if not (data / name).is_file()]
    if missing:
        raise fail(f"--data {data}: {len(missing)} of the {len(PUBLISHED)} files the import reads are not there "
                   f"({', '.join(missing)}); give the directory holding the 2020 Iowa files. Nothing was opened or created")
    changed = unpublished(data)
    writer = (f"importer:idp2020 ({election_id})" if not changed else
              f"{UNPUBLISHED_WRITER} ({election_id}; not as published: {', '.join(changed)})")
    seal = None if dry_run else sealer_for(settings.checkpoint_key, settings.data_dir).seal  # see writer_seals
    journal = None if dry_run else Journal(open_log(settings), writer=writer, seal=seal)
    show_progress = not as_json and sys.stderr.isatty()
    try:
        with progress_bar(show_progress, "appending events") as progress:
            summary = import_idp2020(data, journal, election_id=election_id, log_name=settings.describe_log(),
                                     recount_units=frozenset(recount_units or ()), progress=progress,
                                     turn=lambda: intake_turn(settings))  # fmt: skip
    finally:
        if journal is not None:
            journal.close()
    summary.issues.extend(
        Issue("warning", name, "differs from the published file: the records imported from it are written as direct "
                               "writes, and `caucus audit` lists them (DIRECT_WRITE)")
        for name in changed
    )
    emit(summary.to_json(), as_json, lambda: _print_summary(summary))
    if not summary.ok:
        raise typer.Exit(1)


def _print_summary(s: ImportSummary) -> None:
    for issue in s.issues:
        typer.echo(str(issue), err=True)
    typer.echo(f"election:  {s.election_id}")
    typer.echo(f"log:       {'(dry run, nothing appended)' if s.dry_run else s.log}")
    typer.echo(f"units defined: {s.units_defined}")
    for stage in s.stages:
        corrected = ", ".join(f"{n} {k}" for k, n in sorted(stage.corrected.items())) or "none"
        defined = "election defined, " if stage.defined else ""
        typer.echo(f"release {stage.release}: {defined}{stage.units} units, {stage.reported} first reports, "
                   f"corrections: {corrected}, {stage.unchanged} unchanged "
                   f"({stage.total_rows} county-total rows skipped)")  # fmt: skip
    typer.echo("events: " + ", ".join(f"{t} {n}" for t, n in sorted(s.events.items())))
    if not s.dry_run:
        typer.echo(f"appended {s.appended} new, {s.already_present} already in the log")
    warnings = sum(1 for i in s.issues if i.severity != "info")
    if warnings:
        typer.echo(f"{warnings} problems listed above", err=True)
    if not s.ok:
        typer.echo("nothing appended: the input has errors", err=True)
