"""``caucus simulate …``: make an election from a seed and write it, print it, or send it.

* ``stream`` prints the command stream as JSON lines (what a load test replays);
* ``write`` appends the events the intake would record straight to the configured log (demos);
* ``send`` drives the stream into the intake (HTTP, or in-process over the configured log) at a target
  rate and reports receipts and latencies.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Optional

import typer

from ledger.cli_output import emit, fail, settings_of
from ledger.config import open_log
from ledger.journal import Journal
from producers.importers.progress import progress_bar
from producers.simulator.driver import HttpTarget, IntakeTarget, Target, drive
from producers.simulator.events import election_events
from producers.simulator.model import SimConfig, generate
from producers.simulator.stream import command_stream

__all__ = ["register", "simulate_app"]

simulate_app = typer.Typer(help="Simulate an election from a seed: stream it (as JSON lines), write it to the log, or send it to an intake.", no_args_is_help=True)

_SEED = typer.Option(1, "--seed", help="Same seed, same election.")
_UNITS = typer.Option(200, "--units", min=1, help="Reporting units (about 5 % satellites).")
_TIES = typer.Option(0.06, "--ties", min=0.0, max=1.0, help="Share of units built to need a coin toss.")
_CORRECTIONS = typer.Option(0.05, "--corrections", min=0.0, max=1.0, help="Share of units corrected days later.")
_MALFORMED = typer.Option(0.04, "--malformed", min=0.0, max=1.0, help="Share of units whose first report is malformed.")
_DUPLICATES = typer.Option(0.03, "--duplicates", min=0.0, max=1.0, help="Share of units that send their report twice.")


def register(app: typer.Typer) -> None:
    """Add the ``simulate`` command group to the ``caucus`` app."""
    app.add_typer(simulate_app, name="simulate")


def _config(units: int, ties: float, corrections: float, malformed: float, duplicates: float) -> SimConfig:
    return SimConfig(units=units, tie_share=ties, correction_share=corrections, malformed_share=malformed,
                     duplicate_share=duplicates)  # fmt: skip


@simulate_app.command("stream")
def stream_cmd(
    seed: int = _SEED, units: int = _UNITS, ties: float = _TIES, corrections: float = _CORRECTIONS,
    malformed: float = _MALFORMED, duplicates: float = _DUPLICATES,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write JSON lines here instead of stdout."),
) -> None:  # fmt: skip
    """Print the election's commands, one JSON object per line, in arrival order."""
    commands = command_stream(generate(seed, _config(units, ties, corrections, malformed, duplicates)))
    lines = "".join(json.dumps(c.to_json(), sort_keys=True) + "\n" for c in commands)
    if out is None:
        sys.stdout.write(lines)
    else:
        out.write_text(lines, encoding="utf-8")
    kinds = Counter(f"{c.kind}/{c.expect}" for c in commands)
    typer.echo(f"{len(commands)} commands: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())), err=True)


@simulate_app.command("write")
def write_cmd(
    ctx: typer.Context, seed: int = _SEED, units: int = _UNITS, ties: float = _TIES, corrections: float = _CORRECTIONS,
    malformed: float = _MALFORMED, duplicates: float = _DUPLICATES,
    token: Optional[str] = typer.Option(None, "--token", envvar="CAUCUS_TOKEN", show_default=False,
                                        help="An official's credential (env CAUCUS_TOKEN): writing without the intake needs one."),
    credentials: Optional[Path] = typer.Option(None, "--credentials", envvar="CAUCUS_CREDENTIALS",
                                               help="Credential store file (default: <data dir>/credentials.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:  # fmt: skip
    """Append the events the intake would have recorded to the configured log, without the intake.
    Needs an official's credential; each record names that official in its caucus-writer header.
    Event ids follow from the seed, so writing the same seed again appends nothing. Judged as `caucus
    log append` judges a file, its simulated times aside: if the log refuses one event (another
    simulation under the same ids, a toss for a tie its result does not have), nothing is appended."""
    from producers.direct_writes import append_new, intake_turn, official_writer

    settings = settings_of(ctx)
    writer = official_writer(settings, token, credentials, "write a simulated election to the log")
    events = election_events(generate(seed, _config(units, ties, corrections, malformed, duplicates)))
    journal = Journal(open_log(settings), writer=writer)
    try:
        before = sum(journal.log.high_watermarks().values())
        bar = progress_bar(not as_json and sys.stderr.isatty(), "appending events")
        with intake_turn(settings), bar as progress:  # an intake beside it reads these before deciding
            held = _judge(journal, events)
            for start in range(0, len(events), 500):
                append_new(journal, events[start : start + 500], held)
                if progress is not None:
                    progress(min(start + 500, len(events)), len(events))
        appended = sum(journal.log.high_watermarks().values()) - before
    finally:
        journal.close()
    types = dict(sorted(Counter(e.type for e in events).items()))
    data = {"election_id": f"sim-{seed}", "log": settings.describe_log(), "events": types,
            "appended": appended, "already_present": len(events) - appended}  # fmt: skip
    emit(data, as_json, lambda: typer.echo(
        f"sim-{seed}: {len(events)} events ({', '.join(f'{t} {n}' for t, n in types.items())}); "
        f"appended {appended} to {settings.describe_log()}"))  # fmt: skip


def _judge(journal: Journal, events: list[Any]) -> dict[str, Any]:
    """Refuse the whole write if the log refuses one of its events (``producers.direct_writes.refusals``,
    as ``caucus log append`` and the importer judge): skipping only the events whose ids the log holds
    for other content would write the rest over another election's results, tosses for ties included."""
    from producers.direct_writes import REFUSED, judge

    judged = judge(journal, events, datetime.now(UTC), check_times=False)
    found = judged.refused
    if found:
        shown = "; ".join(f"{events[i].type} {events[i].unit_id or events[i].envelope.election_id} ({events[i].event_id}): "
                          + ", ".join(f"{p.field}: {p.code}: {p.message}" for p in problems) for i, problems in found[:5])
        more = f"; and {len(found) - 5} more" if len(found) > 5 else ""
        raise fail(f"refused, nothing appended ({len(found)} of {len(events)} events): {shown}{more}. Another seed, or "
                   "another data directory, writes another simulation beside it", REFUSED, kind="refused")
    return judged.held  # where the log holds the events it has: not appended again (a Kafka log would double them)


@simulate_app.command("send")
def send_cmd(
    ctx: typer.Context, seed: int = _SEED, units: int = _UNITS, ties: float = _TIES, corrections: float = _CORRECTIONS,
    malformed: float = _MALFORMED, duplicates: float = _DUPLICATES,
    url: Optional[str] = typer.Option(None, "--url", help="Base URL of the HTTP intake (caucus serve intake); "
                                      "without it the commands go to an in-process intake over the configured log."),
    token: Optional[str] = typer.Option(None, "--token", help="An official's bearer token for --url (env CAUCUS_INTAKE_TOKEN)."),
    rate: Optional[float] = typer.Option(None, "--rate", min=0.1, help="Commands per second (default: as fast as possible)."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Requests in flight (a unit's own commands stay in order)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:  # fmt: skip
    """Send the election to the intake and report accepted/refused/duplicate counts and p50/p99
    latencies. Exits 1 when any receipt differs from what the simulator expected."""
    commands = command_stream(generate(seed, _config(units, ties, corrections, malformed, duplicates)))
    target, intake = _target(ctx, url, token, concurrency)
    try:
        with progress_bar(not as_json and sys.stderr.isatty(), "sending") as progress:
            report = drive(commands, target, rate=rate, concurrency=concurrency, progress=progress)
    finally:
        target.close()
        if intake is not None:
            intake.close()
    data = report.to_json()
    emit(data, as_json, lambda: _print_report(data))
    if data["unexpected_count"]:
        raise typer.Exit(1)


def _target(ctx: typer.Context, url: str | None, token: str | None, concurrency: int) -> tuple[Target, Any]:
    """HTTP when a URL is given; else the project's intake in this process, acting as an official
    (the operator already holds the log; corrections and tosses need an official's role)."""
    if url is not None:
        return HttpTarget(url, token or os.environ.get("CAUCUS_INTAKE_TOKEN") or settings_of(ctx).intake_token, pool=concurrency), None
    from producers.credentials import Credential
    from producers.intake import Intake

    intake = Intake.for_settings(settings_of(ctx)).start()
    sender = Credential("simulator", "official", "simulator", None, "", "", datetime.now(UTC).isoformat(timespec="seconds"))
    return IntakeTarget(intake, sender), intake


def _print_report(data: dict) -> None:
    typer.echo(f"sent {data['sent']} in {data['elapsed_s']} s ({data['throughput_per_s']}/s)")
    typer.echo(f"accepted {data['accepted']}, refused {data['refused']}, duplicate {data['duplicate']}, error {data['error']}")
    lat = data["latency_ms"]
    typer.echo(f"latency ms: p50 {lat['p50']}, p99 {lat['p99']}, max {lat['max']}")
    for item in data["unexpected"][:10]:
        typer.echo(f"  unexpected: #{item['seq']} {item['kind']} {item['unit_id']}: expected {item['expected']}, "
                   f"got {item['got']} {item['problems'] or item['detail']}", err=True)  # fmt: skip
    if data["unexpected_count"]:
        typer.echo(f"{data['unexpected_count']} receipts differ from what the simulator expected", err=True)
