"""``caucus witness serve``: a witness reachable by URL, for verifiers that cannot read its directory.

Read-mostly, as Certificate Transparency witnesses are: anyone may read what it cosigned; a new
checkpoint is cosigned only when it is signed by a key the witness was told to trust and comes with
consistency proofs (``witness_proofs``) that it extends the checkpoint held for its log (and, where the
held one signs column roots, that its columns trees extend those too). The witness
never sees the log, so it cannot be shown a rewritten one: a rewrite below what it holds has no proof
that verifies. The first checkpoint of a log is taken on its signature (trust on first use); one
directory serves one log, as ``WitnessDir`` does.

Routes (JSON): ``GET /health``; ``GET /v1/witness`` (its public key, the logs it serves);
``GET /v1/checkpoints`` (everything cosigned, oldest first); ``GET /v1/logs/{log_id}/latest``
(404 when none); ``POST /v1/logs/{log_id}/checkpoints`` (200 cosigned, 400 malformed, 409 refused,
503 the directory cannot be written). No input is a 5xx but the last.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ledger.integrity.checkpoints import Checkpoint, CheckpointFormatError, SignedCheckpoint
from ledger.integrity.keys import TrustedKey
from ledger.integrity.witness import WitnessDir, WitnessError, WitnessRefused
from ledger.log.port import Position

__all__ = ["Submission", "create_witness_app"]

_HEX_HASH = 64
_MAX_PROOF = 128  # a proof of a tree of 2**64 leaves has fewer: longer lists are refused before hex decoding


class Submission(BaseModel):
    """A signed checkpoint offered for cosigning, with one consistency proof per partition (hex)."""

    event_id: str = Field(max_length=200)
    position: str | None = Field(default=None, max_length=50)
    checkpoint: str = Field(max_length=1_000_000, description="The checkpoint's canonical bytes, hex.")
    public_key: str = Field(max_length=_HEX_HASH)
    signature: str = Field(max_length=128)
    proofs: list[list[str]] = Field(default_factory=list, max_length=10_000)
    column_roots: list[str] = Field(default_factory=list, max_length=10_000, description="The columns trees' roots, hex.")
    column_signature: str = Field(default="", max_length=128)
    column_proofs: list[list[str]] = Field(default_factory=list, max_length=10_000)


def _hashes(proofs: list[list[str]], what: str) -> list[list[bytes]]:
    if any(len(proof) > _MAX_PROOF for proof in proofs):
        raise ValueError(f"{what}: a consistency proof has at most {_MAX_PROOF} hashes")
    out = [[bytes.fromhex(h) for h in proof] for proof in proofs]
    if any(len(h) != 32 for proof in out for h in proof):
        raise ValueError(f"{what}: every hash is 32 bytes")
    return out


def _signed(body: Submission) -> tuple[SignedCheckpoint, list[list[bytes]], list[list[bytes]]]:
    """The submission as a signed checkpoint, its proofs and its column proofs; ValueError says what
    is malformed."""
    try:
        checkpoint = Checkpoint.from_bytes(bytes.fromhex(body.checkpoint))
        public_key, signature = bytes.fromhex(body.public_key), bytes.fromhex(body.signature)
        proofs, column_proofs = _hashes(body.proofs, "proofs"), _hashes(body.column_proofs, "column_proofs")
        column_roots = tuple(root for [root] in _hashes([[r] for r in body.column_roots], "column_roots"))
        column_signature = bytes.fromhex(body.column_signature)
    except CheckpointFormatError as exc:
        raise ValueError(f"checkpoint: {exc}") from None
    except ValueError as exc:
        said = str(exc)
        raise ValueError(said if "32 bytes" in said or "at most" in said else "checkpoint, keys, signatures, roots and proofs are hex") from None
    try:
        position = Position.parse(body.position) if body.position else None
    except ValueError as exc:
        raise ValueError(f"position: {exc}") from None
    signed = SignedCheckpoint(checkpoint, public_key, signature, body.event_id, position, column_roots, column_signature)
    return signed, proofs, column_proofs


def create_witness_app(directory: WitnessDir, signers: Sequence[TrustedKey]) -> FastAPI:
    """The witness over ``directory``, cosigning checkpoints signed by one of ``signers``."""
    own = TrustedKey(directory.key().public_key)  # made on first use, before anyone asks for it
    lock = threading.Lock()  # one cosigning at a time: each extends the last one kept
    app = FastAPI(title="caucus witness", docs_url="/docs")

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/witness")
    def witness() -> Any:
        try:
            logs = sorted({w.log_id for w in directory.witnessed()})
        except WitnessError as exc:
            return error(503, str(exc))
        return {"public_key": own.public_key.hex(), "key_id": own.key_id, "logs": logs,
                "signers": [k.key_id for k in signers]}

    @app.get("/v1/checkpoints")
    def checkpoints() -> Any:
        try:
            return {"public_key": own.public_key.hex(), "checkpoints": [w.to_json() for w in directory.witnessed()]}
        except WitnessError as exc:
            return error(503, str(exc))

    @app.get("/v1/logs/{log_id}/latest")
    def latest(log_id: str) -> Any:
        try:
            held = [w for w in directory.witnessed() if w.log_id == log_id]
        except WitnessError as exc:
            return error(503, str(exc))
        return held[-1].to_json() if held else error(404, f"this witness holds no checkpoint of log {log_id}")

    @app.post("/v1/logs/{log_id}/checkpoints")
    def submit(log_id: str, body: Submission) -> Any:
        try:
            signed, proofs, column_proofs = _signed(body)
        except ValueError as exc:
            return error(400, str(exc))
        try:
            with lock:
                done = directory.accept(log_id, signed, proofs, signers, column_proofs)
        except WitnessRefused as exc:
            return error(409, str(exc))
        except WitnessError as exc:
            return error(503, str(exc))
        return done.to_json()

    return app
