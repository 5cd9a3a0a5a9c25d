"""The ``caucus`` command.

One entry point for every user: chairs and operators (report, correct, toss), operators replaying
history (project, replay, tally), auditors (diff, audit, verify) and subscribers. Each package adds
its own commands through a ``register(app)`` function so this module stays a thin switchboard; the
options here only choose where the log and the store live.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer

from ledger.config import Settings, open_log
from ledger.log.port import LogError

__all__ = ["app", "main", "settings_of", "emit", "fail"]

app = typer.Typer(
    name="caucus",
    help=(
        "Caucus Ledger: an append-only record of every precinct report, correction and coin toss, "
        "and the delegate tallies computed from it.\n\n"
        "With no backend options everything is embedded in ./caucus-data (SQLite). "
        "Use --kafka HOST:PORT for a Kafka log and --database postgresql://... for a PostgreSQL store "
        "(or CAUCUS_KAFKA / CAUCUS_DATABASE)."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
log_app = typer.Typer(help="Inspect and write the event log directly.", no_args_is_help=True)
app.add_typer(log_app, name="log")


@app.callback()
def _global(
    ctx: typer.Context,
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Embedded data directory (env CAUCUS_DATA_DIR; default ./caucus-data)."),
    kafka: Optional[str] = typer.Option(None, "--kafka", help="Kafka bootstrap HOST:PORT for the log (env CAUCUS_KAFKA)."),
    topic: Optional[str] = typer.Option(None, "--topic", help="Event topic name (env CAUCUS_TOPIC; default caucus.events)."),
    database: Optional[str] = typer.Option(None, "--database", help="PostgreSQL URL for the projection store (env CAUCUS_DATABASE)."),
    partitions: Optional[int] = typer.Option(None, "--partitions", min=1, help="Partitions when a log is created (default 8)."),
) -> None:
    ctx.obj = Settings.from_env().with_overrides(
        data_dir=data_dir, kafka=kafka, topic=topic, database=database, partitions=partitions
    )


def settings_of(ctx: typer.Context) -> Settings:
    root = ctx.find_root()
    obj = root.obj
    if not isinstance(obj, Settings):
        obj = Settings.from_env()
        root.obj = obj
    return obj


def emit(data: Any, as_json: bool, human: Callable[[], None] | None = None) -> None:
    """Print for a program (one JSON document) or for a person."""
    if as_json or human is None:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        human()


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@log_app.command("info")
def log_info(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Where the log is, its partitions and how many records each holds."""
    settings = settings_of(ctx)
    log = open_log(settings)
    try:
        marks = log.high_watermarks()
    finally:
        log.close()
    data = {"log": settings.describe_log(), "partitions": len(marks), "high_watermarks": marks, "records": sum(marks.values())}

    def human() -> None:
        typer.echo(f"log:        {data['log']}")
        typer.echo(f"partitions: {data['partitions']}")
        typer.echo(f"records:    {data['records']}")
        for part, mark in sorted(marks.items()):
            typer.echo(f"  partition {part}: {mark}")

    emit(data, as_json, human)


@log_app.command("tail")
def log_tail(
    ctx: typer.Context,
    limit: int = typer.Option(20, "--limit", "-n", min=0, help="How many of the latest events to show (0: all)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events until interrupted."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
) -> None:
    """Show the newest events of the log, decoded."""
    from ledger.journal import Journal
    from ledger.render import event_to_json, event_summary

    settings = settings_of(ctx)
    journal = Journal(open_log(settings))
    try:
        marks = journal.log.high_watermarks()
        start: dict[int, int] = {}
        if limit:
            # The last `limit` across partitions: read the tail of each partition, then keep the
            # newest by log time. Partitions have no common order, so this is an approximation.
            start = {p: max(0, m - limit) for p, m in marks.items()}
        seen = sorted(journal.read(start), key=lambda le: (le.event.recorded_at, le.position))
        if limit:
            seen = seen[-limit:]
        for le in seen:
            typer.echo(json.dumps(event_to_json(le), sort_keys=True) if as_json else event_summary(le))
        if follow:
            position = dict(marks)
            try:
                for le in journal.follow(position):
                    typer.echo(json.dumps(event_to_json(le), sort_keys=True) if as_json else event_summary(le))
            except KeyboardInterrupt:
                pass
    finally:
        journal.close()


@log_app.command("append")
def log_append(
    ctx: typer.Context,
    source: Path = typer.Argument(..., help="A file of events as JSON lines (as `log tail --json` prints them), or - for stdin."),
    as_json: bool = typer.Option(False, "--json", help="Print positions as JSON."),
) -> None:
    """Append events given as JSON lines, unvalidated: for restoring or moving a log.

    Reports go through `caucus report` and friends, which validate; this writes what it is given
    (duplicates of event ids already in the log are dropped by the log itself)."""
    from ledger.journal import Journal
    from ledger.render import event_from_json

    from ledger.codec import CodecError

    try:
        text = sys.stdin.read() if str(source) == "-" else source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {source}: {exc}") from exc
    events = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            events.append(event_from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise fail(f"line {lineno}: not an event: {type(exc).__name__}: {exc}") from exc
    journal = Journal(open_log(settings_of(ctx)))
    try:
        positions = journal.append_batch(events)
    except CodecError as exc:  # e.g. a string no UTF-8 encoder can write: nothing was appended
        raise fail(f"not appended: {exc}") from exc
    finally:
        journal.close()
    out = [{"event_id": e.event_id, "type": e.type, "position": str(p)} for e, p in zip(events, positions)]
    emit(out, as_json, lambda: [typer.echo(f"{o['position']:>10}  {o['type']:<18} {o['event_id']}") for o in out])


def _register_plugins() -> None:
    """Each package contributes its commands; a package that is not there yet contributes none."""
    import importlib

    for module in (
        "producers.cli",
        "producers.importers.cli",
        "producers.simulator.cli",
        "projections.cli",
        "projections.replay_cli",
        "projections.feed_cli",
        "projections.audit.cli",
        "projections.audit.diff_cli",
        "projections.audit.audit_cli",
        "projections.demo",
    ):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        mod.register(app)


def main() -> None:
    _register_plugins()
    try:
        app()
    except LogError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
