"""engine: ray on a cluster: validate_dataset as a KubeRay RayJob (ray.io/v1, KubeRay 1.7).

The task copies the input onto a claim every Ray pod mounts (checked against the digest
it read first), writes the job's spec beside it, and submits a RayJob of the data image:
a head and `workers` worker pods, and an entrypoint that runs this module's `main` on the
cluster (RAY_ADDRESS is the cluster there, so the sharded engine joins it). The task
follows the job's status (jobDeploymentStatus, jobStatus) and its submitter's log, reads
the outputs back from the claim and verifies the clean file's Merkle root before they
become its own. The job's name follows from the input's digest and the config, so a
retried task finds its job again; a failed one is replaced."""

from __future__ import annotations

import json
import os

from blake3 import blake3

from kfp_llmops.components import images
from kfp_llmops.components.common import atomic, integrity
from kfp_llmops.components.common.errors import InputError, LlmopsError
from kfp_llmops.components.common.k8s import namespace as resolve_namespace
from kfp_llmops.components.common.k8s_job import FollowedJob

from .config import DataValidationConfig, KubeRaySettings
from .reader import input_files

LABELS = {"app.kubernetes.io/part-of": "kfp-llmops", "kfp-llmops/stage": "validate_dataset"}
RUNS = "llmops-validate"  # the runs' folder on the claim
VOLUME = "llmops-data"


def ray_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ray")
    except PackageNotFoundError:
        return "2.60.0"


def render_rayjob(name: str, s: KubeRaySettings, entrypoint: str) -> dict:
    """The RayJob: a head and `s.workers` workers of the data image, each mounting the claim."""
    image = s.image or images.DATA

    def pod(container: str, cpu: str, memory: str) -> dict:
        spec = {
            "securityContext": {"fsGroup": images.UID},
            "volumes": [{"name": VOLUME, "persistentVolumeClaim": {"claimName": s.claim}}],
            "containers": [
                {
                    "name": container,
                    "image": image,
                    "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
                    "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
                    "volumeMounts": [{"name": VOLUME, "mountPath": s.mount_path}],
                }
            ],
        }
        if s.service_account:
            spec["serviceAccountName"] = s.service_account
        return {"metadata": {"labels": dict(LABELS)}, "spec": spec}

    cluster = {
        "rayVersion": ray_version(),
        "headGroupSpec": {"rayStartParams": {}, "template": pod("ray-head", s.head_cpu, s.head_memory)},
    }
    if s.workers:
        cluster["workerGroupSpecs"] = [
            {
                "groupName": "workers",
                "replicas": s.workers,
                "minReplicas": s.workers,
                "maxReplicas": s.workers,
                "rayStartParams": {},
                "template": pod("ray-worker", s.worker_cpu, s.worker_memory),
            }
        ]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": resolve_namespace(s.namespace), "labels": dict(LABELS)},
        "spec": {
            "entrypoint": entrypoint,
            "submissionMode": "K8sJobMode",
            "shutdownAfterJobFinishes": True,
            "activeDeadlineSeconds": s.timeout_s,
            "backoffLimit": 0,
            "rayClusterSpec": cluster,
        },
    }


class RayJob(FollowedJob):
    GROUP, VERSION, PLURAL, KIND = "ray.io", "v1", "rayjobs", "RayJob"
    # K8sJobMode: a Kubernetes Job of the RayJob's name submits the entrypoint and tails its log.
    LOG_PODS, LOG_CONTAINER = "batch.kubernetes.io/job-name={name}", "ray-job-submitter"
    JOB_PODS = "ray.io/originated-from-cr-name={name}"
    STAGE = "[validate]"
    RETRY_NOTE = "a retry of the task replaces the job"

    def end_of(self, job: dict) -> tuple[bool, str, str] | None:
        status = job.get("status") or {}
        if status.get("jobDeploymentStatus") not in ("Complete", "Failed"):
            return None
        succeeded = status.get("jobDeploymentStatus") == "Complete" and status.get("jobStatus") == "SUCCEEDED"
        return succeeded, status.get("reason") or status.get("jobStatus") or "Failed", status.get("message", "")

    def last_error(self, tail: str) -> str:
        errors = [line for line in tail.splitlines() if line.startswith("error:")]
        return errors[-1] if errors else super().last_error(tail)


def _digest(path: str) -> str:
    """The input's files, names and bytes, as one BLAKE3 digest."""
    inputs = input_files(path)
    hasher = blake3()
    for file in inputs.files:
        hasher.update(inputs.name(file).encode() + b"\0")
        with open(file, "rb") as handle:
            while piece := handle.read(1 << 22):
                hasher.update(piece)
        hasher.update(b"\0")
    return hasher.hexdigest()


def _holds(path: str, digest: str) -> bool:
    """Whether `path` holds the input whose digest is `digest` (a retried task's copy)."""
    try:
        return _digest(path) == digest
    except InputError:  # not there, or a folder copy cut short
        return False


def _copy_input(source: str, dest: str) -> None:
    """A file, or a folder's data files under the same names, copied to `dest`."""
    inputs = input_files(source)
    if not inputs.folder:
        atomic.copy_file(source, dest)
        return
    for file in inputs.files:
        atomic.copy_file(file, os.path.join(dest, inputs.name(file)))


def validate_on_kuberay(
    input_path: str, outputs, config: DataValidationConfig, reference_stats: str | None, apis=None, log=print
):
    """The run as a RayJob; the outputs land in `outputs` only once the clean file verifies."""
    from kfp_llmops.components.common.k8s import clients

    from .outputs import ValidationResult

    s = config.ray.kuberay
    if not os.path.isdir(s.mount_path):
        raise InputError(
            f"ray.kuberay.mount_path: {s.mount_path} is not mounted here; the task and every Ray pod "
            f"mount the claim {s.claim!r} there"
        )
    input_files(input_path)  # refuses a missing input or a folder of other files
    job_config = config.model_copy(deep=True)
    job_config.ray.kuberay.enabled = False  # on the cluster, the sharded engine itself
    settings = job_config.model_dump(mode="json", by_alias=True)
    digest = _digest(input_path)
    name = "llmops-validate-" + blake3(json.dumps([digest, settings, bool(reference_stats)]).encode()).hexdigest()[:10]
    run = os.path.join(s.mount_path, RUNS, name)
    data = os.path.join(run, os.path.basename(os.path.normpath(input_path)))
    if not _holds(data, digest):
        _copy_input(input_path, data)
        if not _holds(data, digest):
            raise InputError(
                f"{input_path}: changed while it was copied to {data}; validate a copy that is not being written"
            )
    reference = None
    if reference_stats:
        reference = os.path.join(run, "reference_stats.json")
        atomic.copy_file(reference_stats, reference)
    out = os.path.join(run, "out")
    spec_path = os.path.join(run, "spec.json")
    atomic.write_json(spec_path, {"input": data, "out": out, "reference": reference, "config": settings})
    manifest = render_rayjob(name, s, f"python -m kfp_llmops.components.data_validation.engines {spec_path}")
    custom, core = apis or clients()
    job = RayJob(custom, core, manifest, os.path.join(run, "job.log"), s.poll_s, log)
    job.run(s.timeout_s + 600)
    metrics_path = os.path.join(out, "metrics.json")
    if not os.path.isfile(metrics_path):
        raise LlmopsError(
            f"RayJob {job.where} completed but left no metrics at {metrics_path}: is {s.claim!r} "
            f"the claim mounted at {s.mount_path} here?"
        )
    with open(metrics_path, encoding="utf-8") as handle:
        metrics = json.load(handle)
    clean = os.path.join(out, os.path.basename(outputs.clean))
    integrity.verify("dataset", clean, metrics["merkle_root"], metrics["chunk_size"])
    for source, dest in (
        (clean, outputs.clean),
        (os.path.join(out, os.path.basename(outputs.quarantine)), outputs.quarantine),
        (metrics_path, outputs.metrics),
        (os.path.join(out, "stats.json"), outputs.stats),
    ):
        if dest:
            atomic.copy_file(source, dest)
    with open(os.path.join(out, "samples.json"), encoding="utf-8") as handle:
        samples = json.load(handle)
    if s.delete_on_success:
        job.delete()
    metrics["rayjob"] = job.where
    return ValidationResult(metrics, metrics["passed"], metrics["gate_reasons"], samples)
