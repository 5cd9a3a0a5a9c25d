"""The columns a record carries beside its value that nothing in the value repeats, under a signature.

Why: the Merkle leaf is the stored value, and the key and derived headers are checked against it; the
writer header (who appended the record: the intake, the importer, an official writing directly) is
not in the value, so nothing held it and it could be edited unseen. It cannot join the leaf without
changing every tree, proof, witness and recount package made so far, so it gets a tree of its own,
beside the value's: per partition, leaf ``i`` is ``SHA-256(0x00 || columns(record i))``, where
``columns`` encodes the record's headers that are not derived from its value, in stored order::

    for each header: u16 len + name (UTF-8) | u32 len + value

(a record with none hashes the empty string). A checkpoint that carries the roots of these trees at
its sizes (``CheckpointSigned`` version 3) has them signed by the same key, as a statement of its
own bound to the checkpoint's root of roots::

    b"caucus-ledger/columns/v1\\n" | 32-byte root of roots | u32 partitions | partitions x 32-byte root

Checkpoints without them (every one made before) are checked as before. The append time is not in
this tree: it is held to the checkpoints' times (``append_times``), so a log copied record by record
keeps verifying.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from ledger.log.port import Headers
from ledger.record_headers import DERIVED

__all__ = ["COLUMNS_MAGIC", "columns_leaf", "columns_message", "EMPTY_LEAF"]

COLUMNS_MAGIC = b"caucus-ledger/columns/v1\n"
_U16, _U32 = struct.Struct(">H"), struct.Struct(">I")
EMPTY_LEAF = hashlib.sha256(b"\x00").digest()


def columns_leaf(headers: Headers) -> bytes:
    """The leaf of a record's columns (its headers not derived from its value)."""
    parts: list[bytes] = []
    for name, value in headers:
        if name in DERIVED:
            continue
        raw = name.encode("utf-8")
        parts += [_U16.pack(len(raw)), raw, _U32.pack(len(value)), value]
    return hashlib.sha256(b"\x00" + b"".join(parts)).digest() if parts else EMPTY_LEAF


def columns_message(root_of_roots: bytes, roots: Sequence[bytes]) -> bytes:
    """The bytes signed for a checkpoint's column roots (see module docstring)."""
    return COLUMNS_MAGIC + root_of_roots + _U32.pack(len(roots)) + b"".join(roots)
