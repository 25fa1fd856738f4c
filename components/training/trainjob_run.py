"""Multi-node training from inside the task's pod: the run is prepared on a claim every
node mounts, a Kubeflow Trainer TrainJob runs its ranks, and the task follows it (status
conditions, the launcher's log, which is where mpirun gathers every rank's output) until
it completes or fails with its own reason; then the result, the newest checkpoint and
the exported model are read back from the claim and verified.

The job's name follows from the run (its checkpoint folder and config), so a retried task
finds its job: a running one is followed again, a completed one is read, a failed one is
replaced by a new one that resumes from the newest verified checkpoint. The Kubernetes API
is reached through the client's CustomObjectsApi and CoreV1Api (tests pass stand-ins)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace

from blake3 import blake3

from kfp_llmops.components.common import atomic, integrity
from kfp_llmops.components.common.errors import InputError, LlmopsError
from kfp_llmops.components.common.k8s import clients
from kfp_llmops.components.common.k8s_job import FollowedJob

from .config import TrainConfig
from .launch import (
    RunInputs,
    check_precision,
    last_error,
    newest_tag,
    prepare,
    rank_env,
    read_result,
    shows_progress,
)
from .trainjob import render_trainjob

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
# JobSet labels every pod of the job: the launcher's log holds every rank's output.
LAUNCHER_PODS = "jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/replicatedjob-name=launcher"
JOB_PODS = "jobset.sigs.k8s.io/jobset-name={name}"


def job_name(spec: dict) -> str:
    """One name per run: its checkpoint folder, config, data and base model."""
    meta = spec["meta"]
    key = json.dumps([spec["checkpoint_dir"], meta["config_hash"], meta["dataset_root"], meta["base_model_root"]])
    return "llmops-train-" + blake3(key.encode()).hexdigest()[:10]


def _under(path: str, folder: str) -> bool:
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return os.path.commonpath([path, folder]) == folder and path != folder


def train_multinode(run: RunInputs, cfg: TrainConfig, apis=None, log=print) -> dict:
    """The run on `cfg.multinode.nodes` nodes; returns rank 0's result like `engines.train`.

    Everything the ranks read or write lies beside `checkpoint_dir` on the claim
    (`<checkpoint_dir>.run/`: the base model, tokens, run spec, log, exported model)."""
    mn = cfg.multinode
    checkpoint_dir = run.checkpoint_dir
    if not checkpoint_dir or not _under(checkpoint_dir, mn.mount_path):
        raise InputError(
            f"multinode.mount_path: checkpoint_dir {checkpoint_dir or '(none)'} is not under "
            f"{mn.mount_path}, where every node mounts the claim {mn.claim!r}"
        )
    check_precision(cfg, cuda=mn.gpus_per_node > 0)
    checkpoint_dir = os.path.abspath(checkpoint_dir)
    shared = checkpoint_dir.rstrip("/") + ".run"
    base_copy = os.path.join(shared, "base_model")
    root = integrity.verify("model", run.base_model, run.base_model_root)
    if not os.path.isdir(base_copy):
        atomic.copy_tree(run.base_model, base_copy)
    on_claim = replace(
        run,
        base_model=base_copy,
        out_dir=shared,
        base_model_root=root,
        checkpoint_dir=checkpoint_dir,
        model_dir=os.path.join(shared, "model"),
    )
    spec_path, spec, _ = prepare(on_claim, cfg)
    secret_env = {}
    if cfg.weight_watermark.enabled:  # from the Secret, never written into the job
        from kfp_llmops.components.common.watermark.keys import ENV_VAR

        secret_env[ENV_VAR] = (mn.key_secret, "key")
    name = job_name(spec)
    manifest = render_trainjob(
        name, spec_path, mn, cfg.world_size // mn.nodes, rank_env(cfg, cuda=mn.gpus_per_node > 0), secret_env
    )
    custom, core = apis or clients()
    job = TrainJob(custom, core, manifest, os.path.join(shared, "ranks.log"), mn.poll_s, log)
    job.run(mn.timeout_s + 600)
    if not os.path.exists(spec["result"]):
        raise LlmopsError(
            f"TrainJob {job.where} completed but left no result at {spec['result']}: "
            f"is {mn.claim!r} the claim mounted at {mn.mount_path} here?"
        )
    result = read_result(spec)
    # What the job left on the claim, read back here: its newest checkpoint, every byte.
    tag = newest_tag(result)
    if tag:
        integrity.verify("checkpoint", os.path.join(checkpoint_dir, tag), result["checkpoint_root"])
    if run.model_dir:  # the task's own output, verified after the copy
        atomic.copy_tree(result["model_dir"], run.model_dir)
        integrity.verify("model", run.model_dir, result["model_root"])
        result["model_dir"] = run.model_dir
    if mn.delete_on_success:
        job.delete()
    result["trainjob"] = job.where
    return result


class TrainJob(FollowedJob):
    """One TrainJob through the API: submitted (or found again), followed, its end told."""

    GROUP, VERSION, PLURAL, KIND = GROUP, VERSION, PLURAL, "TrainJob"
    LOG_PODS, LOG_CONTAINER, JOB_PODS = LAUNCHER_PODS, "node", JOB_PODS
    STAGE = "[train]"
    RETRY_NOTE = "a retry resumes from the newest verified checkpoint"
    RESTART_NOTE = ", from the newest verified checkpoint"

    def __init__(self, custom, core, manifest: dict, log_path: str, poll_s: float = 10.0, log=print, sleep=time.sleep):
        super().__init__(
            custom, core, manifest, log_path, poll_s, log, sleep, show=lambda line: shows_progress(line.encode())
        )

    def end_of(self, job: dict) -> tuple[bool, str, str] | None:
        ended = end_of(job)
        return None if ended is None else (ended[0] == "Complete", ended[1], ended[2])

    def last_error(self, tail: str) -> str:
        return last_error(tail)


def end_of(job: dict) -> tuple[str, str, str] | None:
    """('Complete' | 'Failed', reason, message) once the job has ended, else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"], cond.get("reason", ""), cond.get("message", "")
    return None
