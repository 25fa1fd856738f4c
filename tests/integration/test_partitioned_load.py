"""train_zero3 loads a base model straight into its ZeRO-3 partitions: on 2 ranks every
gathered parameter equals what `from_pretrained` reads, each rank holds half the weights,
tied embeddings stay tied, bf16 files load into fp32 training, and a folder missing a
tensor or holding a corrupt file is refused in one line naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from byo_models import save_model

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_on_two_ranks(tmp_path, *folders: str) -> list[list[dict]]:
    out = str(tmp_path / "report")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(29700 + os.getpid() % 200),
        os.path.join(TESTS, "load_check.py"),
        out,
        *folders,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [[json.loads(line) for line in open(f"{out}.rank{r}")] for r in (0, 1)]


def test_each_rank_loads_only_its_partition_of_exactly_the_stored_weights(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    llama = save_model(str(tmp_path / "llama"), "llama", shard="1MB")  # several shards
    gpt2 = save_model(str(tmp_path / "gpt2"), "gpt2")  # tied lm_head
    bf16 = save_model(str(tmp_path / "bf16"), "qwen2", shard="100MB")
    weights = os.path.join(bf16, "model.safetensors")
    save_file({k: v.to(torch.bfloat16) for k, v in load_file(weights).items()}, weights, metadata={"format": "pt"})
    broken = save_model(str(tmp_path / "broken"), "mistral", shard="100MB")
    tensors = load_file(os.path.join(broken, "model.safetensors"))
    del tensors["model.norm.weight"]
    save_file(tensors, os.path.join(broken, "model.safetensors"), metadata={"format": "pt"})

    corrupt = save_model(str(tmp_path / "corrupt"), "llama", shard="100MB")
    with open(os.path.join(corrupt, "model.safetensors"), "r+b") as handle:
        handle.seek(8)
        handle.write(b"not json")

    ranks = _load_on_two_ranks(tmp_path, llama, gpt2, bf16, broken, corrupt)
    for rank in ranks:
        for row in rank[:3]:
            assert row["mismatched"] == [], row["folder"]
            assert row["names"] == row["reference"], row["folder"]  # the same parameters, tied ones once
            # ZeRO-3's equal slices: half of every tensor, the odd element padded
            assert row["total"] / 2 <= row["own"] <= row["total"] / 2 + len(row["names"])
        assert "lm_head.weight" not in rank[1]["names"]  # GPT-2's head is its embedding
        assert rank[3]["error"] == (
            f"{broken}: the safetensors files hold no weights for parameter model.norm.weight of MistralForCausalLM"
        )
        assert rank[4]["error"].startswith(f"{corrupt}/model.safetensors: not a safetensors file")
