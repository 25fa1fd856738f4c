"""The OpenAI-compatible API of one Triton server: `POST /v1/chat/completions`,
`POST /v1/completions` (streamed as server-sent events or not) and `GET /v1/models`, for
the clients users own (the `openai` SDK, LangChain, lm-evaluation-harness, guidellm,
genai-perf).

A translation layer, not a second generation loop: each request becomes one request to
the served model's `generate_stream` on its Triton server (`openai_api` maps the fields),
whose engine answers it; the pieces come back as OpenAI chunks, the last response's
`finish_reason` and token counts as `usage`. A client that goes away closes its Triton
stream, which cancels the request in the engine. At most `max_running + max_waiting`
requests are taken at once; more get a 429 with `Retry-After`.

`python -m kfp_llmops.components.deploy.openai_frontend --triton URL --model NAME --port N`
runs it; `OpenAIFrontend` starts and stops that process beside a `TritonServer`.

In the cluster it is the InferenceService's transformer, the only door to the model: it
takes KServe's arguments (`--model_name`, `--predictor_host`, `--http_port`), passes
Triton's answer endpoints through (readiness, the model's metadata and readiness,
`generate`, `generate_stream`; nothing else of Triton's API exists here), and with
`--api-keys FILE` (a mounted Secret) answers a model endpoint only for a client that
sends one of its keys (`api_keys.matched`; the file read again when it changes), each key
holding at most `--max-per-key` requests open.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from kfp_llmops.components.common.errors import InputError, LlmopsError

from . import openai_api
from .api_keys import CHALLENGE, REQUIRED, Keys, matched
from .processes import die_with_parent, free_ports, stop_group, wait_for_http

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _event(payload) -> bytes:
    return b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n"


class _Upstream(Exception):
    """Triton answered with an error."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message

    def api_error(self) -> openai_api.ApiError:
        if self.status == 400:  # named as the client named it
            name, _, rest = self.message.partition(": ")
            param = openai_api.PARAMS.get(name)
            return openai_api.ApiError(400, f"{param}: {rest}" if param else self.message, param)
        return openai_api.ApiError(
            503 if self.status == 503 else 500, f"the model failed to answer: {self.message}", kind="server_error"
        )


def _error_text(raw: bytes) -> str:
    """Triton's one-line error, from a JSON body or a server-sent event."""
    text = raw.strip()
    text = text[5:] if text.startswith(b"data:") else text
    try:
        return str(json.loads(text).get("error", "")) or text.decode("utf-8", "replace")[:300]
    except ValueError:
        return text.decode("utf-8", "replace")[:300]


def _error(exc: openai_api.ApiError, headers: dict | None = None):
    from aiohttp import web

    return web.json_response(exc.body(), status=exc.status, headers=headers)


async def _events(upstream):
    """Triton's server-sent events as dicts; an error event raises _Upstream."""
    async for line in upstream.content:
        if not line.startswith(b"data:"):
            continue
        event = json.loads(line[5:])
        if "error" in event:
            raise _Upstream(500, str(event["error"]))
        yield event


async def _stream(request, t, upstream):
    """Pieces as chunks while they come; a client gone ends the upstream stream too."""
    from aiohttp import web

    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    first = True
    try:
        try:
            async for event in _events(upstream):
                piece = str(event.get("text_output", ""))
                final = event if "finish_reason" in event else None
                if piece or first:
                    await response.write(_event(openai_api.chunk(t, piece, None, first)))
                    first = False
                if final is not None:
                    await response.write(_event(openai_api.chunk(t, None, final)))
                    if t.include_usage:
                        await response.write(_event(openai_api.usage_chunk(t, final)))
        except _Upstream as exc:  # headers are sent: the error travels as an event
            await response.write(_event(exc.api_error().body()))
        await response.write(_event(b"[DONE]"))
    except (ConnectionResetError, ConnectionError):
        upstream.close()  # the client left: closing Triton's stream cancels the request
    return response


async def _whole(t, upstream):
    """The pieces gathered into one response, with the last event's reason and counts."""
    from aiohttp import web

    pieces, final = [], {}
    async for event in _events(upstream):
        pieces.append(str(event.get("text_output", "")))
        if "finish_reason" in event:
            final = event
    return web.json_response(openai_api.response(t, "".join(pieces), final))


OPEN_PATHS = frozenset({"/health", "/v2/health/ready"})  # probes ask without a key


def _keyed(keys: Keys, per_key: int):
    """A middleware that answers 401 to a request for a model endpoint without one of
    `keys`, and 429 to a key already holding `per_key` requests open (0: no bound): in the
    cluster every client arrives from the gateway's address, so the key is what tells
    clients apart. An unknown path stays a 404, probes pass."""
    from aiohttp import web

    held: dict[bytes, int] = {}

    @web.middleware
    async def check(request, handler):
        if request.path in OPEN_PATHS or request.match_info.http_exception is not None:
            return await handler(request)
        key = matched(request.headers.get("Authorization"), keys.current())
        if key is None:
            return _error(openai_api.ApiError(401, REQUIRED, code="invalid_api_key"), {"WWW-Authenticate": CHALLENGE})
        if per_key and held.get(key, 0) >= per_key:
            busy = f"this API key holds {per_key} requests open, the most one key may; retry shortly"
            return _error(openai_api.ApiError(429, busy, kind="rate_limit_exceeded"), {"Retry-After": "1"})
        held[key] = held.get(key, 0) + 1
        try:
            return await handler(request)
        finally:
            held[key] -= 1
            if not held[key]:
                del held[key]

    return check


def _add_triton_routes(app, triton: str, model: str) -> None:
    """Triton's answer endpoints for `model`, passed through as they are (status, type,
    streamed body); the request reaches Triton with its body and type only."""
    from aiohttp import web

    async def passed(request):
        if request.match_info.get("model", model) != model:
            raise web.HTTPNotFound()
        version = request.match_info.get("version")
        path = request.path if request.path == "/v2/health/ready" else f"/v2/models/{model}"
        if request.path != "/v2/health/ready":
            path += (f"/versions/{version}" if version else "") + request.match_info.get("op", "")
        body = await request.read() if request.method == "POST" else None
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")} if body else {}
        async with request.app["session"].request(request.method, triton + path, data=body, headers=headers) as up:
            response = web.StreamResponse(
                status=up.status, headers={"Content-Type": up.headers.get("Content-Type", "application/json")}
            )
            await response.prepare(request)
            async for piece in up.content.iter_any():
                await response.write(piece)
            await response.write_eof()
            return response

    app.router.add_get("/v2/health/ready", passed)
    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version:[0-9]+}"):
        app.router.add_get(prefix, passed)
        app.router.add_get(prefix + "{op:/ready}", passed)
        app.router.add_post(prefix + "{op:/generate}", passed)
        app.router.add_post(prefix + "{op:/generate_stream}", passed)


def _with_session(app, capacity: int, timeout_s: float) -> None:
    """`app["session"]`: one client session to Triton while the app runs, as many
    connections as requests are admitted."""
    import aiohttp

    async def start(app):
        connector = aiohttp.TCPConnector(limit=capacity, limit_per_host=capacity)
        app["session"] = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout_s)
        )

    async def stop(app):
        await app["session"].close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)


def make_app(
    triton: str,
    model: str,
    max_running: int = 16,
    max_waiting: int = 64,
    timeout_s: float = 600.0,
    api_keys: str | None = None,
    max_per_key: int = 0,
):
    """The aiohttp application serving `model` from the Triton server at `triton`; with
    `api_keys` (a file) its model endpoints ask for a key, each key holding at most
    `max_per_key` requests open (0: no bound of its own)."""
    import aiohttp
    from aiohttp import web

    triton = triton.rstrip("/")

    state = {"inflight": 0, "created": int(time.time())}
    capacity = max_running + max_waiting
    generate = f"{triton}/v2/models/{model}/generate_stream"

    async def models(request):
        return web.json_response(openai_api.models(model, state["created"]))

    async def health(request):
        async with request.app["session"].get(f"{triton}/v2/health/ready") as resp:
            return web.Response(status=200 if resp.status == 200 else 503)

    async def complete(request, chat: bool):
        try:
            body = await request.json()
        except ValueError:
            return _error(openai_api.ApiError(400, "request body: not valid JSON"))
        try:
            t = openai_api.translate(body, chat, model)
        except openai_api.ApiError as exc:
            return _error(exc)
        if state["inflight"] >= capacity:
            busy = openai_api.ApiError(
                429, f"the server is at its bound of {capacity} requests; retry shortly", kind="rate_limit_exceeded"
            )
            return _error(busy, {"Retry-After": "1"})
        state["inflight"] += 1
        try:
            async with request.app["session"].post(generate, json={**t.inputs, "stream": True}) as upstream:
                if upstream.status != 200:
                    raise _Upstream(upstream.status, _error_text(await upstream.read()))
                return await (_stream(request, t, upstream) if t.stream else _whole(t, upstream))
        except _Upstream as exc:
            return _error(exc.api_error())
        except (aiohttp.ClientError, TimeoutError) as exc:
            return _error(
                openai_api.ApiError(503, f"the model server is unreachable: {type(exc).__name__}", kind="server_error"),
                {"Retry-After": "1"},
            )
        finally:
            state["inflight"] -= 1

    async def chat(request):
        return await complete(request, True)

    async def completions(request):
        return await complete(request, False)

    app = web.Application(
        client_max_size=1 << 20, middlewares=[_keyed(Keys(api_keys), max_per_key)] if api_keys else []
    )
    _with_session(app, capacity, timeout_s)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", completions)
    _add_triton_routes(app, triton, model)
    return app


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with KServe's names for what a transformer is told (`--model_name`,
    `--predictor_host`, `--http_port`, `--workers`) beside this module's own."""
    parser = argparse.ArgumentParser(description="OpenAI-compatible API over one Triton server's model.")
    server = parser.add_mutually_exclusive_group(required=True)
    server.add_argument("--triton", help="The Triton server's HTTP URL.")
    server.add_argument("--predictor_host", help="KServe's: the predictor's host[:port] (HTTP).")
    parser.add_argument("--model", "--model_name", dest="model", required=True, help="The served model's name.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", "--http_port", dest="port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1, help="KServe's; one asynchronous process serves.")
    parser.add_argument("--max-running", type=int, default=16)
    parser.add_argument("--max-waiting", type=int, default=64)
    parser.add_argument("--api-keys", help="File of API keys (one per line): model endpoints ask for one.")
    parser.add_argument(
        "--max-per-key", type=int, default=0, help="Requests one API key may hold open; more get a 429 (0: no bound)."
    )
    args = parser.parse_args(argv)
    if args.triton is None:
        args.triton = f"http://{args.predictor_host}"
    return args


def main(argv: list[str] | None = None) -> None:
    from aiohttp import web

    args = arguments(argv)
    try:
        app = make_app(
            args.triton,
            args.model,
            args.max_running,
            args.max_waiting,
            api_keys=args.api_keys,
            max_per_key=args.max_per_key,
        )
    except InputError as exc:
        sys.exit(f"error: {exc}")
    # A client that disconnects cancels its handler (aiohttp's default leaves it running).
    web.run_app(app, host=args.host, port=args.port, handler_cancellation=True, print=None, access_log=None)


class OpenAIFrontend:
    """The front end of one Triton server as a process of its own: started beside the
    server, ready once it answers, stopped with it."""

    def __init__(
        self,
        triton_url: str,
        model: str,
        work: str,
        role: str,
        host: str = "127.0.0.1",
        port: int = 0,
        max_running: int = 16,
        max_waiting: int = 64,
    ):
        self.triton_url, self.model, self.work, self.role, self.host = triton_url, model, work, role, host
        self.port, self.max_running, self.max_waiting = port, max_running, max_waiting
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(work, f"openai-{role}.log")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> OpenAIFrontend:
        os.makedirs(self.work, exist_ok=True)
        self.port = self.port or free_ports(1, self.host)[0]
        cmd = [sys.executable, "-m", __name__, "--triton", self.triton_url, "--model", self.model]
        cmd += ["--host", self.host, "--port", str(self.port)]
        cmd += ["--max-running", str(self.max_running), "--max-waiting", str(self.max_waiting)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 60.0) -> None:
        try:
            wait_for_http(f"{self.url}/v1/models", self.proc, timeout, f"{self.role} OpenAI front end")
        except LlmopsError as exc:
            self.stop()
            raise LlmopsError(f"{exc} (log: {self.log_path})") from None

    def stop(self) -> None:
        stop_group(self.proc, signal.SIGTERM, 5.0)


if __name__ == "__main__":
    main()
