"""A replay is held to the log's signed checkpoints before it serves.

A replay rebuilds the tallies from the log as it is now, and switches readers to them. The serving
projection was built from the log as it was when each record arrived. If the log was edited since
(a record changed in the embedded file, its append-only trigger dropped first), the replay would serve
the edited numbers, exit 0, and leave the audit to blame the chair whose result was changed. Where the
log holds signed checkpoints, they say what it held: a log that no longer matches them is not
replayed into service (``caucus verify`` lists every difference), unless the operator says to
(``--despite-checkpoints``: a log restored from a copy carries new append times, and its old
checkpoints no longer verify although nothing was forged).
"""

from __future__ import annotations

from typing import Any

from ledger.config import Settings
from ledger.log.port import EventLog

__all__ = ["checkpoint_problem"]


def checkpoint_problem(settings: Settings, log: EventLog) -> str | None:
    """Why ``log`` may not be replayed into service (it does not match its signed checkpoints), or None:
    it matches them, or holds none, or none can be checked (no key to check them with: ``caucus verify``
    says so when asked)."""
    from ledger.integrity.store import open_checkpoint_store
    from ledger.integrity.verify import NoTrustedKey, verify_log
    from projections.audit.cli import trusted_keys

    store = open_checkpoint_store(settings, create=False)
    try:
        try:
            trusted = trusted_keys(settings, None)
            _, report = verify_log(log, store, trusted)
        except NoTrustedKey:
            return None
    finally:
        if store is not None:
            store.close()
    if report.ok:
        return None
    first = report.findings[0]
    where = f" at {first.position}" if first.position is not None else ""
    more = f" (and {len(report.findings) - 1} more)" if len(report.findings) > 1 else ""
    return (f"the log does not match its signed checkpoints: {first.kind}{where}: {first.message}{more}"
            f"{_published_untrusted(settings, trusted)}")


def _published_untrusted(settings: Settings, trusted: list[Any]) -> str:
    """A hint when the data directory publishes a key this command does not trust: the log was most
    likely written under another key home (another operator, another machine), not forged."""
    from ledger.integrity.keys import PUBLIC_KEY_FILE, KeyFileError, load_trusted_key

    path = settings.data_dir / PUBLIC_KEY_FILE
    try:
        published = load_trusted_key(path) if path.exists() else None
    except KeyFileError:
        return ""
    if published is None or any(t.public_key == published.public_key for t in trusted):
        return ""
    return (f"; the data directory's {path} holds key {published.key_id}, which is not trusted here: if the log was "
            f"written under another key home, trust that key (CAUCUS_CHECKPOINT_PUBLIC_KEY={path}, or the key home's own)")
