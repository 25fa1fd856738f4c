"""The OpenAI API's request and response shapes, translated to and from the served
model's Triton inputs (`serving_request.INPUTS`) and outputs: `/v1/chat/completions` and
`/v1/completions`, streamed or not, with `max_tokens` (`max_completion_tokens`),
`temperature` (0: greedy), `top_p`, `seed`, `stop`, `n` = 1, `stream_options.include_usage`,
and vLLM's `min_tokens` and `ignore_eos`. A request that sets nothing gets the blessed
decoding, as Triton clients do.

A bad request is an `ApiError`: a 400 with OpenAI's error object, naming the field and
never quoting the prompt (it may hold PII)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from kfp_llmops.components.common.conversation import TurnError, prompt_turns
from kfp_llmops.components.common.decoding import MIN_TEMPERATURE

from .serving_request import MAX_STOP_CHARS, MAX_STOPS

_COMMON = {
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "n",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "min_tokens",
    "ignore_eos",
    "user",
    "frequency_penalty",
    "presence_penalty",
    "logprobs",
}
CHAT_FIELDS = _COMMON | {"messages", "max_completion_tokens", "top_logprobs"}
COMPLETION_FIELDS = _COMMON | {"prompt", "echo"}
# Triton input -> the request field a client set it with (errors name the client's field).
PARAMS = {
    "max_new_tokens": "max_tokens",
    "min_new_tokens": "min_tokens",
    "text_input": "prompt",
    "messages": "messages",
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "stop": "stop",
}
_NEUTRAL = {"frequency_penalty": 0, "presence_penalty": 0, "logprobs": (None, False), "echo": (None, False)}


class ApiError(Exception):
    """An OpenAI-style error: HTTP status, message, type, the parameter at fault, code."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param)


@dataclass
class Translated:
    """A request as the served model takes it, and what the answer's shape needs."""

    inputs: dict  # Triton's generate inputs
    chat: bool
    stream: bool
    include_usage: bool
    model: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))


def _number(body: dict, name: str, kind: type, low: float, high: float | None = None):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise _bad(name, f"expected {'a number' if kind is float else 'an integer'}, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        raise _bad(name, f"{value} is outside {low}..{high if high is not None else 'inf'}")
    return kind(value)


def _content(value, where: str) -> str:
    """A message's content: a string or a list of text parts (newer clients send those)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise _bad(f"{where}[{i}]", "only text parts are served")
            texts.append(part["text"])
        return "".join(texts)
    raise _bad(where, f"expected a string or a list of text parts, got {type(value).__name__}")


def _messages(value) -> list[dict]:
    if not isinstance(value, list):
        raise _bad("messages", f"expected a list of messages, got {type(value).__name__}")
    turns = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise _bad(f"messages[{i}]", f"expected an object, got {type(message).__name__}")
        role = "system" if message.get("role") == "developer" else message.get("role")
        content = message.get("content")
        turns.append({"role": role, "content": _content(content, f"messages[{i}].content") if content else content})
    try:
        return prompt_turns(turns)
    except TurnError as exc:
        raise ApiError(400, str(exc), exc.field) from None


def _prompt(value) -> str:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise _bad("prompt", "expected one string (a batch of prompts is sent as separate requests)")
    if not value.strip():
        raise _bad("prompt", "empty")
    return value


def _stop(value) -> dict:
    """The inputs OpenAI's `stop` becomes: one string as `stop`; several as `stops`, a JSON
    list (the generate extension takes one value an input)."""
    if value is None:
        return {}
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise _bad("stop", "expected a non-empty string or a list of them")
    if len(stops) > MAX_STOPS:
        raise _bad("stop", f"{len(stops)} stop strings; at most {MAX_STOPS}")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise _bad("stop", f"a stop string longer than {MAX_STOP_CHARS} characters")
    if not stops:
        return {}
    return {"stop": stops[0]} if len(stops) == 1 else {"stops": json.dumps(stops)}


def translate(body, chat: bool, served_model: str) -> Translated:
    """The Triton inputs of an OpenAI request body; ApiError for a bad one."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body: expected a JSON object")
    unknown = sorted(set(body) - (CHAT_FIELDS if chat else COMPLETION_FIELDS))
    if unknown:
        raise _bad(unknown[0], "unrecognized request argument")
    model = body.get("model")
    if model != served_model:
        raise ApiError(
            404,
            f"model: {model!r} is not served here (this server serves {served_model!r})",
            "model",
            code="model_not_found",
        )
    for name, neutral in _NEUTRAL.items():
        if name in body and body[name] not in (neutral if isinstance(neutral, tuple) else (neutral,)):
            raise _bad(name, "not supported by this server")
    if _number(body, "n", int, 1, 1) is None and "n" in body:
        raise _bad("n", "expected 1")
    inputs: dict = {}
    if chat:
        inputs["messages"] = json.dumps(_messages(body.get("messages")))
    else:
        inputs["text_input"] = _prompt(body.get("prompt"))
    max_tokens = _number(body, "max_completion_tokens", int, 1) if chat else None
    max_tokens = max_tokens or _number(body, "max_tokens", int, 1)
    if max_tokens is not None:
        inputs["max_new_tokens"] = max_tokens
    temperature = _number(body, "temperature", float, 0.0, 2.0)
    if temperature == 0.0:
        inputs["do_sample"] = False
    elif temperature is not None:
        if temperature < MIN_TEMPERATURE:
            raise _bad("temperature", f"{temperature} is below {MIN_TEMPERATURE}; 0 asks for greedy decoding")
        inputs["temperature"] = temperature
    for name, kind, low, high, target in (
        ("top_p", float, 0.0, 1.0, "top_p"),
        ("seed", int, -(2**63), 2**63 - 1, "seed"),
        ("min_tokens", int, 0, None, "min_new_tokens"),
    ):
        value = _number(body, name, kind, low, high)
        if value is not None:
            inputs[target] = value
    if inputs.get("top_p") == 0.0:
        raise _bad("top_p", "0 keeps no token; use temperature 0 for greedy decoding")
    if body.get("ignore_eos"):
        if max_tokens is None:
            raise _bad("ignore_eos", "needs max_tokens (the answer runs to it)")
        inputs["min_new_tokens"] = max_tokens
    inputs.update(_stop(body.get("stop")))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream", "expected true or false")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise _bad("stream_options", "only include_usage is known")
    return Translated(inputs, chat, stream, bool(options.get("include_usage")), served_model)


# -- answers ----------------------------------------------------------------------------


def _usage(final: dict) -> dict:
    prompt, completion = int(final.get("prompt_tokens", 0)), int(final.get("completion_tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _reason(final: dict) -> str:
    reason = str(final.get("finish_reason") or "stop")
    return reason if reason in ("stop", "length") else "stop"


def response(t: Translated, text: str, final: dict) -> dict:
    """A whole answer: chat.completion or text_completion."""
    if t.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None}
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None}
        kind = "text_completion"
    choice["finish_reason"] = _reason(final)
    return {
        "id": f"{'chatcmpl' if t.chat else 'cmpl'}-{t.id}",
        "object": kind,
        "created": t.created,
        "model": t.model,
        "choices": [choice],
        "usage": _usage(final),
    }


def chunk(t: Translated, text: str | None, final: dict | None = None, first: bool = False) -> dict:
    """One streamed piece (`final`: the last, with its finish_reason)."""
    if t.chat:
        delta: dict = {"role": "assistant"} if first else {}
        if text:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None}
        kind = "text_completion"
    choice["finish_reason"] = _reason(final) if final is not None else None
    out = {
        "id": f"{'chatcmpl' if t.chat else 'cmpl'}-{t.id}",
        "object": kind,
        "created": t.created,
        "model": t.model,
        "choices": [choice],
    }
    if t.include_usage:
        out["usage"] = None
    return out


def usage_chunk(t: Translated, final: dict) -> dict:
    """The stream's last chunk when `stream_options.include_usage` asked for it."""
    out = chunk(t, None)
    out["choices"] = []
    out["usage"] = _usage(final)
    return out


def models(served_model: str, created: int) -> dict:
    return {
        "object": "list",
        "data": [{"id": served_model, "object": "model", "created": created, "owned_by": "kfp-llmops"}],
    }
