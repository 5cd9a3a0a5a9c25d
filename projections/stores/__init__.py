"""Projection stores: where views, reducer state, log positions and the event index live.

``open_store`` picks the adapter the way the rest of the ledger picks its backends: a PostgreSQL URL
(``--database`` / ``CAUCUS_DATABASE``) selects PostgreSQL, otherwise the embedded SQLite file at
``settings.store_path``. PostgreSQL is imported only when asked for.
"""

from __future__ import annotations

from ledger.config import Settings
from projections.stores.port import ProjectionStore, SetInfo, SetNotFound, StoreError

__all__ = ["open_store", "ProjectionStore", "SetInfo", "SetNotFound", "StoreError"]


def open_store(settings: Settings, *, read_only: bool = False) -> ProjectionStore:
    """``read_only``: for commands that only read; an embedded store is then neither created nor
    changed (``StoreMissing`` if there is none)."""
    if settings.database:
        from projections.stores.postgres import PostgresStore

        return PostgresStore(settings.database)
    from projections.stores.sqlite import SqliteStore

    return SqliteStore(settings.store_path, read_only=read_only)
