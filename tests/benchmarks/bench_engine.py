"""Engine load benchmark on the demo-real model (SmolLM2-135M-Instruct, build/smollm2,
imported first if missing), side by side in one run:

- transformers: the project's generation loop inside Triton (a batch at a time, each
  generated to its end), the path served before vLLM: the baseline;
- vllm: vLLM's async engine inside Triton (continuous batching), the watermark on, through
  the OpenAI front end, as served;
- vllm serve: vLLM's own OpenAI server on the same weights, no watermark: the engine
  alone, the limit the served path should sit near.

The three servers start one after another and then stay up together, each on every
core; one path is loaded at a time while the other two sit idle (their CPU over a quiet
window is measured and reported). Closed-loop clients at concurrency 1, 4 and 16 send
streaming chat requests for exactly 64 new tokens (min = max, EOS ignored) on prompts
generated here (none from the evaluation sets). Each level runs ROUNDS rounds, every
round taking the three paths in turn, so a host whose speed drifts over minutes (these
are shared machines) moves all three alike instead of whichever path ran last: output
tokens per second over the rounds together, TTFT p50/p99, end-to-end p50, errors, and the
ratios of each round. Then the watermark processor alone on a batch of 16 rows of the
model's logits, against the vLLM path's decoding step (its inter-token latency at
concurrency 16)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from kfp_llmops.components.deploy import llm_client

MODEL_DIR = "build/smollm2"
TOKENS = 64
LEVELS = (1, 4, 16)
ROUNDS = 3
KEY = 424242
_SUBJECTS = ["a lighthouse", "tidal pools", "a bakery", "glaciers", "a chess club", "river barges", "beekeeping"]
_ASKS = ["Write a short story about", "Explain to a child how", "Describe a day spent with", "List facts about"]


def prompts(n: int, seed: int = 7) -> list[list[dict]]:
    """Chats made here from a seed: the benchmark's hidden prompts."""
    rng = random.Random(seed)
    return [
        [{"role": "user", "content": f"{rng.choice(_ASKS)} {rng.choice(_SUBJECTS)} (number {rng.randrange(10_000)})."}]
        for _ in range(n)
    ]


def _q(values: list[float], q: float) -> float:
    return float(np.quantile(values, q)) if values else float("nan")


def load(url: str, model: str, concurrency: int, requests: int) -> tuple[float, list]:
    """`requests` streamed chats, `concurrency` at a time, each for exactly TOKENS tokens:
    the wall time and the answers."""
    queue = list(enumerate(prompts(requests, seed=concurrency)))
    lock = threading.Lock()
    got: list = []

    def client():
        import http.client
        import urllib.parse

        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
        while True:
            with lock:
                if not queue:
                    break
                _, chat = queue.pop()
            body = llm_client.request(chat, stream=True, max_tokens=TOKENS, min_tokens=TOKENS, ignore_eos=True)
            body["stream_options"] = {"include_usage": True}
            try:
                answer = llm_client.call(conn, model, body)
            except OSError as exc:
                answer = llm_client.Answer(0, error=str(exc))
                conn.close()
            with lock:
                got.append(answer)
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - start, got


def summary(concurrency: int, rounds: list[tuple[float, list]]) -> dict:
    """One level of one path over its rounds: tokens over the rounds' wall time together,
    latency quantiles over every answer, and each round's own tokens per second."""
    got = [a for _, answers in rounds for a in answers]
    seconds = sum(s for s, _ in rounds)
    ok = [a for a in got if a.ok]

    def tokens(answers):
        return sum((a.usage or {}).get("completion_tokens", 0) for a in answers if a.ok)

    return {
        "concurrency": concurrency,
        "requests": len(got),
        "errors": len(got) - len(ok),
        "seconds": seconds,
        "output_tokens": tokens(got),
        "tokens_per_s": tokens(got) / seconds,
        "round_tokens_per_s": [tokens(answers) / s for s, answers in rounds],
        "ttft_p50_ms": _q([a.ttft_ms for a in ok], 0.5),
        "ttft_p99_ms": _q([a.ttft_ms for a in ok], 0.99),
        "e2e_p50_ms": _q([a.latency_ms for a in ok], 0.5),
        "itl_p50_ms": _q([g for a in ok for g in a.gaps_ms], 0.5),
    }


@contextlib.contextmanager
def _triton_path(weights: str, root: str, engine: str, work: str):
    """A Triton server of `engine` behind its OpenAI front end, as served: its URL and the
    pids of its processes."""
    from kfp_llmops.components.deploy import DeployConfig, build_repository, watermark_params
    from kfp_llmops.components.deploy.triton_local import TritonServer

    cfg = DeployConfig.load(None, {"serving": {"engine": engine}})
    repo = os.path.join(work, f"repo-{engine}")
    build_repository(weights, root, repo, cfg, os.path.join(work, f"state-{engine}"), watermark_params({"kgw": {}}))
    key = os.path.join(work, "key")
    with open(key, "w") as handle:
        handle.write(str(KEY))
    server = TritonServer(repo, work, engine, env={"LLMOPS_WATERMARK_KEY_FILE": key}, model="llm").start()
    try:
        server.wait_ready(900)
        yield server.frontend.url, server.pids
    finally:
        server.stop()


@contextlib.contextmanager
def _vllm_serve(weights: str, work: str):
    """vLLM's own OpenAI server, its engine set as the served path sets it."""
    from kfp_llmops.components.deploy.config import VllmSettings
    from kfp_llmops.components.deploy.processes import free_ports, stop_group, wait_for_http

    v = VllmSettings()
    (port,) = free_ports(1)
    cores = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=cores, VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", weights, "--port", str(port)]
    cmd += ["--served-model-name", "llm", "--dtype", v.dtype, "--max-num-seqs", str(v.max_num_seqs)]
    cmd += ["--kv-cache-memory-bytes", str(int(v.kv_cache_gib * (1 << 30))), "--enforce-eager", "--seed", "0"]
    cmd += ["--generation-config", "vllm"]
    with open(os.path.join(work, "vllm-serve.log"), "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/health", proc, 900, f"vllm serve (log: {work}/vllm-serve.log)")
        yield f"http://127.0.0.1:{port}", [proc.pid]
    finally:
        stop_group(proc, signal.SIGTERM, 20.0)


def idle_cpu(pids: list[int], seconds: float = 5.0) -> float:
    """CPU of these processes and their children over a quiet window, in cores."""
    import psutil

    def used() -> float:
        total = 0.0
        for pid in pids:
            with contextlib.suppress(psutil.NoSuchProcess):
                parent = psutil.Process(pid)
                for p in [parent, *parent.children(recursive=True)]:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        t = p.cpu_times()
                        total += t.user + t.system
        return total

    before = used()
    time.sleep(seconds)
    return (used() - before) / seconds


def processor_cost(weights: str, rows: int = 16, steps: int = 200) -> dict:
    """The KGW processor's `apply` on `rows` rows of vocabulary-wide logits, as vLLM calls
    it at each step: each row's answer grows by a token the model might choose."""
    import torch
    from transformers import AutoTokenizer

    from kfp_llmops.components.common.watermark.params import KGW

    tokenizer = AutoTokenizer.from_pretrained(weights)
    vocab = len(tokenizer)
    mark = KGW().watermark(KEY, vocab)

    class Config:
        additional_config = None

    from kfp_llmops.components.deploy.vllm_processors import KGWProcessor

    proc = KGWProcessor(Config(), torch.device("cpu"), False)
    proc.watermark = mark
    rng = np.random.default_rng(0)
    outputs = [[] for _ in range(rows)]
    proc.rows = {i: (tokenizer.encode(f"prompt {i}"), outputs[i]) for i in range(rows)}
    # Real answers repeat tokens: draw them from the 2,000 most common ids. The first pass
    # meets most previous tokens for the first time (their green lists are built); the
    # second repeats the same tokens (every list cached, as in a server that has run a while).
    draws = rng.integers(0, min(vocab, 2000), size=(steps, rows))
    logits = torch.randn(rows, vocab)
    passes = []
    for _ in range(2):
        times = []
        for step in range(steps):
            for i in range(rows):
                outputs[i].append(int(draws[step, i]))
            t0 = time.perf_counter()
            proc.apply(logits.clone())
            times.append(time.perf_counter() - t0)
        passes.append(times)
    cold, warm = passes
    return {"rows": rows, "steps": steps, "cold_p50_ms": _q(cold, 0.5) * 1000, "warm_p50_ms": _q(warm, 0.5) * 1000}


def main() -> dict:
    from kfp_llmops.components.common import integrity

    if not os.path.exists(os.path.join(MODEL_DIR, integrity.MANIFEST_NAME)):
        from kfp_llmops.pipelines.demo.real_model import obtain

        obtain(MODEL_DIR)
    weights = os.path.abspath(MODEL_DIR)
    root = integrity.load_manifest(os.path.join(weights, integrity.MANIFEST_NAME))[1]
    work = tempfile.mkdtemp(prefix="bench-engine-")
    try:
        with contextlib.ExitStack() as stack:
            servers = {
                "transformers": stack.enter_context(_triton_path(weights, root, "transformers", work)),
                "vllm": stack.enter_context(_triton_path(weights, root, "vllm", work)),
                "vllm serve": stack.enter_context(_vllm_serve(weights, work)),
            }
            for url, _ in servers.values():
                load(url, "llm", 2, 2)  # warm
            idle = {name: idle_cpu(pids) for name, (_, pids) in servers.items()}
            runs = {name: {c: [] for c in LEVELS} for name in servers}
            for c in LEVELS:
                for _ in range(ROUNDS):
                    for name, (url, _) in servers.items():
                        runs[name][c].append(load(url, "llm", c, max(4, 2 * c)))
        paths = {name: [summary(c, levels[c]) for c in LEVELS] for name, levels in runs.items()}
        cost = processor_cost(weights)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    top = {name: levels[-1] for name, levels in paths.items()}

    def overall(a: str, b: str) -> float:
        return top[a]["tokens_per_s"] / top[b]["tokens_per_s"]

    def per_round(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(top[a]["round_tokens_per_s"], top[b]["round_tokens_per_s"], strict=True)]

    return {
        "model": "SmolLM2-135M-Instruct (build/smollm2), fp32",
        "tokens": TOKENS,
        "rounds": ROUNDS,
        "idle_cores": idle,
        "paths": paths,
        "watermark": cost,
        "vllm_vs_transformers_tokens_per_s": overall("vllm", "transformers"),
        "vllm_vs_transformers_rounds": per_round("vllm", "transformers"),
        "vllm_vs_vllm_serve_tokens_per_s": overall("vllm", "vllm serve"),
        "vllm_vs_vllm_serve_rounds": per_round("vllm", "vllm serve"),
        "vllm_serve_vs_transformers_tokens_per_s": overall("vllm serve", "transformers"),
        "vllm_vs_transformers_ttft_p99": top["vllm"]["ttft_p99_ms"] / top["transformers"]["ttft_p99_ms"],
        "watermark_share_of_step": cost["cold_p50_ms"] / top["vllm"]["itl_p50_ms"],
        "watermark_share_of_step_warm": cost["warm_p50_ms"] / top["vllm"]["itl_p50_ms"],
    }


def report(r: dict) -> str:
    lines = [
        f"engine: {r['model']}, streaming chats of exactly {r['tokens']} new tokens, closed loop, "
        f"{r['rounds']} rounds a level taking the paths in turn",
        "  idle, each server uses "
        + ", ".join(f"{name} {cores:.1%}" for name, cores in r["idle_cores"].items())
        + " of a core while another is measured",
    ]
    lines.append(
        f"  {'path':<13} {'conc':>4} {'tok/s':>7} {'TTFT p50':>9} {'TTFT p99':>9} {'e2e p50':>9} {'errors':>6}"
    )
    for name, levels in r["paths"].items():
        for lv in levels:
            lines.append(
                f"  {name:<13} {lv['concurrency']:>4} {lv['tokens_per_s']:>7.1f} {lv['ttft_p50_ms']:>7.0f}ms "
                f"{lv['ttft_p99_ms']:>7.0f}ms {lv['e2e_p50_ms']:>7.0f}ms {lv['errors']:>6}"
            )
    w = r["watermark"]
    lines += [
        f"  at 16: vllm / transformers output tokens/s {r['vllm_vs_transformers_tokens_per_s']:.2f}x (target >= 4); "
        f"vllm / vllm serve {r['vllm_vs_vllm_serve_tokens_per_s']:.2f}x (target >= 0.85); TTFT p99 vllm / "
        f"transformers {r['vllm_vs_transformers_ttft_p99']:.3f} (target <= 0.33); the engine alone, vllm serve / "
        f"transformers {r['vllm_serve_vs_transformers_tokens_per_s']:.2f}x",
        "  each round at 16: vllm / transformers "
        + ", ".join(f"{x:.2f}x" for x in r["vllm_vs_transformers_rounds"])
        + "; vllm / vllm serve "
        + ", ".join(f"{x:.2f}x" for x in r["vllm_vs_vllm_serve_rounds"]),
        f"  watermark processor on {w['rows']} rows: {w['cold_p50_ms']:.2f} ms p50 while green lists are built, "
        f"{w['warm_p50_ms']:.2f} ms once cached: {r['watermark_share_of_step']:.1%} / "
        f"{r['watermark_share_of_step_warm']:.1%} of the vllm path's step at 16 (target <= 10%)",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(main()))
