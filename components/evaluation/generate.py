"""Batched, seeded generation and reference perplexity with the candidate model.

Prompts are formatted exactly as in training (`prompt` + newline); prompts longer than
the context allows are cut from the left (the end of the prompt is what the answer
follows) and counted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kfp_llmops.components.training.data import format_example

from .config import EvalConfig


@dataclass
class Generated:
    id: str
    prompt: str
    response: str
    tokens: int
    truncated: bool


def load_model(model_dir: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def context_size(model) -> int:
    cfg = model.config
    return int(getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", 2048))


def left_pad(batch: list[list[int]], pad: int):
    """input_ids and attention_mask for a batch of prompts, padded on the left."""
    import torch
    width = max(len(ids) for ids in batch)
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch])
    attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch])
    return input_ids, attention


def generate(model, tokenizer, rows: list[dict], cfg: EvalConfig, progress=None) -> list[Generated]:
    import torch

    gen = cfg.generation
    limit = cfg.max_prompt_tokens or max(1, context_size(model) - gen.max_new_tokens)
    out: list[Generated] = []
    for start in range(0, len(rows), gen.batch_size):
        batch = rows[start:start + gen.batch_size]
        encoded, truncated = [], []
        for row in batch:
            ids = tokenizer.encode(format_example(row["prompt"], "")[0])
            truncated.append(len(ids) > limit)
            encoded.append(ids[-limit:])
        pad = tokenizer.pad_token_id
        input_ids, attention = left_pad(encoded, pad)
        width = input_ids.shape[1]
        torch.manual_seed(gen.seed + start)
        with torch.no_grad():
            result = model.generate(input_ids=input_ids, attention_mask=attention, max_new_tokens=gen.max_new_tokens,
                                    do_sample=gen.do_sample, temperature=gen.temperature if gen.do_sample else None,
                                    top_k=gen.top_k or None, pad_token_id=pad, eos_token_id=tokenizer.eos_token_id)
        for row, ids, cut in zip(batch, result[:, width:].tolist(), truncated):
            if tokenizer.eos_token_id in ids:
                ids = ids[:ids.index(tokenizer.eos_token_id)]
            text = tokenizer.decode(ids, skip_special_tokens=True).strip()
            out.append(Generated(row["id"], row["prompt"], text, len(ids), cut))
        if progress is not None:
            progress.update(len(batch))
    return out


def perplexity(model, tokenizer, rows: list[dict], batch_size: int, limit: int) -> tuple[float, list[float]]:
    """exp(mean token NLL) of each reference given its prompt, and per-sample NLLs."""
    import torch

    total_nll, total_tokens, per_sample = 0.0, 0, []
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        seqs, labels = [], []
        for row in batch:
            head, tail = format_example(row["prompt"], row["response"])
            p = tokenizer.encode(head)
            r = tokenizer.encode(tail) + [tokenizer.eos_token_id]
            ids = (p + r)[-limit:]
            keep = min(len(r), len(ids))
            seqs.append(ids)
            labels.append([-100] * (len(ids) - keep) + ids[len(ids) - keep:])
        width = max(len(s) for s in seqs)
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
        attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
        target = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
        shifted = target[:, 1:]
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), shifted.reshape(-1),
                                                ignore_index=-100, reduction="none").view(shifted.shape)
        mask = shifted != -100
        for row_nll, row_mask in zip(nll, mask):
            n = int(row_mask.sum())
            per_sample.append(float(row_nll[row_mask].sum()) / max(1, n))
            total_nll += float(row_nll[row_mask].sum())
            total_tokens += n
    mean = total_nll / max(1, total_tokens)
    return math.exp(mean), per_sample
