"""Seals on the records the intake and the importer write: a writer's claim that a reader can check.

Why: a record's ``caucus-writer`` header is the record's own word. The audit lists a direct write
(``caucus log append``, ``caucus simulate write``) because its header names an official; a record whose
header says ``system:intake`` or ``importer:...`` (or names no writer) passes as a command the intake
checked. Anyone able to write the log's file or topic could put a made-up correction there under that
claim, and the next checkpoint would sign it in. So the writers whose word the ledger trusts seal each
record with the ledger's signing key (the checkpoint key: the key home's, or the one configured), and
``caucus verify``, ``caucus checkpoint`` (which verifies before it signs) and ``caucus audit`` name a claim
without a valid seal (``FORGED_WRITER``).

The seal is a header of its own (``caucus-writer-seal``): ``ed25519 <key id> <base64 signature>`` over::

    b"caucus-ledger/writer-seal/v1\\n" | u16 len + writer (UTF-8) | SHA-256(value)

The value holds the event (its id, election, unit and payload) and the key and derived headers are
checked against it (``scan``), so the writer and the value are what the seal must bind. It holds no
position: a copy of the log (``caucus replay --new-log``, a restore) keeps its seals. Like the writer,
the seal is one of the columns whose tree newer checkpoints sign, so it cannot be taken off a record a
checkpoint covers.

Which records must carry one: a log's first records may predate seals (and tests write records with no
writer at all), so an unsealed claim is a finding once the log holds any validly sealed record: from then
on the intake and importer seal everything they write, and a claim without a seal was made by someone
else. Checkpoint records carry their own signature and are not claims.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ledger.integrity.keys import (KeyFileError, SigningKey, TrustedKey, key_home, publish_public_key,
                                   resolve_signing_key)
from ledger.log.port import Headers, Position
from ledger.record_headers import is_direct_writer, writer_of

__all__ = ["SEAL", "SEAL_MAGIC", "Sealer", "sealer_for", "seal_message", "seal_of", "claims_trusted_writer", "seal_problem",
           "ForgedWriter", "forged_writers"]

log = logging.getLogger(__name__)

SEAL = "caucus-writer-seal"
SEAL_MAGIC = b"caucus-ledger/writer-seal/v1\n"
_U16 = struct.Struct(">H")


def seal_message(writer: str, value: bytes) -> bytes:
    """The bytes a seal signs (see the module docstring)."""
    raw = writer.encode("utf-8")
    return SEAL_MAGIC + _U16.pack(len(raw)) + raw + hashlib.sha256(value).digest()


@dataclass(frozen=True)
class Sealer:
    """Seals what one writer writes, with the ledger's signing key."""

    key: SigningKey

    def seal(self, writer: str, value: bytes) -> tuple[str, bytes]:
        signature = base64.b64encode(self.key.sign(seal_message(writer, value))).decode("ascii")
        return SEAL, f"ed25519 {self.key.key_id} {signature}".encode("ascii")


def sealer_for(checkpoint_key: Path | None, data_dir: Path) -> Sealer:
    """The sealer of a ledger's writers: the key ``caucus checkpoint`` signs with, so the key an auditor
    already trusts for checkpoints vouches for the writers too (``keys.resolve_signing_key``). A key
    that cannot be read or made is an error: a writer that went on unsealed would write records the
    verifier must call forged."""
    try:
        resolved = resolve_signing_key(checkpoint_key, data_dir)
        if resolved.warning:
            log.warning("writer seals: %s", resolved.warning)
        if data_dir.is_dir():  # for auditors, as `caucus checkpoint` does; never replacing another key
            other = publish_public_key(resolved.key, data_dir)
            if other:  # what this writer seals is FORGED_WRITER to a verifier trusting that file alone
                log.warning("writer seals: %s; what this writer seals verifies only with this key's public half", other)
        return Sealer(resolved.key)
    except KeyFileError as exc:
        raise KeyFileError(f"the intake and the importer seal what they write with the ledger's signing key: {exc}") from exc
    except OSError as exc:
        where = exc.filename or checkpoint_key or key_home()
        raise KeyFileError(
            f"the intake and the importer seal what they write with the ledger's signing key, which cannot be read or "
            f"made at {where} ({exc.strerror or exc}): set CAUCUS_KEY_HOME to a directory this user can write, or "
            "give the key (CAUCUS_CHECKPOINT_KEY, or checkpoint.key in the settings file)"
        ) from exc


def seal_of(headers: Headers) -> bytes | None:
    """The record's seal header, if it has one (a repeated header keeps its last value)."""
    found = None
    for name, value in headers:
        if name == SEAL:
            found = value
    return found


def claims_trusted_writer(writer: str) -> bool:
    """Whether a record's writer header claims a writer whose records the audit takes as checked: the
    intake (``system:``), the importer of the published releases, or no writer named; or comes so close
    to one (``System:intake``, `` system:intake``, a JSON null read as "None") that a person reading the
    trail would take it for one."""
    plain = "".join(writer.split()).casefold()
    return not is_direct_writer(writer) or plain in ("", "none", "null") or plain.startswith(("system:", "importer:"))


def seal_problem(headers: Headers, value: bytes, trusted: Sequence[TrustedKey]) -> str | None:
    """Why the record's seal does not vouch for its writer and value (None: a trusted key sealed them).
    A record without a seal is "unsealed"; whether that is a finding is the caller's rule."""
    seal = seal_of(headers)
    if seal is None:
        return "unsealed"
    parts = seal.split(b" ")
    if len(parts) != 3 or parts[0] != b"ed25519":
        return f"its seal is not 'ed25519 <key id> <signature>' ({seal[:40]!r})"
    try:
        signature = base64.b64decode(parts[2], validate=True)
    except (binascii.Error, ValueError):
        return "its seal's signature is not base64"
    key_id = parts[1].decode("ascii", errors="replace")
    keys = [k for k in trusted if k.key_id == key_id]
    if not keys:
        return f"its seal is by key {key_id}, which is not a trusted key"
    message = seal_message(writer_of(headers), value)
    if not any(k.verifies(message, signature) for k in keys):
        return f"its seal (key {key_id}) does not match the record's writer and value: one of them was changed"
    return None


@dataclass(frozen=True, slots=True)
class ForgedWriter:
    """A record whose writer no trusted seal vouches for, and why (``FORGED_WRITER``)."""

    position: Position
    writer: str
    problem: str

    @property
    def message(self) -> str:
        who = self.writer or "no writer named (as the intake's and the importer's records once were)"
        if self.problem == "unsealed":
            return (f"the record at {self.position} claims a writer the audit trusts ({who}) but carries no seal, "
                    "where this log's intake and importer seal every record they write: someone else put it there")
        return f"the record at {self.position} (writer {who}): {self.problem}"


def forged_writers(records: Iterable[tuple[Position, Headers, bytes]],
                   trusted: Sequence[TrustedKey] | None) -> list[ForgedWriter]:
    """The records (checkpoint records left out by the caller) whose writer no trusted seal vouches
    for: every seal that does not verify, and, once the log holds one seal that does, every claim of a
    trusted writer without one (the module docstring says why only then). With no keys to check seals
    by (``trusted`` None), only the unsealed claims of a log that holds seals."""
    found: list[ForgedWriter] = []
    unsealed: list[ForgedWriter] = []
    vouched = False
    for position, headers, value in records:
        writer = writer_of(headers)
        if trusted is None:
            problem = "unsealed" if seal_of(headers) is None else None
        else:
            problem = seal_problem(headers, value, trusted)
        if problem is None:
            vouched = True
        elif problem != "unsealed":
            found.append(ForgedWriter(position, writer, problem))
        elif claims_trusted_writer(writer):
            unsealed.append(ForgedWriter(position, writer, problem))
    return sorted([*found, *unsealed] if vouched else found, key=lambda f: f.position)
