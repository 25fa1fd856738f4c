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

import calendar
import json
import os
import sys
import time

from blake3 import blake3

from kfp_llmops.components.common import atomic, integrity
from kfp_llmops.components.common.errors import InputError, LlmopsError
from kfp_llmops.components.common.k8s import clients
from kfp_llmops.components.common.k8s import namespace as resolve_namespace

from .config import TrainConfig
from .launch import check_precision, last_error, newest_tag, prepare, rank_env, read_result, shows_progress
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


def train_multinode(clean_path: str, base_model: str, cfg: TrainConfig, checkpoint_dir: str | None,
                    model_dir: str | None, dataset_root: str | None = None, base_model_root: str | None = None,
                    stop_after: int | None = None, dataset_chunk_size: int | None = None,
                    watermark_key_file: str | None = None, apis=None, log=print) -> dict:
    """The run on `cfg.multinode.nodes` nodes; returns rank 0's result like `launch.train`.

    Everything the ranks read or write lies beside `checkpoint_dir` on the claim
    (`<checkpoint_dir>.run/`: the base model, tokens, run spec, log, exported model)."""
    mn = cfg.multinode
    if not checkpoint_dir or not _under(checkpoint_dir, mn.mount_path):
        raise InputError(f"multinode.mount_path: checkpoint_dir {checkpoint_dir or '(none)'} is not under "
                         f"{mn.mount_path}, where every node mounts the claim {mn.claim!r}")
    check_precision(cfg, cuda=mn.gpus_per_node > 0)
    checkpoint_dir = os.path.abspath(checkpoint_dir)
    shared = checkpoint_dir.rstrip("/") + ".run"
    base_copy = os.path.join(shared, "base_model")
    root = integrity.verify("model", base_model, base_model_root)
    if not os.path.isdir(base_copy):
        atomic.copy_tree(base_model, base_copy)
    spec_path, spec, _ = prepare(clean_path, base_copy, shared, cfg, dataset_root, root, stop_after,
                                 dataset_chunk_size, checkpoint_dir, os.path.join(shared, "model"), watermark_key_file)
    secret_env = {}
    if cfg.weight_watermark.enabled:                 # from the Secret, never written into the job
        from kfp_llmops.components.common.watermark.keys import ENV_VAR
        secret_env[ENV_VAR] = (mn.key_secret, "key")
    name = job_name(spec)
    manifest = render_trainjob(name, spec_path, mn, cfg.world_size // mn.nodes,
                               rank_env(cfg, cuda=mn.gpus_per_node > 0), secret_env)
    custom, core = apis or clients()
    job = TrainJob(custom, core, manifest, os.path.join(shared, "ranks.log"), mn.poll_s, log)
    job.run(mn.timeout_s + 600)
    if not os.path.exists(spec["result"]):
        raise LlmopsError(f"TrainJob {job.where} completed but left no result at {spec['result']}: "
                          f"is {mn.claim!r} the claim mounted at {mn.mount_path} here?")
    result = read_result(spec)
    # What the job left on the claim, read back here: its newest checkpoint, every byte.
    tag = newest_tag(result)
    if tag:
        integrity.verify("checkpoint", os.path.join(checkpoint_dir, tag), result["checkpoint_root"])
    if model_dir:                                    # the task's own output, verified after the copy
        atomic.copy_tree(result["model_dir"], model_dir)
        integrity.verify("model", model_dir, result["model_root"])
        result["model_dir"] = model_dir
    if mn.delete_on_success:
        job.delete()
    result["trainjob"] = job.where
    return result


class TrainJob:
    """One TrainJob through the API: submitted (or found again), followed, its end told."""

    def __init__(self, custom, core, manifest: dict, log_path: str, poll_s: float = 10.0, log=print,
                 sleep=time.sleep):
        self.custom, self.core, self.manifest = custom, core, manifest
        self.name = manifest["metadata"]["name"]
        self.namespace = resolve_namespace(manifest["metadata"].get("namespace", ""))
        self.where = f"{self.namespace}/{self.name}"
        self.log_path, self.poll_s, self.log, self.sleep = log_path, poll_s, log, sleep
        self.seen = 0.0              # newest log timestamp already written (epoch seconds)
        self.tail = ""               # the log's last lines, for the failure message

    # -- the API --------------------------------------------------------------------------------

    def _api_error(self, exc, doing: str) -> LlmopsError:
        return LlmopsError(f"TrainJob {self.where}: {doing}: {getattr(exc, 'status', '')} "
                           f"{getattr(exc, 'reason', exc)}".rstrip())

    def get(self) -> dict | None:
        from kubernetes.client.exceptions import ApiException
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self._api_error(exc, "cannot read it") from None

    def delete(self) -> None:
        from kubernetes.client.exceptions import ApiException
        try:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name,
                                                        propagation_policy="Foreground")
        except ApiException as exc:
            if exc.status != 404:
                raise self._api_error(exc, "cannot delete it") from None

    def submit(self) -> str:
        """'created', or what was found under this name: 'running' (followed again),
        'complete' (read), or a failed job replaced: 'recreated'."""
        from kubernetes.client.exceptions import ApiException
        found = self.get()
        if found is not None:
            ended = end_of(found)
            if ended is None:
                return "running"
            if ended[0] == "Complete":
                return "complete"
            self.log(f"[train] TrainJob {self.where} failed before ({ended[1]}); starting it again, "
                     "from the newest verified checkpoint")
            self.delete()
            for _ in range(120):
                if self.get() is None:
                    break
                self.sleep(self.poll_s / 2)
            else:
                raise LlmopsError(f"TrainJob {self.where}: the failed job is still being deleted")
        try:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.manifest)
        except ApiException as exc:
            raise self._api_error(exc, "refused") from None
        return "recreated" if found is not None else "created"

    # -- following it ---------------------------------------------------------------------------

    def run(self, timeout_s: float) -> dict:
        """Submit, then follow until Complete; a Failed job raises with its own reason."""
        how = self.submit()
        self.log(f"[train] TrainJob {self.where}: {how}")
        deadline = time.monotonic() + timeout_s
        with open(self.log_path, "a", encoding="utf-8") as sink:
            while True:
                job = self.get()
                if job is None:
                    raise LlmopsError(f"TrainJob {self.where} disappeared while it ran (deleted by someone?)")
                self._copy_log(sink)
                ended = end_of(job)
                if ended is not None:
                    break
                if time.monotonic() > deadline:
                    raise LlmopsError(f"TrainJob {self.where} still runs after {timeout_s:.0f} s; it is left "
                                      "running and a retry of this task follows it again")
                self.sleep(self.poll_s)
        kind, reason, message = ended
        if kind == "Complete":
            return job
        raise LlmopsError(f"TrainJob {self.where} failed: {reason}: {message}{self._pod_reasons()}; "
                          f"last log line: {last_error(self.tail)}; "
                          "a retry resumes from the newest verified checkpoint")

    def _copy_log(self, sink) -> None:
        """New lines of the launcher's log into ranks.log; progress shown live."""
        from kubernetes.client.exceptions import ApiException
        try:
            pods = self.core.list_namespaced_pod(self.namespace,
                                                 label_selector=LAUNCHER_PODS.format(name=self.name)).items
        except ApiException:
            return
        for pod in pods:
            since = max(1, int(time.time() - self.seen) + 1) if self.seen else None
            try:
                text = self.core.read_namespaced_pod_log(pod.metadata.name, self.namespace, container="node",
                                                         timestamps=True, since_seconds=since)
            except ApiException:
                continue                                  # not started yet
            for line in (text or "").splitlines():
                stamp, _, body = line.partition(" ")
                at = _epoch(stamp)
                if at is None or at <= self.seen:
                    continue
                self.seen = at
                sink.write(body + "\n")
                self.tail = (self.tail + body + "\n")[-20000:]
                if shows_progress(body.encode()):
                    sys.stderr.write(body + "\n")
            sink.flush()

    def _pod_reasons(self) -> str:
        """Containers that ended badly (OOMKilled, Error), from every pod of the job."""
        from kubernetes.client.exceptions import ApiException
        try:
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=JOB_PODS.format(name=self.name)).items
        except ApiException:
            return ""
        found = []
        for pod in pods:
            for status in (pod.status.container_statuses or []) if pod.status else []:
                ended = status.state.terminated if status.state else None
                if ended is not None and ended.exit_code:
                    found.append(f"{pod.metadata.name}: {ended.reason or 'Error'} (exit {ended.exit_code})")
        return f" ({'; '.join(found)})" if found else ""


def end_of(job: dict) -> tuple[str, str, str] | None:
    """('Complete' | 'Failed', reason, message) once the job has ended, else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"], cond.get("reason", ""), cond.get("message", "")
    return None


def _epoch(stamp: str) -> float | None:
    """RFC 3339 with nanoseconds (the kubelet's log timestamps) to epoch seconds."""
    try:
        whole, _, frac = stamp.rstrip("Z").partition(".")
        return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float(f"0.{frac or 0}")
    except ValueError:
        return None
