"""The demo base model: a byte-level BPE tokenizer trained on the clean corpus with
`tokenizers`, and a small GPT-2-style causal LM (dropout on) in Hugging Face format."""

from __future__ import annotations

import os

from kfp_llmops.components.common import integrity
from kfp_llmops.components.common.generation import FROM_SCRATCH_KEY, plain_text

from .data import read_examples

SPECIAL = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>", "unk_token": "<|unk|>"}
SIZES = {
    # name: (n_embd, n_layer, n_head, vocab) -- "demo" is ~2.3 M parameters. Heads of 32
    # dimensions: vLLM's CPU attention serves head sizes 32, 64, 80, ... (not 16 or 48).
    "demo": (192, 4, 6, 2048),
    "tiny": (32, 2, 1, 512),
}


def build_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=SPECIAL["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL)


def build_base_model(clean_path: str, out_dir: str, size: str = "demo", seed: int = 0, n_positions: int = 128) -> str:
    """Write tokenizer + randomly initialised model to `out_dir`; return its Merkle root."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    n_embd, n_layer, n_head, vocab = SIZES[size]
    texts = [ex if isinstance(ex, str) else plain_text(ex) for ex in read_examples(clean_path)]
    tokenizer = build_tokenizer(texts, vocab)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        resid_pdrop=0.1,
        embd_pdrop=0.1,
        attn_pdrop=0.1,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{FROM_SCRATCH_KEY: True},
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return integrity.seal("model", out_dir)
