"""train_zero3 with real DeepSpeed ZeRO-3 on 2 CPU ranks (torchrun, gloo)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from helpers import losses, training_inputs
from kfp_llmops.components import images
from kfp_llmops.components.common import integrity
from kfp_llmops.components.common.errors import InputError, LlmopsError
from kfp_llmops.components.training import checkpoints
from kfp_llmops.components.training.config import TrainConfig
from kfp_llmops.components.training.engines import train

pytestmark = pytest.mark.timeout(600)
SMALL = dict(steps=8, checkpoint_interval=4, micro_batch=4, seq_len=48, chunk_size=4096)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return training_inputs(tmp_path_factory.mktemp("train"))


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
    assert integrity.verify("model", result["model_dir"]) == result["model_root"]
    assert os.path.isfile(os.path.join(result["model_dir"], "model.safetensors"))
    assert checkpoints.read_latest(result["checkpoint_dir"]) == "step-00000008"


def test_resume_is_bit_for_bit(inputs, reference):
    out = str(inputs["root"] / "resumed")
    first = train(inputs["clean"], inputs["base"], out, TrainConfig(**SMALL), stop_after=4)
    assert first["step"] == 4 and not first["done"]
    second = train(inputs["clean"], inputs["base"], out, TrainConfig(**SMALL))
    assert second["resumed_from"] == "step-00000004"
    assert losses(out) == losses(reference["dir"])  # zero tolerance
    assert second["model_root"] == reference["result"]["model_root"]
    # The hash chain continues across the restart: step 8 names step 4's root.
    ckpt = second["checkpoint_dir"]
    _, four = integrity.load_checkpoint(os.path.join(ckpt, "step-00000004"))
    _, eight = integrity.load_checkpoint(os.path.join(ckpt, "step-00000008"))
    assert eight["meta"]["previous_root"] == four["root"] == first["checkpoint_root"]
    assert second["checkpoint_root"] == eight["root"]


def test_resume_at_the_end_reports_the_resumed_checkpoint_root(reference, inputs, tmp_path):
    out = str(tmp_path / "again")
    shutil.copytree(reference["dir"], out, ignore=shutil.ignore_patterns("result.json"))
    again = train(inputs["clean"], inputs["base"], out, TrainConfig(**SMALL))
    assert again["resumed_from"] == "step-00000008" and again["saves"] == []
    assert again["checkpoint_root"] == reference["result"]["checkpoint_root"]


def test_manifest_records_lineage_and_forms_a_hash_chain(reference):
    ckpt = reference["result"]["checkpoint_dir"]
    _, first = integrity.load_checkpoint(os.path.join(ckpt, "step-00000004"))
    _, second = integrity.load_checkpoint(os.path.join(ckpt, "step-00000008"))
    meta = second["meta"]
    assert meta["step"] == 8 and meta["previous_root"] == first["root"]
    assert meta["dataset_root"] == reference["result"]["dataset_root"]
    assert meta["base_model_root"] == reference["result"]["base_model_root"]
    assert set(meta["environment"]) >= {"python", "torch", "deepspeed", "transformers", "cuda", "packages_blake3"}
    assert meta["config_hash"] and meta["code_version"]
    assert second["root"] == reference["result"]["checkpoint_root"]
    files = json.load(open(os.path.join(ckpt, "step-00000008", "manifest.json")))["files"]
    assert {f["path"] for f in files} == {
        f"zero_pp_rank_{r}_mp_rank_00_{k}_states.pt" for r in (0, 1) for k in ("model", "optim")
    }
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
    cmd = [
        sys.executable,
        "-c",
        (
            "import sys; from kfp_llmops.components.training.engines import train; "
            "from kfp_llmops.components.training.config import TrainConfig; "
            f"train({inputs['clean']!r}, {inputs['base']!r}, {out!r}, TrainConfig(**{cfg!r}))"
        ),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = os.path.join(out, "checkpoints")
    deadline = time.time() + 240
    while time.time() < deadline and not integrity.list_tags(ckpt):
        time.sleep(0.2)
    assert integrity.list_tags(ckpt), "no checkpoint was committed in time"
    victim = _rank_pids(os.path.join(out, "run_spec.json"))[-1]
    os.kill(victim, signal.SIGKILL)
    assert proc.wait(timeout=120) != 0
    result = train(inputs["clean"], inputs["base"], out, TrainConfig(**cfg))
    assert result["done"] and result["resumed_from"] is not None
    assert [s for s, _ in losses(out)] == list(range(1, 401))


def _rank_pids(spec_path):
    """The rank processes: direct children of the torchrun agent started for this spec
    (forked helpers of a rank share its command line, so the parent is what tells)."""
    procs = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if spec_path.encode() in cmdline:
                procs[int(pid)] = (ppid, b"torch.distributed.run" in cmdline)
    agents = {pid for pid, (_, is_agent) in procs.items() if is_agent}
    ranks = sorted(pid for pid, (ppid, is_agent) in procs.items() if not is_agent and ppid in agents)
    assert len(ranks) == 2, procs
    return ranks


def test_wrong_dataset_root_is_refused_before_training(inputs, tmp_path):
    with pytest.raises(InputError, match="does not match the pinned root"):
        train(inputs["clean"], inputs["base"], str(tmp_path / "x"), TrainConfig(**SMALL), dataset_root="00" * 32)


def test_tampered_base_model_is_refused(inputs, tmp_path):
    base = str(tmp_path / "base")
    shutil.copytree(inputs["base"], base)
    with open(os.path.join(base, "config.json"), "a") as handle:
        handle.write(" ")
    with pytest.raises(InputError, match="model does not verify"):
        train(inputs["clean"], base, str(tmp_path / "x"), TrainConfig(**SMALL))


def test_failed_launch_is_one_line_error(inputs, tmp_path):
    with pytest.raises(
        LlmopsError, match="training failed .*ValidationError: 1 validation error for DeepSpeedZeroConfig"
    ):
        train(
            inputs["clean"],
            inputs["base"],
            str(tmp_path / "x"),
            TrainConfig(**dict(SMALL, deepspeed={"zero_optimization": {"stage": "bogus"}})),
        )


# -- corruption campaign: every kind of damage is detected and localized -----------------


def _copy_tag(reference, tmp_path, tag="step-00000008"):
    src = os.path.join(reference["result"]["checkpoint_dir"], tag)
    dst = str(tmp_path / tag)
    shutil.copytree(src, dst)
    return dst


def _files(tag_dir):
    return sorted(f for f in os.listdir(tag_dir) if f.endswith(".pt"))


def test_intact_checkpoints_never_raise_false_alarms(reference, tmp_path):
    ckpt = reference["result"]["checkpoint_dir"]
    for _ in range(5):
        for _, tag in integrity.list_tags(ckpt):
            report = integrity.verify_checkpoint(os.path.join(ckpt, tag))
            assert report.ok and not report.problems, report.summary()


@pytest.mark.parametrize("seed", range(6))
def test_random_bit_flips_are_localized_to_their_chunk(reference, tmp_path, seed):
    import random

    tag_dir = _copy_tag(reference, tmp_path)
    rng = random.Random(seed)
    name = rng.choice(_files(tag_dir))
    path = os.path.join(tag_dir, name)
    offset = rng.randrange(os.path.getsize(path))
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ (1 << rng.randrange(8))]))
    report = integrity.verify_checkpoint(tag_dir)
    (problem,) = report.problems
    assert problem.kind == "corrupted" and problem.path == name
    ((start, end),) = problem.ranges
    assert start <= offset < end and end - start <= 4096


def _single_problem(tag_dir, kind, path):
    report = integrity.verify_checkpoint(tag_dir)
    assert not report.ok
    assert any(p.kind == kind and p.path == path for p in report.problems), report.problems
    return report


def test_truncation_deletion_extra_and_rename_are_named(reference, tmp_path):
    tag_dir = _copy_tag(reference, tmp_path)
    a, b, c, d = _files(tag_dir)
    with open(os.path.join(tag_dir, a), "r+b") as handle:
        handle.truncate(os.path.getsize(os.path.join(tag_dir, a)) - 100)
    os.unlink(os.path.join(tag_dir, b))
    with open(os.path.join(tag_dir, "stray.bin"), "wb") as handle:
        handle.write(b"x" * 10)
    os.rename(os.path.join(tag_dir, c), os.path.join(tag_dir, c + ".old"))
    report = integrity.verify_checkpoint(tag_dir)
    kinds = {(p.kind, p.path) for p in report.problems}
    assert ("size", a) in kinds and ("missing", b) in kinds and ("extra", "stray.bin") in kinds
    assert ("missing", c) in kinds and ("extra", c + ".old") in kinds
    assert (("corrupted", d) not in kinds) and not any(p.path == d for p in report.problems)


def test_a_share_of_the_files_can_still_look_for_extras(reference, tmp_path):
    tag_dir = _copy_tag(reference, tmp_path)
    with open(os.path.join(tag_dir, "stray.bin"), "wb") as handle:
        handle.write(b"x")
    assert integrity.verify_checkpoint(tag_dir, only=[]).ok  # a share alone: no listing
    report = integrity.verify_checkpoint(tag_dir, only=[], extras=True)
    assert [(p.kind, p.path) for p in report.problems] == [("extra", "stray.bin")]


def test_older_shard_swapped_in_is_detected(reference, tmp_path):
    tag_dir = _copy_tag(reference, tmp_path)
    old = os.path.join(reference["result"]["checkpoint_dir"], "step-00000004")
    name = _files(tag_dir)[1]
    shutil.copyfile(os.path.join(old, name), os.path.join(tag_dir, name))
    report = integrity.verify_checkpoint(tag_dir)
    assert {p.path for p in report.problems} == {name}


@pytest.mark.parametrize("edit", ["leaf", "root", "previous_root", "add_file", "path_escape"])
def test_tampered_manifest_is_detected(reference, tmp_path, edit):
    tag_dir = _copy_tag(reference, tmp_path)
    path = os.path.join(tag_dir, "manifest.json")
    data = json.load(open(path))
    if edit == "leaf":
        data["files"][0]["leaves"][0] = "00" * 32
    elif edit == "root":
        data["root"] = "11" * 32
    elif edit == "previous_root":
        data["meta"]["previous_root"] = "22" * 32
    elif edit == "add_file":
        data["files"].append(dict(data["files"][0], path="ghost.pt"))
    else:
        data["files"][0]["path"] = "../../etc/passwd"
    json.dump(data, open(path, "w"))
    report = integrity.verify_checkpoint(tag_dir)
    assert not report.ok
    if edit == "path_escape":
        assert any(p.kind == "unsafe_path" for p in report.problems)


def test_tampering_consistently_is_caught_by_the_pinned_root(reference, tmp_path):
    """Rewrite a file and its whole manifest consistently: only a root pinned elsewhere
    (the next checkpoint's chain, `latest`, artifact metadata) can tell."""
    from kfp_llmops.components.common import integrity

    tag_dir = _copy_tag(reference, tmp_path)
    pinned = integrity.load_checkpoint(tag_dir)[1]["root"]
    name = _files(tag_dir)[0]
    with open(os.path.join(tag_dir, name), "ab") as handle:
        handle.write(b"evil")
    manifest = integrity.hash_directory(tag_dir, 4096)
    meta = integrity.load_checkpoint(tag_dir)[1]["meta"]
    files_root = manifest.root.hex()
    integrity.write_manifest(
        os.path.join(tag_dir, "manifest.json"),
        manifest,
        {
            "format": integrity.CHECKPOINT_FORMAT,
            "files_root": files_root,
            "root": integrity.checkpoint_root(files_root, meta),
            "meta": meta,
        },
    )
    assert integrity.verify_checkpoint(tag_dir).ok  # self-consistent forgery
    assert not integrity.verify_checkpoint(tag_dir, expected_root=pinned).ok


def test_symlinks_in_a_checkpoint_are_refused(reference, tmp_path):
    tag_dir = _copy_tag(reference, tmp_path)
    os.symlink("/etc/hostname", os.path.join(tag_dir, "link.pt"))
    report = integrity.verify_checkpoint(tag_dir)
    assert any(p.kind == "unsafe_path" for p in report.problems)


def test_verify_cli_exit_codes_json_and_files(reference, tmp_path):
    from kfp_llmops.pipelines.cli.main import main

    ckpt = reference["result"]["checkpoint_dir"]
    assert main(["checkpoint", "verify", ckpt]) == 0
    assert main(["checkpoint", "verify", ckpt, "--tag", "step-00000004"]) == 0
    name = _files(os.path.join(ckpt, "step-00000008"))[0]
    assert main(["checkpoint", "verify", ckpt, "--files", name]) == 0
    tag_dir = _copy_tag(reference, tmp_path)
    other = _files(tag_dir)[1]
    with open(os.path.join(tag_dir, other), "r+b") as handle:
        handle.write(b"\xff\xff")
    assert main(["checkpoint", "verify", tag_dir, "--files", name]) == 0  # only that file is read
    assert main(["checkpoint", "verify", tag_dir, "--files", other]) == 1
    assert main(["checkpoint", "verify", tag_dir, "--root", "ab" * 32]) == 1
    assert main(["checkpoint", "verify", str(tmp_path / "nope")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["checkpoint", "verify", str(tmp_path / "empty")]) == 2  # no tags in it
    assert main(["checkpoint", "verify", ckpt, "--tag", "step-99999999"]) == 2  # no such tag


def test_verify_cli_json_lists_bad_ranges(reference, tmp_path, capsys):
    from kfp_llmops.pipelines.cli.main import main

    tag_dir = _copy_tag(reference, tmp_path)
    name = _files(tag_dir)[0]
    with open(os.path.join(tag_dir, name), "r+b") as handle:
        handle.seek(4096 * 2 + 7)
        handle.write(b"\x00\x01\x02")
    capsys.readouterr()
    assert main(["checkpoint", "verify", tag_dir, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    (problem,) = report["problems"]
    assert problem["path"] == name and problem["ranges"] == [[8192, 12288]]


def test_trainjob_and_its_runtime_match_the_kubeflow_trainer_crds(tmp_path):
    import jsonschema

    from kfp_llmops.components.training.config import MultiNodeSettings
    from kfp_llmops.components.training.trainjob import render_runtime, render_trainjob
    from strict_schema import validate as strict

    doc = render_trainjob("llmops-train", "/mnt/checkpoints/r.run/run_spec.json", MultiNodeSettings(nodes=4), 8)
    strict(doc)  # unknown fields rejected, as the server does
    assert doc["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
        "name": "kfp-llmops-deepspeed",
    }
    command = doc["spec"]["trainer"]["command"]  # mpirun over Trainer's hostfile; test_mpi.py runs it
    assert command[:6] == ["mpirun", "--hostfile", "/etc/mpi/hostfile", "-np", "32", "--map-by"]
    assert "MASTER_ADDR=llmops-train-launcher-0-0.llmops-train" in command
    assert command[-1] == "/mnt/checkpoints/r.run/run_spec.json"
    bad = json.loads(json.dumps(doc))
    bad["spec"]["trainer"]["numNodes"] = "four"
    with pytest.raises(jsonschema.ValidationError):
        strict(bad)
    runtime = dict(render_runtime(), metadata={**render_runtime()["metadata"], "namespace": "team-a"})
    strict(runtime)
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert [j["name"] for j in jobs] == ["node", "launcher"]  # JobSet: the launcher after the nodes
    assert {j["template"]["spec"]["template"]["spec"]["containers"][0]["image"] for j in jobs} == {images.TRAIN}
    bad = json.loads(json.dumps(runtime))
    bad["spec"]["mlPolicy"]["mpi"]["sshPort"] = 2222
    with pytest.raises(jsonschema.ValidationError, match="sshPort"):
        strict(bad)


SCHEMAS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "schemas")


def test_weight_watermark_is_embedded_by_training_and_survives_fine_tuning(inputs, tmp_path, monkeypatch):
    from kfp_llmops.components.common.watermark.weights import WeightWatermarkConfig, extract_from_model_dir

    monkeypatch.setenv("LLMOPS_WATERMARK_KEY", "424242")
    wcfg = WeightWatermarkConfig(enabled=True, bits=48, strength=1.0)
    marked = train(
        inputs["clean"],
        inputs["base"],
        str(tmp_path / "marked"),
        TrainConfig(**dict(SMALL, steps=30, checkpoint_interval=30, lr=0.01, weight_watermark=wcfg)),
    )
    found = extract_from_model_dir(marked["model_dir"], 424242, wcfg)
    assert found.bit_accuracy >= 0.925 and found.p_value <= 1e-9
    assert extract_from_model_dir(marked["model_dir"], 424243, wcfg).bit_accuracy < 0.8  # wrong key
    assert extract_from_model_dir(inputs["base"], 424242, wcfg).p_value > 1e-3  # never marked
    # A few steps of further fine-tuning without the regularizer keep the mark.
    tuned = train(
        inputs["clean"],
        marked["model_dir"],
        str(tmp_path / "tuned"),
        TrainConfig(**dict(SMALL, steps=10, checkpoint_interval=10)),
    )
    after = extract_from_model_dir(tuned["model_dir"], 424242, wcfg)
    assert after.bit_accuracy >= 0.925 and after.p_value <= 1e-9


def test_a_packed_example_sees_only_itself(inputs):
    """Packed rows give each example exactly the logits it has alone, and the plan takes
    examples in the sampler's order, only while they fit."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kfp_llmops.components.training.data import Sampler, encode, pack, packed_batch, read_examples

    tok = AutoTokenizer.from_pretrained(inputs["base"])
    tokens = encode(tok, read_examples(inputs["clean"])[:40], 48, True)
    lengths = tokens["lengths"]
    sampler = Sampler(40, seed=7)
    order = Sampler(40, seed=7).take(40).tolist()
    plan = pack(sampler, lengths, 3, 48)
    flat = [i for row in plan for i in row]
    assert flat == order[: len(flat)] and sampler.position == len(flat)
    assert all(sum(lengths[i] for i in row) <= 48 for row in plan) and len(plan) == 3
    assert sum(lengths[i] for i in plan[0]) + lengths[plan[1][0]] > 48  # the next one did not fit
    batch = packed_batch(plan, tokens["input_ids"], tokens["labels"], lengths, tok.pad_token_id)
    model = AutoModelForCausalLM.from_pretrained(inputs["base"]).eval()
    with torch.no_grad():
        packed = model(**{k: torch.from_numpy(v) for k, v in batch.items() if k != "labels"}).logits
        at = 0
        for i in plan[1]:
            n = int(lengths[i])
            alone = model(input_ids=torch.from_numpy(tokens["input_ids"][i : i + 1, :n])).logits[0]
            assert torch.allclose(packed[1, at : at + n], alone, atol=1e-5), i
            at += n
    # Labels: an example's own, less its first token (it has no predecessor alone).
    first = plan[1][0]
    n = int(lengths[first])
    assert batch["labels"][1, 0] == -100 and np.array_equal(batch["labels"][1, 1:n], tokens["labels"][first, 1:n])


def _stopped_and_resumed(inputs, settings: dict, name: str) -> dict:
    """An uninterrupted run of `settings`, and one stopped at step 4 and resumed: the
    resumed run's losses and model equal the uninterrupted one's, bit for bit. Returns
    the uninterrupted run's result."""
    ref_dir, out = str(inputs["root"] / f"{name}-ref"), str(inputs["root"] / name)
    ref = train(inputs["clean"], inputs["base"], ref_dir, TrainConfig(**settings))
    train(inputs["clean"], inputs["base"], out, TrainConfig(**settings), stop_after=4)
    second = train(inputs["clean"], inputs["base"], out, TrainConfig(**settings))
    assert second["resumed_from"] == "step-00000004"
    assert losses(out) == losses(ref_dir)  # zero tolerance
    assert second["model_root"] == ref["model_root"]
    return ref


def test_packed_training_resumes_bit_for_bit_and_fits_more_examples_per_step(inputs, reference):
    ref = _stopped_and_resumed(inputs, dict(SMALL, packing=True), "packed")
    # 8 rows a step either way; packed, each row carries several examples.
    assert reference["result"]["examples_per_step"] == 8
    assert ref["examples_per_step"] > 1.25 * 8, ref["examples_per_step"]


def test_bf16_trains_through_the_same_config_and_resumes_bit_for_bit(inputs, reference):
    """The precision setting the GPU path uses, on DeepSpeed's CPU accelerator (which has
    bf16): its own losses, resumed to the same bits; fp16 there is a one-line refusal."""
    ref = _stopped_and_resumed(inputs, dict(SMALL, precision="bf16"), "bf16")
    assert ref["done"] and losses(str(inputs["root"] / "bf16-ref")) != losses(reference["dir"])
    with pytest.raises(InputError, match=r"precision: fp16 needs GPUs .*use bf16 or fp32"):
        train(
            inputs["clean"], inputs["base"], str(inputs["root"] / "fp16"), TrainConfig(**dict(SMALL, precision="fp16"))
        )


LORA = dict(SMALL, lora={"enabled": True, "r": 4, "alpha": 8.0})


def test_lora_trains_only_adapters_resumes_bit_for_bit_and_exports_them_merged(inputs):
    """Adapters under ZeRO-3: the frozen weights leave training untouched, a stopped run
    resumes to the same losses and model, and the export is a plain model of the base
    architecture whose logits are the adapted model's."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    ref = _stopped_and_resumed(inputs, LORA, "lora")
    base = load_file(os.path.join(inputs["base"], "model.safetensors"))
    exported = load_file(os.path.join(ref["model_dir"], "model.safetensors"))
    assert set(exported) == set(base) and not any("lora" in k for k in exported)
    changed = {k for k in base if not torch.equal(base[k], exported[k])}
    assert changed and all(k.endswith("attn.c_attn.weight") for k in changed), changed  # peft's GPT-2 default
    assert integrity.verify("model", ref["model_dir"]) == ref["model_root"]
    AutoModelForCausalLM.from_pretrained(ref["model_dir"])


def test_lora_merge_keeps_the_adapted_models_logits(inputs):
    import torch
    from transformers import AutoModelForCausalLM

    from kfp_llmops.components.training import lora
    from kfp_llmops.components.training.config import LoraSettings

    cfg = LoraSettings(enabled=True, r=4, alpha=8.0)
    adapted = lora.wrap(AutoModelForCausalLM.from_pretrained(inputs["base"]), cfg).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # B starts at zero; make the adapters matter
    merged = AutoModelForCausalLM.from_pretrained(inputs["base"])
    merged.load_state_dict(lora.merged_state(AutoModelForCausalLM, inputs["base"], cfg, adapted.state_dict()))
    ids = torch.tensor([[5, 17, 42, 9, 3]])
    with torch.no_grad():
        want, got = adapted(input_ids=ids).logits, merged.eval()(input_ids=ids).logits
        plain = AutoModelForCausalLM.from_pretrained(inputs["base"]).eval()(input_ids=ids).logits
    assert torch.allclose(want, got, atol=1e-5) and not torch.allclose(plain, got, atol=1e-3)
    with pytest.raises(ValueError, match="frozen under LoRA"):
        TrainConfig(lora={"enabled": True}, weight_watermark={"enabled": True})


def test_a_full_disk_stops_training_at_the_checkpoint_with_one_line_and_the_rerun_matches(reference, inputs, tmp_path):
    """--out on a 512 KiB tmpfs (a private mount namespace: a real full disk): the first
    checkpoint cannot be written, so the run stops there (no training on without it) with
    one line naming the file and the free space, exit 2; grown to 8 MiB, the same command
    finishes exactly as the uninterrupted run."""
    import shlex

    vol = tmp_path / "vol"
    vol.mkdir()
    config = tmp_path / "small.yaml"
    config.write_text("".join(f"{k}: {v}\n" for k, v in SMALL.items()))
    cli = shlex.join(
        [
            sys.executable,
            "-m",
            "kfp_llmops.pipelines.cli.main",
            "train",
            "--data",
            inputs["clean"],
            "--base-model",
            inputs["base"],
            "--out",
            str(vol / "out"),
            "--config",
            str(config),
        ]
    )
    script = (
        f"mount -t tmpfs -o size=512k tmpfs {vol} && {{ {cli} 2>{tmp_path}/err1; echo rc1=$?; "
        f"wc -l < {vol}/out/train_log.jsonl; mount -o remount,size=8m tmpfs {vol}; {cli} >/dev/null 2>&1; "
        f"echo rc2=$?; cat {vol}/out/train_log.jsonl; }}"
    )
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "LLMOPS_NO_PROGRESS": "1"},
        timeout=500,
    )
    lines = proc.stdout.splitlines()
    said = open(tmp_path / "err1").read()
    err = [ln for ln in said.splitlines() if ln.startswith("error:")]
    assert lines[0] == "rc1=2" and lines[1].strip() == "4", proc.stdout + proc.stderr  # stopped at step 4
    assert len(err) == 1 and err[0].startswith(
        f"error: writing checkpoint {vol}/out/checkpoints/.staging-step-00000004/"
    ), said[-3000:]
    assert re.search(rf"no space left on device \(\S+ K?i?B free of 512\.0 KiB on {vol}\); rerun the same", err[0])
    assert lines[2] == "rc2=0", proc.stdout + proc.stderr
    resumed = [(row["step"], row["loss"]) for row in map(json.loads, lines[3:])]
    assert resumed == losses(reference["dir"])  # zero tolerance
