"""A witness served by URL (``caucus witness serve``, the real service in its own process) catches the
insider's rewrite as the witness directory does: flip an event, cut the ``CheckpointSigned`` events,
delete the checkpoint store and re-sign, with the same key home or a new key. It holds no log, so it
cosigns a newer checkpoint only with consistency proofs from what it holds, and a rewritten history
has none that verify."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.integrity.keys import load_or_create_signing_key

Site = Any  # the conftest's ``Site``
Served = Any  # the conftest's ``ServedWitness``


@pytest.fixture
def site(tmp_path: Path, site_at: Callable[[Path], Site]) -> Site:
    s = site_at(tmp_path / "operator")
    s.run("demo")  # records a caucus night and signs a checkpoint
    return s


@pytest.fixture
def witness(site: Site, serve_witness: Callable[..., Served], tmp_path: Path) -> Served:
    served = serve_witness(tmp_path / "newsroom", site.public_key)
    cosigned = json.loads(site.run("witness", served.url, "--public-key", site.public_key, "--json").stdout)
    assert cosigned["tree_size"] > 0 and cosigned["witness"] == served.url
    site.run("verify", "--public-key", site.public_key, "--against", served.url)
    return served


def _held(served: Served) -> list[dict[str, Any]]:
    return list(httpx.get(f"{served.url}/v1/checkpoints", timeout=10).json()["checkpoints"])


def _caught(site: Site, served: Served, public_key: str) -> None:
    site.run("verify", "--public-key", public_key)  # a genuine signature: the key alone cannot tell
    caught = site.run("verify", "--public-key", public_key, "--against", served.url, "--json", code=1)
    found = json.loads(caught.stdout)["findings"]
    assert [f["kind"] for f in found] == ["witness"] and "rewritten" in found[0]["message"], found
    assert found[0]["message"].startswith(served.url)


def test_a_key_holder_who_rewrites_and_re_signs_is_caught_by_the_url_witness(site: Site, witness: Served) -> None:
    site.rewrite(reseal=site.keys / "checkpoint-key.pem")
    (site.keys / "checkpoint-key.signed.json").unlink()
    site.run("checkpoint")  # the same key home re-signs the rewritten history
    _caught(site, witness, site.public_key)
    refused = site.run("witness", witness.url, "--public-key", site.public_key, code=1)
    assert "REFUSED TO COSIGN" in refused.stderr and "rewritten" in refused.stderr
    assert len(_held(witness)) == 1, "the witness kept nothing of the rewrite"


def test_re_signing_with_a_new_key_is_caught_and_not_cosigned(site: Site, witness: Served, tmp_path: Path) -> None:
    load_or_create_signing_key(tmp_path / "new-keys")  # the insider's own key, which seals the rewrite too
    site.rewrite(reseal=tmp_path / "new-keys" / "checkpoint-key.pem")
    site.env["CAUCUS_KEY_HOME"] = str(tmp_path / "new-keys")
    site.run("checkpoint")
    new_key = str(tmp_path / "new-keys" / "checkpoint-key.pub")
    _caught(site, witness, new_key)
    refused = site.run("witness", witness.url, "--public-key", new_key, code=1)
    assert "REFUSED TO COSIGN" in refused.stderr and "not a trusted key" in refused.stderr
    assert len(_held(witness)) == 1


def test_the_url_witness_follows_a_growing_log_and_refuses_bad_proofs(site: Site, witness: Served) -> None:
    issued = json.loads(site.run("credentials", "issue", "--official", "Pat", "--json").stdout)
    site.run("simulate", "write", "--units", "5", "--token", str(issued["token"]))
    site.run("checkpoint")
    site.run("witness", witness.url, "--public-key", site.public_key)
    held = _held(witness)
    assert len(held) == 2 and held[0]["log_id"] == held[1]["log_id"]
    site.run("verify", "--against", witness.url)

    # The service checks what it is sent, not who sends it: a grown checkpoint with the proofs emptied
    # is refused, so is one with a proof hash changed; malformed offers are a 400, never a 5xx.
    site.run("checkpoint")
    last = held[-1]
    offer = _offer(site, last)
    base = f"{witness.url}/v1/logs/{last['log_id']}/checkpoints"
    assert any(offer["proofs"]), "the log grew in some partition since the witnessed checkpoint"
    for proofs in ([[] for _ in offer["proofs"]], [[h[:-2] + ("00" if h[-2:] != "00" else "11") for h in p] for p in offer["proofs"]]):
        answer = httpx.post(base, json={**offer, "proofs": proofs}, timeout=10)
        assert answer.status_code == 409 and "rewritten" in answer.json()["error"], answer.text
    assert held[0]["column_roots"] and any(offer["column_proofs"])
    for columns in ({"column_proofs": [[] for _ in offer["column_proofs"]]}, {"column_roots": [], "column_signature": ""}):
        answer = httpx.post(base, json={**offer, **columns}, timeout=10)
        assert answer.status_code == 409 and "headers" in answer.json()["error"], answer.text
    for bad in ({**offer, "checkpoint": "zz"}, {**offer, "checkpoint": offer["checkpoint"][:-2]}, {"event_id": 3},
                {**offer, "column_roots": ["00"]}, {**offer, "position": "nowhere"}, {**offer, "proofs": [["00" * 32] * 200]}):
        answer = httpx.post(base, json=bad, timeout=10)
        assert answer.status_code in (400, 422), answer.text
    assert len(_held(witness)) == 2
    answer = httpx.post(base, json=offer, timeout=10)
    assert answer.status_code == 200 and len(_held(witness)) == 3, answer.text
    site.run("verify", "--against", witness.url)


def _offer(site: Site, held: dict[str, Any]) -> dict[str, Any]:
    """What ``caucus witness URL`` sends for the log's latest checkpoint: built the same way, from the
    log as it stands and the checkpoint the witness holds."""
    from ledger.config import Settings, open_log
    from ledger.integrity.checkpoints import Checkpoint
    from ledger.integrity.keys import load_trusted_key
    from ledger.integrity.scan import scan_log
    from ledger.integrity.store import open_checkpoint_store
    from ledger.integrity.verify import trusted_checkpoints
    from ledger.integrity.witness_proofs import partition_proofs

    log = open_log(Settings(data_dir=site.data), read_only=True)
    store = open_checkpoint_store(Settings(data_dir=site.data), create=False)
    assert store is not None
    try:
        scan = scan_log(log)
        signed = trusted_checkpoints(scan, store.checkpoints(), [load_trusted_key(Path(site.public_key))])[-1]
    finally:
        log.close()
        store.close()
    old = Checkpoint.from_bytes(bytes.fromhex(held["checkpoint"]))
    proofs = partition_proofs(scan, old, signed.checkpoint)
    column_proofs = partition_proofs(scan, old, signed.checkpoint, columns=True)
    return {"event_id": signed.event_id, "position": str(signed.position), "checkpoint": signed.checkpoint.to_bytes().hex(),
            "public_key": signed.public_key.hex(), "signature": signed.signature.hex(),
            "proofs": [[h.hex() for h in proof] for proof in proofs],
            "column_roots": [r.hex() for r in signed.column_roots], "column_signature": signed.column_signature.hex(),
            "column_proofs": [[h.hex() for h in proof] for proof in column_proofs]}


def test_a_pinned_witness_key_unmasks_an_impostor_witness(
    site: Site, witness: Served, serve_witness: Callable[..., Served], tmp_path: Path
) -> None:
    """The insider rewrites, re-signs with a new key and stands up a witness of their own that cosigns
    the rewrite: asked by URL alone it vouches for the rewrite; with the real witness's key pinned it
    is named as another witness."""
    real_key = str(tmp_path / "newsroom" / "witness-key.pub")
    site.run("verify", "--against", witness.url, "--witness-key", real_key)
    load_or_create_signing_key(tmp_path / "new-keys")  # the insider's own key, which seals the rewrite too
    site.rewrite(reseal=tmp_path / "new-keys" / "checkpoint-key.pem")
    site.env["CAUCUS_KEY_HOME"] = str(tmp_path / "new-keys")
    site.run("checkpoint")
    new_key = str(tmp_path / "new-keys" / "checkpoint-key.pub")
    impostor = serve_witness(tmp_path / "impostor", new_key)
    site.run("witness", impostor.url, "--public-key", new_key)
    site.run("verify", "--public-key", new_key, "--against", impostor.url)  # unpinned: the impostor vouches
    caught = site.run("verify", "--public-key", new_key, "--against", impostor.url, "--witness-key", real_key,
                      "--json", code=1)
    found = json.loads(caught.stdout)["findings"]
    assert [f["kind"] for f in found] == ["witness"] and "not a pinned witness key" in found[0]["message"], found
    missing = site.run("verify", "--against", witness.url, "--witness-key", str(tmp_path / "nowhere.pub"), code=2)
    assert "nowhere.pub" in missing.stderr
