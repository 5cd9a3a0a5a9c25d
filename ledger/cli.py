"""The ``caucus`` command.

One entry point for every user: chairs and operators (report, correct, toss), operators replaying
history (project, replay, tally), auditors (diff, audit, verify) and subscribers. Each package adds
its own commands through a ``register(app)`` function so this module stays a thin switchboard; the
options here only choose where the log and the store live.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

import typer
from typer._click import (
    exceptions as click_errors,  # typer carries its own copy of click
)
from typer._click.core import Command, Context
from typer.core import TyperOption

from ledger.broken_pipe import PIPE_CLOSED, StdoutPipe
from ledger.cli_args import Terminated, hoist_wide, name_the_place_of_a_global_option, terminate_as_interrupt
from ledger.cli_output import (COMMAND_NAMES_KEY, LOADED_KEY, JsonOption, emit, fail, loaded_settings, print_error, set_args,
                               set_wide, settings_of)
from ledger.config import open_log
from ledger.log.port import LogError, LogLostError, LogReplacedError

__all__ = ["app", "main", "command", "settings_of", "emit", "fail", "JsonOption", "loaded_settings"]

log = logging.getLogger(__name__)

app = typer.Typer(
    name="caucus",
    help=(
        "Caucus Ledger: an append-only record of every precinct report, correction and coin toss, "
        "and the delegate tallies computed from it.\n\n"
        "With no backend options everything is embedded in ./caucus-data (SQLite). "
        "Use --kafka HOST:PORT for a Kafka log and --database postgresql://... for a PostgreSQL store "
        "(or CAUCUS_KAFKA / CAUCUS_DATABASE, or caucus.toml; see `caucus config show`).\n\n"
        "Exit codes: 0 done, 1 refused or differences found (diff, an audit's error, verify's tampering), 2 an "
        "operational error (bad arguments or configuration, a backend unreachable, something missing), 3 the log was "
        "lost, rewound or replaced by another (a projection built from another log), 141 the output's reader went "
        'away. Under --json an error is printed as {"error": {...}} on stderr.'
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
log_app = typer.Typer(help="Inspect and write the event log directly.", no_args_is_help=True)
app.add_typer(log_app, name="log")





def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"caucus {version('caucus-ledger')}")
        except PackageNotFoundError:
            typer.echo("caucus (version unknown: not installed as a package)")
        raise typer.Exit(0)


@app.callback()
def _global(
    ctx: typer.Context,
    config: Optional[Path] = typer.Option(None, "--config", help="Configuration file (TOML; env CAUCUS_CONFIG; default ./caucus.toml if present)."),
    data_dir: Optional[str] = typer.Option(None, "--data-dir", help="Embedded data directory (env CAUCUS_DATA_DIR; default ./caucus-data)."),
    kafka: Optional[str] = typer.Option(None, "--kafka", help="Kafka bootstrap HOST:PORT[,HOST:PORT] for the log (env CAUCUS_KAFKA)."),
    topic: Optional[str] = typer.Option(None, "--topic", help="Event topic name (env CAUCUS_TOPIC; default caucus.events)."),
    database: Optional[str] = typer.Option(None, "--database", help="PostgreSQL URL for the projection store (env CAUCUS_DATABASE)."),
    partitions: Optional[int] = typer.Option(None, "--partitions", help="Partitions when a log is created (env CAUCUS_PARTITIONS; default 8). An existing embedded log keeps its own count; a Kafka topic needs the count it was made with."),
    log_level: Optional[str] = typer.Option(None, "--log-level", help="Diagnostics on stderr from this level: DEBUG, INFO, WARNING (default), ERROR."),
    log_format: Optional[str] = typer.Option(None, "--log-format", help="Diagnostics as text (default) or json lines."),
    wide: bool = typer.Option(False, "--wide", help="Tables as wide as their content: no wrapping (may be given anywhere on the line)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    from ledger.files import set_file_mode
    from ledger.observability import configure_logging
    from ledger.settings import SettingsError, load_settings

    set_wide(wide)
    if data_dir is not None and not data_dir.strip():  # a Path of "" is ".": an unset variable must not mean here
        raise fail("--data-dir is empty: give a directory (`.` for this one)", kind="usage")
    flags = {"data_dir": Path(data_dir) if data_dir is not None else None, "kafka": kafka, "topic": topic, "database": database, "partitions": partitions,
             "log_level": log_level, "log_format": log_format}
    try:
        loaded = load_settings(flags, config=config)
    except SettingsError as exc:
        raise fail(str(exc), kind="configuration") from None
    configure_logging(loaded.model.log_level, loaded.model.log_format)
    # Warned once logging is set up, so the warning takes the configured format and level.
    for name in loaded.unknown_variables:
        log.warning("%s names no setting and is ignored (`caucus config show` lists them)", name)
    set_file_mode(loaded.settings.file_mode)
    ctx.meta[LOADED_KEY] = loaded
    from ledger.commands import COMMANDS  # every command's name, for hints (``cli_output.runnable_here``)
    ctx.meta[COMMAND_NAMES_KEY] = frozenset(name for _, names in COMMANDS for name in names)
    ctx.obj = loaded.settings
    log.debug("settings from %s", loaded.config_file or "environment and defaults")


@log_app.command("info")
def log_info(ctx: typer.Context, as_json: bool = JsonOption) -> None:
    """Where the log is, its id, its partitions and how many records each holds."""
    settings = settings_of(ctx)
    log = open_log(settings, read_only=True)
    try:
        marks = log.high_watermarks()
        log_id = log.log_id
    finally:
        log.close()
    data = {"log": settings.describe_log(), "log_id": log_id, "partitions": len(marks), "high_watermarks": marks,
            "records": sum(marks.values())}

    def human() -> None:
        typer.echo(f"log:        {data['log']}")
        typer.echo(f"log id:     {log_id or '(none yet: written when the log is next opened for writing)'}")
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
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line (errors: {\"error\": {...}})."),
) -> None:
    """Show the newest events of the log, decoded."""
    from ledger.journal import Journal

    settings = settings_of(ctx)
    journal = Journal(open_log(settings, read_only=True))
    try:
        marks = journal.log.high_watermarks()
        start: dict[int, int] = {}
        if limit:
            # The last `limit` across partitions: read the tail of each partition, then keep the
            # newest by log time. Partitions have no common order, so this is an approximation.
            start = {p: max(0, m - limit) for p, m in marks.items()}
        seen = _log_order(journal.read(start))
        if limit:
            seen = seen[-limit:]
        for le in seen:
            typer.echo(_tail_line(le, as_json))
        if follow:
            position = dict(marks)
            try:
                for le in journal.follow(position):
                    typer.echo(_tail_line(le, as_json))
            except KeyboardInterrupt:
                pass
    finally:
        journal.close()


def _log_order(events: Iterable[Any]) -> list[Any]:
    """The events merged by ``recorded_at`` across partitions, each partition kept in its own order.

    Why not a plain sort by time: a record may be dated up to a minute before one appended ahead of
    it (a direct write's tolerance, clocks of several intakes), and a unit's events all sit in one
    partition, in the order the intake judged them. Sorted by time, a correction dated before the
    result it corrects came first, and a restore of the output refused it."""
    import heapq

    parts: dict[int, list[Any]] = {}
    for le in events:
        parts.setdefault(le.position.partition, []).append(le)
    return list(heapq.merge(*(parts[p] for p in sorted(parts)), key=lambda le: le.event.recorded_at))


def _tail_line(le: Any, as_json: bool) -> str:
    """One event for ``log tail``: its JSON (with the record's headers, which ``log append`` ignores),
    or its summary, naming who wrote it when that was not the intake, the importer or the feed."""
    from ledger.record_headers import WRITER, header_map
    from ledger.render import event_summary, event_to_json

    headers = header_map(le.headers)
    if as_json:
        doc = event_to_json(le)
        if headers:
            doc["record_headers"] = headers
        return json.dumps(doc, sort_keys=True)
    writer = headers.get(WRITER, "")
    direct = writer.startswith(("official:", "chair:"))
    return event_summary(le) + (f"  [written directly by {writer}]" if direct else "")


@log_app.command("append")
def log_append(
    ctx: typer.Context,
    source: Path = typer.Argument(..., help="A file of events as JSON lines (as `log tail --json` prints them), or - for stdin."),
    token: Optional[str] = typer.Option(None, "--token", envvar="CAUCUS_TOKEN", show_default=False,
                                        help="An official's credential (env CAUCUS_TOKEN): direct writes need one."),
    credentials: Optional[Path] = typer.Option(None, "--credentials", envvar="CAUCUS_CREDENTIALS",
                                               help="Credential store file (default: <data dir>/credentials.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print positions as JSON."),
) -> None:
    """Append events given as JSON lines: for restoring or moving a log. Needs an official.

    Reports go through `caucus report` and friends; this writes the events as given (an event already
    in the log is not written again), but refuses the whole file if one event is what the intake would
    refuse of the log as it stands (a second result for a unit, a negative or fractional count, an
    unknown unit or candidate, a toss for no tie, a result that breaks a caucus rule, ...; a published
    record on the import channel keeps its rule findings, as history holds them, and the audit reports
    them), redefines what an opened, reported or tossed-for unit is counted under (its D, county, SDE ratio, a
    candidate its result names; a published amendment may re-weight satellites), certifies an
    election the log does not define, carries a checkpoint not signed by a key this ledger trusts or
    that does not state this log's records, copies a command the log holds under another event id,
    reuses an event id the log holds for other content, has a field its type does not have (it would be left out), or has a recorded_at more than a minute before
    the log's newest record, or after now. Each record names the official who appended it in its `caucus-writer` header."""
    from ledger.journal import Journal
    from ledger.render import event_as_given

    from producers.direct_writes import intake_turn, official_writer

    from ledger.codec import CodecError

    settings = settings_of(ctx)
    writer = official_writer(settings, token, credentials, "append events directly to the log")
    try:
        text = sys.stdin.read() if str(source) == "-" else source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {source}: {exc}") from exc
    events, lines, docs = [], [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            event = event_as_given(doc)
        except KeyError as exc:
            raise fail(f"line {lineno}: not an event: it has no field {exc.args[0]!r}") from exc
        except (ValueError, TypeError, AttributeError, RecursionError, ArithmeticError) as exc:
            raise fail(f"line {lineno}: not an event: {_unreadable_field(line)}{type(exc).__name__}: {exc}") from exc
        for name in ("occurred_at", "recorded_at"):
            if getattr(event.envelope, name).utcoffset() is None:
                raise fail(f"line {lineno}: not an event: {name} {doc.get(name)!r} has no UTC offset")
        events.append(event)
        lines.append(lineno)
        docs.append(line)  # its text, parsed again when judged: a parsed line weighs several times its text
    journal = Journal(open_log(settings), writer=writer)
    try:
        with intake_turn(settings):  # judged and appended while no intake beside it decides
            before = journal.log.high_watermarks()
            positions = _judged_append(journal, events, lines, docs, _checkpoint_keys(settings, events))
    except CodecError as exc:  # e.g. a string no UTF-8 encoder can write: nothing was appended
        raise fail(f"not appended: {exc}") from exc
    finally:
        journal.close()
    seen: set[Any] = set()  # a line the log held already (or an earlier line of the file) keeps its position
    out = []
    for e, p in zip(events, positions):
        out.append({"event_id": e.event_id, "type": e.type, "position": str(p),
                    "appended": p.offset >= before.get(p.partition, 0) and p not in seen})
        seen.add(p)

    def human() -> None:
        for o in out:
            typer.echo(f"{o['position']:>10}  {o['type']:<18} {o['event_id']}{'' if o['appended'] else '  (already in the log)'}")
        fresh = sum(1 for o in out if o["appended"])
        typer.echo(f"{fresh} appended, {len(out) - fresh} already in the log")

    emit(out, as_json, human)


def _writable(codec: Any, events: list[Any], lines: list[int]) -> None:
    """Every event encodes and reads back, or nothing is appended: an instant past year 9999 in UTC was
    once written and made the log unreadable."""
    from ledger.codec import CodecError

    for lineno, event in zip(lines, events):
        try:
            codec.decode(codec.encode(event))
        except CodecError as exc:
            raise fail(f"not appended: line {lineno}: {exc}") from exc
        except (OverflowError, ValueError, TypeError) as exc:  # e.g. a size beyond Avro's long
            raise fail(f"not appended: line {lineno}: not an event this ledger can write: {type(exc).__name__}: {exc}") from exc


def _unreadable_field(line: str) -> str:
    """Which envelope field a line that did not parse got wrong, when it is one ("" otherwise)."""
    from datetime import datetime

    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return "not JSON; "
    if not isinstance(doc, dict):
        return "a line is one JSON object; "
    if not isinstance(doc.get("payload"), dict):
        return "field 'payload' is not an object; "
    for name in ("occurred_at", "recorded_at"):
        try:
            datetime.fromisoformat(str(doc.get(name)))
        except ValueError:
            return f"field {name!r} is not an ISO 8601 time; "
    return ""


def _judged_append(journal: Any, events: list[Any], lines: list[int], docs: list[Any], trusted: Any = None) -> list[Any]:
    """``caucus log append``'s check and write: the whole file refused if one event may not be written."""
    from datetime import UTC, datetime

    from producers.direct_writes import REFUSED, append_new, judge

    judged = judge(journal, events, datetime.now(UTC), docs, trusted)
    refused = judged.refused
    if refused:
        more = f"; and {len(refused) - 10} more lines" if len(refused) > 10 else ""
        raise fail(f"refused, nothing appended ({len(refused)} of {len(events)} lines): " + "; ".join(
            f"line {lines[i]} ({events[i].type} {events[i].event_id}): "
            + ", ".join(f"{p.field}: {p.code}: {p.message}" for p in problems) for i, problems in refused[:10]
        ) + more, REFUSED, kind="refused")
    _writable(journal.codec, events, lines)  # after judging: a count too large for any schema is TOO_LARGE above
    return append_new(journal, events, judged.held)  # what the log holds is not written again (a Kafka log would)


def _checkpoint_keys(settings: Any, events: list[Any]) -> Any:
    """The keys ``caucus verify`` trusts by default, when the file holds a checkpoint (None otherwise)."""
    from ledger.events import CheckpointSigned
    from ledger.integrity.keys import KeyFileError
    from projections.audit.cli import trusted_keys

    if not any(isinstance(e.payload, CheckpointSigned) for e in events):
        return None
    try:
        return trusted_keys(settings, None)
    except (KeyFileError, OSError) as exc:
        raise fail(f"cannot read the checkpoint keys to judge the file's checkpoints: {exc}") from exc


def _register_commands(args: list[str] | None = None) -> None:
    """The commands of the packages (:mod:`ledger.commands` names them): the one ``args`` name, or all.
    Imported here, not at the top: those modules import this one for ``app``, ``emit`` and ``fail``."""
    from ledger.commands import register_all, register_for

    if args is None:
        register_all(app)
        return
    name = _command_word(args)
    if name == "log" or (name is None and "--version" in args and "--help" not in args):
        return  # this module's own
    register_for(app, name)


def _command_word(args: list[str]) -> str | None:
    """The command a command line names: its first argument that is neither a global option nor the
    value of one (``--data-dir log`` names no command)."""
    valued = {opt for param in typer.main.get_command(app).params if isinstance(param, TyperOption) and not param.is_flag
              for opt in param.opts}
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--":
            return None
        elif arg.startswith("-"):
            skip = arg in valued
        else:
            return arg
    return None


def _tidy_help(command: Command) -> None:
    """Flags take no value, so their help shows no type (the help formatter would print ``<bool>``); a
    command's text flows as paragraphs (the formatter keeps a docstring's line breaks, so lines written
    for the source broke again at the terminal's width, every other line a stub)."""
    helper = command.get_help_option(Context(command))  # made once and cached by the command
    for param in [*command.params, *([helper] if helper is not None else [])]:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""
    if command.help:
        command.help = _flowed(command.help)
    for sub in getattr(command, "commands", {}).values():
        _tidy_help(sub)


def _flowed(text: str) -> str:
    """Each paragraph on one line, except one laid out by hand (indented lines, lists, or click's
    no-rewrap mark, a backspace, at its start)."""
    out = []
    for paragraph in text.split("\n\n"):
        lines = paragraph.splitlines()
        laid_out = paragraph.startswith("\b") or any(line.startswith((" ", "-", "*", "|")) for line in lines[1:])
        out.append(paragraph if laid_out else " ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def _operational_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean "could not be done", each with a message for a person: exit 2, no traceback."""
    import sqlite3

    from ledger.codec import CodecError
    from ledger.settings import SettingsError

    found: list[type[BaseException]] = [LogError, SettingsError, CodecError, sqlite3.Error, OSError]
    for module, name in (("projections.stores.port", "StoreError"), ("producers.credentials", "CredentialError"),
                         ("ledger.integrity.store", "StoreError"), ("producers.spool", "SpoolError"),
                         ("ledger.integrity.keys", "KeyFileError")):
        try:
            found.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def command(args: list[str] | None = None) -> Command:
    """The ``caucus`` command tree: with ``args``, the commands they name (all when they name none);
    without, every package's commands (tests walk it)."""
    _register_commands(args)
    built = typer.main.get_command(app)
    _tidy_help(built)
    return built


def main(argv: list[str] | None = None) -> None:
    """Run ``caucus``: the README's contract (exit codes, JSON errors, no traceback for a user's error).
    The command line is known to the error printer while it runs, and only then: a later command in the
    same process (a test, an embedding program) is not answered in JSON for this one's ``--json``."""
    args = hoist_wide(list(sys.argv[1:] if argv is None else argv))
    try:
        with terminate_as_interrupt():
            _run(args)
    finally:
        set_args(None)


def _run(args: list[str]) -> None:
    command_ = command(args)
    set_args(args)
    as_json = "--json" in args
    stdout = StdoutPipe()
    try:
        code = command_.main(args=args, prog_name="caucus", standalone_mode=False)
    except SystemExit as exc:  # the libraries answer a reader gone (`| head`) with 1, the README's "refused"
        if exc.code == 1 and stdout.reader_gone():
            sys.exit(PIPE_CLOSED)
        raise
    except typer.Abort:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt as exc:
        typer.echo("terminated" if isinstance(exc, Terminated) else "interrupted", err=True)
        sys.exit(143 if isinstance(exc, Terminated) else 130)
    except click_errors.UsageError as exc:
        name_the_place_of_a_global_option(exc, command_)
        if isinstance(exc, getattr(click_errors, "NoArgsIsHelpError", ())) and not as_json:  # no command: the help
            from typer import rich_utils

            rich_utils.rich_format_error(exc)
            sys.exit(2)
        where = exc.ctx.command_path if exc.ctx is not None else None
        hint = "" if where is None else f" (command: {where})" if as_json else f" (`{where} --help` explains each option)"
        print_error(exc.format_message() + hint, 2, as_json=as_json, kind="usage")
        sys.exit(2)
    except click_errors.ClickException as exc:
        print_error(exc.format_message(), exc.exit_code, as_json=as_json, kind="usage")
        sys.exit(exc.exit_code)
    except (LogLostError, LogReplacedError) as exc:  # whatever command met it: README's exit 3, not an operational 2
        log.debug("log lost", exc_info=True)
        print_error(_describe(exc), 3, as_json=as_json, kind="LogLostError" if isinstance(exc, LogLostError) else "LogReplacedError")
        sys.exit(3)
    except _operational_errors() as exc:
        log.debug("operational error", exc_info=True)
        print_error(_describe(exc), 2, as_json=as_json, kind=type(exc).__name__)
        sys.exit(2)
    except Exception as exc:  # noqa: BLE001 -- a bug: say so in one line, the traceback goes to the log
        log.debug("internal error", exc_info=True)
        print_error(f"internal error: {type(exc).__name__}: {exc} (a bug in caucus; run with --log-level DEBUG "
                    "for the traceback and report it)", 2, as_json=as_json, kind="internal")
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, PermissionError) and exc.filename:
        return f"permission denied: {exc.filename}"
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc) or type(exc).__name__
