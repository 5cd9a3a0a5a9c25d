"""Credentials: tokens shown once and stored only as salted digests; roles decide what may be sent."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from producers.commands import CommandKind
from producers.credentials import AuthFailure, Credential, CredentialStore, authorize


def test_issue_and_authenticate(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "creds.json")
    chair, token = store.issue("chair", unit_id="FM5")
    assert token.startswith(f"ckl_{chair.cred_id}_")
    text = store.path.read_text()
    assert token.split("_", 2)[2] not in text  # the secret is not stored
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    proved = store.authenticate(token)
    assert isinstance(proved, Credential) and proved.actor == f"chair:FM5#{chair.cred_id}"
    # another store object on the same file (the HTTP service beside a CLI) sees new credentials
    official, official_token = store.issue("official", name="Pat")
    assert isinstance(CredentialStore(store.path).authenticate(official_token), Credential)
    assert official.actor == f"official:Pat#{official.cred_id}"
    assert {c.cred_id for c in store.list()} == {chair.cred_id, official.cred_id}
    assert "digest" not in json.dumps([c.public() for c in store.list()])


@pytest.mark.parametrize("token", [None, "", "garbage", "ckl_", "ckl_nope_secret", "Bearer x"])
def test_bad_tokens(tmp_path: Path, token: str | None) -> None:
    store = CredentialStore(tmp_path / "creds.json")
    store.issue("chair", unit_id="FM5")
    failure = store.authenticate(token)
    assert isinstance(failure, AuthFailure) and failure.problem.code == "UNAUTHENTICATED"
    assert failure.problem.field == "authorization" and failure.problem.message


def test_a_wrong_secret_names_the_claimed_credential(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "creds.json")
    chair, token = store.issue("chair", unit_id="FM5")
    failure = store.authenticate(token[:-3] + "AAA")
    assert isinstance(failure, AuthFailure) and failure.problem.code == "UNAUTHENTICATED"
    assert failure.claimed == f"unverified:{chair.actor}"


def test_revoked_tokens_stop_working(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "creds.json")
    chair, token = store.issue("chair", unit_id="FM5")
    store.revoke(chair.cred_id)
    failure = store.authenticate(token)
    assert isinstance(failure, AuthFailure) and failure.problem.code == "REVOKED"
    with pytest.raises(KeyError):
        store.revoke("nope")


def test_roles(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "creds.json")
    chair, _ = store.issue("chair", unit_id="FM5")
    official, _ = store.issue("official", name="Pat")
    for kind in CommandKind:
        assert authorize(official, kind, "anything") is None
    assert authorize(chair, CommandKind.REPORT, "FM5") is None
    assert authorize(chair, CommandKind.OPEN, "FM5") is None
    wrong = authorize(chair, CommandKind.REPORT, "E01")
    assert wrong is not None and wrong.code == "WRONG_UNIT" and "FM5" in wrong.message
    for kind in (CommandKind.CORRECT, CommandKind.TOSS, CommandKind.DEFINE):
        denied = authorize(chair, kind, "FM5")
        assert denied is not None and denied.code == "FORBIDDEN" and "official" in denied.message
    with pytest.raises(ValueError):
        store.issue("chair")
    # the name goes into every record the holder writes (official:<name>#<id>): it must show, and hide nothing
    for blank in ("\u3164", "\u200b", " ", "Pa\u202et"):
        with pytest.raises(ValueError, match="must show a letter or digit"):
            store.issue("official", name=blank)


def test_lock_files_beside_secrets_are_private(tmp_path: Path) -> None:
    """The credential store's lock and the intake's lock are the owner's only, whatever the umask; a
    lock file an older version left readable by others is made private on its next use."""
    import os

    from ledger.files import lock_beside
    from producers.intake_lock import DirectoryLock

    old = os.umask(0o022)
    try:
        store = CredentialStore(tmp_path / "credentials.json")
        store.issue("official", name="Pat")
        lock = tmp_path / "credentials.json.lock"
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600
        lock.chmod(0o644)
        with lock_beside(tmp_path / "credentials.json"):
            pass
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600
        intake = DirectoryLock(tmp_path / "intake")
        with intake.held():
            pass
        intake.close()
        assert stat.S_IMODE((tmp_path / "intake" / "intake.lock").stat().st_mode) == 0o600
    finally:
        os.umask(old)
