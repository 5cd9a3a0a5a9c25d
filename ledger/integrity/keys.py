"""The Ed25519 key pair that signs checkpoints, and the public keys a verifier trusts.

Why Ed25519: small keys and signatures, deterministic signing (no nonce to get wrong), and the
scheme the transparency-log ecosystem (signed notes, Sigsum) uses, so an auditor's tools check it.

Where keys live: the private key is a PEM (PKCS #8) file readable by its owner only (0600); it is
given by path (``--key`` / ``CAUCUS_CHECKPOINT_KEY``) or, by default, generated on first use as
``checkpoint-key.pem`` in the key home (``CAUCUS_KEY_HOME``, else ``$XDG_CONFIG_HOME/caucus``, else
``~/.config/caucus``), never in the data directory: a key kept beside the log it vouches for signs
whatever anyone who can rewrite that directory puts there. The public half is written next to it and
into the data directory as ``checkpoint-key.pub`` (SubjectPublicKeyInfo PEM) for auditors. A data
directory from before keeps its own key until it is moved. A verifier trusts the public keys it is
given (``--public-key`` / ``CAUCUS_CHECKPOINT_PUBLIC_KEY``), else the key home's, else the data
directory's (with a warning: whoever can write the directory can replace it); it never trusts a key
because a checkpoint carries it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "KeyFileError",
    "PRIVATE_KEY_FILE",
    "PUBLIC_KEY_FILE",
    "publish_public_key",
    "other_public_key",
    "ENV_PRIVATE_KEY",
    "ENV_PUBLIC_KEY",
    "SigningKey",
    "TrustedKey",
    "key_id",
    "generate_key",
    "load_signing_key",
    "load_or_create_signing_key",
    "key_home",
    "ENV_KEY_HOME",
    "default_trusted_paths",
    "load_trusted_key",
    "write_public_key",
    "ResolvedKey",
    "resolve_signing_key",
    "held_signing_key",
]

PRIVATE_KEY_FILE = "checkpoint-key.pem"
PUBLIC_KEY_FILE = "checkpoint-key.pub"
ENV_PRIVATE_KEY = "CAUCUS_CHECKPOINT_KEY"
ENV_PUBLIC_KEY = "CAUCUS_CHECKPOINT_PUBLIC_KEY"
ENV_KEY_HOME = "CAUCUS_KEY_HOME"


def key_home() -> Path:
    """Where the default signing key lives (outside every data directory)."""
    if os.environ.get(ENV_KEY_HOME):
        return Path(os.environ[ENV_KEY_HOME])
    config = os.environ.get("XDG_CONFIG_HOME")
    return (Path(config) if config else Path.home() / ".config") / "caucus"


class KeyFileError(ValueError):
    """A key file is missing, unreadable, not an Ed25519 key, or readable by others."""



def key_id(public_key: bytes) -> str:
    """First 8 bytes of SHA-256 over the raw 32-byte public key, in hex: short enough to read, and
    always checked together with the key itself."""
    return hashlib.sha256(public_key).hexdigest()[:16]


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclass(frozen=True)
class TrustedKey:
    """A public key a verifier accepts signatures from."""

    public_key: bytes  # raw, 32 bytes

    @property
    def key_id(self) -> str:
        return key_id(self.public_key)

    def verifies(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True

    def pem(self) -> bytes:
        return Ed25519PublicKey.from_public_bytes(self.public_key).public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


@dataclass(frozen=True)
class SigningKey:
    """The private key and what a checkpoint says about it."""

    private: Ed25519PrivateKey

    @property
    def public_key(self) -> bytes:
        return _raw_public(self.private.public_key())

    @property
    def key_id(self) -> str:
        return key_id(self.public_key)

    @property
    def trusted(self) -> TrustedKey:
        return TrustedKey(self.public_key)

    def sign(self, message: bytes) -> bytes:
        return self.private.sign(message)

    def private_pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def generate_key() -> SigningKey:
    return SigningKey(Ed25519PrivateKey.generate())


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise KeyFileError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} {path}: {exc.strerror}") from None


def load_signing_key(path: Path) -> SigningKey:
    """Read a PEM Ed25519 private key; refuse one that group or others may read, as ssh does."""
    data = _read(path, "checkpoint signing key")
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"checkpoint signing key {path} is accessible by other users (mode {stat.S_IMODE(mode):04o}); "
            f"run: chmod 600 {path}"
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"checkpoint signing key {path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"checkpoint signing key {path} is a {type(key).__name__}, not an Ed25519 key")
    return SigningKey(key)


def write_public_key(key: SigningKey, path: Path) -> None:
    path.write_bytes(key.trusted.pem())


def publish_public_key(key: SigningKey, data_dir: Path) -> str | None:
    """Leave the public half in the data directory for auditors, unless one is there already. The file
    is what a verifier with no key home trusts: replacing it (with the key of whoever signs or writes
    next, from another key home) would turn every record sealed before into a forgery in its eyes. After a
    key change auditors are given both keys. Returns a warning when the file holds another key.

    Written whole under a temporary name, then linked into place, which fails if the file is there: of
    two first writers with two keys one publishes and the other is told, and no reader sees half a file."""
    if not (data_dir / PUBLIC_KEY_FILE).exists() and _link_new(key.trusted.pem(), data_dir / PUBLIC_KEY_FILE):
        return None
    other = other_public_key(key, data_dir)
    return None if other is None else (f"{other}; it was left as it is (auditors who trust it verify what that key "
                                       "signed): after a key change, give auditors both public keys (--public-key A "
                                       "--public-key B, or CAUCUS_CHECKPOINT_PUBLIC_KEY=A:B)")


def _link_new(content: bytes, path: Path) -> bool:
    """Create ``path`` holding ``content`` if it does not exist (whole, atomically); False if it does."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    temporary.write_bytes(content)
    try:
        os.link(temporary, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links (vfat, some network mounts): exclusive create
        try:
            with open(path, "xb") as out:
                out.write(content)
            return True
        except FileExistsError:
            return False
    finally:
        temporary.unlink(missing_ok=True)


def other_public_key(key: SigningKey, data_dir: Path) -> str | None:
    """What to tell the holder of ``key`` when the data directory's public key is another one."""
    path = data_dir / PUBLIC_KEY_FILE
    if not path.exists():
        return None
    try:
        there = load_trusted_key(path)
    except KeyFileError as exc:
        return str(exc)
    if there.public_key == key.public_key:
        return None
    return f"{path} holds key {there.key_id}, not this signing key {key.key_id}"


def load_or_create_signing_key(
    data_dir: Path, *, private_name: str = PRIVATE_KEY_FILE, public_name: str = PUBLIC_KEY_FILE
) -> tuple[SigningKey, bool]:
    """The key pair in a directory, generated on first use. Returns (key, created).

    The private key file is created with O_EXCL and mode 0600 so two processes starting at once
    cannot both write one, and it is never readable by others, not even for an instant.
    """
    path = data_dir / private_name
    if path.exists():
        key = load_signing_key(path)
        pub = data_dir / public_name
        if not pub.exists():
            write_public_key(key, pub)
        return key, False
    data_dir.mkdir(parents=True, exist_ok=True)
    key = generate_key()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return load_signing_key(path), False
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_pem())
    write_public_key(key, data_dir / public_name)
    return key, True


@dataclass(frozen=True)
class ResolvedKey:
    """The signing key chosen, where it is, whether it was made just now, and why it deserves little
    trust if it does (a data directory's own key)."""

    key: SigningKey
    path: Path
    created: bool = False
    warning: str | None = None


def resolve_signing_key(given: Path | None, data_dir: Path) -> ResolvedKey:
    """The ledger's signing key, for checkpoints and writer seals alike: ``given`` (an option or the
    setting), else ``CAUCUS_CHECKPOINT_KEY``, else a data directory's own key from before the key home
    (with a warning), else the key home's, generated on first use."""
    path = _configured_key(given)
    if path is not None:
        return ResolvedKey(load_signing_key(path), path)
    if (data_dir / PRIVATE_KEY_FILE).exists():
        path = data_dir / PRIVATE_KEY_FILE
        return ResolvedKey(load_signing_key(path), path, warning=(
            f"signing with the key in the data directory ({path}), beside the log it vouches for: anyone who can "
            f"rewrite the directory can sign with it. Move it to {key_home()} (or give --key) and share its public "
            "half with auditors."))
    try:
        key, created = load_or_create_signing_key(key_home())
    except OSError as exc:  # the key home is a file, not writable, on a full disk ...
        raise KeyFileError(
            f"the ledger's signing key cannot be read or made in the key home {key_home()} ({exc.strerror or exc}): "
            f"set {ENV_KEY_HOME} to a directory this user can write, or give the key ({ENV_PRIVATE_KEY}, or "
            "checkpoint.key in the settings file)") from exc
    return ResolvedKey(key, key_home() / PRIVATE_KEY_FILE, created)


def held_signing_key(given: Path | None, data_dir: Path) -> SigningKey | None:
    """The key ``resolve_signing_key`` would choose, for signing what may as well go unsigned (a recount
    package's manifest): the same one path, never another key in its place (a manifest signed by a key the
    auditors do not trust is worse than none); None when that key cannot be read, and none is ever made."""
    path = _configured_key(given)
    if path is None:
        path = data_dir / PRIVATE_KEY_FILE if (data_dir / PRIVATE_KEY_FILE).exists() else key_home() / PRIVATE_KEY_FILE
    if not os.access(path, os.R_OK):
        return None
    try:
        return load_signing_key(path)
    except KeyFileError:
        return None


def _configured_key(given: Path | None) -> Path | None:
    return given or (Path(os.environ[ENV_PRIVATE_KEY]) if os.environ.get(ENV_PRIVATE_KEY) else None)


def load_trusted_key(path: Path) -> TrustedKey:
    """A public key to verify with: a PEM public key, a PEM private key (its public half), or the
    64 hex digits of a raw key (as ``caucus prove`` prints it)."""
    data = _read(path, "public key file")
    text = data.strip()
    if len(text) == 64:
        try:
            return TrustedKey(bytes.fromhex(text.decode("ascii")))
        except ValueError:
            pass
    try:
        pub = serialization.load_pem_public_key(data)
    except ValueError:
        try:
            priv = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            raise KeyFileError(f"{path} is neither a PEM Ed25519 public key nor 64 hex digits") from None
        if not isinstance(priv, Ed25519PrivateKey):
            raise KeyFileError(f"{path} holds a {type(priv).__name__}, not an Ed25519 key") from None
        return TrustedKey(_raw_public(priv.public_key()))
    if not isinstance(pub, Ed25519PublicKey):
        raise KeyFileError(f"{path} holds a {type(pub).__name__}, not an Ed25519 public key")
    return TrustedKey(_raw_public(pub))


def default_trusted_paths(data_dir: Path) -> tuple[list[Path], str | None]:
    """The public keys a verifier trusts when none is given, and a warning when that trust is weak.

    A data directory that still holds its own private key (from before the key home) is checked with
    it; otherwise the key home's public key; otherwise the copy in the data directory, which anyone
    able to write that directory can replace with their own.
    """
    if (data_dir / PRIVATE_KEY_FILE).exists():
        return [data_dir / PRIVATE_KEY_FILE], (
            f"the signing key is in the data directory {data_dir}, beside the log it vouches for; move it out "
            f"(e.g. to {key_home() / PRIVATE_KEY_FILE}) and pin its public key with --public-key"
        )
    home = key_home() / PUBLIC_KEY_FILE
    if os.access(home, os.R_OK):  # another user's key home (or none) is no key home for this user
        return [home], None
    if (data_dir / PUBLIC_KEY_FILE).exists():
        return [data_dir / PUBLIC_KEY_FILE], (
            f"trusting the public key found in the data directory ({data_dir / PUBLIC_KEY_FILE}): whoever can write "
            "that directory can replace it; pin the signer's key with --public-key"
        )
    return [], None
