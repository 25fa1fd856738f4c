"""Real inference requests through the traffic split, each attributed to the server that
answered (nginx's X-Upstream), timed on the client."""
from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass
from typing import Callable

from kfp_llmops.components.common.progress import progress

_RETRYABLE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.CannotSendRequest)


@dataclass
class Sample:
    t: float            # seconds since the load started, at the response
    backend: str        # stable | canary | unknown | none (nginx unreachable)
    ok: bool
    latency_ms: float
    status: int

    def to_json(self) -> dict:
        return {"t": round(self.t, 4), "backend": self.backend, "ok": self.ok,
                "latency_ms": round(self.latency_ms, 3), "status": self.status}


def infer_body(prompt: str, max_new_tokens: int, seed: int = 0) -> bytes:
    return json.dumps({"inputs": [
        {"name": "text_input", "shape": [1, 1], "datatype": "BYTES", "data": [prompt]},
        {"name": "max_new_tokens", "shape": [1, 1], "datatype": "INT32", "data": [max_new_tokens]},
        {"name": "seed", "shape": [1, 1], "datatype": "INT64", "data": [seed]}]}).encode()


def sized_concurrency(cfg, latency_ms: float) -> int:
    """Clients enough for the smallest step's canary share to reach `sla.min_requests` in
    `interval_s` at the measured latency (25 % headroom), within the configured range."""
    import math
    t = cfg.traffic
    needed_rps = cfg.sla.min_requests / (cfg.interval_s * min(cfg.steps) / 100.0)
    want = math.ceil(needed_rps * max(latency_ms, 1.0) / 1000.0 * 1.25)
    return max(t.concurrency, min(t.max_concurrency, want))


class LoadGenerator:
    def __init__(self, host: str, port: int, model: str, roles: dict[str, str], prompts: list[str],
                 max_new_tokens: int, concurrency: int, timeout: float = 30.0, headers: dict | None = None):
        self.host, self.port, self.model, self.roles = host, port, model, roles
        self.prompts, self.max_new_tokens, self.concurrency, self.timeout = prompts, max_new_tokens, concurrency, timeout
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self._counter = 0

    def _role(self, upstream: str | None) -> str:
        if not upstream:
            return "unknown"
        return self.roles.get(upstream.split(",")[-1].strip(), "unknown")

    def _one(self, conn_box: list, body: bytes) -> tuple[str, bool, int]:
        path = f"/v2/models/{self.model}/infer"
        for attempt in range(2):
            if conn_box[0] is None:
                conn_box[0] = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            conn = conn_box[0]
            try:
                conn.request("POST", path, body=body, headers=self.headers)
                resp = conn.getresponse()
                resp.read()
                return self._role(resp.getheader("X-Upstream")), resp.status == 200, resp.status
            except _RETRYABLE:
                conn.close()          # keep-alive connection closed by an nginx reload: retry once
                conn_box[0] = None
                if attempt:
                    return "unknown", False, 0
            except OSError:
                conn.close()
                conn_box[0] = None
                return "none", False, 0
        return "unknown", False, 0

    def run(self, duration: float, on_sample: Callable[[Sample], bool] | None = None,
            desc: str = "load", enough: Callable[[], bool] | None = None,
            max_duration: float | None = None) -> list[Sample]:
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
                body = infer_body(self.prompts[n % len(self.prompts)], self.max_new_tokens, n)
                t0 = time.monotonic()
                backend, ok, status = self._one(box, body)
                now = time.monotonic()
                sample = Sample(now - start, backend, ok, (now - t0) * 1000.0, status)
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
