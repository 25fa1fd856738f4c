"""The one prompt format and the one generation routine: training formats its examples
with `format_example`, and evaluation, watermark verification and the served Triton model
all generate through `generate`, so a model is judged and served on the format it was
trained on.

Prompts longer than the context allows are cut from the left (the end of the prompt is
what the answer follows) and counted as truncated.
"""
from __future__ import annotations

from dataclasses import dataclass


def format_example(prompt: str, response: str) -> tuple[str, str]:
    """(head, tail) of a training text: the prompt on its own line, then the response.
    Loss is taken on the tail (and the head unless prompts are masked)."""
    return (f"{prompt}\n" if prompt else ""), response


def load_model(model_dir: str):
    """(model in eval mode, tokenizer with a pad token) from a Hugging Face folder."""
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


@dataclass
class Completion:
    tokens: list[int]          # generated ids, up to (without) the first EOS, padding removed
    truncated: bool            # the prompt was cut to fit the context


def generate(model, tokenizer, prompts: list[str], *, max_new_tokens: int, batch_size: int, seed: int,
             do_sample: bool = True, temperature: float = 1.0, top_k: int | None = None, min_new_tokens: int = 0,
             max_prompt_tokens: int | None = None, processors: list | None = None, progress=None) -> list[Completion]:
    """Seeded batched generation; batch `i` (starting at prompt `start`) uses seed
    `seed + start`, so results do not depend on how many batches came before."""
    import torch
    from transformers import LogitsProcessorList

    limit = max_prompt_tokens or max(1, context_size(model) - max_new_tokens)
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    out: list[Completion] = []
    for start in range(0, len(prompts), batch_size):
        encoded = [tokenizer.encode(format_example(p, "")[0]) for p in prompts[start:start + batch_size]]
        input_ids, attention = left_pad([ids[-limit:] for ids in encoded], pad)
        width = input_ids.shape[1]
        torch.manual_seed(seed + start)
        with torch.no_grad():
            result = model.generate(input_ids=input_ids, attention_mask=attention, max_new_tokens=max_new_tokens,
                                    min_new_tokens=min_new_tokens or None, do_sample=do_sample,
                                    temperature=temperature if do_sample else None, top_k=top_k or None,
                                    pad_token_id=pad, eos_token_id=eos,
                                    logits_processor=LogitsProcessorList(processors) if processors else None)
        for ids, full in zip(result[:, width:].tolist(), encoded):
            if eos in ids:
                ids = ids[:ids.index(eos)]
            if pad != eos:
                ids = [t for t in ids if t != pad]
            out.append(Completion(ids, len(full) > limit))
        if progress is not None:
            progress.update(len(encoded))
    return out
