"""A GGUF model (llama.cpp's format, how many pretrained models are shipped) as a sealed
Hugging Face folder the pipeline can fine-tune: `llmops model import --gguf FILE --out DIR`.

transformers dequantizes GGUF tensors on load but refuses to save such a model, so the
importer builds the same architecture from the GGUF's config (without its quantization
settings) on the meta device, assigns the dequantized tensors to it and saves that: fp32
safetensors, the tokenizer and its chat template. The folder is written beside its final
place and renamed into it once sealed, so a failed import leaves nothing that looks done.

The config files omit `transformers_version`, so the folder's root depends on the model,
not on which transformers wrote it, and a pinned root can refuse a different download.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

from kfp_llmops.components.common.errors import InputError

from .model_folder import seal_model_folder

# Keys of the GGUF architecture table that are not architectures.
_NOT_ARCHITECTURES = ("general", "tokenizer")


def supported_architectures() -> list[str]:
    """The GGUF architectures this transformers can dequantize into a model."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in _NOT_ARCHITECTURES]


def read_architecture(path: str) -> tuple[str, int]:
    """(architecture, tensor count) from the file's header; a file that is not a whole
    GGUF is an InputError naming it."""
    import gguf

    if not os.path.isfile(path):
        raise InputError(f"{path}: GGUF file not found")
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError, IndexError, KeyError) as exc:
        detail = str(exc).split("\n")[0][:160]
        if "magic" in detail.lower():
            raise InputError(f"{path}: not a GGUF file ({detail})") from None
        raise InputError(f"{path}: truncated or damaged GGUF ({detail}; {os.path.getsize(path):,} bytes)") from None
    field = reader.fields.get("general.architecture")
    if field is None:
        raise InputError(f"{path}: general.architecture: missing from the GGUF header")
    return bytes(field.parts[field.data[0]]).decode("utf-8", "replace"), len(reader.tensors)


def _log(message: str) -> None:
    print(f"[import] {message}", file=sys.stderr, flush=True)


def _drop_version(path: str) -> None:
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        data.pop("transformers_version", None)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
            handle.write("\n")


def import_gguf(gguf_path: str, out_dir: str, expect_root: str | None = None) -> str:
    """Write `out_dir` (absent or empty: anything else is refused, nothing in it removed)
    from `gguf_path` and seal it; returns the root.
    With `expect_root`, a folder whose root differs is refused and removed."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if os.path.exists(os.path.join(out_dir, "manifest.json")):
        raise InputError(f"{out_dir}: already holds a sealed model (remove it to import again)")
    if os.path.lexists(out_dir) and not (os.path.isdir(out_dir) and not os.listdir(out_dir)):
        raise InputError(f"{out_dir}: not an empty folder; import into a new or empty one (nothing there is removed)")
    arch, tensors = read_architecture(gguf_path)
    if arch not in supported_architectures():
        raise InputError(
            f"{gguf_path}: general.architecture {arch!r}: transformers cannot dequantize it "
            f"(supported: {', '.join(supported_architectures())})"
        )
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    folder, name = os.path.split(os.path.abspath(gguf_path))
    _log(f"{name}: {arch}, {tensors} tensors; dequantizing")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001 - a GGUF transformers cannot read is bad input
        raise InputError(f"{gguf_path}: transformers cannot load it: {str(exc).splitlines()[0][:200]}") from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = model.load_state_dict(loaded.state_dict(), strict=False, assign=True)
    model.tie_weights()
    meta = [n for n, p in model.named_parameters() if p.is_meta]
    if meta or result.unexpected_keys:
        raise InputError(
            f"{gguf_path}: tensors do not match the {arch} architecture "
            f"(missing {meta[:3]}, unexpected {result.unexpected_keys[:3]})"
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    parameters = sum(p.numel() for p in model.parameters())
    parent, base = os.path.split(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f"{base}.", suffix=".importing", dir=parent)  # its own, never another's
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        for json_name in ("config.json", "generation_config.json"):
            _drop_version(os.path.join(staging, json_name))
        for file_name in os.listdir(staging):  # readable by the images' user, like any model folder
            os.chmod(os.path.join(staging, file_name), 0o644)
        root = seal_model_folder(staging)
        if expect_root and root != expect_root:
            raise InputError(
                f"{gguf_path}: imported root {root} is not the pinned {expect_root} "
                "(a different file, or a transformers that converts it differently)"
            )
        os.chmod(staging, 0o755)  # mkdtemp's 0700: the images' user reads a model folder
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty, as checked; something written there since stops the import
        os.rename(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _log(f"{out_dir}: {arch}, {parameters / 1e6:.1f} M parameters, fp32 safetensors; root {root}")
    return root
