"""GGUF files as llama.cpp's converter writes them, made here from a random-initialised
Hugging Face Llama (no downloads): the model's tensors under GGUF's names (Q and K rows
permuted as llama.cpp stores them), its byte-level BPE tokenizer (tokens, types, merges)
and its chat template in the header, F32 tensors so an import can be compared exactly."""

from __future__ import annotations

import json
import os

import numpy as np

# Hugging Face Llama tensor names -> GGUF's (llama.cpp's gguf-py tensor map).
_LAYER = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary layout of a Q or K projection (what transformers undoes on load)."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, index, rest = hf.split(".", 3)
    module, _, kind = rest.rpartition(".")
    return f"blk.{index}.{_LAYER[module]}.{kind}"


def write_llama_gguf(hf_dir: str, path: str, architecture: str = "llama") -> str:
    """`path`: the Llama in `hf_dir` as a GGUF file (`architecture` names another to test
    the refusal of one transformers cannot read)."""
    import gguf
    from safetensors.numpy import load_file

    with open(os.path.join(hf_dir, "config.json"), encoding="utf-8") as handle:
        cfg = json.load(handle)
    with open(os.path.join(hf_dir, "tokenizer.json"), encoding="utf-8") as handle:
        tok = json.load(handle)
    with open(os.path.join(hf_dir, "tokenizer_config.json"), encoding="utf-8") as handle:
        tok_cfg = json.load(handle)
    tensors = {}
    for name in sorted(os.listdir(hf_dir)):
        if name.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(hf_dir, name)))
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_name("test-llama")
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_rope_dimension_count(cfg["hidden_size"] // cfg["num_attention_heads"])
    writer.add_rope_freq_base(float((cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)))
    writer.add_vocab_size(cfg["vocab_size"])
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    added = {t["id"]: t["content"] for t in tok["added_tokens"]}
    words = [added.get(i, w) for w, i in vocab]
    for i, content in added.items():
        if i >= len(words):
            words.append(content)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(words)
    writer.add_token_types([gguf.TokenType.CONTROL if i in added else gguf.TokenType.NORMAL for i in range(len(words))])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
    index = {w: i for i, w in enumerate(words)}
    writer.add_bos_token_id(index[tok_cfg["bos_token"]])
    writer.add_eos_token_id(index[tok_cfg["eos_token"]])
    writer.add_pad_token_id(index[tok_cfg["pad_token"]])
    template = os.path.join(hf_dir, "chat_template.jinja")
    if os.path.exists(template):
        writer.add_chat_template(open(template, encoding="utf-8").read())
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    for name in sorted(tensors):
        data = tensors[name].astype(np.float32)
        if name.endswith("q_proj.weight"):
            data = _permute(data, heads)
        elif name.endswith("k_proj.weight"):
            data = _permute(data, kv_heads)
        writer.add_tensor(_name(name), data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
