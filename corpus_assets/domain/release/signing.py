"""Optional Ed25519 signatures for release manifests: who vouches for this content digest.

Whoever can replace the artifacts can replace the manifest too, so authenticity comes from a key
kept outside the release: the publisher signs the sha256 of the exact ``manifest.json`` bytes with
``CORPUS_SIGNING_KEY`` (unset: unsigned) into ``manifest.sig``; a consumer verifies with a public
key file it holds itself. A key file inside the release's directory is refused, and error messages
never echo key material.

Format and decisions: docs/releases.md#signing
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Union

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.hashing import canonical_json

__all__ = [
    "KEY_ENV",
    "SIGNATURE_FORMAT",
    "SigningKeyError",
    "SignatureError",
    "Keypair",
    "generate_keypair",
    "load_private_key",
    "private_key_from_env",
    "load_public_key",
    "key_id",
    "sign_manifest",
    "verify_manifest_signature",
    "signature_key_id",
    "refuse_key_inside",
]

KEY_ENV = "CORPUS_SIGNING_KEY"
SIGNATURE_FORMAT = "corpus-release-sig/1"
_ALGORITHM = "ed25519"


class SigningKeyError(CorpusError, ValueError):
    """A key cannot be loaded, or sits where it cannot be trusted."""


class SignatureError(CorpusError, ValueError):
    """A manifest signature is malformed, made by another key, or does not match the manifest."""


@dataclass(frozen=True)
class Keypair:
    private_b64: str  # what goes into CORPUS_SIGNING_KEY
    private_pem: bytes  # the same key as PKCS#8 PEM (also accepted by CORPUS_SIGNING_KEY)
    public_pem: bytes  # what a consumer keeps in a file outside the release
    public_raw: bytes
    key_id: str

    def write_public(self, path: Path) -> Path:
        path = Path(path)
        path.write_bytes(self.public_pem)
        return path


def key_id(public_key: Ed25519PublicKey) -> str:
    """sha256 hex of the raw 32-byte public key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def generate_keypair() -> Keypair:
    priv = Ed25519PrivateKey.generate()
    raw_priv = priv.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    pub = priv.public_key()
    return Keypair(
        private_b64=base64.b64encode(raw_priv).decode("ascii"),
        private_pem=priv.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        public_pem=pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
        public_raw=pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw),
        key_id=key_id(pub),
    )


def _b64_32(text: bytes) -> Optional[bytes]:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 32 else None


def load_private_key(value: Union[str, bytes], *, what: str = "private key") -> Ed25519PrivateKey:
    """Ed25519 private key from base64 of the raw 32 bytes or an unencrypted PEM."""
    data = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(data.strip(), password=None)
        except (ValueError, TypeError) as exc:
            raise SigningKeyError(f"{what}: PEM could not be loaded ({type(exc).__name__}); use an unencrypted PKCS#8 Ed25519 key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningKeyError(f"{what}: PEM holds a {type(key).__name__}, not an Ed25519 key")
        return key
    raw = _b64_32(data)
    if raw is None:
        raise SigningKeyError(f"{what}: expected base64 of a 32-byte Ed25519 private key, or a PEM")
    return Ed25519PrivateKey.from_private_bytes(raw)


def private_key_from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[Ed25519PrivateKey]:
    """The signing key from ``CORPUS_SIGNING_KEY``, or None when it is unset or empty."""
    env = os.environ if environ is None else environ
    value = env.get(KEY_ENV, "")
    if not value.strip():
        return None
    return load_private_key(value, what=f"environment variable {KEY_ENV}")


def load_public_key(key: Union[bytes, str, Path, Ed25519PublicKey]) -> Ed25519PublicKey:
    """Ed25519 public key from a file path (str / Path) or bytes: PEM, base64 of raw 32 bytes, raw 32 bytes."""
    if isinstance(key, Ed25519PublicKey):
        return key
    what = "public key"
    if isinstance(key, (str, Path)):
        path = Path(key)
        what = f"public key file {path}"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise SigningKeyError(f"{what} does not exist") from None
    else:
        data = bytes(key)
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            pub = serialization.load_pem_public_key(data.strip())
        except ValueError as exc:
            raise SigningKeyError(f"{what}: PEM could not be loaded ({exc})") from None
        if not isinstance(pub, Ed25519PublicKey):
            raise SigningKeyError(f"{what}: PEM holds a {type(pub).__name__}, not an Ed25519 key")
        return pub
    raw = data if len(data) == 32 else _b64_32(data)
    if raw is None:
        raise SigningKeyError(f"{what}: expected a PEM, base64 of the raw 32-byte key, or the raw 32 bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def refuse_key_inside(key_path: Path, release_path: Path) -> None:
    """Refuse a verification key stored inside the release it is meant to verify.

    Checked against the build directory and, when it is a published release's build directory
    (its parent holds CURRENT), against the release directory with all its builds."""
    key = Path(key_path).resolve()
    build = Path(release_path).resolve()
    roots = [build]
    if (build.parent / "CURRENT").is_file():
        roots.append(build.parent)
    for root in roots:
        if key == root or root in key.parents:
            raise SigningKeyError(
                f"public key {key_path} is inside the release directory {root}: a key shipped with the data "
                "proves nothing; keep the verification key outside the release"
            )


def sign_manifest(manifest_bytes: bytes, private_key: Ed25519PrivateKey) -> bytes:
    """The ``manifest.sig`` bytes for these exact ``manifest.json`` bytes."""
    digest = hashlib.sha256(manifest_bytes).digest()
    sig = private_key.sign(digest)
    return canonical_json(
        {
            "format": SIGNATURE_FORMAT,
            "algorithm": _ALGORITHM,
            "key_id": key_id(private_key.public_key()),
            "manifest_sha256": digest.hex(),
            "signature": base64.b64encode(sig).decode("ascii"),
        }
    )


def _parse_signature(sig_bytes: bytes) -> dict:
    try:
        sig = json.loads(sig_bytes)
    except (ValueError, UnicodeDecodeError):
        raise SignatureError("signature file is not valid JSON") from None
    required = {"format", "algorithm", "key_id", "manifest_sha256", "signature"}
    if not isinstance(sig, dict) or set(sig) != required:
        raise SignatureError(f"signature file must hold exactly the fields {sorted(required)}")
    if sig["format"] != SIGNATURE_FORMAT or sig["algorithm"] != _ALGORITHM:
        raise SignatureError(f"unsupported signature format {sig['format']!r} / algorithm {sig['algorithm']!r}")
    return sig


def signature_key_id(sig_bytes: bytes) -> str:
    """The key id a ``manifest.sig`` claims (not verified)."""
    return _parse_signature(sig_bytes)["key_id"]


def verify_manifest_signature(manifest_bytes: bytes, sig_bytes: bytes, public_key: Ed25519PublicKey) -> str:
    """Check ``manifest.sig`` against the manifest bytes and the trusted key; returns the key id."""
    sig = _parse_signature(sig_bytes)
    expected = key_id(public_key)
    if sig["key_id"] != expected:
        raise SignatureError(f"signed by key {sig['key_id']}, but the trusted public key is {expected}")
    digest = hashlib.sha256(manifest_bytes).digest()
    if sig["manifest_sha256"] != digest.hex():
        raise SignatureError(
            f"signature is for manifest sha256 {sig['manifest_sha256']}, but manifest.json has {digest.hex()}"
        )
    try:
        raw_sig = base64.b64decode(sig["signature"], validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise SignatureError("signature is not valid base64") from None
    try:
        public_key.verify(raw_sig, digest)
    except InvalidSignature:
        raise SignatureError("signature does not verify with the trusted public key") from None
    return expected
