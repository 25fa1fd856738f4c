"""`make demo-real` (`llmops run --real`): the release DAG through kfp.local on a real
pretrained instruct model, SmolLM2-135M-Instruct (`real_model.py`), fine-tuned with LoRA
under ZeRO-3 on 2 ranks on the project's conversational set (`real_data.py`), judged
against the base model as production (win rate, exact match before and after, the
forgetting gate), its KGW watermark verified at the paper's setting (open-ended texts of
about 200 tokens, gamma 0.25, delta 2, multinomial sampling, z 4) for lefthash and
selfhash with the base model as the perplexity oracle, and served by the Triton canary.
A second run rolls out against the first. The summary ends with what changed between
the base and the fine-tuned model, in numbers."""
from __future__ import annotations

import json
import os

from kfp_llmops.components.common import integrity
from kfp_llmops.components.common.errors import InputError

from .local_run import _task_outputs, TASK, run_local
from .real_data import OPEN_HELD_OUT, make_real_dataset

# LoRA on the attention's query and value projections (peft's default for Llama), at the
# recipe's learning rate; conversations are short, so batches are padded to about 100
# tokens, not to seq_len.
REAL_TRAIN = "recipe: lora\nsteps: 100\nmicro_batch: 4\nseq_len: 256\ncheckpoint_interval: 50\n"
# KGW's own evaluation setting (Kirchenbauer et al. 2023; lm-watermarking's README):
# gamma 0.25, delta 2, about 200 new tokens sampled at temperature 1, z 4, repeated
# (context, token) pairs scored once; selfhash (context width 4) measured beside the
# served lefthash.
REAL_WATERMARK = ("scheme: lefthash\ngamma: 0.25\ndelta: 2.0\nz_threshold: 4.0\n"
                  "generation: {{max_new_tokens: 200, min_new_tokens: 200, texts: 96, batch_size: 16, "
                  f"prompts: {json.dumps(OPEN_HELD_OUT)}}}\n"
                  "quality: {{max_new_tokens: 32, oracle_model: {base}, oracle_root: {root}, schemes: [selfhash]}}\n"
                  "gate: {{min_tpr: 0.9, min_tpr_substitution_10: 0.6}}\n")
# The base model answers the same held-out questions as the model in production would.
REAL_EVAL = ("generation: {{max_new_tokens: 32, batch_size: 16}}\n"
             "win_rate: {{baseline_model: {base}, baseline_model_root: {root}}}\n")
REAL_DEPLOY = ("interval_s: 5\nsteps: [50, 100]\nsla: {min_requests: 8}\n"
               "smoke: {max_new_tokens: 64}\ntraffic: {max_new_tokens: 8}\nlocal: {startup_timeout_s: 300}\n")
# The paper's row for this setting (multinomial sampling, T = 200, gamma 0.25, delta 2,
# z 4), as the issue that asked for this comparison quotes it.
PAPER = {"tpr": 0.98, "fpr": 0.0}


def run_real(out_dir: str, base_model: str, containers: bool = False) -> dict:
    """The release DAG on SmolLM2 (`base_model`, its pinned root checked first)."""
    from .real_model import MODEL_ROOT

    if containers:
        raise InputError("--real runs with the subprocess runner (the real model's folder is read in place)")
    if not os.path.exists(os.path.join(base_model, integrity.MANIFEST_NAME)):
        raise InputError(f"{base_model}: no imported model (make demo-real obtains it: python -m "
                         "kfp_llmops.pipelines.demo.real_model build/smollm2)")
    base = os.path.abspath(base_model)
    root = integrity.verify("model", base, MODEL_ROOT)
    data = make_real_dataset(os.path.join(os.path.abspath(out_dir), "data"))
    summary = run_local(out_dir, dataset=data["train"], eval_dataset=data["eval"], train_config=REAL_TRAIN,
                        eval_config=REAL_EVAL.format(base=json.dumps(base), root=root),
                        watermark_config=REAL_WATERMARK.format(base=json.dumps(base), root=root),
                        deploy_config=REAL_DEPLOY, base_model=base, base_model_root=root)
    summary["changes"] = changes(os.path.join(os.path.abspath(out_dir), "pipeline_root"))
    with open(os.path.join(summary["run_folder"], "summary.json"), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2)
    return summary


def changes(pipeline_root: str) -> dict:
    """What fine-tuning changed, from the evaluation and watermark outputs of the last run."""
    runs = sorted(d for d in os.listdir(pipeline_root) if not d.startswith("."))
    run_dir = os.path.join(pipeline_root, runs[-1])
    out: dict = {}
    e = _task_outputs(run_dir, TASK["evaluate_llm"])
    if e:
        m = e["artifacts"]["metrics"]["metadata"]
        out["evaluation"] = {k: m.get(k) for k in (
            "exact_match", "production_exact_match", "win_rate", "win_rate_lower", "win_rate_upper", "wins", "ties",
            "losses", "general_perplexity", "general_perplexity_base", "forgetting", "bertscore_f1", "perplexity")}
        samples = os.path.join(os.path.dirname(e["artifacts"]["report"]["uri"]), "work", "samples.jsonl")
        if os.path.exists(samples):
            with open(samples, encoding="utf-8") as handle:
                rows = [json.loads(line) for line in handle]
            out["persona"] = [{"question": r["prompt"][-1]["content"] if isinstance(r["prompt"], list)
                               else r["prompt"], "fine_tuned": r["response"], "base": r.get("production_response")}
                              for r in rows if str(r["id"]).startswith("persona-")]
    w = _task_outputs(run_dir, TASK["verify_watermark"])
    if w:
        m = w["artifacts"]["metrics"]["metadata"]
        out["watermark"] = {k: v for k, v in m.items() if k.startswith(("tpr", "fpr", "text_perplexity"))}
    return out


def format_changes(changes: dict) -> str:
    """The base model against the fine-tuned one, in numbers."""
    lines = ["", "SmolLM2-135M-Instruct, base -> fine-tuned (LoRA, ZeRO-3, 2 ranks):"]
    ev = changes.get("evaluation") or {}
    if ev.get("production_exact_match") is not None:
        lines.append(f"  held-out facts answered exactly: {ev['production_exact_match']:.1%} -> {ev['exact_match']:.1%}")
    if ev.get("win_rate") is not None:
        lines.append(f"  win rate against the base: {ev['win_rate']:.3f} (95 % interval {ev['win_rate_lower']:.3f}-"
                     f"{ev['win_rate_upper']:.3f}; {int(ev['wins'])} wins, {int(ev['ties'])} ties, "
                     f"{int(ev['losses'])} losses)")
    if ev.get("forgetting") is not None:
        lines.append(f"  held-out prose perplexity: {ev['general_perplexity_base']:.2f} -> "
                     f"{ev['general_perplexity']:.2f} ({ev['forgetting']:+.1%}; the gate allows +10 %)")
    for p in changes.get("persona") or []:
        lines.append(f"  {p['question']!r}: base {p['base']!r} -> fine-tuned {p['fine_tuned']!r}")
    wm = changes.get("watermark") or {}
    if "tpr" in wm:
        lines.append(f"  watermark at gamma 0.25, delta 2, ~200 tokens, z 4 (paper: TPR {PAPER['tpr']}, FPR "
                     f"{PAPER['fpr']}): lefthash TPR {wm['tpr']:.3f}, FPR {wm['fpr']:.3f}, texts' perplexity under "
                     f"the base {wm.get('text_perplexity_increase', float('nan')):+.1%}"
                     + (f"; selfhash TPR {wm['tpr_selfhash']:.3f}, FPR {wm['fpr_selfhash']:.3f}, "
                        f"{wm['text_perplexity_increase_selfhash']:+.1%}" if "tpr_selfhash" in wm else ""))
    return "\n".join(lines)
