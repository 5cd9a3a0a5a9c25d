"""A witness reached by URL (``caucus witness serve``), seen as ``WitnessDir`` is: what it cosigned,
its key, and offering it a checkpoint with the consistency proofs it needs.

Why the client builds the proofs: the witness holds no log. The offer carries, per partition, an RFC
9162 proof from the size the witness holds to the new one, built from the log as read here; the
witness checks it against its own roots, so an honest client cannot talk it into a rewrite either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import httpx

from ledger.integrity.checkpoints import SignedCheckpoint
from ledger.integrity.keys import TrustedKey
from ledger.integrity.scan import LogScan
from ledger.integrity.witness import Witnessed, WitnessError, WitnessRefused, held_problems
from ledger.integrity.witness_proofs import partition_proofs

__all__ = ["is_witness_url", "WitnessUrl"]


def is_witness_url(target: str) -> bool:
    return target.startswith(("http://", "https://"))


class WitnessUrl:
    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            return httpx.request(method, self.url + path, json=body, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise WitnessError(f"the witness at {self.url} cannot be reached: {exc}") from exc

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise WitnessError(f"the witness at {self.url} answered {response.status_code} without JSON") from None

    def _answer(self, response: httpx.Response) -> Any:
        doc = self._json(response)
        if response.status_code != 200:
            message = doc.get("error", doc) if isinstance(doc, dict) else doc
            raise WitnessError(f"the witness at {self.url} answered {response.status_code}: {message}")
        return doc

    def public_key(self) -> TrustedKey:
        doc = self._answer(self._call("GET", "/v1/witness"))
        try:
            return TrustedKey(bytes.fromhex(doc["public_key"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise WitnessError(f"the witness at {self.url} gave no usable public key: {exc}") from None

    def witnessed(self) -> list[Witnessed]:
        doc = self._answer(self._call("GET", "/v1/checkpoints"))
        try:
            return [Witnessed.from_json(d) for d in doc["checkpoints"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise WitnessError(f"the witness at {self.url} sent a malformed checkpoint: {exc}") from None

    def latest(self, log_id: str) -> Witnessed | None:
        response = self._call("GET", f"/v1/logs/{quote(log_id, safe='')}/latest")
        if response.status_code == 404:
            return None
        try:
            return Witnessed.from_json(self._answer(response))
        except (KeyError, TypeError, ValueError) as exc:
            raise WitnessError(f"the witness at {self.url} sent a malformed checkpoint: {exc}") from None

    def cosign(self, log_id: str, scan: LogScan, signed: SignedCheckpoint) -> Witnessed:
        """Offer ``signed`` with the proofs that the scanned log extends what the witness holds."""
        held = self.latest(log_id)
        proofs = partition_proofs(scan, held.signed.checkpoint, signed.checkpoint) if held is not None else []
        column_proofs = (partition_proofs(scan, held.signed.checkpoint, signed.checkpoint, columns=True)
                         if held is not None and held.signed.column_roots else [])
        body = {
            "event_id": signed.event_id,
            "position": None if signed.position is None else str(signed.position),
            "checkpoint": signed.checkpoint.to_bytes().hex(),
            "public_key": signed.public_key.hex(),
            "signature": signed.signature.hex(),
            "proofs": [[h.hex() for h in proof] for proof in proofs],
            "column_roots": [r.hex() for r in signed.column_roots],
            "column_signature": signed.column_signature.hex(),
            "column_proofs": [[h.hex() for h in proof] for proof in column_proofs],
        }
        response = self._call("POST", f"/v1/logs/{quote(log_id, safe='')}/checkpoints", body)
        if response.status_code == 409:
            doc = self._json(response)
            raise WitnessRefused(str(doc.get("error", doc)) if isinstance(doc, dict) else str(doc))
        try:
            done = Witnessed.from_json(self._answer(response))
        except (KeyError, TypeError, ValueError) as exc:
            raise WitnessError(f"the witness at {self.url} sent a malformed cosignature: {exc}") from None
        if not self.public_key().verifies(done.message(), done.cosignature):
            raise WitnessError(f"the witness at {self.url} sent a cosignature that does not verify with its key")
        return done

    def check(self, log_id: str | None, scan: LogScan, pinned: Sequence[TrustedKey] = ()) -> list[str]:
        """Why the scanned log is not the one this witness cosigned (empty: it extends all of it)."""
        return held_problems(self.witnessed(), self.public_key(), log_id, scan, self.url, pinned)
