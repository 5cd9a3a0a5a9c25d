"""Who may submit what: credentials for unit chairs and party officials, and the rules for each role.

The store is one JSON file, by default ``<data dir>/credentials.json`` (``--credentials PATH`` or
``CAUCUS_CREDENTIALS`` to put it elsewhere, e.g. on the intake host when the log is a Kafka cluster). It
is created with mode 0600 and rewritten atomically under a file lock, so issuing a credential while the
HTTP intake runs is safe; the intake rereads the file when it changes.

A token is ``ckl_<id>_<secret>``: the id is public and finds the entry, the secret is 32 random bytes
shown once when issued and never stored. The store keeps an HMAC-SHA256 of the secret under a per-entry
salt and compares in constant time. A slow password hash (scrypt) would add nothing: the secret has 256
bits of entropy, so there is nothing to guess, and a fast check keeps the intake's latency flat.

Roles (``authorize``):
- a **chair** holds a credential for one unit and may open it and report its result;
- an **official** may do that for any unit, and is the only one who may define an election, correct a
  result or record a coin toss / drawing of lots.
Every event records its actor as ``chair:<unit>#<id>`` or ``official:<name>#<id>``.
"""

from __future__ import annotations

import hashlib
import logging
import hmac
import json
import secrets
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from ledger.events import Problem
from ledger.files import lock_beside, replace_secret_file
from producers.commands import CommandKind
from producers.identifiers import hidden_character, shows_a_word

__all__ = [
    "Role",
    "Credential",
    "CredentialStore",
    "CredentialError",
    "AuthFailure",
    "authorize",
    "TOKEN_PREFIX",
]

log = logging.getLogger(__name__)

Role = Literal["chair", "official"]
TOKEN_PREFIX = "ckl_"
_DUMMY_SALT = bytes(16)
_MAX_TOKEN = 512


class CredentialError(RuntimeError):
    """The store cannot be read or written (an operational problem, not a refused submission)."""


@dataclass(frozen=True, slots=True)
class Credential:
    cred_id: str
    role: Role
    name: str
    unit_id: str | None
    salt: str
    digest: str
    issued_at: str
    revoked_at: str | None = None
    #: A chair reports for one unit of one election: unit ids repeat across elections, so a credential
    #: for "unit 7" alone would let a chair report into every election that has a unit 7.
    election_id: str | None = None

    @property
    def actor(self) -> str:
        who = f"chair:{self.unit_id}" if self.role == "chair" else f"official:{self.name}"
        return f"{who}#{self.cred_id}"

    def may_read(self, sender: str) -> bool:
        """Whether a receipt or refusal of a command ``sender`` sent is this credential's to read: its
        sender's and an official's. A chair learning of another's command would learn another unit's figures."""
        return self.role == "official" or sender == self.actor

    def public(self) -> dict[str, object]:
        """What may be shown: everything but the salt and digest."""
        return {
            "id": self.cred_id,
            "role": self.role,
            "name": self.name,
            "unit_id": self.unit_id,
            "election_id": self.election_id,
            "actor": self.actor,
            "issued_at": self.issued_at,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True, slots=True)
class AuthFailure:
    """Why a token was not accepted, and who the sender claimed to be (for the rejection record)."""

    problem: Problem
    claimed: str


def _digest(salt: bytes, secret: str) -> str:
    return hmac.new(salt, secret.encode(), hashlib.sha256).hexdigest()


def _split(token: str) -> tuple[str, str] | None:
    if not token.startswith(TOKEN_PREFIX):
        return None
    cred_id, sep, secret = token[len(TOKEN_PREFIX) :].partition("_")
    if not sep or not cred_id or not secret:
        return None
    return cred_id, secret


class CredentialStore:
    """The credential file (see module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._cache: tuple[tuple[int, int], dict[str, Credential]] | None = None

    # -- reading ----------------------------------------------------------------------------------

    def _load(self) -> dict[str, Credential]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise CredentialError(f"cannot read the credential store {self.path}: {exc}") from exc
        stamp = (stat.st_mtime_ns, stat.st_size)
        if self._cache is not None and self._cache[0] == stamp:
            return self._cache[1]
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            entries = {c["cred_id"]: Credential(**c) for c in data["credentials"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CredentialError(f"the credential store {self.path} is unreadable: {exc}") from exc
        self._cache = (stamp, entries)
        return entries

    def list(self) -> list[Credential]:
        return sorted(self._load().values(), key=lambda c: c.issued_at)

    def authenticate(self, token: str | None) -> Credential | AuthFailure:
        """The credential a token proves, or why it proves nothing."""
        if not token:
            return AuthFailure(
                Problem("authorization", "UNAUTHENTICATED", "no credential given: send a bearer token (CLI: --token or "
                        "CAUCUS_TOKEN); an operator issues one with `caucus credentials issue --unit UNIT` (a chair) "
                        "or `--official NAME` (an official)"),
                "anonymous",
            )
        if len(token) > _MAX_TOKEN or not token.isascii():
            # Not a token this store issued (ours are ASCII, ~75 characters); nothing of it is kept.
            return AuthFailure(
                Problem("authorization", "UNAUTHENTICATED", "the credential is not valid (not a token of the form ckl_<id>_<secret>)"),
                "anonymous",
            )
        parts = _split(token.strip())
        entries = self._load()
        entry = entries.get(parts[0]) if parts else None
        salt = bytes.fromhex(entry.salt) if entry else _DUMMY_SALT
        expected = entry.digest if entry else _digest(_DUMMY_SALT, "")
        ok = hmac.compare_digest(_digest(salt, parts[1] if parts else token), expected)
        claimed = f"unverified:{parts[0]}" if parts else "anonymous"
        if entry is None or not ok:
            return AuthFailure(
                Problem("authorization", "UNAUTHENTICATED", "the credential is not valid (unknown id or wrong secret)"),
                f"unverified:{entry.actor}" if entry else claimed,
            )
        if entry.revoked_at is not None:
            return AuthFailure(
                Problem("authorization", "REVOKED", f"credential {entry.cred_id} was revoked at {entry.revoked_at}"),
                f"unverified:{entry.actor}",
            )
        return entry

    # -- writing ----------------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Credential]]:
        with ExitStack() as held:
            try:
                held.enter_context(lock_beside(self.path))
            except OSError as exc:
                raise CredentialError(f"cannot lock the credential store {self.path}: {exc}") from exc
            self._cache = None
            entries = dict(self._load())
            yield entries
            self._write(entries)

    def _write(self, entries: dict[str, Credential]) -> None:
        body = json.dumps({"format": 1, "credentials": [asdict(c) for c in entries.values()]}, indent=1)
        try:
            replace_secret_file(self.path, body)
        except OSError as exc:
            raise CredentialError(f"cannot write the credential store {self.path}: {exc}") from exc
        self._cache = None

    def issue(
        self, role: Role, *, unit_id: str | None = None, name: str | None = None, election_id: str | None = None
    ) -> tuple[Credential, str]:
        """A new credential and its token. The token is returned once; only its digest is kept."""
        if role == "chair" and not unit_id:
            raise ValueError("a chair's credential needs the unit it reports for")
        if role == "official" and election_id:
            raise ValueError("an official's credential is not scoped to an election")
        if role == "official" and not name:
            raise ValueError("an official's credential needs the official's name")
        if name is not None:  # it names them in every record they write (the actor, the writer header)
            hidden = hidden_character(name)
            if hidden is not None or not shows_a_word(name):
                raise ValueError(f"the name {name!r} must show a letter or digit and hold no control or invisible "
                                 f"character{f' (found {hidden})' if hidden else ''}")
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_bytes(16)
        with self._locked() as entries:
            cred_id = secrets.token_hex(4)
            while cred_id in entries:
                cred_id = secrets.token_hex(4)
            cred = Credential(
                cred_id=cred_id,
                role=role,
                name=name or f"chair of {unit_id}",
                unit_id=unit_id if role == "chair" else None,
                election_id=election_id if role == "chair" else None,
                salt=salt.hex(),
                digest=_digest(salt, secret),
                issued_at=datetime.now(UTC).isoformat(timespec="seconds"),
            )
            entries[cred_id] = cred
        log.info("issued %s credential %s (%s)", role, cred_id, cred.actor)
        return cred, f"{TOKEN_PREFIX}{cred_id}_{secret}"

    def revoke(self, cred_id: str) -> Credential:
        with self._locked() as entries:
            if cred_id not in entries:
                raise KeyError(cred_id)
            cred = entries[cred_id]
            if cred.revoked_at is None:
                cred = replace(cred, revoked_at=datetime.now(UTC).isoformat(timespec="seconds"))
                entries[cred_id] = cred
                log.info("revoked credential %s (%s)", cred_id, cred.actor)
        return cred


def authorize(credential: Credential, kind: CommandKind, unit_id: str | None) -> Problem | None:
    """None if the credential's role allows this command for this unit, else the reason it does not."""
    if credential.role == "official":
        return None
    if kind in (CommandKind.DEFINE, CommandKind.CORRECT, CommandKind.TOSS):
        return Problem(
            "authorization",
            "FORBIDDEN",
            f"a unit chair may not {_VERBS[kind]}; that needs an official's credential",
        )
    if unit_id != credential.unit_id:
        return Problem(
            "unit_id",
            "WRONG_UNIT",
            f"this credential reports for unit {credential.unit_id!r} only, not for {unit_id or '(no unit given)'!r}",
        )
    return None


def election_scope(credential: Credential, election_id: str, holders: Sequence[str]) -> Problem | None:
    """None if a chair's credential may report into ``election_id`` (``holders``: every election that
    has the credential's unit), else why not. A credential scoped to an election reports there only; an
    unscoped one (issued without ``--election``) only while a single election has its unit, since
    otherwise nothing says which of them its chair was trusted with."""
    if credential.role != "chair":
        return None
    if credential.election_id is not None:
        if credential.election_id == election_id:
            return None
        return Problem(
            "election_id",
            "WRONG_ELECTION",
            f"this credential reports for unit {credential.unit_id!r} of election {credential.election_id!r} only, "
            f"not of {election_id!r}",
        )
    if len(holders) > 1:
        return Problem(
            "authorization",
            "AMBIGUOUS_CREDENTIAL",
            f"unit {credential.unit_id!r} belongs to several elections ({', '.join(holders)}) and this credential "
            "names none of them; issue the chair a credential with --election",
        )
    return None


_VERBS = {
    CommandKind.DEFINE: "define an election",
    CommandKind.CORRECT: "correct a result",
    CommandKind.TOSS: "record a coin toss or drawing of lots",
}
