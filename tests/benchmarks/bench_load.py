"""Base-model load on 2 CPU ranks: each rank's peak memory (anonymous, and resident with
mapped file pages) while loading a >= 300 M-parameter fp32 model into its ZeRO-3
partitions, through deepspeed.initialize and through its first optimizer step, as a
share of the full model's size; the baseline is the old full load on every rank
(`from_pretrained`, then partitioning). Both run in the same invocation, interleaved,
several rounds."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

MB = 1024 * 1024
# ~309 M parameters: 32 k vocabulary, 1024 wide, 19 layers, untied embeddings.
SHAPE = {"hidden": 1024, "layers": 19, "vocab": 32_000}


def make_model(folder: str) -> tuple[str, int]:
    """A random-initialised Llama in sharded safetensors; (folder, parameter bytes)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import torch
    from byo_models import tokenizer
    from transformers import AutoModelForCausalLM, LlamaConfig

    tok = tokenizer(SHAPE["vocab"])
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=SHAPE["hidden"], intermediate_size=2816,
                      num_hidden_layers=SHAPE["layers"], num_attention_heads=16, num_key_value_heads=16,
                      max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(folder, safe_serialization=True, max_shard_size="300MB")
    tok.save_pretrained(folder)
    return folder, sum(p.numel() * p.element_size() for p in model.parameters())


def run(mode: str, model_dir: str) -> list[dict]:
    out = tempfile.mktemp(prefix="llmops-load-")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(29600 + os.getpid() % 300), os.path.join(os.path.dirname(__file__), "load_worker.py"),
           mode, model_dir, out]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if proc.returncode:
        raise RuntimeError(f"{mode} load failed: {proc.stderr.decode(errors='replace')[-1500:]}")
    marks = []
    for rank in (0, 1):
        with open(f"{out}.rank{rank}") as handle:
            marks.append(json.load(handle))
        os.unlink(f"{out}.rank{rank}")
    return marks


def bf16_copy(model_dir: str, folder: str) -> str:
    """The same model stored in bf16, as published checkpoints are; training still runs in
    fp32, so the full load converts it whole."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(model_dir, folder)
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            path = os.path.join(folder, name)
            save_file({k: v.to(torch.bfloat16) for k, v in load_file(path).items()}, path, metadata={"format": "pt"})
    return folder


STORAGE = ("fp32", "bf16")
POINTS = ("load", "engine", "first_step")
MODES = ("full", "partitioned")


def main(rounds: int = 3) -> dict:
    with tempfile.TemporaryDirectory() as work:
        fp32, size = make_model(os.path.join(work, "fp32"))
        folders = {"fp32": fp32, "bf16": bf16_copy(fp32, os.path.join(work, "bf16"))}
        rows = {(stored, mode): [] for stored in STORAGE for mode in MODES}
        for _ in range(rounds):
            for stored in STORAGE:
                for mode in MODES:
                    rows[stored, mode].append(run(mode, folders[stored]))
    result = {"model_mib": round(size / MB, 1), "params_m": round(size / 4 / 1e6, 1), "rounds": rounds}
    for (stored, mode), runs in rows.items():
        for point in POINTS:
            for field in ("RssAnon", "VmRSS"):
                # a phase's peak above what the imports alone hold, per rank, as a share of the model
                ratios = [(r[point][field] - r["imports"][field]) * MB / size for marks in runs for r in marks]
                result[f"{stored}_{mode}_{point}_{field}"] = {
                    "median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
                    "max": round(max(ratios), 3)}
    return result


NAMES = {"load": "load (to partitions)", "engine": "deepspeed.initialize", "first_step": "first step"}


def report(r: dict) -> str:
    lines = [f"Base-model load into ZeRO-3, 2 CPU ranks, {r['params_m']} M parameters trained in fp32 "
             f"({r['model_mib']} MiB), {r['rounds']} rounds; each rank's peak above its imports, as a share "
             "of the model (median, min-max over ranks and rounds); target for the load: <= 0.65",
             f"  {'file':<5} {'phase':<22} {'memory':<9} {'full load (baseline)':<22} {'partitioned':<20}"]
    for stored in STORAGE:
        for point in POINTS:
            for field, label in (("RssAnon", "anonymous"), ("VmRSS", "resident")):
                f, p = (r[f"{stored}_{mode}_{point}_{field}"] for mode in MODES)
                lines.append(f"  {stored:<5} {NAMES[point]:<22} {label:<9} "
                             f"{f['median']:.2f} ({f['min']:.2f}-{f['max']:.2f}){'':<7} "
                             f"{p['median']:.2f} ({p['min']:.2f}-{p['max']:.2f})")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)))
