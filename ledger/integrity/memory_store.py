"""Signed checkpoints kept in this process's memory, beside the in-memory log (``backend = "memory"``).

A checkpoint store on disk would outlive the in-memory log it describes, and the next process, with a
new log, would find checkpoints that log never had. So with the log in memory the store is too, named
like it and shared within the process; it keeps the promises of ``CheckpointStore.record`` (one step,
leaf hashes that continue and agree with those recorded).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ledger.integrity.checkpoints import SignedCheckpoint
from ledger.integrity.store import CheckpointStoreError, NewLeaves, StoredRow, unrecorded

__all__ = ["MemoryCheckpointStore", "forget"]


@dataclass
class _Held:
    signed: list[SignedCheckpoint] = field(default_factory=list)
    leaves: dict[int, list[bytes]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_STORES: dict[str, _Held] = {}
_STORES_LOCK = threading.Lock()


def forget(name: str) -> None:
    with _STORES_LOCK:
        _STORES.pop(name, None)


class MemoryCheckpointStore:
    def __init__(self, name: str, *, create: bool = True) -> None:
        """``create`` false: only a store that exists (``CheckpointStoreError`` otherwise)."""
        self.name = name
        with _STORES_LOCK:
            held = _STORES.get(name)
            if held is None:
                if not create:
                    raise CheckpointStoreError(f"no checkpoint store named {name!r} in memory")
                held = _STORES[name] = _Held()
        self._held = held

    @classmethod
    def exists(cls, name: str) -> bool:
        with _STORES_LOCK:
            return name in _STORES

    def describe(self) -> str:
        return f"memory:{self.name}"

    def checkpoints(self) -> list[StoredRow]:
        with self._held.lock:
            return [StoredRow(seq, signed) for seq, signed in enumerate(self._held.signed, start=1)]

    def leaves(self) -> dict[int, list[bytes]]:
        with self._held.lock:
            return {p: list(hashes) for p, hashes in sorted(self._held.leaves.items())}

    def record(self, signed: SignedCheckpoint, new_leaves: NewLeaves) -> None:
        held = self._held
        with held.lock:
            if any(s.event_id == signed.event_id for s in held.signed):
                raise CheckpointStoreError(f"checkpoint {signed.event_id} is already recorded in {self.describe()}")
            staged: dict[int, list[bytes]] = {}
            for part, (start, hashes) in new_leaves.items():
                recorded = held.leaves.get(part, [])
                _, fresh = unrecorded(part, start, hashes, len(recorded), recorded[start:])
                staged[part] = [*recorded, *fresh]
            held.leaves.update(staged)
            held.signed.append(signed)

    def close(self) -> None:
        """Nothing to release: the checkpoints stay for the next open of this name."""
