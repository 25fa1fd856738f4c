"""Real streamed requests through the traffic split, each attributed to the server that
answered (nginx's X-Upstream), timed on the client: the whole request, the first piece of
the answer (time to first token) and the gaps between pieces (inter-token latency)."""

from __future__ import annotations

import http.client
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kfp_llmops.components.common.progress import progress

from . import llm_client

_RETRYABLE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.CannotSendRequest)


@dataclass
class Sample:
    t: float  # seconds since the load started, at the response
    backend: str  # stable | canary | unknown | none (nginx unreachable)
    ok: bool
    latency_ms: float
    status: int
    ttft_ms: float = math.nan
    itl_ms: float = math.nan  # mean gap between the stream's pieces
    pieces: int = 0

    def to_json(self) -> dict:
        def r(v):
            return None if v != v else round(v, 3)

        return {
            "t": round(self.t, 4),
            "backend": self.backend,
            "ok": self.ok,
            "latency_ms": r(self.latency_ms),
            "status": self.status,
            "ttft_ms": r(self.ttft_ms),
            "itl_ms": r(self.itl_ms),
            "pieces": self.pieces,
        }


def sized_concurrency(cfg, latency_ms: float) -> int:
    """Clients enough for the smallest step's canary share to reach `gate.min_requests` in
    `interval_s` at the measured latency (25 % headroom), within the configured range."""
    import math

    t = cfg.traffic
    needed_rps = cfg.gate.min_requests / (cfg.interval_s * min(cfg.steps) / 100.0)
    want = math.ceil(needed_rps * max(latency_ms, 1.0) / 1000.0 * 1.25)
    return max(t.concurrency, min(t.max_concurrency, want))


class LoadGenerator:
    def __init__(
        self,
        host: str,
        port: int,
        model: str,
        roles: dict[str, str],
        prompts: list[str],
        max_new_tokens: int,
        concurrency: int,
        timeout: float = 30.0,
        headers: dict | None = None,
        api: str = "openai",
    ):
        """`api`: openai (the front ends' /v1) or triton (the generate extension: the
        cluster targets, whose pods serve Triton's protocol only)."""
        self.host, self.port, self.model, self.roles = host, port, model, roles
        self.prompts, self.max_new_tokens, self.concurrency, self.timeout = (
            prompts,
            max_new_tokens,
            concurrency,
            timeout,
        )
        self.headers = dict(headers or {})
        self.build = llm_client.request if api == "openai" else llm_client.generate_body
        self._counter = 0

    def _role(self, upstream: str | None) -> str:
        if not upstream:
            return "unknown"
        return self.roles.get(upstream.split(",")[-1].strip(), "unknown")

    def _one(self, conn_box: list, request: dict) -> tuple[str, llm_client.Answer]:
        for attempt in range(2):
            if conn_box[0] is None:
                conn_box[0] = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            conn = conn_box[0]
            try:
                answer = llm_client.call(conn, self.model, request, self.headers)
                return self._role(answer.upstream), answer
            except _RETRYABLE:
                conn.close()  # keep-alive connection closed by an nginx reload: retry once
                conn_box[0] = None
                if attempt:
                    return "unknown", llm_client.Answer(0, error="connection closed")
            except (OSError, http.client.HTTPException, ValueError) as exc:
                conn.close()
                conn_box[0] = None
                return "none", llm_client.Answer(0, error=str(exc))
        return "unknown", llm_client.Answer(0)

    def run(
        self,
        duration: float,
        on_sample: Callable[[Sample], bool] | None = None,
        desc: str = "load",
        enough: Callable[[], bool] | None = None,
        max_duration: float | None = None,
    ) -> list[Sample]:
        """Send requests for `duration` seconds, then on until `enough()` holds or
        `max_duration` has passed; stop at once when `on_sample` returns True."""
        limit = max(duration, max_duration or duration)
        samples: list[Sample] = []
        lock = threading.Lock()
        stop = threading.Event()
        start = time.monotonic()
        bar = progress(None, desc, unit="req")

        def worker() -> None:
            box = [None]
            while not stop.is_set():
                elapsed = time.monotonic() - start
                if elapsed >= limit or elapsed >= duration and (enough is None or enough()):
                    break
                with lock:
                    n = self._counter
                    self._counter += 1
                request = self.build(
                    self.prompts[n % len(self.prompts)], stream=True, max_tokens=self.max_new_tokens, seed=n
                )
                backend, answer = self._one(box, request)
                gaps = answer.gaps_ms
                sample = Sample(
                    time.monotonic() - start,
                    backend,
                    answer.ok,
                    answer.latency_ms,
                    answer.status,
                    answer.ttft_ms,
                    sum(gaps) / len(gaps) if gaps else math.nan,
                    len(answer.pieces),
                )
                with lock:
                    samples.append(sample)
                    bar.update(1)
                    if on_sample is not None and on_sample(sample):
                        stop.set()
            if box[0] is not None:
                box[0].close()

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(self.concurrency)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        bar.close()
        return samples
