"""Requests to the served model, timed on the client: time to the first piece of the
answer, the gaps between pieces, the whole request. Two APIs:

- OpenAI's (`request`): `/v1/chat/completions` for a conversation, `/v1/completions` for a
  text, streamed or not. The load generator, the smoke tests, the served exact match and
  `llmops deploy` speak it, as users' clients do.
- Triton's generate extension (`generate_body`): `generate` (one response) and
  `generate_stream`, which Triton clients keep using.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass, field

from kfp_llmops.components.common.conversation import Prompt

# What the OpenAI request fields are called in Triton's generate inputs.
_GENERATE_NAMES = {"max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens"}


def request(prompt: Prompt, stream: bool = False, **params) -> dict:
    """An OpenAI request body (without `model`, which `call` adds): a chat for a
    conversation, a completion for a text; `params` by OpenAI's names (max_tokens,
    temperature, seed, min_tokens, stop, top_p), those left None not sent, so the served
    (blessed) decoding decides them."""
    out: dict = {"messages": prompt} if isinstance(prompt, list) else {"prompt": prompt}
    if stream:
        out["stream"] = True
    out.update({k: v for k, v in params.items() if v is not None})
    return out


def generate_body(prompt: Prompt, stream: bool = False, **params) -> dict:
    """The same request for Triton's generate extension: a conversation travels as a JSON
    string in `messages` (the generate endpoint maps each key to one tensor element)."""
    out = {"text_input": prompt} if isinstance(prompt, str) else {"messages": json.dumps(prompt)}
    if stream:
        out["stream"] = True
    out.update({_GENERATE_NAMES.get(k, k): v for k, v in params.items() if v is not None})
    return out


@dataclass
class Answer:
    status: int  # HTTP status; 0 when the connection failed
    text: str = ""
    error: str = ""
    latency_ms: float = 0.0
    ttft_ms: float = float("nan")  # the first piece (the whole answer when not streamed)
    gaps_ms: list = field(default_factory=list)  # between successive pieces of a stream
    pieces: list = field(default_factory=list)
    upstream: str | None = None  # nginx's X-Upstream
    finish_reason: str | None = None
    usage: dict | None = None
    retry_after: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error


def _error_of(raw: bytes) -> str:
    try:
        error = json.loads(raw).get("error", "")
    except ValueError:
        return raw.decode("utf-8", "replace")[:300]
    return str(error.get("message", error) if isinstance(error, dict) else error) or raw.decode()[:300]


def _piece(event: dict, openai: bool) -> tuple[str, str | None, dict | None]:
    """(text, finish_reason, usage) of one streamed event."""
    if not openai:
        return str(event.get("text_output", "")), event.get("finish_reason"), None
    choices = event.get("choices") or [{}]
    choice = choices[0]
    text = choice.get("text") if "text" in choice else (choice.get("delta") or {}).get("content")
    return text or "", choice.get("finish_reason"), event.get("usage")


def _whole(event: dict, openai: bool) -> tuple[str, str | None, dict | None]:
    if not openai:
        return str(event.get("text_output", "")), event.get("finish_reason"), None
    choice = event["choices"][0]
    text = choice["text"] if "text" in choice else choice["message"]["content"]
    return text, choice.get("finish_reason"), event.get("usage")


def call(conn: http.client.HTTPConnection, model: str, body: dict, headers: dict | None = None) -> Answer:
    """One request on an open connection: OpenAI's API for a `request` body, Triton's
    generate extension for a `generate_body` one; streamed when `body["stream"]` is true.
    Connection errors propagate (the caller decides whether to retry)."""
    openai = "prompt" in body or isinstance(body.get("messages"), list)
    stream = bool(body.get("stream"))
    if openai:
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        body = {"model": model, **body}
    else:
        path = f"/v2/models/{model}/{'generate_stream' if stream else 'generate'}"
    t0 = time.monotonic()
    conn.request(
        "POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    resp = conn.getresponse()
    answer = Answer(resp.status, upstream=resp.getheader("X-Upstream"), retry_after=resp.getheader("Retry-After"))
    if resp.status != 200 or not stream:
        raw = resp.read()
        answer.latency_ms = answer.ttft_ms = (time.monotonic() - t0) * 1000.0
        if resp.status != 200:
            answer.error = _error_of(raw)
        else:
            event = json.loads(raw)
            answer.error = _error_of(raw) if "error" in event else ""
            if not answer.error:
                answer.text, answer.finish_reason, answer.usage = _whole(event, openai)
                answer.pieces = [answer.text]
        return answer
    last = None
    while True:
        line = resp.readline()
        if not line:
            break
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            continue
        event = json.loads(data)
        if "error" in event:
            answer.error = _error_of(data)
            continue
        piece, reason, usage = _piece(event, openai)
        answer.finish_reason = reason or answer.finish_reason
        answer.usage = usage or answer.usage
        if not piece:
            continue
        now = time.monotonic()
        if last is None:
            answer.ttft_ms = (now - t0) * 1000.0
        else:
            answer.gaps_ms.append((now - last) * 1000.0)
        last = now
        answer.pieces.append(piece)
    answer.latency_ms = (time.monotonic() - t0) * 1000.0
    answer.text = "".join(answer.pieces)
    return answer


def ask(url: str, model: str, body: dict, headers: dict | None = None, timeout: float = 120.0) -> Answer:
    """One request on a connection of its own; a connection failure is status 0."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        return call(conn, model, body, headers)
    except (OSError, http.client.HTTPException) as exc:
        return Answer(0, error=f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()
