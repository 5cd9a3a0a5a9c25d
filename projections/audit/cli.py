"""The auditors' commands. ``register(app)`` adds them to ``caucus``; each command group has its own
``_register_*`` function so new ones slot in without touching the others.

Tamper evidence (``ledger.integrity``):

- ``caucus checkpoint``: audit the log against its earlier checkpoints, then sign and record a new one.
- ``caucus verify``: recompute every partition's Merkle tree and check every checkpoint against it.
- ``caucus prove EVENT_ID``: an inclusion proof of one event against the latest checkpoint.
- ``caucus witness``: another party's witness, by directory or served by URL (``witness_cli``).

Exit status: 0 all is well, 1 tampering found (or a proof that does not verify), 2 the check could not
be done (log or store unreachable, no key, unknown event, nothing to prove against), 3 the log is lost
(gone while checkpoints signed over it are stored).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from ledger.cli_output import emit, fail, settings_of
from ledger.config import Settings, open_log
from ledger.log.port import EventLog, LogError
from projections.audit import witness_cli

if TYPE_CHECKING:
    from ledger.integrity.store import CheckpointStore

__all__ = ["register"]

OK, TAMPERED, OPERATIONAL = 0, 1, 2


def register(app: typer.Typer) -> None:
    _register_integrity(app)


def _register_integrity(app: typer.Typer) -> None:
    app.command("checkpoint")(checkpoint_command)
    app.command("verify")(verify_command)
    app.command("prove")(prove_command)
    witness_cli.register(app)  # witness [cosign], witness serve


# -- shared plumbing -----------------------------------------------------------------------------------


_PUBLIC_KEY_HELP = (
    "Public key to trust (PEM, or 64 hex digits); repeatable. Default: env CAUCUS_CHECKPOINT_PUBLIC_KEY "
    "(paths separated by ':'), else the key home's checkpoint-key.pub (CAUCUS_KEY_HOME, default ~/.config/caucus), "
    "else the data directory's (with a warning: whoever can write the data directory can replace it)."
)


TRUST_NOTE: list[str] = []
"""Why the keys ``trusted_keys`` chose by default deserve little trust, if they do: reports show it
(human: a ``trust:`` line; JSON: ``trust_warning``) rather than stderr, where only errors go."""


def trusted_keys(settings: Settings, given: list[Path] | None) -> list[Any]:
    """The keys to verify with: given, configured, else ``keys.default_trusted_paths``."""
    from ledger.integrity.keys import ENV_PUBLIC_KEY, default_trusted_paths, load_trusted_key

    TRUST_NOTE.clear()
    paths = list(given or [])
    configured = settings.checkpoint_public_key or os.environ.get(ENV_PUBLIC_KEY)
    if not paths and configured:
        paths = [Path(p) for p in configured.split(os.pathsep) if p]
    if not paths:
        paths, warning = default_trusted_paths(settings.data_dir)
        if warning:
            TRUST_NOTE.append(warning)
    return [load_trusted_key(p) for p in paths]


_trusted_keys = trusted_keys


@contextmanager
def operational() -> Iterator[None]:
    """Problems that stop a check from being done are exit 2, with the reason."""
    from ledger.integrity.keys import KeyFileError
    from ledger.integrity.proofs import ProofError
    from ledger.integrity.store import CheckpointStoreError
    from ledger.integrity.verify import NoTrustedKey

    try:
        yield
    except (LogError, CheckpointStoreError, KeyFileError, NoTrustedKey, ProofError) as exc:
        raise fail(str(exc), OPERATIONAL) from exc


@contextmanager
def log_for(settings: Settings, *, read_only: bool = False) -> Iterator[EventLog]:
    log = open_log(settings, read_only=read_only)
    try:
        yield log
    finally:
        log.close()


@contextmanager
def _signed_log(settings: Settings, store: CheckpointStore | None) -> Iterator[EventLog]:
    """The log to verify. One that is not there, while the checkpoint store holds checkpoints signed
    over a log here, is a lost log (exit 3): the history they vouch for is gone, which "nothing has been
    recorded yet" would hide."""
    from ledger.log.port import LogMissingError, LogVanishedError

    try:
        log = open_log(settings, read_only=True)
    except LogMissingError as exc:
        signed = [row.signed for row in store.checkpoints() if row.signed is not None] if store is not None else []
        if store is None or not signed:
            raise
        last = signed[-1].checkpoint
        raise LogVanishedError(
            f"the log {settings.describe_log()} is not there, but {store.describe()} holds {len(signed)} checkpoint(s) signed over a "
            f"log here, the last over {last.tree_size} record(s) at {last.time.isoformat()}: the log they vouch for "
            "is gone (lost, or the settings name another place). Restore it from a copy and verify it again."
        ) from exc
    try:
        yield log
    finally:
        log.close()


def _short(h: bytes) -> str:
    return h.hex()[:16] + "…"


# -- caucus checkpoint ---------------------------------------------------------------------------------


def checkpoint_command(
    ctx: typer.Context,
    key: Optional[Path] = typer.Option(
        None, "--key", help="Ed25519 private key (PEM, mode 0600). Default: env CAUCUS_CHECKPOINT_KEY, else "
        "checkpoint-key.pem in the key home (CAUCUS_KEY_HOME, default ~/.config/caucus), generated on first use; "
        "what it signed is kept beside it, and a log that no longer extends that is refused."
    ),
    public_key: Optional[list[Path]] = typer.Option(
        None, "--public-key", help="Other keys whose earlier checkpoints, or writer seals, to accept (after a key change; an intake or importer on another machine seals with its own key home's key); repeatable."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Sign a checkpoint of the log as it stands now and record it (in the log and the checkpoint store).

    The log is audited first; if it no longer matches an earlier checkpoint nothing is signed (exit 1).
    A record whose writer no seal vouches for (FORGED_WRITER) is signed over as what the log holds,
    and named in a warning."""
    from ledger.integrity.issue import RefusedToSign, RewrittenSinceSigned, issue_checkpoint
    from ledger.integrity.keys import other_public_key, publish_public_key, resolve_signing_key
    from ledger.integrity.signer_state import SignerState, SignerStateError, state_path_for
    from ledger.integrity.store import CheckpointStoreError, open_checkpoint_store

    settings = settings_of(ctx)
    with operational():
        # first: a mistyped --data-dir or --topic signs (and so makes) no log, key, or store of its own
        existing = open_checkpoint_store(settings, create=False)
        try:
            with _signed_log(settings, existing):
                pass
        finally:
            if existing is not None:
                existing.close()
        resolved = resolve_signing_key(key or settings.checkpoint_key, settings.data_dir)
        signing, key_path, created = resolved.key, resolved.path, resolved.created
        if resolved.warning:
            typer.echo(f"warning: {resolved.warning}", err=True)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        state = SignerState(state_path_for(key_path))
        others = [k for k in _trusted_keys(settings, public_key) if k.public_key != signing.public_key]
        store = open_checkpoint_store(settings, create=True)
        if store is None:  # create=True always opens one
            raise CheckpointStoreError("no checkpoint store")
        try:
            with log_for(settings) as log:
                try:
                    issued = issue_checkpoint(log, store, signing, scope=settings.topic, also_trusted=others,
                                              signer_state=state)
                except RefusedToSign as refused:
                    _print_report(settings, store.describe(), refused.report, as_json, 0.0, title="REFUSED TO SIGN")
                    other = other_public_key(signing, settings.data_dir)  # nothing is published for a refusal
                    if other:
                        typer.echo(f"note: {other}: if that key signed and sealed this log, sign with it (--key, "
                                   "CAUCUS_KEY_HOME), or trust it with --public-key", err=True)
                    raise typer.Exit(TAMPERED) from None
                except RewrittenSinceSigned as refused:
                    raise fail(f"REFUSED TO SIGN: {refused} (the signer's record: {state.path})", TAMPERED,
                               kind="tampering") from None
                except SignerStateError as exc:
                    raise fail(str(exc), OPERATIONAL) from None
                log_id = log.log_id or f"scope:{settings.topic}"
        finally:
            store.close()
    other_key = publish_public_key(signing, settings.data_dir)  # for auditors; never trusted over a pinned key
    if other_key:
        typer.echo(f"warning: {other_key}", err=True)
    # The earlier checkpoints as the audit before signing read them: verified, with the log's column roots.
    feed = _publish_on_feed(settings, [*issued.report.checkpoints, issued.signed], log_id)
    s = issued.signed
    c = s.checkpoint
    data = {
        "event_id": s.event_id,
        "position": str(s.position),
        "time": c.time.isoformat(),
        "scope": c.scope,
        "tree_size": c.tree_size,
        "root_hash": c.root_hash.hex(),
        "partition_sizes": list(c.partition_sizes),
        "partition_roots": [r.hex() for r in c.partition_roots],
        "key_id": c.key_id,
        "public_key": s.public_key.hex(),
        "signature": s.signature.hex(),
        "key_created": created,
        "feed": {"published": feed.published, "feed": feed.feed, "error": feed.error},
        "forged_writers": [f.to_json() for f in issued.report.findings],
    }
    for f in issued.report.findings[:20]:  # signed as what the log holds: verify and audit name them every time
        typer.echo(f"warning: {f.message}", err=True)
    if len(issued.report.findings) > 20:
        typer.echo(f"warning: and {len(issued.report.findings) - 20} more record(s) whose writer no seal vouches for", err=True)

    def human() -> None:
        if created:
            typer.echo(f"generated signing key {c.key_id} in {key_path.parent} (share checkpoint-key.pub with auditors)")
        typer.echo(f"checkpoint {s.event_id} recorded at {s.position}")
        typer.echo(f"  covers {c.tree_size} records in {c.partitions} partitions: {', '.join(map(str, c.partition_sizes))}")
        typer.echo(f"  root   {c.root_hash.hex()}")
        typer.echo(f"  key    {c.key_id}   time {c.time.isoformat()}")
        if feed.error is None:
            typer.echo(f"  published on the results feed {feed.feed} ({feed.published} checkpoint(s))")

    emit(data, as_json, human)


def _publish_on_feed(settings: Settings, known: list[Any], log_id: str) -> Any:
    """Every checkpoint the feed lacks goes out on it; a feed that is away costs a warning (the
    checkpoint is in the log and its store already, and the next run publishes what was missed)."""
    from projections.feed_checkpoints import publish_on_feed

    outcome = publish_on_feed(settings, known, log_id)
    if outcome.error is not None:
        typer.echo(f"warning: the checkpoint was not published on the results feed {outcome.feed}: {outcome.error} "
                   "(the next `caucus checkpoint` publishes it)", err=True)
    return outcome


# -- caucus verify -------------------------------------------------------------------------------------


def verify_command(
    ctx: typer.Context,
    public_key: Optional[list[Path]] = typer.Option(None, "--public-key", help=_PUBLIC_KEY_HELP),
    require_checkpoint: bool = typer.Option(
        False, "--require-checkpoint",
        help="Fail (exit 1) unless at least one signed checkpoint verifies. A log copy whose checkpoint events "
             "were cut away, checked without the checkpoint store, otherwise looks like a log never checkpointed."),
    against: Optional[list[str]] = typer.Option(
        None, "--against", metavar="DIR|URL", help="A witness: its directory (`caucus witness`) or the URL of "
        "`caucus witness serve`. The log must also extend the last checkpoint that witness cosigned, and be the "
        "log it cosigned. Repeatable."),
    witness_key: Optional[list[Path]] = typer.Option(
        None, "--witness-key", metavar="PATH", help="A witness's public key (its `witness-key.pub`), obtained from "
        "the witness itself, not from the operator. With it, every --against witness must answer with one of these "
        "keys; otherwise a witness at the given place is trusted with the key it offers. Repeatable."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Recompute the log's Merkle trees and check every signed checkpoint against them, and every
    writer seal (a record claiming the intake or the importer that no trusted seal vouches for is
    FORGED_WRITER).

    Reports the first bad position (PARTITION:OFFSET) and what is wrong there. Exit 0: intact;
    1: tampering found (or, with --require-checkpoint, no checkpoint verified); 2: could not check;
    3: the log is gone while checkpoints signed over it are stored (lost, or the settings name another place)."""
    from ledger.integrity.keys import load_trusted_key
    from ledger.integrity.store import open_checkpoint_store
    from ledger.integrity.verify import IntegrityFinding, verify_log

    settings = settings_of(ctx)
    with operational():
        trusted = _trusted_keys(settings, public_key)
        pinned = [load_trusted_key(p) for p in witness_key or []]
        store = open_checkpoint_store(settings, create=False)
        try:
            began = time.perf_counter()
            with _signed_log(settings, store) as log:
                scan, report = verify_log(log, store, trusted)
                log_id = log.log_id
            witnesses = []
            for target in against or []:
                problems = list(witness_cli.witness_problems(target, log_id, scan, pinned))
                witnesses.append({"witness": target, "ok": not problems, "problems": problems})
                for problem in problems:
                    report.findings.append(IntegrityFinding("witness", f"{target}: {problem}"))
            elapsed = time.perf_counter() - began
            store_name = store.describe() if store is not None else "(none)"
        finally:
            if store is not None:
                store.close()
    _print_report(settings, store_name, report, as_json, elapsed, witnesses=witnesses)
    if not report.ok:
        raise typer.Exit(TAMPERED)
    if require_checkpoint and report.latest is None:
        typer.echo("FAILED: no signed checkpoint verified, and --require-checkpoint was given", err=True)
        raise typer.Exit(TAMPERED)


def _print_report(settings: Settings, store_name: str, report: Any, as_json: bool, elapsed: float,
                  title: str = "TAMPERING FOUND", witnesses: list[dict[str, Any]] | None = None) -> None:
    data = report.to_json()
    data.update({"log": settings.describe_log(), "store": store_name, "seconds": round(elapsed, 3),
                 "trust_warning": TRUST_NOTE[0] if TRUST_NOTE else None})
    if witnesses is not None:
        data["witnesses"] = witnesses

    def human() -> None:
        typer.echo(f"log:         {data['log']} ({report.partitions} partitions, {report.records} records)")
        if TRUST_NOTE:
            typer.echo(f"trust:       {TRUST_NOTE[0]}")
        typer.echo(f"store:       {store_name}")
        latest = report.latest
        if latest is None:
            typer.echo("checkpoints: none verified (without a signed checkpoint there is nothing to hold the log to)")
        else:
            c = latest.checkpoint
            typer.echo(
                f"checkpoints: {len(report.checkpoints)} with a signature that verifies"
                f"{'' if report.ok else ' (the records do not all match them: see below)'}; latest {latest.event_id} at {latest.position} "
                f"({c.time.isoformat()}, {c.tree_size} records, root {_short(c.root_hash)}, key {c.key_id})"
            )
        waiting = data["records_not_yet_checkpointed"]
        own = " (the latest checkpoint's own record among them: it is appended after the records it signs)"
        typer.echo(f"not yet checkpointed: {waiting} record(s)" + (own if latest is not None and waiting else ""))
        for w in witnesses or []:
            typer.echo(f"witness:     {w['witness']}: " + ("this log extends the last checkpoint it cosigned" if w["ok"]
                                                            else f"DISAGREES ({len(w['problems'])} problem(s), below)"))
        if report.ok and latest is None:  # vacuously true: say what it does not cover
            typer.echo(f"NOTHING TO VERIFY YET: no checkpoint is signed over this log, so nothing holds it to what it "
                       f"held; `caucus checkpoint` signs one (--require-checkpoint makes this a failure) ({elapsed:.2f} s)")
            return
        if report.ok:
            typer.echo(f"OK: every checkpointed record matches its signed checkpoint ({elapsed:.2f} s)")
            return
        first = report.first_bad
        typer.echo(f"{title}: {len(report.findings)} finding(s); first bad position {first if first else '-'}")
        for f in report.findings:
            typer.echo(f"  {str(f.position) if f.position else '-':>9}  {f.kind:<20} {f.message}")

    emit(data, as_json, human)


# -- caucus prove --------------------------------------------------------------------------------------


def prove_command(
    ctx: typer.Context,
    event_id: str = typer.Argument(..., help="The event to prove: its event id, or its position P:O (`caucus trail UNIT` shows both)."),
    public_key: Optional[list[Path]] = typer.Option(None, "--public-key", help=_PUBLIC_KEY_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Prove that an event is in the log covered by the latest signed checkpoint, and verify the proof.

    Prints the leaf index, the tree size, the audit path (hex), the root, the signature and the public
    key. Exit 0: the proof verifies; 1: it does not; 2: no proof could be made."""
    from ledger.integrity.proofs import check_proof, prove_event
    from ledger.integrity.scan import scan_log
    from ledger.integrity.store import open_checkpoint_store
    from ledger.integrity.verify import NoTrustedKey, trusted_checkpoints

    settings = settings_of(ctx)
    with operational():
        trusted = _trusted_keys(settings, public_key)
        if not trusted:
            raise NoTrustedKey("no public key to check the checkpoint's signature with: give --public-key PATH")
        store = open_checkpoint_store(settings, create=False)
        try:
            with log_for(settings, read_only=True) as log:
                scan = scan_log(log)
            rows = store.checkpoints() if store is not None else []
        finally:
            if store is not None:
                store.close()
        proof = prove_event(scan, event_id, trusted_checkpoints(scan, rows, trusted))
    problems = check_proof(proof, trusted)
    data = proof.to_json()
    data["verified"] = not problems
    data["problems"] = problems
    data["trust_warning"] = TRUST_NOTE[0] if TRUST_NOTE else None

    def human() -> None:
        c = proof.signed.checkpoint
        if TRUST_NOTE:
            typer.echo(f"trust       {TRUST_NOTE[0]}")
        typer.echo(f"event       {proof.event_id} ({proof.event_type}) at {proof.position}")
        typer.echo(f"leaf        index {proof.leaf_index} of {proof.tree_size} in partition {proof.position.partition}; hash {proof.leaf_hash.hex()}")
        typer.echo("audit path")
        for h in proof.audit_path:
            typer.echo(f"  {h.hex()}")
        typer.echo(f"partition root {proof.partition_root.hex()}")
        typer.echo(f"head path   {' '.join(h.hex() for h in proof.head_path) or '(single partition)'}")
        typer.echo(f"checkpoint  {proof.signed.event_id} at {proof.signed.position} ({c.time.isoformat()})")
        typer.echo(f"  root      {c.root_hash.hex()} ({c.tree_size} records)")
        typer.echo(f"  signature {proof.signed.signature.hex()}")
        typer.echo(f"  key       {proof.signed.public_key.hex()} (id {c.key_id})")
        if problems:
            typer.echo("NOT VERIFIED:")
            for p in problems:
                typer.echo(f"  {p}")
        else:
            typer.echo("VERIFIED: the event is in the log the signed checkpoint covers")

    emit(data, as_json, human)
    if problems:
        raise typer.Exit(TAMPERED)
