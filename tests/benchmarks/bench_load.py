"""Base-model load and first step on 2 CPU ranks: each rank's peak memory (anonymous, and
resident with mapped file pages) while loading a >= 300 M-parameter fp32 model into its
ZeRO-3 partitions, through deepspeed.initialize and through its first optimizer step, as
a share of the full model's size. Three ways, in the same invocation, interleaved,
several rounds: the old full load on every rank (`from_pretrained`, then partitioning)
and the partitioned load, both with DeepSpeed's default ZeRO-3 sizes, and the partitioned
load with the sizes training now takes from the model (`zero3_sizes`).
`--model DIR` measures a model of your own (build/smollm2) instead."""

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
    from transformers import AutoModelForCausalLM, LlamaConfig

    from byo_models import tokenizer

    tok = tokenizer(SHAPE["vocab"])
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=SHAPE["hidden"],
        intermediate_size=2816,
        num_hidden_layers=SHAPE["layers"],
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(folder, safe_serialization=True, max_shard_size="300MB")
    tok.save_pretrained(folder)
    return folder, sum(p.numel() * p.element_size() for p in model.parameters())


def run(mode: str, model_dir: str) -> list[dict]:
    out = tempfile.mktemp(prefix="llmops-load-")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(29600 + os.getpid() % 300),
        os.path.join(os.path.dirname(__file__), "load_worker.py"),
        mode,
        model_dir,
        out,
    ]
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
MODES = ("full", "partitioned_defaults", "partitioned")


def model_bytes(folder: str) -> int:
    """fp32 bytes of a model folder's parameters (what training holds), from its headers."""
    from kfp_llmops.components.training.partitioned_load import index

    return sum(count * 4 for _, _, _, count in index(folder).values())


def main(rounds: int = 3, model_dir: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as work:
        if model_dir:  # a model of your own (SmolLM2: build/smollm2), as it is stored
            folders, size = {"fp32": model_dir}, model_bytes(model_dir)
        else:
            fp32, size = make_model(os.path.join(work, "fp32"))
            folders = {"fp32": fp32, "bf16": bf16_copy(fp32, os.path.join(work, "bf16"))}
        rows = {(stored, mode): [] for stored in folders for mode in MODES}
        for _ in range(rounds):
            for stored in folders:
                for mode in MODES:
                    rows[stored, mode].append(run(mode, folders[stored]))
    result = {"model_mib": round(size / MB, 1), "params_m": round(size / 4 / 1e6, 1), "rounds": rounds}
    for (stored, mode), runs in rows.items():
        for point in POINTS:
            for field in ("RssAnon", "VmRSS"):
                # a phase's peak above what the imports alone hold, per rank, as a share of the model
                ratios = [(r[point][field] - r["imports"][field]) * MB / size for marks in runs for r in marks]
                result[f"{stored}_{mode}_{point}_{field}"] = {
                    "median": round(statistics.median(ratios), 3),
                    "min": round(min(ratios), 3),
                    "max": round(max(ratios), 3),
                }
    return result


NAMES = {"load": "load (to partitions)", "engine": "deepspeed.initialize", "first_step": "first step"}


def report(r: dict) -> str:
    lines = [
        f"Base-model load into ZeRO-3, 2 CPU ranks, {r['params_m']} M parameters trained in fp32 "
        f"({r['model_mib']} MiB), {r['rounds']} rounds; each rank's peak above its imports, as a share "
        "of the model (median, min-max over ranks and rounds); targets: load <= 0.65, first step <= 3",
        f"  {'file':<5} {'phase':<22} {'memory':<9} {'full load, DeepSpeed sizes':<27} "
        f"{'partitioned, DeepSpeed sizes':<29} {'partitioned, sized (training)':<20}",
    ]
    for stored in [s for s in STORAGE if f"{s}_full_load_RssAnon" in r]:
        for point in POINTS:
            for field, label in (("RssAnon", "anonymous"), ("VmRSS", "resident")):
                cells = [r[f"{stored}_{mode}_{point}_{field}"] for mode in MODES]
                lines.append(
                    f"  {stored:<5} {NAMES[point]:<22} {label:<9} "
                    + "".join(
                        f"{c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f}){'':<{w}}"
                        for c, w in zip(cells, (12, 14, 0), strict=False)
                    )
                )
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    model = args[args.index("--model") + 1] if "--model" in args else None
    rounds = [a for i, a in enumerate(args) if a.isdigit() and (i == 0 or args[i - 1] != "--model")]
    print(report(main(int(rounds[0]) if rounds else 3, model)))
