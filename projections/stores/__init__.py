"""Projection stores: where views, reducer state, log positions and the event index live.

``open_store`` (from ``projections.backends``) opens the adapter ``ledger.backends`` chooses: a
PostgreSQL URL (``--database`` / ``CAUCUS_DATABASE``) selects PostgreSQL, otherwise the embedded
SQLite file at ``settings.store_path``. Adapters are imported only when asked for.
"""

from __future__ import annotations

from ledger.config import Settings
from projections.stores.port import ProjectionStore, SetInfo, SetNotFound, StoreError

__all__ = ["open_store", "ProjectionStore", "SetInfo", "SetNotFound", "StoreError"]



def open_store(settings: Settings, *, read_only: bool = False) -> ProjectionStore:
    """``read_only``: for commands that only read; an embedded store is then neither created nor
    changed (``StoreMissing`` if there is none)."""
    from projections.backends import open_store as open_chosen  # it imports this package's port

    return open_chosen(settings, read_only=read_only)
