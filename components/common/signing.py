"""Signatures others can verify: model folders and Triton repositories signed with
OpenSSF model-signing (`model_signing`, key-based, offline; the upstream
`model_signing verify key` CLI accepts them), and DSSE envelopes for in-toto statements
(the release's SLSA provenance), signed with the same kind of key: ECDSA P-256 in PEM.

A folder's signature is `model.sig` inside it. It covers every file but itself, our
Merkle manifest included, so one signature binds the Merkle root and the bytes. The
model-signing digest of a folder (its statement's subject, SHA-256 over the files'
digests in path order) is what provenance names as the folder's `sha256`.

Keys come from files (a mounted Secret on a cluster); their contents never reach logs,
records or pipeline YAML.
"""

from __future__ import annotations

import base64
import json
import os

from .errors import InputError

SIGNATURE_NAME = "model.sig"
HASHES = ("sha256", "blake3")
# The upstream CLI's `verify key` re-hashes with SHA-256 file serialization whatever the
# signature says (model-signing 1.1.1), so SHA-256 is the default that others can check.
DEFAULT_HASH = "sha256"
IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"


class SignatureError(InputError):
    """A signature that is missing, malformed or does not verify: nothing is deployed."""


def _read_pem(path: str | None, what: str) -> bytes:
    if not path:
        raise InputError(f"no {what} given")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise InputError(f"{path}: {what} unreadable: {exc.strerror or exc}") from None
    if b"-----BEGIN" not in data:
        raise InputError(f"{path}: {what} is not a PEM file")
    return data


def load_private_key(path: str | None):
    """The ECDSA P-256 private key in `path`; InputError naming the file otherwise."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(_read_pem(path, "signing key"), password=None)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path}: signing key is not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise InputError(f"{path}: signing key must be ECDSA P-256 (openssl ecparam -name prime256v1 -genkey)")
    return key


def load_public_key(path: str | None):
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(_read_pem(path, "public key"))
    except (ValueError, TypeError) as exc:
        raise InputError(f"{path}: public key is not a PEM public key ({exc})") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise InputError(f"{path}: public key must be ECDSA P-256")
    return key


def generate_keys(private_path: str, public_path: str) -> None:
    """A new P-256 key pair; the private key is written owner-only and never printed."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for path, data, mode in ((private_path, private, 0o600), (public_path, public, 0o644)):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(path, mode)


def key_file(given: str | None = None, public: bool = False) -> str | None:
    """The signing key file given, else `$LLMOPS_SIGNING_KEY` (`$LLMOPS_SIGNING_PUBLIC_KEY`
    for the public key); None: unsigned."""
    return given or os.environ.get("LLMOPS_SIGNING_PUBLIC_KEY" if public else "LLMOPS_SIGNING_KEY") or None


def _hashing(hash_name: str):
    import model_signing

    if hash_name not in HASHES:
        raise InputError(f"hash {hash_name!r}: use one of {', '.join(HASHES)}")
    return (
        model_signing.hashing.Config()
        .use_file_serialization(hashing_algorithm=hash_name)
        .set_ignored_paths(paths=[SIGNATURE_NAME], ignore_git_paths=False)
    )


def signature_path(folder: str, signature: str | None = None) -> str:
    return signature or os.path.join(folder, SIGNATURE_NAME)


def sign_folder(
    folder: str,
    private_key: str | None,
    signature: str | None = None,
    hash_name: str = DEFAULT_HASH,
    certificate: str | None = None,
    chain: tuple[str, ...] = (),
    sigstore: bool = False,
) -> str:
    """Sign every file of `folder` (but the signature) with model-signing; returns the
    folder's model-signing digest (SHA-256 over its files' digests).

    Modes: a private key (the default, offline); a private key with its signing
    `certificate` and `chain` (offline, verified against the chain); `sigstore` (keyless,
    needs a network and an OIDC identity; not exercised here)."""
    import model_signing

    if not os.path.isdir(folder):
        raise InputError(f"{folder}: not a folder to sign")
    config = model_signing.signing.Config()
    if sigstore:
        config = config.use_sigstore_signer()
    else:
        load_private_key(private_key)  # a clear error before model-signing's own
        if certificate:
            for path in (certificate, *chain):
                _read_pem(path, "certificate")
            config = config.use_certificate_signer(
                private_key=private_key, signing_certificate=certificate, certificate_chain=chain
            )
        else:
            config = config.use_elliptic_key_signer(private_key=private_key)
    out = signature_path(folder, signature)
    if os.path.exists(out):
        os.remove(out)  # a stale signature is never left behind
    try:
        config.set_hashing_config(_hashing(hash_name)).sign(folder, out)
    except (ValueError, TypeError) as exc:
        raise SignatureError(f"{folder}: signing failed: {' '.join(str(exc).split())[:300]}") from None
    return read_signature(out)["digest"]


def read_signature(signature: str) -> dict:
    """What a signature states (unverified): its folder digest, hash and file digests."""
    try:
        with open(signature, encoding="utf-8") as handle:
            bundle = json.load(handle)
        statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
        predicate = statement["predicate"]
        return {
            "digest": statement["subject"][0]["digest"]["sha256"],
            "name": statement["subject"][0]["name"],
            "hash": predicate["serialization"]["hash_type"],
            "files": {r["name"]: r["digest"] for r in predicate["resources"]},
        }
    except FileNotFoundError:
        raise SignatureError(f"{signature}: no signature (unsigned)") from None
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise SignatureError(f"{signature}: not a model-signing signature ({type(exc).__name__}: {exc})") from None


def verify_folder(
    folder: str,
    public_key: str | None,
    signature: str | None = None,
    chain: tuple[str, ...] = (),
    sigstore: tuple[str, str] | None = None,
) -> dict:
    """Check `folder` against its signature (model-signing's verifier: the signature,
    then every file re-hashed) with `public_key`, or a certificate `chain`, or a Sigstore
    (identity, OIDC issuer); SignatureError naming what failed."""
    import model_signing

    sig = signature_path(folder, signature)
    stated = read_signature(sig)
    config = model_signing.verifying.Config()
    if sigstore:
        config, trust = config.use_sigstore_verifier(identity=sigstore[0], oidc_issuer=sigstore[1]), sigstore[0]
    elif chain:
        for path in chain:
            _read_pem(path, "certificate")
        config, trust = config.use_certificate_verifier(certificate_chain=chain), os.path.basename(chain[0])
    else:
        load_public_key(public_key)
        config, trust = config.use_elliptic_key_verifier(public_key=public_key), os.path.basename(public_key)
    try:
        config.verify(folder, sig)
    except Exception as exc:  # model-signing raises ValueError and library errors alike
        detail = _why(str(exc)) or type(exc).__name__
        raise SignatureError(
            f"{folder}: signature {os.path.basename(sig)} does not verify with {trust}: {detail}"
        ) from None
    return stated


def _why(message: str) -> str:
    """model-signing's mismatch list, as the files that changed, appeared or went missing."""
    import re

    message = message.replace("\\'", "'")  # the list arrives as its repr, quotes escaped
    changed = re.findall(r"Hash mismatch for '([^']+)'", message)
    parts = [f"changed: {', '.join(changed)}"] if changed else []
    listed = r"(Extra|Missing) files (?:found )?in model '[^']*': ([^'\"\]]+)"
    parts += [f"{m.group(1).lower()}: {m.group(2)}" for m in re.finditer(listed, message)]
    return "; ".join(parts) if parts else " ".join(message.split())[:400]


# --- DSSE envelopes for in-toto statements ---------------------------------------------
def _signer(private_key: str):
    from securesystemslib.signer import CryptoSigner

    return CryptoSigner(load_private_key(private_key))


def key_id(public_key: str) -> str:
    """The SHA-256 of the public key's DER form, as securesystemslib names keys."""
    from securesystemslib.signer import SSlibKey

    return SSlibKey.from_crypto(load_public_key(public_key)).keyid


def sign_statement(statement: dict, private_key: str) -> dict:
    """A DSSE envelope (in-toto payload type) holding `statement`, signed."""
    from securesystemslib.dsse import Envelope

    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    envelope = Envelope(payload=payload, payload_type=IN_TOTO_PAYLOAD, signatures={})
    envelope.sign(_signer(private_key))
    return envelope.to_dict()


def verify_envelope(envelope: dict, public_key: str, origin: str) -> dict:
    """The statement inside a DSSE envelope after its signature verifies with `public_key`."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    try:
        env = Envelope.from_dict(envelope)
    except (KeyError, TypeError, ValueError) as exc:
        raise SignatureError(f"{origin}: not a DSSE envelope ({type(exc).__name__}: {exc})") from None
    if env.payload_type != IN_TOTO_PAYLOAD:
        raise SignatureError(f"{origin}: payloadType {env.payload_type!r} is not {IN_TOTO_PAYLOAD}")
    try:
        env.verify([SSlibKey.from_crypto(load_public_key(public_key))], 1)
    except VerificationError as exc:
        raise SignatureError(
            f"{origin}: envelope signature does not verify with {os.path.basename(public_key)}: {exc}"
        ) from None
    try:
        return json.loads(env.payload)
    except ValueError as exc:
        raise SignatureError(f"{origin}: the signed payload is not JSON ({exc})") from None
