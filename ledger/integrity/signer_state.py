"""What a signing key has signed, kept with the key: so the key never signs a rewritten history.

The checkpoint store and the ``CheckpointSigned`` events live beside the log, so whoever can rewrite the
log can delete them too, and then a signer that only audits the log against *its own* earlier
checkpoints would find nothing to compare with and sign the rewritten history. This file lives next to
the private key (outside the data directory by default, ``ledger.integrity.keys``): for each log (by
its id) it holds the sizes and roots of the last checkpoint the key signed. Before signing again the
signer checks that the log still extends that checkpoint (for each partition: at least as many
records, and the root of the first ``size`` records unchanged: RFC 9162 consistency; the same for the
columns tree when the checkpoint signed its roots, ``columns``), and refuses otherwise, naming the partition and the checkpoint the log no longer extends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.files import lock_beside, replace_secret_file
from ledger.integrity.checkpoints import SignedCheckpoint
from ledger.integrity.scan import LogScan

__all__ = ["SignerStateError", "SignedHead", "SignerState", "state_path_for"]


class SignerStateError(RuntimeError):
    """The state file cannot be read or written (an operational problem)."""


@dataclass(frozen=True, slots=True)
class SignedHead:
    """The last checkpoint a key signed for one log."""

    event_id: str
    time: str
    sizes: tuple[int, ...]
    roots: tuple[bytes, ...]
    column_roots: tuple[bytes, ...] = ()  # the columns trees' roots (``columns``), if the checkpoint had them

    def to_json(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "time": self.time, "partition_sizes": list(self.sizes),
                "partition_roots": [r.hex() for r in self.roots], "column_roots": [r.hex() for r in self.column_roots]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SignedHead:
        return cls(str(d["event_id"]), str(d["time"]), tuple(int(n) for n in d["partition_sizes"]),
                   tuple(bytes.fromhex(r) for r in d["partition_roots"]),
                   tuple(bytes.fromhex(r) for r in d.get("column_roots", ())))


def state_path_for(key_path: Path) -> Path:
    """``checkpoint-key.pem`` -> ``checkpoint-key.signed.json`` beside it."""
    return key_path.with_name(key_path.stem + ".signed.json")


def extends(scan: LogScan, head: SignedHead) -> str | None:
    """None if the scanned log extends ``head``, else how it does not."""
    for p, (size, root) in enumerate(zip(head.sizes, head.roots)):
        part = scan.parts.get(p)
        have = part.size if part is not None else 0
        if have < size:
            return (f"partition {p} holds {have} records, fewer than the {size} this key signed in checkpoint "
                    f"{head.event_id} ({head.time}): records were removed")
        assert part is not None
        if part.tree.root(size) != root:
            return (f"the first {size} records of partition {p} are not the ones this key signed in checkpoint "
                    f"{head.event_id} ({head.time}): the history was rewritten")
        if head.column_roots and part.column_tree.root(size) != head.column_roots[p]:
            return (f"the headers beside the first {size} records of partition {p} (the writer) are not the ones this "
                    f"key signed in checkpoint {head.event_id} ({head.time}): they were rewritten")
    return None


class SignerState:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"format": 1, "logs": {}}
        except (OSError, ValueError) as exc:
            raise SignerStateError(f"the signer's record {self.path} is unreadable: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("logs"), dict):
            raise SignerStateError(f"the signer's record {self.path} is not in the expected format")
        return data

    def last(self, log_id: str) -> SignedHead | None:
        entry = self._read()["logs"].get(log_id)
        return SignedHead.from_json(entry) if entry else None

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Held while checking and signing, so two signers with one key cannot race past each other."""
        with ExitStack() as held:
            try:
                held.enter_context(lock_beside(self.path))
            except OSError as exc:
                raise SignerStateError(f"cannot lock the signer's record {self.path}: {exc}") from exc
            yield

    def record(self, log_id: str, signed: SignedCheckpoint) -> None:
        data = self._read()
        c = signed.checkpoint
        data["logs"][log_id] = SignedHead(signed.event_id, c.time.isoformat(), tuple(c.partition_sizes),
                                          tuple(c.partition_roots), signed.column_roots).to_json()
        try:
            replace_secret_file(self.path, json.dumps(data, indent=1))
        except OSError as exc:
            raise SignerStateError(f"cannot write the signer's record {self.path}: {exc}") from exc
