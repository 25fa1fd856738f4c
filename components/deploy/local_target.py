"""The embedded target: stable and canary as two real Triton servers behind nginx.

Promoted repositories live in a state folder: `stable/` (serving), `previous/` (kept for
a one-step rollback) and `state.json` with their roots. Everything started here is
stopped by `close()`: nothing is left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.records import read_serving_state, served_dir

from . import metrics as prom
from . import repository, serving_state, smoke
from .api_keys import keys_for
from .config import DeployConfig
from .loadgen import LoadGenerator, sized_concurrency
from .nginx_split import NginxSplit
from .processes import LOOPBACK, http_get
from .prometheus import LocalPrometheus, PromQL
from .triton_local import REPOSITORY_ROOT_ENV, TritonServer


class LocalTarget:
    name = "local"
    attributes = True  # nginx's X-Upstream names the server of every response

    def __init__(self, cfg: DeployConfig, state_dir: str, work: str, key_file: str | None = None):
        self.server_env = {"LLMOPS_WATERMARK_KEY_FILE": os.path.abspath(key_file)} if key_file else {}
        self.cfg, self.state_dir, self.work = cfg, os.path.abspath(state_dir), os.path.abspath(work)
        os.makedirs(self.state_dir, exist_ok=True)
        os.makedirs(self.work, exist_ok=True)
        self.state = read_serving_state(self.state_dir)
        self.stable: TritonServer | None = None
        self.canary: TritonServer | None = None
        self.split: NginxSplit | None = None
        self.canary_repo: str | None = None
        self.stable_at_start: dict | None = None  # the verified stable this rollout met
        self.concurrency = cfg.traffic.concurrency  # sized from the warm-up's latency
        self.prometheus = None  # LocalPrometheus, when this target started one
        self.promql = None  # PromQL, when metrics come from Prometheus

    # -- lifecycle --------------------------------------------------------------------

    def stable_info(self) -> dict | None:
        """The promoted repository, verified against the root recorded at promotion."""
        if not self.state.get("stable"):
            return None
        repo = served_dir(self.state_dir, "stable")
        rec = self.state["stable"]
        return repository.verify(repo, rec["model_root"], rec["repository_root"])

    def production_root(self) -> tuple[bool, str | None]:
        """(known, the model root serving now), as the state recorded it at promotion."""
        return True, (self.state.get("stable") or {}).get("model_root")

    def start(self, canary_repo: str, info: dict | None = None) -> None:
        """Under the rollout lock: what a killed rollout left (servers, a half-made
        promotion) cleared first, then stable (verified) and the canary started."""
        serving_state.stop_leftovers(self.state_dir)
        serving_state.repair(self.state_dir)
        self.state = read_serving_state(self.state_dir)
        self.canary_repo = canary_repo
        self.stable_at_start = self.stable_info()
        has_stable = self.stable_at_start is not None
        timeout = self.cfg.local.startup_timeout_s
        host = self.cfg.local.host
        if has_stable:
            self.stable = self._triton(served_dir(self.state_dir, "stable"), "stable")
        self.canary = self._triton(canary_repo, "canary", (info or {}).get("repository_root"))
        for server in (self.stable, self.canary):  # both load in parallel, then wait
            if server is not None:
                server.wait_ready(timeout)
        self.split = NginxSplit(
            self.work,
            self.stable.backend if self.stable else None,
            self.canary.backend,
            host,
            model=self.cfg.serving.model_name,
            api_keys=keys_for(host, self.cfg.front_door.api_keys_file, self.state_dir),
            limits=self.cfg.front_door,
        )
        self.split.start(0 if has_stable else 100)
        self._note_processes(self.split.pids)
        if self.cfg.metrics.source == "prometheus":
            url = self.cfg.metrics.prometheus_url
            if not url:
                targets = {
                    role: f"{LOOPBACK}:{s.metrics_port}"
                    for role, s in (("stable", self.stable), ("canary", self.canary))
                    if s
                }
                self.prometheus = LocalPrometheus(
                    self.work, targets, self.cfg.metrics.scrape_interval_s, LOOPBACK
                ).start()
                serving_state.note_process(self.state_dir, self.prometheus.proc.pid)
                url = self.prometheus.url
            self.promql = PromQL(url)
        self.warm_up()

    def _triton(self, repo: str, role: str, root: str | None = None) -> TritonServer:
        """A started (not yet ready) server, listed for the next rollout to stop should this
        one be killed; its model verifies `repo` against `root` (stable: the state's) as it loads."""
        cfg = self.cfg
        if role == "stable":
            root = self.state["stable"]["repository_root"]
        server = TritonServer(
            repo,
            self.work,
            role,
            LOOPBACK,  # behind nginx only: its own ports never face the network
            {**self.server_env, **({REPOSITORY_ROOT_ENV: root} if root else {})},
            cfg.serving.model_name,
            cfg.frontend_limits,
            self._cores(role),
        )
        server.on_start = self._note_processes
        return server.start()

    def _note_processes(self, pids: list[int]) -> None:
        for pid in pids:
            serving_state.note_process(self.state_dir, pid)

    def _cores(self, role: str) -> list[int] | None:
        """With stable and canary side by side, each server (its engine and every process
        it starts) gets half the cores, as two pods get CPUs of their own: two engines
        whose processes wait for each other by spinning, on shared cores, slow each other
        unevenly (one vLLM engine was measured at a sixth of the other's throughput),
        which the analysis would read as a regression of whichever side lost."""
        cores = sorted(os.sched_getaffinity(0))
        half = len(cores) // 2
        if not self.state.get("stable") or not half:
            return None
        return cores[:half] if role == "stable" else cores[half:]

    def warm_up(self, requests: int = 8) -> None:
        """A few requests to each server first: a fresh server's first inferences are slow
        (lazy initialisation), which would read as a latency regression of whichever side
        is colder."""
        slowest = 0.0
        for server in (self.stable, self.canary):
            if server is None:
                continue
            host, port = server.frontend.address.rsplit(":", 1)
            ld = self.cfg.traffic
            seen: list = []
            LoadGenerator(
                host,
                int(port),
                self.cfg.serving.model_name,
                {},
                ld.prompts,
                ld.max_new_tokens,
                min(ld.concurrency, requests),
                ld.timeout_s,
            ).run(30.0, on_sample=lambda s, seen=seen: seen.append(s) or len(seen) >= requests, desc="warm-up")
            warm = sorted(s.latency_ms for s in seen[len(seen) // 2 :] if s.ok)  # the later, warm half
            if warm:
                slowest = max(slowest, warm[len(warm) // 2])
        self.concurrency = sized_concurrency(self.cfg, slowest)

    def close(self) -> None:
        for part in (self.split, self.canary, self.stable, self.prometheus):
            if part is not None:
                part.stop()
        serving_state.stop_leftovers(self.state_dir, log=lambda *_: None)  # all stopped: the list goes

    # -- traffic and observations -----------------------------------------------------

    def set_canary_percent(self, percent: int) -> None:
        self.split.set_canary_percent(percent)

    def canary_alive(self) -> bool | None:
        return self.canary is not None and self.canary.alive() and self.canary.ready()

    def stable_alive(self) -> bool | None:
        """None on a first release (no stable)."""
        return None if self.stable is None else self.stable.alive() and self.stable.ready()

    def _selector(self, role: str) -> str:
        m = self.cfg.metrics
        return (m.stable_selector if role == "stable" else m.canary_selector) or f'job="{role}"'

    def scrape(self, role: str) -> dict | None:
        server = self.stable if role == "stable" else self.canary
        if server is None:
            return None
        try:
            if self.promql is not None:
                return self.promql.counters_now(
                    self.cfg.serving.model_name, self._selector(role), self.cfg.metrics.freshness_timeout_s
                )
            return prom.parse(server.metrics_text(), self.cfg.serving.model_name)
        except OSError:
            return None

    def token_latency(self, role: str, delta: dict | None, seconds: float) -> dict | None:
        """TTFT and ITL quantiles over the interval: PromQL's histogram_quantile where
        Prometheus is the source, the same rule on the scraped buckets' increase otherwise."""
        if (self.stable if role == "stable" else self.canary) is None or delta is None:
            return None
        if self.promql is None:
            return prom.token_latency(delta)
        try:
            return self.promql.token_latency(self.cfg.serving.model_name, self._selector(role), seconds)
        except OSError:
            return None

    def load(self) -> LoadGenerator:
        roles = {}
        for role, server in (("canary", self.canary), ("stable", self.stable)):
            if server is not None:
                roles.update({server.address: role, server.frontend.address: role})
        ld = self.cfg.traffic
        return LoadGenerator(
            self.split.host,
            self.split.port,
            self.cfg.serving.model_name,
            roles,
            ld.prompts,
            ld.max_new_tokens,
            self.concurrency,
            ld.timeout_s,
            headers=self.split.operator_headers,  # X-Upstream names the side of each answer
        )

    def smoke(self, watermark=None, tokenizer=None) -> dict:
        pinned = {**smoke.CANARY, **self.split.operator_headers}
        return smoke.run(self.split.url, self.cfg, watermark, tokenizer, pinned)

    def interfaces(self) -> tuple[dict, dict, dict, dict] | None:
        """(stable metadata, stable config, canary metadata, canary config), straight from the servers."""
        if self.stable is None:
            return None
        name = self.cfg.serving.model_name
        out = []
        for server in (self.stable, self.canary):
            for path in (f"/v2/models/{name}", f"/v2/models/{name}/config"):
                status, body = http_get(server.url + path)
                if status != 200:
                    raise InputError(f"{server.role} server answered {status} for {path}")
                out.append(json.loads(body))
        return tuple(out)

    # -- decisions --------------------------------------------------------------------

    def rollback(self) -> dict:
        """Canary traffic to 0, canary stopped (no idle accelerator), stable untouched; a
        stable server that died is started again (from the state's verified folder) and
        nginx pointed at it."""
        restarted = False
        if self.stable is not None and not self.stable.alive():
            self.stable.stop()
            self.stable = self._triton(served_dir(self.state_dir, "stable"), "stable")
            self.stable.wait_ready(self.cfg.local.startup_timeout_s)
            if self.split is not None:
                self.split.stable = self.stable.backend
            restarted = True
        if self.stable is not None and self.split is not None:
            self.split.set_canary_percent(0)
        if self.canary is not None:
            self.canary.stop()
        out = {
            "canary_percent": self.split.canary_percent if self.split else 0,
            "canary_running": bool(self.canary and self.canary.alive()),
            "stable_ready": bool(self.stable and self.stable.ready()),
        }
        return {**out, "stable_restarted": True} if restarted else out

    def promote(self, info: dict) -> None:
        """Canary becomes stable; the old stable is kept as `previous` for one-step rollback
        (serving_state.commit_promotion: a kill at any instant leaves one or the other)."""
        self.split.set_canary_percent(100)
        record = {k: info[k] for k in ("model_name", "version", "repository_root", "model_root")}
        self.state = serving_state.commit_promotion(self.state_dir, self.canary_repo, record)
        if self.stable is not None:
            self.stable.stop()


def undo(state_dir: str) -> dict:
    """One-step rollback of the last promotion: previous becomes stable again. Refused,
    naming the holder, while a rollout holds the state."""
    from .config import Lock
    from .rollout_lock import state_lock

    with state_lock(state_dir, Lock(on_busy="refuse")):
        serving_state.repair(state_dir)
        return serving_state.commit_undo(state_dir)


@contextlib.contextmanager
def serving(
    state_dir: str,
    port: int = 0,
    host: str = "127.0.0.1",
    key_file: str | None = None,
    cfg: DeployConfig | None = None,
    api_keys: str | None = "",
    public_key: str | None = None,
):
    """What the state holds as stable (verified against its recorded roots and, with
    `public_key`, its signature; verified again by the model as it loads), served by
    Triton behind nginx until the block ends: yields (nginx's URL, the repository's info,
    with `api_keys`: the key file clients must use, or None). `api_keys` "": the config's
    file, else none on loopback and a key made in the state folder elsewhere; None: no key
    asked, whatever the host."""
    import tempfile

    cfg = cfg or DeployConfig()
    state = read_serving_state(state_dir)
    if not state.get("stable"):
        raise InputError(f"{state_dir}: nothing promoted to serve (no stable version in state.json)")
    rec = state["stable"]
    folder = served_dir(state_dir, "stable")
    info = repository.verify(folder, rec["model_root"], rec["repository_root"], public_key)
    keys = None if api_keys is None else keys_for(host, api_keys or cfg.front_door.api_keys_file, state_dir)
    work = tempfile.mkdtemp(prefix="llmops-serve-")
    env = {"LLMOPS_WATERMARK_KEY_FILE": os.path.abspath(key_file)} if key_file else {}
    env[REPOSITORY_ROOT_ENV] = info["repository_root"]  # verified again as the model loads
    server = TritonServer(folder, work, "stable", LOOPBACK, env, info["model_name"], cfg.frontend_limits)
    split = None
    try:
        server.start().wait_ready(cfg.local.startup_timeout_s)
        split = NginxSplit(work, None, server.backend, host, port, info["model_name"], keys, cfg.front_door).start(100)
        yield split.url, {**info, "server": server, "api_keys": keys}
    finally:
        for part in (split, server):
            if part is not None:
                part.stop()
        shutil.rmtree(work, ignore_errors=True)


def serve(
    state_dir: str,
    port: int = 0,
    host: str = "127.0.0.1",
    key_file: str | None = None,
    announce=print,
    cfg: DeployConfig | None = None,
    api_keys: str | None = "",
    public_key: str | None = None,
) -> None:
    """`serving` in the foreground until SIGINT or SIGTERM; `announce` gets the URL first,
    once the model answers."""
    import signal

    stop = []
    previous = {s: signal.signal(s, lambda *_: stop.append(True)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with serving(state_dir, port, host, key_file, cfg, api_keys, public_key) as (url, info):
            keys = info["api_keys"]
            announce(
                f"{url} serving {info['model_name']} version {info['version']} (model root "
                f"{info['model_root'][:16]}…, engine {info['settings'].get('engine', 'transformers')}): OpenAI API "
                f"at {url}/v1 (chat/completions, completions, models), Triton's at "
                f"{url}/v2/models/{info['model_name']}/generate and generate_stream; "
                + (f"API key required (Authorization: Bearer; keys in {keys}); " if keys else "no API key asked; ")
                + f"metrics at http://{LOOPBACK}:{info['server'].metrics_port}/metrics; Ctrl-C stops"
            )
            while not stop:
                if not info["server"].alive():
                    raise InputError(
                        f"tritonserver exited with {info['server'].proc.returncode}: {info['server'].log_tail()}"
                    )
                time.sleep(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
