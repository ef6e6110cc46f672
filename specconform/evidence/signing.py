"""Ed25519 keys and the signed attestation: a DSSE envelope over an in-toto Statement v1.

The attestation (`attestation.dsse.json`) is a DSSE envelope::

    {"payloadType": "application/vnd.in-toto+json",
     "payload": base64(statement),
     "signatures": [{"keyid": sha256(raw public key), "sig": base64(Ed25519(PAE))}]}

where PAE is DSSE's pre-authentication encoding of (payloadType, payload), and the
statement lists every file of the archive except the attestation itself (SHA256SUMS
included) with its sha256, plus a predicate naming the run, its protocol hash and its
verdict. Ed25519 signatures are deterministic, so the same statement signed with the
same key gives the same envelope bytes.

Keys are PEM files: the private key PKCS#8 unencrypted (mode 0600), the public key
SubjectPublicKeyInfo.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from specconform.evidence.jsonio import canonical_json_bytes
from specconform.util.errors import EvidenceError, UsageError

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://specconform.dev/evidence/v1"
SIGNING_KEY_ENV = "SPECCONFORM_SIGNING_KEY"


# --- keys ------------------------------------------------------------------------------


def generate_key_pem() -> tuple[bytes, bytes]:
    """A new Ed25519 key pair as (private PKCS#8 PEM, public PEM)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return private, public_key_pem(key.public_key())


def public_key_pem(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def keyid(public: Ed25519PublicKey) -> str:
    """sha256 (hex) of the raw 32-byte public key: names the key in the envelope."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def load_private_key(path: Path) -> Ed25519PrivateKey:
    data = _read_key_file(path, "signing key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{path}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"{path}: not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    data = _read_key_file(path, "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{path}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(f"{path}: not an Ed25519 public key")
    return key


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: {what} file not found") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read {what}: {exc.strerror}") from None


def resolve_signing_key(
    key_opt: Path | str | None, env: Mapping[str, str] | None = None, *, sign: bool = True
) -> Path | None:
    """The signing key file for a run: `--key FILE`, else $SPECCONFORM_SIGNING_KEY.

    Returns None when `sign` is False (an unsigned run; a --key given with it is a
    contradiction and an error). Raises UsageError when signing is asked for and no key
    is given, or the key file does not exist. Call it before running a protocol so that
    a missing key fails in a second, not after the run.
    """
    env = os.environ if env is None else env
    if not sign:
        if key_opt is not None:
            raise UsageError("--key and --no-sign contradict each other; pass one of them")
        return None
    chosen = key_opt if key_opt is not None else env.get(SIGNING_KEY_ENV) or None
    if chosen is None:
        raise UsageError(
            f"no signing key: pass --key FILE, set {SIGNING_KEY_ENV}, "
            "or pass --no-sign for an unsigned archive"
        )
    path = Path(chosen)
    if not path.is_file():
        raise UsageError(f"{path}: signing key file not found")
    return path


# --- statement and envelope ------------------------------------------------------------


def build_statement(subject_digests: Mapping[str, str], predicate: Mapping[str, Any]) -> dict:
    """An in-toto Statement v1 over {file name: sha256 hex}, subjects sorted by name."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": name, "digest": {"sha256": subject_digests[name]}}
            for name in sorted(subject_digests)
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": dict(predicate),
    }


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what the signature actually covers."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign_statement(statement: Mapping[str, Any], key: Ed25519PrivateKey) -> bytes:
    """The DSSE envelope (canonical JSON bytes) carrying `statement`, signed with `key`."""
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    signature = key.sign(pae(PAYLOAD_TYPE, payload))
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [
            {"keyid": keyid(key.public_key()), "sig": base64.b64encode(signature).decode()}
        ],
    }
    return canonical_json_bytes(envelope)


def open_envelope(data: bytes, name: str) -> tuple[dict, bytes, list[dict]]:
    """Parse an envelope into (statement, payload bytes, signatures) without checking
    any signature; raise EvidenceError naming `name` if its structure is wrong."""
    try:
        envelope = json.loads(data)
        if envelope.get("payloadType") != PAYLOAD_TYPE:
            raise EvidenceError(f"{name}: payloadType is not {PAYLOAD_TYPE}")
        payload = base64.b64decode(envelope["payload"], validate=True)
        statement = json.loads(payload)
        signatures = envelope["signatures"]
    except EvidenceError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError):
        raise EvidenceError(f"{name}: not a DSSE envelope") from None
    if not isinstance(statement, dict) or not isinstance(signatures, list) or not signatures:
        raise EvidenceError(f"{name}: not a signed DSSE envelope")
    if statement.get("_type") != STATEMENT_TYPE:
        raise EvidenceError(f"{name}: statement _type is not {STATEMENT_TYPE}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise EvidenceError(f"{name}: predicateType is not {PREDICATE_TYPE}")
    return statement, payload, signatures


def check_signature(
    payload: bytes, signatures: list[dict], public: Ed25519PublicKey, name: str
) -> str:
    """Verify that one signature by `public` covers `payload`; return its keyid."""
    wanted = keyid(public)
    stated = [s.get("keyid") for s in signatures if isinstance(s, dict)]
    if wanted not in stated:
        raise EvidenceError(
            f"{name}: signed by key(s) {', '.join(map(str, stated))}, "
            f"not by the given public key {wanted}"
        )
    for entry in signatures:
        if entry.get("keyid") != wanted:
            continue
        try:
            public.verify(base64.b64decode(entry["sig"], validate=True), pae(PAYLOAD_TYPE, payload))
            return wanted
        except (InvalidSignature, ValueError, KeyError, TypeError):
            continue
    raise EvidenceError(f"{name}: signature invalid for key {wanted}")
