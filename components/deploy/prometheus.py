"""Canary and stable counters from Prometheus's query API (PromQL), as Flagger reads
them, in the same shape `metrics.parse` gives from a direct scrape, so the analysis does
not care where they came from.

`PromQL` talks to any Prometheus (a cluster's, `metrics.prometheus_url`). `LocalPrometheus`
runs a real Prometheus server (Debian's `prometheus`) beside the local target, scraping
both Triton servers, so the local drills exercise exactly the cluster's query path.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request

from kfp_llmops.components.common.errors import InputError, LlmopsError

from .metrics import COUNTERS, HISTOGRAMS, QUANTILES
from .processes import die_with_parent, free_ports, http_get, stop_group


class PromQL:
    def __init__(self, url: str, timeout: float = 5.0):
        self.url, self.timeout = url.rstrip("/"), timeout

    def query(self, expr: str) -> list[tuple[dict, float]]:
        """Instant query: [(labels, value)]; an error or a non-success answer raises OSError."""
        q = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=self.timeout) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise OSError(f"Prometheus: {body.get('error', body)}")
        return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]

    def counters(self, model: str, selector: str) -> dict[str, float] | None:
        """Counter totals of `model` on the series `selector` picks; None when Prometheus has
        no series for it (not scraped: a failed check, never a pass)."""
        out = {}
        for metric, key in COUNTERS.items():
            rows = self.query(f'sum({metric}{{model="{model}",{selector}}})')
            if not rows:
                if metric == "nv_inference_request_success":
                    return None
                out[key] = 0.0
                continue
            out[key] = rows[0][1]
        for key, names in HISTOGRAMS.items():
            rows = []
            for metric in names:  # the first name the server exports
                rows = self.query(f'sum by (le) ({metric}_bucket{{model="{model}",{selector}}})')
                if rows:
                    break
            out[key] = {float(labels["le"]): value for labels, value in rows}
        return out

    def _exported(self, names: tuple[str, ...], model: str, selector: str) -> str:
        """The first of a histogram's names with series for `model` (else the first)."""
        for metric in names:
            if self.query(f'count({metric}_count{{model="{model}",{selector}}})'):
                return metric
        return names[0]

    def token_latency(self, model: str, selector: str, seconds: float) -> dict:
        """Time to first token and inter-token latency over the last `seconds`, as a canary
        analysis reads them: `histogram_quantile` of the buckets' increase (ms), and how
        many observations it rests on."""
        window = f"{max(1, math.ceil(seconds))}s"
        out = {}
        for key, names in HISTOGRAMS.items():
            metric = self._exported(names, model, selector)
            series = f'{metric}_bucket{{model="{model}",{selector}}}'
            count = self.query(f'sum(increase({metric}_count{{model="{model}",{selector}}}[{window}]))')
            out[key] = {"observations": int(round(count[0][1])) if count else 0}
            for q in QUANTILES:
                rows = self.query(f"histogram_quantile({q}, sum by (le) (increase({series}[{window}])))")
                out[key][f"p{round(q * 100)}_ms"] = rows[0][1] * 1000.0 if rows else math.nan
        return out

    def counters_now(self, model: str, selector: str, timeout: float) -> dict[str, float] | None:
        """`counters` once a scrape newer than this moment is in (None if none comes in `timeout`):
        what an interval's end reads, so the requests it just sent are counted."""
        if not self.wait_fresh([selector], time.time(), timeout):
            return None
        return self.counters(model, selector)

    def scraped_since(self, selector: str, since: float) -> bool:
        """Has every series `selector` picks been scraped at or after `since` (unix time)?"""
        rows = self.query(f"timestamp(up{{{selector}}})")
        return bool(rows) and min(v for _, v in rows) >= since

    def wait_fresh(self, selectors: list[str], since: float, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.scraped_since(s, since) for s in selectors):
                return True
            time.sleep(0.1)
        return False


class LocalPrometheus:
    """A Prometheus server scraping `targets` (job name -> host:port), stopped by `stop()`."""

    def __init__(self, work: str, targets: dict[str, str], interval_s: float = 1.0, host: str = "127.0.0.1"):
        self.work, self.targets, self.interval_s, self.host = (
            os.path.join(work, "prometheus"),
            targets,
            interval_s,
            host,
        )
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _config(self) -> str:
        jobs = "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: ['{addr}']\n"
            for job, addr in sorted(self.targets.items())
        )
        every = f"{max(1, round(self.interval_s * 1000))}ms"  # Prometheus durations are integers
        return f"global:\n  scrape_interval: {every}\n  evaluation_interval: {every}\nscrape_configs:\n{jobs}"

    def start(self, timeout: float = 60.0) -> LocalPrometheus:
        binary = shutil.which("prometheus") or "/usr/bin/prometheus"
        if not os.path.exists(binary):
            raise InputError("metrics.source prometheus: no `prometheus` binary (apt-get install prometheus)")
        os.makedirs(self.work, exist_ok=True)
        # One rollout's series only: a rerun in the same folder (after a killed rollout)
        # would otherwise read the dead servers' series beside the new ones.
        shutil.rmtree(os.path.join(self.work, "data"), ignore_errors=True)
        config = os.path.join(self.work, "prometheus.yml")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write(self._config())
        (self.port,) = free_ports(1, self.host)
        log = open(os.path.join(self.work, "prometheus.log"), "ab")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={os.path.join(self.work, 'data')}",
                f"--web.listen-address={self.host}:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.work,
            preexec_fn=die_with_parent,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LlmopsError(f"prometheus exited with {self.proc.returncode} (log: {self.work}/prometheus.log)")
            try:
                if http_get(f"{self.url}/-/ready", 2.0)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise LlmopsError(f"prometheus not ready after {timeout:.0f} s")

    def stop(self) -> None:
        stop_group(self.proc, signal.SIGTERM, 5.0)
