"""Requests to the served model through Triton's generate extension: `generate` (one
response) and `generate_stream` (server-sent events, one per piece of the answer), timed
on the client: time to the first piece, the gaps between pieces, the whole request. The
load generator, the smoke tests and `llmops deploy ask` all ask through here."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass, field

from kfp_llmops.components.common.conversation import Prompt


def body(prompt: Prompt, stream: bool = False, **inputs) -> dict:
    """A generate request: a text prompt as `text_input`, a conversation as `messages`
    (a JSON list of turns: the generate endpoint maps each key to one tensor element);
    `inputs` left None are not sent, so the served decoding decides them."""
    out = {"text_input": prompt} if isinstance(prompt, str) else {"messages": json.dumps(prompt)}
    if stream:
        out["stream"] = True
    out.update({k: v for k, v in inputs.items() if v is not None})
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

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error


def _error_of(raw: bytes) -> str:
    try:
        return str(json.loads(raw).get("error", "")) or raw.decode("utf-8", "replace")[:300]
    except ValueError:
        return raw.decode("utf-8", "replace")[:300]


def call(conn: http.client.HTTPConnection, model: str, request: dict, headers: dict | None = None) -> Answer:
    """One request on an open connection; streamed when `request["stream"]` is true.
    Connection errors propagate (the caller decides whether to retry)."""
    stream = bool(request.get("stream"))
    path = f"/v2/models/{model}/{'generate_stream' if stream else 'generate'}"
    t0 = time.monotonic()
    conn.request(
        "POST", path, body=json.dumps(request).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    resp = conn.getresponse()
    answer = Answer(resp.status, upstream=resp.getheader("X-Upstream"))
    if resp.status != 200 or not stream:
        raw = resp.read()
        answer.latency_ms = answer.ttft_ms = (time.monotonic() - t0) * 1000.0
        if resp.status != 200:
            answer.error = _error_of(raw)
        else:
            event = json.loads(raw)
            answer.error = str(event.get("error", ""))
            answer.text = str(event.get("text_output", ""))
            answer.pieces = [answer.text]
        return answer
    last = None
    while True:
        line = resp.readline()
        if not line:
            break
        if not line.startswith(b"data:"):
            continue
        event = json.loads(line[5:])
        if "error" in event:
            answer.error = str(event["error"])
            continue
        piece = str(event.get("text_output", ""))
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


def ask(url: str, model: str, request: dict, headers: dict | None = None, timeout: float = 120.0) -> Answer:
    """One request on a connection of its own; a connection failure is status 0."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        return call(conn, model, request, headers)
    except (OSError, http.client.HTTPException) as exc:
        return Answer(0, error=f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()
