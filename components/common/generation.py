"""The one prompt format and the one generation routine: training encodes its examples
with `encode_turns`, and evaluation, watermark verification and the served Triton model
all generate through `generate`, so a model is judged and served on the format it was
trained on.

A prompt is a user's text or a conversation so far (`common.conversation`). The format is
the tokenizer's chat template when it has one: each assistant turn is what the template
adds to the conversation before it, and everything else (system and user turns, the
template's markup) is context, which training masks. Without a template the plain format
puts each non-assistant turn on its own line and ends each assistant turn with EOS. An
answer always ends with EOS, where generation stops.

Prompts longer than the context allows are cut from the left (the end of the prompt is
what the answer follows) and counted as truncated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .conversation import Prompt, as_turns
from .errors import InputError


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def _render(tokenizer, turns: list[dict], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=generation_prompt)


def _template_pieces(tokenizer, turns: list[dict]) -> list[tuple[str, bool]]:
    """(text, is an answer) pieces through the chat template; turns after the last
    assistant turn end the pieces with the generation prompt."""
    pieces, done = [], ""
    for i, turn in enumerate(turns):
        if turn["role"] != "assistant":
            continue
        head = _render(tokenizer, turns[:i], True)
        full = _render(tokenizer, turns[: i + 1], False)
        if not (head.startswith(done) and full.startswith(head)):
            raise InputError(
                "tokenizer chat_template: a conversation's rendering does not begin with the rendering "
                "of its earlier turns, so the assistant's answers cannot be told apart"
            )
        answer = full[len(head) :].rstrip()
        pieces += [(head[len(done) :], False), (answer, True)]
        done = head + answer
    if turns and turns[-1]["role"] != "assistant":
        head = _render(tokenizer, turns, True)
        if not head.startswith(done):
            raise InputError("tokenizer chat_template: the prompt's rendering does not begin with its earlier turns'")
        pieces.append((head[len(done) :], False))
    return pieces


def _plain_pieces(turns: list[dict]) -> list[tuple[str, bool]]:
    return [(t["content"], True) if t["role"] == "assistant" else (f"{t['content']}\n", False) for t in turns]


def encode_turns(tokenizer, turns: list[dict]) -> tuple[list[int], list[bool]]:
    """Token ids of a conversation and, for each, whether it belongs to an assistant's
    answer (what training takes the loss on when prompts are masked). Each answer ends
    with EOS; a conversation that ends with a user turn ends with the generation prompt."""
    template = has_chat_template(tokenizer)
    pieces = _template_pieces(tokenizer, turns) if template else _plain_pieces(turns)
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    answer: list[bool] = []
    for text, is_answer in pieces:
        piece = tokenizer.encode(text, add_special_tokens=not template and not ids) if text else []
        if is_answer and (not piece or piece[-1] != eos):
            piece = piece + [eos]
        ids += piece
        answer += [is_answer] * len(piece)
    return ids, answer


def plain_text(turns: list[dict]) -> str:
    """A conversation in the plain format, as text (what the demo tokenizer is trained on)."""
    return "".join(text for text, _ in _plain_pieces(turns))


def encode_text(tokenizer, text: str) -> list[int]:
    """A plain-text record: a continuation trained on whole, ending with EOS."""
    ids = tokenizer.encode(text)
    return ids if ids and ids[-1] == tokenizer.eos_token_id else ids + [tokenizer.eos_token_id]


def prompt_ids(tokenizer, prompt: Prompt) -> list[int]:
    """What the model is given before it answers `prompt`."""
    if not prompt:
        return []
    return encode_turns(tokenizer, as_turns(prompt))[0]


def encode_example(tokenizer, prompt: Prompt, response: str) -> tuple[list[int], list[int]]:
    """(head, answer) token ids of a response to a prompt: the answer is the last
    assistant turn, ending with EOS."""
    ids, answer = encode_turns(tokenizer, as_turns(prompt) + [{"role": "assistant", "content": response}])
    start = len(answer)
    while start and answer[start - 1]:
        start -= 1
    return ids[:start], ids[start:]


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


# A model build_base_model made from random weights says so in its config.json; any other
# base model is pretrained (training's recipe, evaluation's forgetting check read it).
FROM_SCRATCH_KEY = "llmops_from_scratch"


def from_scratch(config) -> bool:
    """Whether a transformers config (or its config.json as a dict) is of a model built
    from random weights here."""
    return bool(config.get(FROM_SCRATCH_KEY) if isinstance(config, dict) else getattr(config, FROM_SCRATCH_KEY, False))


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
    tokens: list[int]  # generated ids, up to (without) the first EOS, padding removed
    truncated: bool  # the prompt was cut to fit the context
    ended: bool = True  # stopped at EOS (False: cut at max_new_tokens)


def _token_watch(start: int, eos: int, on_token: Callable[[int, int | None], bool]):
    """A stopping criterion that hands each row's new token to `on_token(prompt index,
    token)` as it is chosen (None when the row's answer ended at EOS) and ends the rows
    for which it returns True. Other rows' tokens are untouched: a watched generation
    chooses exactly the tokens an unwatched one does, until a row is ended."""
    import torch
    from transformers import StoppingCriteria

    class Watch(StoppingCriteria):
        def __init__(self):
            self.done: list[bool] = []
            self.ended_by_callback: dict[int, int] = {}  # row -> tokens it kept

        def __call__(self, input_ids, scores, **kwargs):
            latest = input_ids[:, -1].tolist()
            if not self.done:
                self.done = [False] * len(latest)
                self.seen = [0] * len(latest)
            for row, token in enumerate(latest):
                if self.done[row]:
                    continue
                if token == eos:
                    self.done[row] = True
                    on_token(start + row, None)
                    continue
                self.seen[row] += 1
                if on_token(start + row, token):
                    self.done[row] = True
                    self.ended_by_callback[row] = self.seen[row]
            return torch.tensor(self.done, dtype=torch.bool, device=input_ids.device)

    return Watch()


def generate(
    model,
    tokenizer,
    prompts: list[Prompt],
    *,
    max_new_tokens: int,
    batch_size: int,
    seed: int,
    do_sample: bool = True,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_new_tokens: int = 0,
    max_prompt_tokens: int | None = None,
    processors: list | None = None,
    progress=None,
    on_token: Callable[[int, int | None], bool] | None = None,
) -> list[Completion]:
    """Seeded batched generation; batch `i` (starting at prompt `start`) uses seed
    `seed + start`, so results do not depend on how many batches came before.
    `on_token(i, token)` sees prompt i's tokens as they are chosen (None: ended at EOS) and
    ends that answer by returning True (a stop string, a client gone): the server streams
    through it. An answer it ended keeps the tokens up to the one it was ended at."""
    import torch
    from transformers import LogitsProcessorList, StoppingCriteriaList

    limit = max_prompt_tokens or max(1, context_size(model) - max_new_tokens)
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    out: list[Completion] = []
    for start in range(0, len(prompts), batch_size):
        encoded = [prompt_ids(tokenizer, p) for p in prompts[start : start + batch_size]]
        input_ids, attention = left_pad([ids[-limit:] for ids in encoded], pad)
        width = input_ids.shape[1]
        torch.manual_seed(seed + start)
        watch = _token_watch(start, eos, on_token) if on_token is not None else None
        with torch.no_grad():
            result = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=max_new_tokens,
                min_new_tokens=min_new_tokens or None,
                do_sample=do_sample,
                temperature=temperature if do_sample else None,
                top_k=top_k or None,
                top_p=top_p if do_sample else None,
                pad_token_id=pad,
                eos_token_id=eos,
                logits_processor=LogitsProcessorList(processors) if processors else None,
                stopping_criteria=StoppingCriteriaList([watch]) if watch else None,
            )
        for row, (ids, full) in enumerate(zip(result[:, width:].tolist(), encoded, strict=False)):
            kept = watch.ended_by_callback.get(row) if watch is not None else None
            ended = kept is None and eos in ids
            if kept is not None:
                ids = ids[:kept]
            elif ended:
                ids = ids[: ids.index(eos)]
            if pad != eos:
                ids = [t for t in ids if t != pad]
            out.append(Completion(ids, len(full) > limit, ended))
        if progress is not None:
            progress.update(len(encoded))
    return out
