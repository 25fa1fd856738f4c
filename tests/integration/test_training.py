"""train_zero3 with real DeepSpeed ZeRO-3 on 2 CPU ranks (torchrun, gloo)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from kfp_llmops.components.common.errors import InputError, LlmopsError
from kfp_llmops.components.data_validation import run_to_dir as validate
from kfp_llmops.components.training import checkpoints
from kfp_llmops.components.training.base_model import build_base_model, verify_model_dir
from kfp_llmops.components.training.config import TrainConfig
from kfp_llmops.components.training.launch import train
from kfp_llmops.pipelines.demo_data import make_demo_dataset

pytestmark = pytest.mark.timeout(600)
SMALL = dict(steps=8, checkpoint_interval=4, micro_batch=4, seq_len=48, chunk_size=4096)


def losses(run_dir):
    with open(os.path.join(run_dir, "train_log.jsonl")) as handle:
        return [(row["step"], row["loss"]) for row in map(json.loads, handle)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    data = make_demo_dataset(str(root / "data"), rows=600)
    validate(data["train"], str(root / "valid"), show_progress=False)
    clean = str(root / "valid" / "clean.jsonl")
    base = str(root / "base")
    build_base_model(clean, base, size="tiny")
    return {"root": root, "clean": clean, "base": base}


@pytest.fixture(scope="module")
def reference(inputs):
    """8 uninterrupted steps, checkpoints at 4 and 8."""
    out = str(inputs["root"] / "ref")
    result = train(inputs["clean"], inputs["base"], out, TrainConfig(**SMALL))
    return {"dir": out, "result": result}


def test_reference_run_trains_checkpoints_and_exports(reference):
    result = reference["result"]
    assert result["done"] and result["step"] == 8 and result["world_size"] == 2
    steps = [s for s, _ in losses(reference["dir"])]
    assert steps == list(range(1, 9))
    assert [s["tag"] for s in result["saves"]] == ["step-00000004", "step-00000008"]
    assert verify_model_dir(result["model_dir"]) == result["model_root"]
    assert os.path.isfile(os.path.join(result["model_dir"], "model.safetensors"))
    assert checkpoints.read_latest(result["checkpoint_dir"]) == "step-00000008"


def test_resume_is_bit_for_bit(inputs, reference):
    out = str(inputs["root"] / "resumed")
    first = train(inputs["clean"], inputs["base"], out, TrainConfig(**SMALL), stop_after=4)
    assert first["step"] == 4 and not first["done"]
    second = train(inputs["clean"], inputs["base"], out, TrainConfig(**SMALL))
    assert second["resumed_from"] == "step-00000004"
    assert losses(out) == losses(reference["dir"])          # zero tolerance
    assert second["model_root"] == reference["result"]["model_root"]


def test_manifest_records_lineage_and_forms_a_hash_chain(reference):
    ckpt = reference["result"]["checkpoint_dir"]
    _, first = checkpoints.load(os.path.join(ckpt, "step-00000004"))
    _, second = checkpoints.load(os.path.join(ckpt, "step-00000008"))
    meta = second["meta"]
    assert meta["step"] == 8 and meta["previous_root"] == first["root"]
    assert meta["dataset_root"] == reference["result"]["dataset_root"]
    assert meta["base_model_root"] == reference["result"]["base_model_root"]
    assert set(meta["environment"]) >= {"python", "torch", "deepspeed", "transformers", "cuda", "packages_blake3"}
    assert meta["config_hash"] and meta["code_version"]
    assert second["root"] == reference["result"]["checkpoint_root"]
    files = json.load(open(os.path.join(ckpt, "step-00000008", "manifest.json")))["files"]
    assert {f["path"] for f in files} == {f"zero_pp_rank_{r}_mp_rank_00_{k}_states.pt" for r in (0, 1)
                                          for k in ("model", "optim")}
    assert not [n for n in os.listdir(ckpt) if n.startswith(".staging")]


def test_resume_refuses_a_damaged_checkpoint_and_falls_back(inputs, reference):
    out = str(inputs["root"] / "damaged")
    shutil.copytree(reference["dir"], out, ignore=shutil.ignore_patterns("model", "result.json"))
    spec = json.load(open(os.path.join(out, "run_spec.json")))
    target = os.path.join(out, "checkpoints", "step-00000008", "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    with open(target, "r+b") as handle:
        handle.seek(5000)
        byte = handle.read(1)
        handle.seek(5000)
        handle.write(bytes([byte[0] ^ 0x01]))
    result = train(inputs["clean"], inputs["base"], out, TrainConfig(**dict(SMALL, steps=10)))
    assert result["resumed_from"] == "step-00000004"
    assert "step-00000008" in result["skipped_checkpoints"][0] and "corrupted" in result["skipped_checkpoints"][0]
    assert [s for s, _ in losses(out)] == list(range(1, 11))
    assert spec["checkpoint_dir"] != out


def test_kill_9_of_one_rank_then_rerun_resumes_and_finishes(inputs, tmp_path):
    out = str(tmp_path / "killed")
    cfg = dict(SMALL, steps=400, checkpoint_interval=20)
    cmd = [sys.executable, "-c", (
        "import sys; from kfp_llmops.components.training.launch import train; "
        "from kfp_llmops.components.training.config import TrainConfig; "
        f"train({inputs['clean']!r}, {inputs['base']!r}, {out!r}, TrainConfig(**{cfg!r}))")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = os.path.join(out, "checkpoints")
    deadline = time.time() + 240
    while time.time() < deadline and not checkpoints.list_tags(ckpt):
        time.sleep(0.2)
    assert checkpoints.list_tags(ckpt), "no checkpoint was committed in time"
    victim = _rank_pids(os.path.join(out, "run_spec.json"))[-1]
    os.kill(victim, signal.SIGKILL)
    assert proc.wait(timeout=120) != 0
    result = train(inputs["clean"], inputs["base"], out, TrainConfig(**cfg))
    assert result["done"] and result["resumed_from"] is not None
    assert [s for s, _ in losses(out)] == list(range(1, 401))


def _rank_pids(spec_path):
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if (b"kfp_llmops.components.training.worker" in cmdline and spec_path.encode() in cmdline
                    and b"torch.distributed.run" not in cmdline):
                pids.append(int(pid))
    assert len(pids) == 2, pids
    return sorted(pids)


def test_wrong_dataset_root_is_refused_before_training(inputs, tmp_path):
    with pytest.raises(InputError, match="does not match the validated dataset"):
        train(inputs["clean"], inputs["base"], str(tmp_path / "x"), TrainConfig(**SMALL), dataset_root="00" * 32)


def test_tampered_base_model_is_refused(inputs, tmp_path):
    base = str(tmp_path / "base")
    shutil.copytree(inputs["base"], base)
    with open(os.path.join(base, "config.json"), "a") as handle:
        handle.write(" ")
    with pytest.raises(InputError, match="model does not verify"):
        train(inputs["clean"], base, str(tmp_path / "x"), TrainConfig(**SMALL))


def test_failed_launch_is_one_line_error(inputs, tmp_path):
    with pytest.raises(LlmopsError, match="training failed"):
        train(inputs["clean"], inputs["base"], str(tmp_path / "x"),
              TrainConfig(**dict(SMALL, deepspeed={"zero_optimization": {"stage": "bogus"}})))
