"""``caucus witness``: be a witness of someone else's log, in a directory or as a service by URL.

- ``caucus witness [cosign] DIR|URL --public-key KEY``: check the log's latest signed checkpoint and
  have the witness cosign it (a directory: checked against the log read here; a URL: offered with
  the consistency proofs the service checks against what it holds).
- ``caucus witness serve DIR --public-key KEY``: serve the witness in DIR over HTTP
  (``ledger.integrity.witness_service``), for ``caucus verify --against URL`` and for cosigning.

``cosign`` is the default, so ``caucus witness DIR`` keeps its meaning. ``witness_problems`` is how
``caucus verify --against`` asks a witness of either kind.
"""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from ledger.cli_output import emit, fail, settings_of

__all__ = ["register", "witness_problems"]

TAMPERED, OPERATIONAL = 1, 2


class _CosignByDefault(TyperGroup):
    """``caucus witness DIR`` means ``caucus witness cosign DIR``: a first word that names no
    subcommand (and is not a request for help) is taken as cosign's."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["cosign", *args]
        return super().parse_args(ctx, args)


def register(app: typer.Typer) -> None:
    group = typer.Typer(cls=_CosignByDefault, no_args_is_help=True,
                        help="Witness the log's signed checkpoints (a directory, or a service by URL).")
    group.command("cosign")(cosign_command)
    group.command("serve")(serve_command)
    app.add_typer(group, name="witness")


def _signer_keys(settings: Any, public_key: list[Path] | None) -> list[Any]:
    """The signer's public keys: given, or configured; never the ones the operator's directory offers."""
    from ledger.integrity.keys import ENV_PUBLIC_KEY, load_trusted_key
    from ledger.integrity.verify import NoTrustedKey

    configured = settings.checkpoint_public_key or os.environ.get(ENV_PUBLIC_KEY)
    paths = list(public_key or ([Path(p) for p in configured.split(os.pathsep) if p] if configured else []))
    if not paths:
        raise NoTrustedKey("a witness needs the signer's public key: give --public-key PATH")
    return [load_trusted_key(p) for p in paths]


def witness_problems(target: str, log_id: str | None, scan: Any, pinned: Sequence[Any] = ()) -> list[str]:
    """Why the scanned log is not the one the witness at ``target`` (a directory or an http(s) URL)
    cosigned, and, with ``pinned`` keys, why it is not a witness the verifier trusts; a witness that
    cannot be asked is exit 2."""
    from ledger.integrity.witness import WitnessDir, WitnessError
    from ledger.integrity.witness_client import WitnessUrl, is_witness_url

    try:
        if is_witness_url(target):
            return WitnessUrl(target).check(log_id, scan, pinned)
        path = Path(target)
        if not path.is_dir():
            raise fail(f"no witness directory {path} (`caucus witness DIR --public-key KEY` makes one)", OPERATIONAL)
        return WitnessDir(path).check(log_id, scan, pinned)
    except WitnessError as exc:
        raise fail(str(exc), OPERATIONAL) from None


def cosign_command(
    ctx: typer.Context,
    target: str = typer.Argument(..., metavar="DIR|URL", help="The witness: its own directory (created if new: its key "
                                 "and what it cosigned), or the URL of `caucus witness serve`."),
    public_key: Optional[list[Path]] = typer.Option(
        None, "--public-key", help="The signer's public key (required: a witness trusts no key the operator's "
        "directory offers). Repeatable, or env CAUCUS_CHECKPOINT_PUBLIC_KEY."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Have a witness check and cosign the log's latest signed checkpoint (the default command).

    Checks it was signed by the given key and that the log still extends the last checkpoint this witness cosigned (RFC 9162 consistency: read here for a
    directory, proved to the service for a URL); then the witness cosigns and keeps it. Run it as
    another party, where the log's operator cannot write; `caucus verify --against DIR|URL` then holds
    the log to it. Exit 0: cosigned (or already held); 1: refused (the history was rewritten, or
    another log); 2: could not check."""
    from ledger.integrity.scan import scan_log
    from ledger.integrity.store import open_checkpoint_store
    from ledger.integrity.verify import NoTrustedKey, trusted_checkpoints
    from ledger.integrity.witness import WitnessDir, WitnessError, WitnessRefused
    from ledger.integrity.witness_client import WitnessUrl, is_witness_url
    from projections.audit.cli import log_for, operational

    settings = settings_of(ctx)
    with operational():
        trusted = _signer_keys(settings, public_key)
        store = open_checkpoint_store(settings, create=False)
        try:
            with log_for(settings, read_only=True) as log:
                scan = scan_log(log)
                log_id = log.log_id or f"scope:{settings.topic}"
            rows = store.checkpoints() if store is not None else []
        finally:
            if store is not None:
                store.close()
        signed = trusted_checkpoints(scan, rows, trusted)
        if not signed:
            raise NoTrustedKey("the log holds no checkpoint signed by the given key: run `caucus checkpoint` first")
        latest = max(signed, key=lambda s: (s.checkpoint.tree_size, s.checkpoint.timestamp_micros))
        try:
            if is_witness_url(target):
                done = WitnessUrl(target).cosign(log_id, scan, latest)
            else:
                Path(target).mkdir(parents=True, exist_ok=True)
                done = WitnessDir(Path(target)).cosign(log_id, scan, latest)
        except WitnessRefused as refused:
            raise fail(f"REFUSED TO COSIGN: {refused}", TAMPERED, kind="tampering") from None
        except WitnessError as exc:
            raise fail(str(exc), OPERATIONAL) from None
    c = done.signed.checkpoint
    data = {"log_id": done.log_id, "event_id": done.signed.event_id, "time": c.time.isoformat(), "tree_size": c.tree_size,
            "partition_sizes": list(c.partition_sizes), "witnessed_at": done.witnessed_at,
            "cosignature": done.cosignature.hex(), "witness": target}
    if not is_witness_url(target):
        data["witness_dir"] = target
    emit(data, as_json, lambda: typer.echo(
        f"cosigned checkpoint {done.signed.event_id} of log {done.log_id} ({c.tree_size} records, {c.time.isoformat()}); "
        f"kept by {target}"))


def serve_command(
    ctx: typer.Context,
    directory: Path = typer.Argument(..., help="The witness's own directory (created if new): its key and what it cosigned."),
    public_key: Optional[list[Path]] = typer.Option(
        None, "--public-key", help="The signer's public key: only checkpoints it signed are cosigned (required). "
        "Repeatable, or env CAUCUS_CHECKPOINT_PUBLIC_KEY."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8091, "--port", min=0, max=65535, help="Port to listen on (0: any free port, printed at start; 8090 is `caucus serve results`'s)."),
) -> None:
    """Serve the witness in DIRECTORY over HTTP, for verifiers and signers elsewhere.

    Anyone may read the checkpoints it cosigned; a new one is cosigned only if the given key signed it and its consistency proofs show that it extends the
    one held (the first of a log on its signature alone). `caucus verify --against URL` and
    `caucus witness URL` use it. Runs until stopped (Ctrl-C, SIGTERM)."""
    from ledger.http_serve import bind, port_of, serve
    from ledger.integrity.witness import WitnessDir, WitnessError
    from ledger.integrity.witness_service import create_witness_app
    from projections.audit.cli import operational

    settings = settings_of(ctx)
    with operational():
        signers = _signer_keys(settings, public_key)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            app_ = create_witness_app(WitnessDir(directory), signers)
            socks = bind(host, port)
        except (OSError, WitnessError) as exc:
            raise fail(str(exc), OPERATIONAL) from None
    typer.echo(f"witness {directory} on http://{host}:{port_of(socks)} (cosigns checkpoints of key "
               f"{', '.join(k.key_id for k in signers)}); stop with Ctrl-C", err=True)
    if not serve(app_, socks):
        raise fail("the witness service did not start (see the lines above)", OPERATIONAL)
