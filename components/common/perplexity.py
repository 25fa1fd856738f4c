"""Perplexity of responses given their prompts, in the training format: evaluation's
reference perplexity and the watermark's cost (its answers scored with and without it)."""

from __future__ import annotations

import math

from .generation import encode_example


def perplexity(model, tokenizer, rows: list[dict], batch_size: int, limit: int) -> tuple[float, list[float]]:
    """exp(mean token NLL) of each row's response given its prompt, and per-sample NLLs."""
    import torch

    total_nll, total_tokens, per_sample = 0.0, 0, []
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        seqs, labels = [], []
        for row in batch:
            p, r = encode_example(tokenizer, row["prompt"], row["response"])
            ids = (p + r)[-limit:]
            keep = min(len(r), len(ids))
            seqs.append(ids)
            labels.append([-100] * (len(ids) - keep) + ids[len(ids) - keep :])
        width = max(len(s) for s in seqs)
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
        attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
        target = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
        shifted = target[:, 1:]
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), shifted.reshape(-1), ignore_index=-100, reduction="none"
        ).view(shifted.shape)
        mask = shifted != -100
        for row_nll, row_mask in zip(nll, mask, strict=False):
            n = int(row_mask.sum())
            per_sample.append(float(row_nll[row_mask].sum()) / max(1, n))
            total_nll += float(row_nll[row_mask].sum())
            total_tokens += n
    mean = total_nll / max(1, total_tokens)
    return math.exp(mean), per_sample


def text_perplexity(model, tokenizer, texts: list[str], batch_size: int, limit: int) -> float:
    """exp(mean token NLL) of plain texts, every token after each text's first scored:
    how well a model still reads ordinary prose (evaluation's forgetting check)."""
    import torch

    total_nll, total_tokens = 0.0, 0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    for start in range(0, len(texts), batch_size):
        seqs = [tokenizer.encode(t)[:limit] for t in texts[start : start + batch_size]]
        width = max(len(s) for s in seqs)
        input_ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
        attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
        with torch.no_grad():
            logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
        target = input_ids[:, 1:].masked_fill(attention[:, 1:] == 0, -100)
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=-100, reduction="sum"
        )
        total_nll += float(nll)
        total_tokens += int((target != -100).sum())
    return math.exp(total_nll / max(1, total_tokens))
