"""Who may write to the log without the intake: officials only, and their name goes on every record.

``caucus log append`` (restoring or moving a log) and ``caucus simulate write`` put events on the log
without validation. Anyone able to run them could otherwise forge a chair's report, so they need an
official's credential, checked like the intake checks one, and each record they write carries the
official's actor in its ``caucus-writer`` header (``ledger.record_headers``): an auditor can tell
these records from the intake's.

The importer (``caucus import``) needs none: it writes only what the party's published releases
say, under the fixed actor of the importer, with event ids derived from the releases (so running it
again appends nothing), and anyone can check its events against the same public files.
"""

from __future__ import annotations

from pathlib import Path

from ledger.cli_output import fail
from ledger.config import Settings
from producers.credentials import AuthFailure, CredentialError, CredentialStore

__all__ = ["official_writer", "REFUSED"]

REFUSED = 1


def official_writer(settings: Settings, token: str | None, credentials: Path | None, what: str) -> str:
    """The actor of the official whose ``token`` this is; otherwise the command stops (exit 1, refused)."""
    store = CredentialStore(credentials or settings.credentials or settings.data_dir / "credentials.json")
    try:
        found = store.authenticate(token or settings.token)
    except CredentialError as exc:
        raise fail(str(exc)) from exc
    if isinstance(found, AuthFailure):
        raise fail(f"refused: to {what} you need an official's credential (--token or CAUCUS_TOKEN; an operator "
                   f"issues one with `caucus credentials issue --official NAME`): {found.problem.message}",
                   REFUSED, kind="unauthenticated")
    if found.role != "official":
        raise fail(f"refused: to {what} you need an official's credential; {found.actor} is a {found.role}",
                   REFUSED, kind="forbidden")
    return found.actor
