"""Bring your own model: seal, import a GGUF, keys, sign and verify."""

from __future__ import annotations

import click

from kfp_llmops.components.common.errors import LlmopsError


@click.group()
def model() -> None:
    """Bring your own model: seal a Hugging Face folder so every stage can verify it."""


@model.command("seal")
@click.argument("model_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--allow-pickle", is_flag=True, help="Accept pickled weights (.bin/.pt); loading them can run code.")
@click.option(
    "--pad-token",
    type=click.Choice(["eos"]),
    help="Set a missing pad token to the EOS token (saved in the tokenizer files before sealing).",
)
def model_seal(model_dir, allow_pickle, pad_token) -> None:
    """Check DIR (config, safetensors weights, tokenizer, chat template) and write its Merkle
    manifest; prints the root to pin (`llmops run --base-model DIR`, `base_model_root`)."""
    from kfp_llmops.components.training.model_folder import seal_model_folder

    click.echo(seal_model_folder(model_dir, allow_pickle, pad_token))


@model.command("import")
@click.option(
    "--gguf",
    "gguf_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="A GGUF model file (llama, qwen2, mistral, ...: what transformers can dequantize).",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="The Hugging Face folder to write (fp32 safetensors, tokenizer, chat template).",
)
@click.option("--expect-root", help="Refuse the result unless its Merkle root is this one.")
def model_import(gguf_path, out_dir, expect_root) -> None:
    """Import a GGUF model as a sealed Hugging Face folder; prints its root."""
    from kfp_llmops.components.training.gguf_import import import_gguf

    click.echo(import_gguf(gguf_path, out_dir, expect_root))


@model.command("keygen")
@click.option(
    "--private-key",
    required=True,
    type=click.Path(dir_okay=False),
    help="Where the PEM private key goes (owner-only; store it as a Secret, never in YAML).",
)
@click.option("--public-key", required=True, type=click.Path(dir_okay=False), help="Where the PEM public key goes.")
def model_keygen(private_key, public_key) -> None:
    """A new ECDSA P-256 key pair for model-signing signatures and release attestations."""
    from kfp_llmops.components.common import signing

    signing.generate_keys(private_key, public_key)
    click.echo(f"wrote {private_key} (private, mode 600) and {public_key}; key id {signing.key_id(public_key)}")


@model.command("sign")
@click.argument("model_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--private-key", required=True, type=click.Path(dir_okay=False), help="PEM ECDSA P-256 private key.")
@click.option("--signature", type=click.Path(dir_okay=False), help="Where the signature goes (default DIR/model.sig).")
@click.option(
    "--hash",
    "hash_name",
    type=click.Choice(["sha256", "blake3"]),
    default="sha256",
    show_default=True,
    help="Per-file digest; `model_signing verify key` (1.1.1) checks sha256 signatures only.",
)
@click.option(
    "--certificate",
    type=click.Path(dir_okay=False),
    help="Certificate mode: the private key's signing certificate (KeyUsage digitalSignature or code signing).",
)
@click.option(
    "--certificate-chain",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Certificate mode: the certificates up to the root (repeat).",
)
def model_sign(model_dir, private_key, signature, hash_name, certificate, certificate_chain) -> None:
    """Sign every file of DIR with OpenSSF model-signing (a key, or a key with its
    certificate; offline); prints the folder's model-signing digest.
    `model_signing verify key` (or `verify certificate`) checks it."""
    from kfp_llmops.components.common import signing

    click.echo(signing.sign_folder(model_dir, private_key, signature, hash_name, certificate, tuple(certificate_chain)))


@model.command("verify")
@click.argument("model_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("--public-key", type=click.Path(dir_okay=False), help="PEM public key of the signer.")
@click.option(
    "--certificate-chain",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Or certificate mode: the chain to trust (repeat).",
)
@click.option("--signature", type=click.Path(dir_okay=False), help="The signature (default DIR/model.sig).")
def model_verify(model_dir, public_key, certificate_chain, signature) -> None:
    """Check DIR against its model-signing signature (exit 2 naming what failed)."""
    from kfp_llmops.components.common import signing

    if bool(public_key) == bool(certificate_chain):
        raise LlmopsError("give exactly one of --public-key and --certificate-chain")
    stated = signing.verify_folder(model_dir, public_key, signature, tuple(certificate_chain))
    click.echo(
        f"{model_dir}: signature verifies ({len(stated['files'])} files, {stated['hash']}, digest {stated['digest']})"
    )
