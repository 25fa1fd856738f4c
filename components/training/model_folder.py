"""A model folder a user already has (Hugging Face format: config, tokenizer, safetensors
weights, sharded or not), checked and sealed with a Merkle manifest so every stage can
verify it before use (`llmops model seal DIR`).

Refused with a one-line error naming the file or field: no config, no weights, pickled
weights (they can run code when loaded) unless explicitly allowed, a sharded index naming
a missing shard, no tokenizer, a tokenizer without a pad token (unless told to use EOS),
a chat template that renders no assistant turn, symlinks (a Hub cache snapshot: copy it
with `cp -rL`), and a manifest that no longer matches the folder.
"""

from __future__ import annotations

import json
import os

from kfp_llmops.components.common import integrity
from kfp_llmops.components.common.errors import InputError

PICKLED = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
_PROBE = [{"role": "user", "content": "ping-user"}, {"role": "assistant", "content": "pong-assistant"}]


def _json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise InputError(f"{path}: missing") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data


def check_weights(model_dir: str, allow_pickle: bool = False) -> list[str]:
    """The weight files, after refusing pickles and checking a sharded index's shards."""
    names = sorted(os.listdir(model_dir))
    pickled = [n for n in names if n.endswith(PICKLED)]
    if pickled and not allow_pickle:
        raise InputError(
            f"{os.path.join(model_dir, pickled[0])}: pickled weights (loading them can run code); "
            "convert to safetensors or pass --allow-pickle"
        )
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        shards = sorted(set((_json(index).get("weight_map") or {}).values()))
        if not shards:
            raise InputError(f"{index}: weight_map: empty")
        missing = [s for s in shards if not os.path.isfile(os.path.join(model_dir, s))]
        if missing:
            raise InputError(f"{index}: weight_map names a missing shard {missing[0]}")
        return shards
    weights = [n for n in names if n.endswith(".safetensors")] or (pickled if allow_pickle else [])
    if not weights:
        raise InputError(f"{model_dir}: no weights (model.safetensors or a sharded index)")
    return weights


def check_tokenizer(model_dir: str, pad_token: str | None = None):
    """The tokenizer, with a pad token (`pad_token="eos"` sets it to EOS and saves it), and
    a chat template that renders the assistant's turn, when it has one."""
    from transformers import AutoTokenizer

    if not any(os.path.exists(os.path.join(model_dir, n)) for n in ("tokenizer.json", "tokenizer_config.json")):
        raise InputError(f"{model_dir}: no tokenizer (tokenizer.json / tokenizer_config.json)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except Exception as exc:  # noqa: BLE001 - any failure to load is bad input
        raise InputError(f"{model_dir}: the tokenizer does not load: {str(exc)[:200]}") from None
    where = os.path.join(model_dir, "tokenizer_config.json")
    if tokenizer.pad_token is None:
        if pad_token != "eos" or tokenizer.eos_token is None:
            raise InputError(
                f"{where}: pad_token: not set (batches need one); pass --pad-token eos to use the EOS token"
            )
        tokenizer.pad_token = tokenizer.eos_token
        tokenizer.save_pretrained(model_dir)
    if tokenizer.chat_template:
        try:
            text = tokenizer.apply_chat_template(_PROBE, tokenize=False)
        except Exception as exc:  # noqa: BLE001 - a template that does not render is bad input
            raise InputError(f"{where}: chat_template: does not render a conversation: {str(exc)[:200]}") from None
        if "pong-assistant" not in text:
            raise InputError(f"{where}: chat_template: renders no assistant turn")
    return tokenizer


def seal_model_folder(model_dir: str, allow_pickle: bool = False, pad_token: str | None = None) -> str:
    """Check `model_dir` and write its manifest; an existing manifest must still match."""
    if not os.path.isdir(model_dir):
        raise InputError(f"{model_dir}: not a folder")
    config = _json(os.path.join(model_dir, "config.json"))
    if not config.get("model_type"):
        raise InputError(f"{os.path.join(model_dir, 'config.json')}: model_type: missing (not a transformers model)")
    check_weights(model_dir, allow_pickle)
    if os.path.exists(os.path.join(model_dir, integrity.MANIFEST_NAME)):
        return integrity.verify("model", model_dir)  # sealed already: it must still match
    check_tokenizer(model_dir, pad_token)
    try:
        return integrity.seal("model", model_dir)
    except integrity.UnsafePath as exc:
        raise InputError(f"{model_dir}: {exc} (a Hub cache snapshot links its files: copy it with `cp -rL`)") from None


def import_model(uri: str, root: str, dest: str, work: str) -> str:
    """Copy the sealed model at `uri` (a path on a mounted volume, or a URI) to `dest` and
    verify the copy against the pinned `root`; returns the root."""
    from kfp_llmops.components.common import atomic
    from kfp_llmops.components.common.fetch import fetch

    if not root:
        raise InputError("base_model_root: required with base_model_uri (pin the root `llmops model seal` printed)")
    source = fetch(uri, work, "base_model")
    if not os.path.isdir(source):
        raise InputError(f"{uri}: not a model folder")
    atomic.copy_tree(source, dest)
    return integrity.verify("model", dest, root)
