"""One served request, read and checked before the model sees it: what to answer (a
text, or a chat as `messages`), how to decode it (the blessed decoding, with what the
request overrides), where to stop, and whether to stream. A bad request is a ValueError
whose one line names the input and never quotes the prompt (which may hold PII)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import ValidationError

from kfp_llmops.components.common.conversation import Prompt, TurnError, prompt_turns
from kfp_llmops.components.common.decoding import Decoding

# name -> (Triton datatype, optional); each is one value per request (dims [1] per batch
# row). `text_input` or `messages` (a JSON list of role/content turns, rendered with the
# model's chat template) is the prompt; unset sampling inputs take the blessed decoding,
# `temperature` alone turns sampling on and `do_sample` false asks for greedy decoding
# (OpenAI's temperature 0); `stop` ends the answer at its first
# occurrence, `stops` (a JSON list of up to MAX_STOPS strings) at the first of any of them;
# `min_new_tokens` asks for a long answer (the watermark smoke test);
# `stream` sends the answer piece by piece (generate_stream), else in one response.
INPUTS = {
    "text_input": ("TYPE_STRING", True),
    "messages": ("TYPE_STRING", True),
    "max_new_tokens": ("TYPE_INT32", True),
    "temperature": ("TYPE_FP32", True),
    "seed": ("TYPE_INT64", True),
    "top_k": ("TYPE_INT32", True),
    "top_p": ("TYPE_FP32", True),
    "min_new_tokens": ("TYPE_INT32", True),
    "stop": ("TYPE_STRING", True),
    "stops": ("TYPE_STRING", True),
    "stream": ("TYPE_BOOL", True),
    "do_sample": ("TYPE_BOOL", True),
}
# The answer (or its next piece); a request's last response also says why it ended
# (stop: EOS or a stop string; length: the token bound; abort: the client left) and how
# many tokens its prompt and answer took, which OpenAI clients read as `usage`.
MAX_STOPS = 4  # OpenAI's bound on a request's stop strings
MAX_STOP_CHARS = 256  # each; the stream holds back at most this much of a tail
OUTPUTS = {
    "text_output": "TYPE_STRING",
    "finish_reason": "TYPE_STRING",
    "prompt_tokens": "TYPE_INT32",
    "completion_tokens": "TYPE_INT32",
}


@dataclass(frozen=True)
class ServedRequest:
    prompt: Prompt
    decoding: Decoding
    min_new_tokens: int
    seed: int
    stops: tuple[str, ...]
    stream: bool

    @property
    def batch_key(self) -> tuple:
        """Requests that can be generated in one batch share this."""
        return (*self.decoding.model_dump().values(), self.min_new_tokens, self.seed)


def _prompt(values: dict, limits: dict) -> Prompt:
    text, messages = values.get("text_input"), values.get("messages")
    max_chars = int(limits.get("max_prompt_chars", 0))
    if (text is None) == (messages is None):
        raise ValueError("text_input or messages: give exactly one")
    if text is not None:
        if not text.strip():
            raise ValueError("text_input: empty")
        if max_chars and len(text) > max_chars:
            raise ValueError(f"text_input: {len(text)} characters; this server takes at most {max_chars}")
        return text
    try:
        turns = json.loads(messages)
    except ValueError as exc:
        raise ValueError(f"messages: not a JSON list of turns ({exc.msg} at character {exc.pos})") from None
    try:
        return prompt_turns(turns, max_turns=int(limits.get("max_turns", 0)), max_chars=max_chars)
    except TurnError as exc:
        raise ValueError(str(exc)) from None


def parse(values: dict, blessed: Decoding, limit: int, limits: dict | None = None) -> ServedRequest:
    """`values`: the request's inputs as Python scalars (absent ones left out); `limits`:
    the server's prompt bounds (serving.json's `prompt_limits`: max_turns, max_prompt_chars)."""
    prompt = _prompt(values, limits or {})
    update = {k: values[k] for k in ("max_new_tokens", "temperature", "top_k", "top_p") if k in values}
    if "temperature" in values:
        update["do_sample"] = True
    if "do_sample" in values:
        if not values["do_sample"] and "temperature" in values:
            raise ValueError("do_sample: false (greedy) given with a temperature")
        update["do_sample"] = bool(values["do_sample"])
    try:
        decoding = Decoding.model_validate({**blessed.model_dump(), **update})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ValueError(
            f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']} (got {first.get('input')})"
        ) from None
    if decoding.max_new_tokens > limit:
        raise ValueError(f"max_new_tokens: {decoding.max_new_tokens} is above the server's bound {limit}")
    min_new = int(values.get("min_new_tokens", 0))
    if not 0 <= min_new <= decoding.max_new_tokens:
        raise ValueError(f"min_new_tokens: {min_new} is outside 0..max_new_tokens ({decoding.max_new_tokens})")
    seed = int(values.get("seed", 0)) if decoding.do_sample else 0  # greedy requests batch together
    return ServedRequest(prompt, decoding, min_new, seed, _stops(values), bool(values.get("stream", False)))


def _stops(values: dict) -> tuple[str, ...]:
    """The request's stop strings: `stop` (one) and `stops` (a JSON list of them)."""
    stops = [str(values["stop"])] if values.get("stop") else []
    if values.get("stops"):
        try:
            more = json.loads(values["stops"])
        except ValueError as exc:
            raise ValueError(f"stops: not a JSON list of strings ({exc.msg} at character {exc.pos})") from None
        if not isinstance(more, list) or not all(isinstance(x, str) and x for x in more):
            raise ValueError("stops: expected a JSON list of non-empty strings")
        stops += more
    if len(stops) > MAX_STOPS:
        raise ValueError(f"stops: {len(stops)} stop strings; this server takes at most {MAX_STOPS}")
    if any(len(x) > MAX_STOP_CHARS for x in stops):
        raise ValueError(f"stops: a stop string longer than {MAX_STOP_CHARS} characters")
    return tuple(dict.fromkeys(stops))


def check_fits(prompt_tokens: int, max_new_tokens: int, context: int) -> None:
    """A prompt is answered whole or refused: the server never cuts it."""
    if prompt_tokens + max_new_tokens > context:
        raise ValueError(
            f"prompt: {prompt_tokens} tokens and max_new_tokens {max_new_tokens} exceed the model's "
            f"context of {context} tokens"
        )
