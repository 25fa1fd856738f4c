"""The stage images as built by `make images` and run by dockerd: each starts as its
non-root user, imports what its stage needs with the network off, installs nothing at
start, keeps nothing of the build's pip configuration, and the whole release DAG runs
through kfp.local's DockerRunner, every task in its own image, with its lineage proven.
`make test` builds the images first (or reuses those built from the same sources)."""

import json
import os

import pytest
import yaml

from helpers import docker as _docker
from kfp_llmops.components import images
from kfp_llmops.components.common.errors import InputError, LlmopsError
from kfp_llmops.pipelines import compile as compile_mod
from kfp_llmops.pipelines import containers
from kfp_llmops.pipelines.cli.main import main

pytestmark = pytest.mark.timeout(1500)
IMPORTS = {
    "base": "import kfp_llmops.components.release, kfp",
    "data": "import kfp_llmops.components.data_validation.blocks, orjson, dvc; "
    "from kfp_llmops.components.data_validation import ner, names; "
    "names.NameFinder(ner.NerConfirmer(ner.resolve(ner.BUNDLED, None)[0])); "
    "from kfp_llmops.components.data_validation import plain_rows; assert plain_rows.load()",
    "train": "import kfp_llmops.components.training.launch, torch, deepspeed, transformers",
    "eval": "import kfp_llmops.components.evaluation.evaluate, bert_score, detoxify, profanity_check, torch",
    "deploy": "import kfp_llmops.components.deploy.local_target, torch, transformers; "
    "from kfp_llmops.components.deploy import serving_env as s; s.check_env(); s.triton_paths(); "
    "from kfp_llmops.components.deploy.engine_vllm import check_kernels; check_kernels(); "
    "from kfp_llmops.components.deploy import openai_frontend as door, cluster, config; "  # the cluster's front door
    'c = cluster.front_door(config.DeployConfig())["containers"][0]; '  # the shell quotes this in '...'
    'door.make_app(door.arguments(c["args"] + ["--predictor_host", "p", "--api-keys", ""]).triton, "llm")',
}


@pytest.fixture(scope="module", autouse=True)
def runnable():
    containers.docker_ready()
    containers.check_runnable()


def test_the_torch_images_share_one_torch_layer():
    """train, eval and deploy install torch with the same first instruction on the same
    base: one layer of about 0.8 GB in all three (in dockerd, after the load), not three."""
    layers = {
        stage: json.loads(
            _docker("image", "inspect", "--format", "{{json .RootFS.Layers}}", images.image(stage, pinned=False)).stdout
        )
        for stage in ("base", "train", "eval", "deploy")
    }
    shared = [x for x in layers["train"] if x in layers["eval"] and x in layers["deploy"] and x not in layers["base"]]
    assert len(shared) == 1, shared
    for stage in ("train", "eval", "deploy"):
        history = _docker(
            "history", "--no-trunc", "--human=false", "--format", "{{.Size}} {{.CreatedBy}}", images.image(stage, False)
        ).stdout.splitlines()
        (size,) = [int(line.split()[0]) for line in history if "requirements.py --only torch" in line]
        assert size > 500e6, (stage, size)  # torch itself, not an empty layer


@pytest.mark.parametrize("stage", containers.STAGES)
def test_image_runs_as_its_user_offline_and_installs_nothing(stage):
    image = images.image(stage, pinned=False)
    out = _docker(
        "run",
        "--rm",
        "--network",
        "none",
        image,
        "sh",
        "-c",
        "echo uid=$(id -u); llmops --help >/dev/null && echo help-ok; "
        f"python -c '{IMPORTS[stage]}' >/dev/null 2>&1 && echo imports-ok; "
        "echo left=$(ls -d /etc/pip.conf /opt/wheels /etc/xdg/pip 2>/dev/null | wc -l)",
    ).stdout.split()
    assert "uid=0" not in out and "uid=10001" in out and "help-ok" in out and "imports-ok" in out, out
    assert "left=0" in out  # no build-time mount point left behind
    config = json.loads(_docker("image", "inspect", image).stdout)[0]["Config"]
    start = " ".join((config.get("Entrypoint") or []) + (config.get("Cmd") or []))
    assert "pip" not in start and "apt" not in start
    assert config["User"].split(":")[0] == "10001"


def test_deploy_image_serves_by_itself():
    out = _docker(
        "run",
        "--rm",
        "--network",
        "none",
        images.image("deploy", pinned=False),
        "sh",
        "-c",
        "nginx -v 2>&1; /opt/serving/bin/python -c 'import numpy; print(numpy.__version__)'",
    ).stdout
    assert "nginx/1.22" in out and out.split()[-1].startswith("1.")


def test_compiled_components_install_nothing_at_start():
    spec = next(yaml.safe_load_all(open(compile_mod.output_path(compile_mod.COMPILED_DIR, "release", "kfp"))))
    for executor in spec["deploymentSpec"]["executors"].values():
        if "container" in executor:
            text = " ".join(executor["container"].get("command", []) + executor["container"].get("args", []))
            assert "pip install" not in text and "apt-get" not in text


def test_missing_stale_and_stopped_are_one_line_errors(monkeypatch):
    monkeypatch.setattr(images, "VERSION", "9.9.9")
    with pytest.raises(
        InputError, match=r"base:0\.1\.0: built from package version .* this is 9\.9\.9 \(run `make images`\)"
    ):
        containers.check_runnable(["base"])
    monkeypatch.setattr(images, "REGISTRY", "registry.invalid/nothing")
    with pytest.raises(
        InputError, match=r"registry.invalid/nothing/data:.*no such image in dockerd \(run `make images`\)"
    ):
        containers.check_runnable(["data"])
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    with pytest.raises(LlmopsError, match="dockerd is not running"):
        containers.docker_ready()


def test_release_dag_runs_inside_the_images_and_its_lineage_is_proven(tmp_path, capsys):
    from kfp_llmops.pipelines.demo.local_run import format_summary, run_local

    summary = run_local(
        str(tmp_path / "run"),
        rows=800,
        base_model_size="tiny",
        train_config="steps: 6\ncheckpoint_interval: 3\nmicro_batch: 4\nseq_len: 48\n",
        eval_config="generation: {max_new_tokens: 8}\ngate:\n  value: {}\n",
        containers=True,
    )
    assert summary["runner"] == "docker"
    gates = [(s["stage"], s["gate"]) for s in summary["stages"]]
    assert gates == [
        ("validate_dataset", "passed"),
        ("train_zero3", "trained"),
        ("evaluate_llm", "blessed"),
        ("verify_watermark", "verified"),
        ("triton_canary_deploy", "promoted"),
    ], gates
    record = json.load(open(summary["release_record"]))
    assert record["decision"] == "promoted"
    assert "triton_canary_deploy" in format_summary(summary)
    capsys.readouterr()
    assert main(["lineage", "verify", summary["release_record"]]) == 0
    assert "lineage proven" in capsys.readouterr().out
    # Signed inside the images (model-signing, DSSE): the attestation verifies here.
    assert main(["lineage", "verify", summary["provenance"], "--public-key", summary["public_key"]]) == 0
    out = capsys.readouterr().out
    assert "ok  attestation" in out and "ok  served signature" in out
    # Each task really ran in its image, as uid 10001: its outputs are owned by that user.
    clean = summary["stages"][0]["outputs"]["clean"]
    assert os.stat(clean).st_uid == 10001
    # The pinned NER model ran in the data image: names and addresses came out redacted.
    text = open(clean, encoding="utf-8").read()
    assert "[PERSON]" in text and "[ADDRESS]" in text
