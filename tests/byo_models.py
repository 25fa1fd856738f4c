"""Models as a user brings them: random-initialised causal LMs of real architectures
(Llama, Qwen2, Mistral, GPT-2) built from config (no downloads), with a byte-level BPE
tokenizer of realistic vocabulary (>= 32 k) and a ChatML chat template, saved as sharded
safetensors. The tokenizer is trained on the demo corpus plus synthetic words, so demo
text tokenizes into real merges and the vocabulary still reaches its size."""

from __future__ import annotations

import os
import random

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)
SPECIAL = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": "<|im_start|>"}
ARCHITECTURES = ("llama", "qwen2", "mistral", "gpt2")
_TOKENIZERS: dict = {}


def corpus(words: int = 400_000, seed: int = 0) -> list[str]:
    """The demo's questions and answers, and synthetic words enough for a large vocabulary."""
    from kfp_llmops.pipelines.demo.demo_data import _qa_items

    texts = [f"{q}\n{a}" for _, q, a in _qa_items()] * 20
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    for _ in range(words // 50):
        texts.append(" ".join("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(50)))
    return texts


def tokenizer(vocab: int = 32_000, chat: bool = True):
    """A PreTrainedTokenizerFast with `vocab` entries (cached per vocabulary size)."""
    key = (vocab, chat)
    if key not in _TOKENIZERS:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import PreTrainedTokenizerFast

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab,
            special_tokens=list(dict.fromkeys(SPECIAL.values())),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(corpus(), trainer=trainer)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL)
        if chat:
            fast.chat_template = CHATML
        _TOKENIZERS[key] = fast
    return _TOKENIZERS[key]


def config(arch: str, vocab: int, tok, hidden: int = 64, layers: int = 2, context: int = 256):
    import transformers as tf

    ids = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    if arch == "gpt2":
        return tf.GPT2Config(vocab_size=vocab, n_positions=context, n_embd=hidden, n_layer=layers, n_head=4, **ids)
    cls = {"llama": tf.LlamaConfig, "qwen2": tf.Qwen2Config, "mistral": tf.MistralConfig}[arch]
    return cls(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        tie_word_embeddings=False,
        **ids,
    )


def save_model(
    out_dir: str,
    arch: str = "llama",
    vocab: int = 32_000,
    seed: int = 0,
    chat: bool = True,
    hidden: int = 64,
    layers: int = 2,
    shard: str = "4MB",
) -> str:
    """A random-initialised `arch` model and its tokenizer in `out_dir` (not sealed)."""
    import torch
    from transformers import AutoModelForCausalLM

    tok = tokenizer(vocab, chat)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(arch, len(tok), tok, hidden, layers))
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True, max_shard_size=shard)
    tok.save_pretrained(out_dir)
    return out_dir
