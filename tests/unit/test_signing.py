"""Model-signing signatures over sealed folders: ours verify with the upstream CLI, each
refusal is one line naming what failed, and Merkle roots and model-signing digests
describe the same bytes."""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import flip_byte
from kfp_llmops.components.common import integrity, signing
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.pipelines.cli.main import main


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    signing.generate_keys(str(d / "private.pem"), str(d / "public.pem"))
    signing.generate_keys(str(d / "other.pem"), str(d / "other.pub"))
    return d


def _model(folder) -> str:
    os.makedirs(folder / "sub")
    (folder / "model.safetensors").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "sub" / "tokenizer.json").write_text('{"v": 1}')
    integrity.seal("model", str(folder))
    return str(folder)


def _upstream_verify(folder, public_key) -> subprocess.CompletedProcess:
    cli = os.path.join(os.path.dirname(sys.executable), "model_signing")
    return subprocess.run(
        [cli, "verify", "key", folder, "--signature", os.path.join(folder, "model.sig"), "--public_key", public_key],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_signed_folder_verifies_here_and_with_the_upstream_cli(tmp_path, keys, capsys):
    folder = _model(tmp_path / "m")
    assert main(["model", "sign", folder, "--private-key", str(keys / "private.pem")]) == 0
    digest = capsys.readouterr().out.strip()
    stated = signing.verify_folder(folder, str(keys / "public.pem"))
    assert stated["digest"] == digest and stated["hash"] == "sha256"
    assert set(stated["files"]) == {"config.json", "manifest.json", "model.safetensors", "sub/tokenizer.json"}
    done = _upstream_verify(folder, str(keys / "public.pem"))
    assert done.returncode == 0 and "Verification succeeded" in done.stdout
    # The Merkle manifest does not cover the signature, so the sealed root still verifies.
    assert integrity.verify("model", folder)
    assert main(["model", "verify", folder, "--public-key", str(keys / "public.pem")]) == 0


def test_merkle_roots_and_signature_digests_describe_the_same_bytes(tmp_path, keys):
    folder = _model(tmp_path / "m")
    stated = (
        signing.verify_folder(folder, str(keys / "public.pem"))
        if signing.sign_folder(folder, str(keys / "private.pem"))
        else None
    )
    manifest, _ = integrity.load_manifest(os.path.join(folder, integrity.MANIFEST_NAME))
    merkle_files = {f.path: f.size for f in manifest.files}
    assert set(stated["files"]) - {integrity.MANIFEST_NAME} == set(merkle_files)
    for rel in merkle_files:  # the same bytes: each file's SHA-256 is the signed digest
        with open(os.path.join(folder, rel), "rb") as handle:
            assert hashlib.sha256(handle.read()).hexdigest() == stated["files"][rel]
    # The folder digest is SHA-256 over the file digests in path order (model-signing's subject).
    joined = b"".join(bytes.fromhex(stated["files"][p]) for p in sorted(stated["files"]))
    assert hashlib.sha256(joined).hexdigest() == stated["digest"]
    flip_byte(os.path.join(folder, "model.safetensors"), 2 * 1024 * 1024 + 5)
    with pytest.raises(InputError, match=r"corrupted model\.safetensors"):
        integrity.verify("model", folder)
    with pytest.raises(signing.SignatureError, match=r"changed: model\.safetensors$"):
        signing.verify_folder(folder, str(keys / "public.pem"))
    assert _upstream_verify(folder, str(keys / "public.pem")).returncode == 1


def test_each_refusal_names_what_failed(tmp_path, keys, capsys):
    folder = _model(tmp_path / "m")
    public = str(keys / "public.pem")
    with pytest.raises(signing.SignatureError, match="no signature"):
        signing.verify_folder(folder, public)  # unsigned
    signing.sign_folder(folder, str(keys / "private.pem"))
    with pytest.raises(signing.SignatureError, match="does not verify with other.pub"):
        signing.verify_folder(folder, str(keys / "other.pub"))  # another key's pair
    other = _model(tmp_path / "o")
    signing.sign_folder(other, str(keys / "private.pem"))
    shutil.copyfile(os.path.join(other, "model.sig"), os.path.join(folder, "model.sig"))
    with pytest.raises(signing.SignatureError, match="changed: .*model.safetensors"):
        signing.verify_folder(folder, public)  # a signature over other files
    (tmp_path / "junk.sig").write_text("{not json")
    with pytest.raises(signing.SignatureError, match="not a model-signing signature"):
        signing.verify_folder(folder, public, str(tmp_path / "junk.sig"))
    with pytest.raises(InputError, match="signing key unreadable"):
        signing.sign_folder(folder, str(tmp_path / "missing.pem"))  # a missing key
    (tmp_path / "text.pem").write_text("hello")
    with pytest.raises(InputError, match="not a PEM file"):
        signing.sign_folder(folder, str(tmp_path / "text.pem"))
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    (tmp_path / "ed.pem").write_bytes(
        ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(InputError, match="must be ECDSA P-256"):
        signing.sign_folder(folder, str(tmp_path / "ed.pem"))  # a key of the wrong type
    with pytest.raises(InputError, match="public key is not a PEM public key"):
        signing.verify_folder(other, str(keys / "private.pem"))  # a private key given as public
    capsys.readouterr()
    assert main(["model", "verify", folder, "--public-key", public]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.safetensors" in err


def test_keys_never_reach_output(tmp_path, capsys):
    assert (
        main(["model", "keygen", "--private-key", str(tmp_path / "k.pem"), "--public-key", str(tmp_path / "k.pub")])
        == 0
    )
    out = capsys.readouterr().out
    assert "BEGIN" not in out and oct(os.stat(tmp_path / "k.pem").st_mode & 0o777) == "0o600"
    envelope = signing.sign_statement({"_type": "x"}, str(tmp_path / "k.pem"))
    assert "PRIVATE" not in str(envelope)
    assert signing.verify_envelope(envelope, str(tmp_path / "k.pub"), "e") == {"_type": "x"}


def test_deploy_refuses_an_unsigned_or_wrongly_signed_repository_before_traffic(tmp_path, keys, capsys):
    model = _model(tmp_path / "m")
    root = integrity.verify("model", model)
    state, out, repo = str(tmp_path / "state"), str(tmp_path / "out"), str(tmp_path / "repo")
    verified = tmp_path / "watermark.json"  # verify_watermark's record of what it verified
    verified.write_text(json.dumps({"kgw": {"delta": 4.0}}))
    assert (
        main(
            [
                "deploy",
                "repository",
                "--model",
                model,
                "--blessed-root",
                root,
                "--out",
                repo,
                "--state",
                state,
                "--watermark",
                str(verified),
            ]
        )
        == 0
    )
    canary = [
        "deploy",
        "canary",
        "--blessed-root",
        root,
        "--out",
        out,
        "--state",
        state,
        "--public-key",
        str(keys / "public.pem"),
    ]
    capsys.readouterr()
    assert main(canary + ["--repository", repo]) == 2  # unsigned
    assert "no signature (unsigned)" in capsys.readouterr().err
    signing.sign_folder(repo, str(keys / "other.pem"))
    assert main(canary + ["--repository", repo]) == 2  # signed by another key
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not verify with public.pem" in err
    assert main(canary + ["--model", model, "--watermark", str(verified)]) == 2  # an unsigned model is not built
    assert "no signature" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(out, "record.json")) and not os.path.exists(os.path.join(state, "stable"))


def _ca(tmp_path, name: str, leaf_key_path: str):
    """A root CA and a code-signing certificate for the key at `leaf_key_path`."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} root")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = signing.load_private_key(leaf_key_path)
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "release")]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = tmp_path / f"{name}-ca.pem", tmp_path / f"{name}-leaf.pem"
    for path, cert in zip(paths, (ca, leaf), strict=False):
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return [str(p) for p in paths]


def test_certificate_mode_signs_offline_and_verifies_against_the_chain(tmp_path, keys, capsys):
    folder = _model(tmp_path / "m")
    ca, leaf = _ca(tmp_path, "ours", str(keys / "private.pem"))
    other_ca, _ = _ca(tmp_path, "theirs", str(keys / "other.pem"))
    assert (
        main(
            [
                "model",
                "sign",
                folder,
                "--private-key",
                str(keys / "private.pem"),
                "--certificate",
                leaf,
                "--certificate-chain",
                ca,
            ]
        )
        == 0
    )
    assert main(["model", "verify", folder, "--certificate-chain", ca]) == 0
    cli = os.path.join(os.path.dirname(sys.executable), "model_signing")
    done = subprocess.run(
        [
            cli,
            "verify",
            "certificate",
            folder,
            "--signature",
            os.path.join(folder, "model.sig"),
            "--certificate_chain",
            ca,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-300:]
    capsys.readouterr()
    assert main(["model", "verify", folder, "--certificate-chain", other_ca]) == 2  # another root of trust
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not verify with theirs-ca.pem" in err
    with pytest.raises(InputError, match="not a PEM file"):
        signing.sign_folder(folder, str(keys / "private.pem"), certificate=str(tmp_path / "m" / "config.json"))
    assert main(["model", "verify", folder]) == 2  # neither mode given
