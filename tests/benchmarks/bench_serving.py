"""Serving benchmark on the promoted demo model (runs/demo's serving state; `make demo`
first), or on a barely trained tiny model when there is none (said in the report).

One Triton server behind nginx, the held-out questions asked one at a time:
1. streaming against not: time to first token (a non-streamed answer's first token is
   its whole answer) and inter-token latency, p50 and p99;
2. ending at EOS against the fixed length every answer paid before (min_new_tokens =
   max_new_tokens, the served bound): tokens and time per answer;
3. the nginx hop on a stream: the same streamed requests straight to Triton.
"""

from __future__ import annotations

import os
import statistics
import tempfile

import numpy as np

from kfp_llmops.components.common.jsonl import read_eval_set
from kfp_llmops.components.deploy import llm_client

DEMO_STATE, DEMO_KEY, DEMO_EVAL = "runs/demo/serving", "runs/demo/watermark.key", "runs/demo/data/eval.jsonl"


def _q(values: list[float], q: float) -> float:
    return float(np.quantile(values, q)) if values else float("nan")


def _ask_all(url: str, prompts: list, stream: bool, rounds: int, **inputs) -> dict:
    ttft, itl, total, pieces = [], [], [], []
    for _ in range(rounds):
        for p in prompts:
            a = llm_client.ask(url, "llm", llm_client.generate_body(p, stream=stream, **inputs))
            if not a.ok:
                raise RuntimeError(f"{a.status}: {a.error}")
            ttft.append(a.ttft_ms)
            itl += a.gaps_ms
            total.append(a.latency_ms)
            pieces.append(len(a.pieces))
    return {
        "ttft_p50_ms": _q(ttft, 0.5),
        "ttft_p99_ms": _q(ttft, 0.99),
        "itl_p50_ms": _q(itl, 0.5),
        "itl_p99_ms": _q(itl, 0.99),
        "latency_mean_ms": statistics.fmean(total),
        "requests": len(total),
        "pieces_mean": statistics.fmean(pieces),
    }


def _tokens(url: str, prompts: list, tokenizer, **inputs) -> float:
    return statistics.fmean(
        len(
            tokenizer.encode(
                llm_client.ask(url, "llm", llm_client.generate_body(p, **inputs)).text, add_special_tokens=False
            )
        )
        for p in prompts
    )


def main(questions: int = 100, rounds: int = 2) -> dict:
    from transformers import AutoTokenizer

    from kfp_llmops.components.common.records import read_serving_state
    from kfp_llmops.components.deploy.local_target import serving

    state, key, model = DEMO_STATE, DEMO_KEY, "demo model (runs/demo, promoted)"
    prompts = [r["prompt"] for r in read_eval_set(DEMO_EVAL)][:questions] if os.path.exists(DEMO_EVAL) else []
    tmp = None
    if not read_serving_state(state).get("stable") or not prompts:
        from kfp_llmops.components.deploy import DeployConfig, build_repository, deploy, watermark_params
        from tests.helpers import tiny_model

        tmp = tempfile.mkdtemp(prefix="bench-serving-")
        _, _, weights, root = tiny_model(tmp)
        key = os.path.join(tmp, "key")
        open(key, "w").write("987654321")
        state = os.path.join(tmp, "state")
        cfg = DeployConfig.load("interval_s: 2\nsteps: [100]\n")
        build_repository(weights, root, os.path.join(tmp, "repo"), cfg, state, watermark_params({"kgw": {}}))
        deploy(os.path.join(tmp, "repo"), root, os.path.join(tmp, "out"), cfg, state, key, log=lambda *_: None)
        prompts = [f"Tell me about item {i} and its color." for i in range(questions)]
        model = "tiny model (2 training steps; no promoted demo model found)"
    with serving(state, key_file=key) as (url, info):
        tokenizer = AutoTokenizer.from_pretrained(info["weights"])
        bound = info["settings"]["decoding"]["max_new_tokens"]
        _ask_all(url, prompts[:8], True, 1)  # warm
        streamed = _ask_all(url, prompts, True, rounds)
        whole = _ask_all(url, prompts, False, rounds)
        fixed = _ask_all(url, prompts, False, rounds, min_new_tokens=bound)
        direct = _ask_all(info["server"].url, prompts, True, rounds)
        eos_tokens, fixed_tokens = (
            _tokens(url, prompts, tokenizer),
            _tokens(url, prompts, tokenizer, min_new_tokens=bound),
        )
    return {
        "model": model,
        "questions": len(prompts),
        "rounds": rounds,
        "bound": bound,
        "streamed": streamed,
        "not_streamed": whole,
        "fixed_length": fixed,
        "direct_stream": direct,
        "tokens_at_eos": eos_tokens,
        "tokens_fixed": fixed_tokens,
        "eos_time_saving": 1 - whole["latency_mean_ms"] / fixed["latency_mean_ms"],
        "nginx_ttft_ms": streamed["ttft_p50_ms"] - direct["ttft_p50_ms"],
        "nginx_latency_ms": streamed["latency_mean_ms"] - direct["latency_mean_ms"],
    }


def report(r: dict) -> str:
    s, w, f, d = r["streamed"], r["not_streamed"], r["fixed_length"], r["direct_stream"]
    return "\n".join(
        [
            f"serving: {r['model']}, {r['questions']} held-out questions x {r['rounds']}, one at a time, through nginx",
            f"  streamed:      TTFT p50 {s['ttft_p50_ms']:.1f} ms, p99 {s['ttft_p99_ms']:.1f}; ITL p50 "
            f"{s['itl_p50_ms']:.2f} ms, p99 {s['itl_p99_ms']:.2f}; whole answer {s['latency_mean_ms']:.1f} ms mean, "
            f"{s['pieces_mean']:.1f} pieces",
            f"  not streamed:  first token = whole answer: p50 {w['ttft_p50_ms']:.1f} ms, p99 {w['ttft_p99_ms']:.1f} "
            f"(streaming's first token comes {w['ttft_p50_ms'] / s['ttft_p50_ms']:.1f}x sooner at p50)",
            f"  ends at EOS:   {r['tokens_at_eos']:.1f} tokens, {w['latency_mean_ms']:.1f} ms per answer; "
            f"the fixed length "
            f"paid before ({r['bound']} tokens): {r['tokens_fixed']:.1f} tokens, {f['latency_mean_ms']:.1f} ms "
            f"({r['eos_time_saving']:.0%} of the time saved)",
            f"  nginx hop:     streamed straight to Triton TTFT p50 {d['ttft_p50_ms']:.1f} ms, whole "
            f"{d['latency_mean_ms']:.1f} ms; nginx adds {r['nginx_ttft_ms']:+.2f} ms to TTFT, "
            f"{r['nginx_latency_ms']:+.2f} ms to the answer",
        ]
    )


if __name__ == "__main__":
    print(report(main()))
