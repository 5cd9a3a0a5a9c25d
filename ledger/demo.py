"""``caucus demo``: a simulated caucus night, end to end, on whatever backends are configured.

It exists so that a new user sees the whole ledger work with one command and nothing installed: the
simulator's precinct chairs report through the real intake (validation, refusals recorded, duplicates
dropped, coin tosses recorded), the projection runner replays the log into tallies exactly once, and
the auditor's tools (paper trail, §12 checks, signed checkpoint, verification) run over the result.
Each step is the same command a user would type, invoked in-process, so the demo cannot drift from
the real surface. Running it again with the same seed appends no result again (event ids and keys
follow the seed, so every accepted command comes back a duplicate); what it does append again is what
every run appends: each refused attempt (a fact of its own) and a new signed checkpoint.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer

from ledger.backends import backends_for
from ledger.cli import emit, settings_of
from ledger.cli_output import runnable_here

__all__ = ["register", "demo"]


def _run(ctx: typer.Context, name: str, *args: str) -> Any:
    """Run ``caucus NAME ARGS...`` in this process, parsed by the command's own options."""
    cmd = ctx.find_root().command.get_command(ctx, name)  # type: ignore[attr-defined]
    if cmd is None:
        raise typer.Exit(2)
    with cmd.make_context(name, list(args), parent=ctx) as sub:
        return cmd.invoke(sub)


def _heading(text: str) -> None:
    typer.secho(f"\n== {text}", bold=True)


def demo(
    ctx: typer.Context,
    seed: int = typer.Option(2020, "--seed", help="Same seed, same election: run again, it appends no result twice (its refused attempts and a checkpoint are recorded again)."),
    units: int = typer.Option(60, "--units", min=2, help="Reporting units to simulate."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON summary instead of the walk-through."),
) -> None:
    """Simulate a caucus night and walk through the ledger: report, project, tally, trail, audit, verify."""
    from producers.credentials import Credential
    from producers.intake import Intake
    from producers.simulator import SimConfig, command_stream, generate
    from producers.simulator.driver import IntakeTarget, drive

    settings = settings_of(ctx)
    quiet = as_json
    if not quiet:
        typer.echo(f"Caucus Ledger demo: log {settings.describe_log()}, store {backends_for(settings).describe_store()}")
        _heading(f"1. {units} precinct chairs report through the intake (seed {seed})")
    election = generate(seed, SimConfig(units=units, tie_share=0.12, correction_share=0.08, malformed_share=0.06, duplicate_share=0.05))
    commands = command_stream(election)
    intake = Intake.for_settings(settings).start()
    official = Credential("demo", "official", "demo-operator", None, "", "", datetime.now(UTC).isoformat(timespec="seconds"))
    try:
        report = drive(commands, IntakeTarget(intake, official))
    finally:
        intake.close()
    sent = report.to_json()
    if not quiet:
        typer.echo(f"sent {sent['sent']} commands: accepted {sent['accepted']}, refused {sent['refused']} "
                   f"(recorded as SubmissionRejected), duplicate {sent['duplicate']} (nothing appended)")
        if sent["accepted"] == 0 and sent["duplicate"]:
            typer.echo("the log already held this election (same seed): nothing new was appended; "
                       "every refused attempt is recorded again, as each attempt is a fact")
        elif sent["unexpected_count"]:
            typer.echo(f"{sent['unexpected_count']} receipts differed from what the simulator expected", err=True)
        _heading("2. The projection replays the log into tallies, exactly once")
    _run(ctx, "project", "--until-caught-up", *(("--quiet",) if quiet else ()))
    if not quiet:
        _heading("3. Statewide tally")
        _run(ctx, "tally", "--election", election.election_id)  # the log may hold other elections too
    tossed = sorted({c.unit_id for c in commands if c.kind == "toss" and c.unit_id})
    if tossed and not quiet:
        _heading(f"4. Paper trail of unit {tossed[0]}, where a coin toss or lots settled a seat")
        _run(ctx, "trail", tossed[0], "--election", election.election_id)
    if quiet:
        again = sent["accepted"] == 0 and bool(sent["duplicate"])  # its 'unexpected' are the duplicates of a rerun
        emit({"seed": seed, "units": units, "intake": sent, "log": settings.describe_log(), "tossed_units": tossed,
              "already_in_log": again}, True)
        return
    _heading("5. Auditor's checks (RULES.md §12) over every unit")
    try:
        _run(ctx, "audit", "--election", election.election_id)
    except typer.Exit:
        pass  # findings of severity error exit 1 by design; in a demo they are the point
    _heading("6. Sign a checkpoint of the log and verify it")
    _run(ctx, "checkpoint")
    _run(ctx, "verify")
    _run(ctx, "project", "--until-caught-up", "--quiet")  # the checkpoint's own record: the store is current again
    if settings.backend == "memory":
        typer.echo("\nThe memory backend keeps nothing once this process ends: run `caucus demo` without "
                   "CAUCUS_BACKEND=memory to keep a log and a store to explore (tally, trail, diff, audit).")
        return
    typer.echo(runnable_here(
        "\nNext: `caucus tally --county <name>`, `caucus trail <unit>`, `caucus diff live rules:idp-2016`, "
        f"all with `--election {election.election_id}` once the log holds another election; the real 2020 history in "
        "a log of its own: `caucus --data-dir iowa2020 import idp2020 --data ../shared/data/iowa2020`, then "
        "`caucus --data-dir iowa2020 project --until-caught-up` for its tallies."
    ))


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
