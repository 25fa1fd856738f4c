"""The one prompt format and the one generation routine: training encodes its examples
with `encode_example`, and evaluation, watermark verification and the served Triton model
all generate through `generate`, so a model is judged and served on the format it was
trained on.

The format is the tokenizer's chat template when it has one (the prompt as the user's
turn, the response as the assistant's; what precedes the assistant's turn is the head,
which training masks), else the plain format: the prompt on its own line, then the
response. The answer always ends with EOS, where generation stops.

Prompts longer than the context allows are cut from the left (the end of the prompt is
what the answer follows) and counted as truncated.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError


def format_example(prompt: str, response: str) -> tuple[str, str]:
    """(head, tail) in the plain format: the prompt on its own line, then the response."""
    return (f"{prompt}\n" if prompt else ""), response


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def _chat_head(tokenizer, prompt: str) -> str:
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)


def prompt_ids(tokenizer, prompt: str) -> list[int]:
    """What the model is given before it answers `prompt`."""
    if prompt and has_chat_template(tokenizer):
        return tokenizer.encode(_chat_head(tokenizer, prompt), add_special_tokens=False)
    head = format_example(prompt, "")[0]
    return tokenizer.encode(head) if head else []


def encode_example(tokenizer, prompt: str, response: str) -> tuple[list[int], list[int]]:
    """(head, answer) token ids of one example; the answer ends with EOS. Loss is taken on
    the answer (and on the head too unless prompts are masked). A bare text (no prompt)
    is a plain continuation."""
    eos = tokenizer.eos_token_id
    if prompt and has_chat_template(tokenizer):
        head = _chat_head(tokenizer, prompt)
        full = tokenizer.apply_chat_template([{"role": "user", "content": prompt},
                                              {"role": "assistant", "content": response}], tokenize=False)
        if not full.startswith(head):
            raise InputError("tokenizer chat_template: the conversation does not begin with the prompt's turn, "
                             "so the answer cannot be told apart")
        head_ids = tokenizer.encode(head, add_special_tokens=False)
        answer = tokenizer.encode(full[len(head):].rstrip(), add_special_tokens=False)
    else:
        text, tail = format_example(prompt, response)
        head_ids = tokenizer.encode(text) if text else []
        answer = tokenizer.encode(tail)
    if not answer or answer[-1] != eos:
        answer = answer + [eos]
    return head_ids, answer


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


def context_of(config) -> int | None:
    """The context length a transformers config states, if it states one."""
    value = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    return int(value) if value else None


def context_size(model) -> int:
    return context_of(model.config) or 2048


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
    ended: bool = True         # stopped at EOS (False: cut at max_new_tokens)


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
        encoded = [prompt_ids(tokenizer, p) for p in prompts[start:start + batch_size]]
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
            ended = eos in ids
            if ended:
                ids = ids[:ids.index(eos)]
            if pad != eos:
                ids = [t for t in ids if t != pad]
            out.append(Completion(ids, len(full) > limit, ended))
        if progress is not None:
            progress.update(len(encoded))
    return out
