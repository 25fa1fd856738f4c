"""The pipelines, each inside an exit handler whose task writes the release record
(every stage's roots) whatever happened:

- `release`: validate_dataset -> [gate passed] -> build_base_model -> train_zero3 ->
  evaluate_llm -> [blessed] -> verify_watermark -> [verified] -> triton_canary_deploy.
  The base model is the user's (`base_model_uri`, its root pinned by `base_model_root`),
  else the demo model built from the clean data.
- `continue-training`: validate new data, resume training from a checkpoint of an
  earlier run (its Merkle root pinned), then the same evaluate/watermark/deploy tail.
- `evaluate-deploy`: an existing model (its root pinned) through evaluate, watermark
  and deploy.

Each run first pins the promoted release it compares with (`pin-baseline`) and fingerprints
the datasets it imports, so that validate_dataset and evaluate_llm, which KFP may cache,
are keyed by everything they read; their lineage notes are filed by uncached tasks.

`PIPELINES` are the compiled, cluster forms: pod sizes, timeouts, GPU type and count (one
rank per GPU), a GPU toleration, the checkpoint and release PVCs (a folder per run on
each), the watermark-key Secret, object-storage credentials and the registry pull secret
come from kfp-kubernetes, and the deploy stage targets KServe. `LOCAL_PIPELINES` are the
same DAGs for kfp.local, with local folders instead. Parameters: `params.py`.
"""

from __future__ import annotations

import inspect

from kfp import dsl
from kfp.dsl.pipeline_channel import PipelineChannel

from kfp_llmops.components.common.k8s import TASK_LABEL
from kfp_llmops.components.data_validation.component import validate_dataset
from kfp_llmops.components.deploy.cluster import API_KEYS_MOUNT
from kfp_llmops.components.deploy.component import triton_canary_deploy
from kfp_llmops.components.deploy.config import Cluster
from kfp_llmops.components.evaluation.component import evaluate_llm
from kfp_llmops.components.release.component import file_note, fingerprint_dataset, pin_baseline, write_release_record
from kfp_llmops.components.training.component import build_base_model, train_zero3
from kfp_llmops.components.training.config import CHECKPOINT_MOUNT
from kfp_llmops.components.watermark.component import verify_watermark

from . import params as P

KEY_SECRET, KEY_MOUNT = "llmops-watermark-key", "/var/run/secrets/kfp-llmops/watermark"
# The served model's API keys (the deploy task's smoke tests and load through the front doors).
API_KEYS_SECRET = Cluster().api_keys_secret
# model-signing and provenance keys: a Secret with `private.pem` and `public.pem`.
SIGNING_SECRET, SIGNING_MOUNT = "llmops-signing-key", "/var/run/secrets/kfp-llmops/signing"
# Object-storage credentials (DVC remote, model repository upload) as environment variables.
STORAGE_SECRET = "llmops-storage"
STORAGE_ENV = {"access_key_id": "AWS_ACCESS_KEY_ID", "secret_access_key": "AWS_SECRET_ACCESS_KEY"}
# The tasks that get them: data and base models come from it, the repository goes to it, and
# evaluation reads the production model back from it (the win rate).
STORAGE_TASKS = ("validate-dataset", "build-base-model", "evaluate-llm", "triton-canary-deploy")
PULL_SECRET = "llmops-registry"
RELEASE_MOUNT = "/mnt/release"
# The local target's promoted repositories outlive runs (on a cluster the default target is KServe).
SERVING_STATE = f"{RELEASE_MOUNT}/serving"
# Pod sizes of the tasks whose size is not a parameter, and every task's deadline (s).
SMALL = ("1", "1Gi")
FIXED_SIZE = {
    "validate-dataset": ("2", "4Gi"),
    "build-base-model": ("2", "4Gi"),
    "release-record": SMALL,
    "pin-baseline": SMALL,
    "fingerprint-dataset": SMALL,
    "fingerprint-eval-dataset": SMALL,
    "file-validate-note": SMALL,
    "file-evaluate-note": SMALL,
}
TIMEOUT = {
    "validate-dataset": 4 * 3600,
    "build-base-model": 3600,
    "train-zero3": 72 * 3600,
    "evaluate-llm": 12 * 3600,
    "verify-watermark": 12 * 3600,
    "triton-canary-deploy": 6 * 3600,
    "release-record": 1800,
    "pin-baseline": 600,
    "fingerprint-dataset": 2 * 3600,
    "fingerprint-eval-dataset": 3600,
    "file-validate-note": 600,
    "file-evaluate-note": 600,
}
# KFP may reuse these tasks' results: they read nothing outside their cache key (the pinned
# baseline, the inputs' roots) and write nothing but their outputs. Every other task has a
# side effect (checkpoints, the release folder, serving) and always runs.
CACHED = ("validate-dataset", "evaluate-llm")
# The small uncached tasks around them (components/release/component.py). Argo has no cache:
# its stage runner pins and files in the stage's own pod instead.
CACHE_TASKS = (
    "pin-baseline",
    "fingerprint-dataset",
    "fingerprint-eval-dataset",
    "file-validate-note",
    "file-evaluate-note",
)


class _Form:
    """Settings that differ between the cluster form (kfp-kubernetes) and kfp.local."""

    def __init__(self, cluster: bool, p: dict):
        self.enabled, self.p = cluster, p

    def get(self, name: str):
        """A parameter of the other form has a fixed value here (never a UI field)."""
        if name in self.p:
            return self.p[name]
        return {
            "checkpoint_dir": f"{CHECKPOINT_MOUNT}/{dsl.PIPELINE_JOB_ID_PLACEHOLDER}",
            "release_dir": f"{RELEASE_MOUNT}/{dsl.PIPELINE_JOB_ID_PLACEHOLDER}",
            "serving_state_dir": SERVING_STATE,
            "watermark_key_file": f"{KEY_MOUNT}/key",
            "signing_key_file": f"{SIGNING_MOUNT}/private.pem",
            "signing_public_key_file": f"{SIGNING_MOUNT}/public.pem",
            "gpu_count": "0",
        }[name]

    def size(self, task, cpu, memory):
        """Requests equal limits: a quota'd namespace admits the pod, and it is not evicted first.

        Channels used only in resource settings are not passed into nested DAGs by the KFP
        SDK (kubeflow/pipelines #11957: "parent DAG does not have input parameter"), so
        they are registered as the task's inputs here; `ir_check` proves the result."""
        task.set_cpu_request(cpu).set_cpu_limit(cpu).set_memory_request(memory).set_memory_limit(memory)
        task.register_pipeline_channels([v for v in (cpu, memory) if isinstance(v, PipelineChannel)])
        return task

    def task(self, task, name: str, key: bool = False, size=None, signing: bool = False, api_keys: bool = False):
        task.set_display_name(name).set_caching_options(name in CACHED)
        if not self.enabled:
            return task
        from kfp import kubernetes

        self.size(task, *(size or FIXED_SIZE[name]))
        kubernetes.set_timeout(task, TIMEOUT[name])
        kubernetes.set_image_pull_secrets(task, [PULL_SECRET])
        for label, value in TASK_LABEL.items():
            kubernetes.add_pod_label(task, label, value)
        kubernetes.mount_pvc(task, pvc_name=self.p["release_pvc"], mount_path=RELEASE_MOUNT)
        if key:
            kubernetes.use_secret_as_volume(task, secret_name=KEY_SECRET, mount_path=KEY_MOUNT)
        if signing:
            kubernetes.use_secret_as_volume(task, secret_name=SIGNING_SECRET, mount_path=SIGNING_MOUNT)
        if api_keys:  # the deploy controller's own requests through the gateway form's front doors
            kubernetes.use_secret_as_volume(task, secret_name=API_KEYS_SECRET, mount_path=API_KEYS_MOUNT)
        if name in STORAGE_TASKS:
            kubernetes.use_secret_as_env(task, secret_name=STORAGE_SECRET, secret_key_to_env=STORAGE_ENV)
        return task

    def training(self, task):
        self.task(task, "train-zero3", size=(self.p.get("train_cpu"), self.p.get("train_memory")), signing=True)
        if not self.enabled:
            return task
        from kfp import kubernetes

        gpu_type, gpu_count = self.p["gpu_type"], self.p["gpu_count"]
        task.set_accelerator_type(gpu_type).set_accelerator_limit(gpu_count)
        task.register_pipeline_channels([gpu_type, gpu_count])  # see `size`
        kubernetes.add_toleration(task, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        kubernetes.mount_pvc(task, pvc_name=self.p["checkpoint_pvc"], mount_path=CHECKPOINT_MOUNT)
        return task

    def eval_size(self):
        return (self.p.get("eval_cpu"), self.p.get("eval_memory"))


def _tail(f: _Form, model, eval_set, pinned, model_root="", base_model=None, base_model_root=None) -> None:
    """evaluate_llm -> [blessed] -> verify_watermark -> [verified] -> triton_canary_deploy.
    `base_model`, what training started from, is the forgetting check's base."""
    eval_root = f.task(fingerprint_dataset(dataset=eval_set), "fingerprint-eval-dataset").output
    kwargs = {"base_model": base_model} if base_model is not None else {}
    if base_model_root is not None:
        kwargs["base_model_root"] = base_model_root
    evaluated = evaluate_llm(
        model=model,
        eval_dataset=eval_set,
        config=f.p["eval_config"],
        baseline_release=pinned,
        model_root=model_root,
        eval_root=eval_root,
        **kwargs,
    )
    f.task(evaluated, "evaluate-llm", size=f.eval_size())
    f.task(file_note(note=evaluated.outputs["note"], release_dir=f.get("release_dir")), "file-evaluate-note")
    with dsl.If(evaluated.outputs["Output"] == True, name="blessed"):  # noqa: E712
        marked = verify_watermark(
            model=model,
            eval_dataset=eval_set,
            blessing=evaluated.outputs["blessing"],
            config=f.p["watermark_config"],
            key_file=f.get("watermark_key_file"),
            release_dir=f.get("release_dir"),
        )
        f.task(marked, "verify-watermark", key=True, size=f.eval_size())
        with dsl.If(marked.outputs["Output"] == True, name="verified"):  # noqa: E712
            deployed = triton_canary_deploy(
                model=model,
                blessing=evaluated.outputs["blessing"],
                watermarked=marked.outputs["watermarked"],
                config=f.p["deploy_config"],
                default_target="kserve" if f.enabled else "local",
                key_file=f.get("watermark_key_file"),
                state_dir=f.get("serving_state_dir"),
                release_dir=f.get("release_dir"),
                signing_key_file=f.get("signing_key_file"),
                public_key_file=f.get("signing_public_key_file"),
            )
            f.task(
                deployed,
                "triton-canary-deploy",
                key=True,
                signing=True,
                api_keys=True,
                size=(f.p.get("deploy_cpu"), f.p.get("deploy_memory")),
            )


def _pin(f: _Form):
    """The promoted release this run compares with, pinned before any stage reads it."""
    return f.task(
        pin_baseline(release_dir=f.get("release_dir"), baseline_release=f.p["baseline_release"]), "pin-baseline"
    ).output


def _train(f: _Form, dataset, base_model, resume_from=None):
    """train_zero3 with its retry policy; checkpoints on the PVC survive the retries."""
    kwargs = {"resume_from": resume_from} if resume_from is not None else {}
    trained = train_zero3(
        dataset=dataset,
        base_model=base_model,
        config=f.p["train_config"],
        checkpoint_dir=f.get("checkpoint_dir"),
        gpus=f.get("gpu_count"),
        release_dir=f.get("release_dir"),
        signing_key_file=f.get("signing_key_file"),
        **kwargs,
    )
    trained.set_retry(num_retries=2)
    return f.training(trained)


def _validate(f: _Form, raw, pinned):
    """validate_dataset, keyed by the raw data's root; its `Output` is the data gate."""
    raw_root = f.task(fingerprint_dataset(dataset=raw), "fingerprint-dataset").output
    validated = validate_dataset(
        raw=raw,
        config=f.p["data_config"],
        policy=f.p["pii_policy"],
        baseline_release=pinned,
        raw_root=raw_root,
        engine=f.p["data_engine"],
    )
    f.task(validated, "validate-dataset")
    f.task(
        file_note(note=validated.outputs["note"], release_dir=f.get("release_dir"), stats=validated.outputs["stats"]),
        "file-validate-note",
    )
    return validated


def _import(uri, cls, name: str, root=None):
    task = dsl.importer(
        artifact_uri=uri,
        artifact_class=cls,
        reimport=False,
        metadata={"merkle_root": root} if root is not None else None,
    )
    return task.set_display_name(name)


def _release(f: _Form) -> None:
    raw = _import(f.p["dataset_uri"], dsl.Dataset, "import-dataset")
    eval_set = _import(f.p["eval_dataset_uri"], dsl.Dataset, "import-eval-dataset")
    pinned = _pin(f)
    validated = _validate(f, raw.output, pinned)
    with dsl.If(validated.outputs["Output"] == True, name="data-gate-passed"):  # noqa: E712
        base = build_base_model(
            dataset=validated.outputs["clean"],
            size=f.p["base_model_size"],
            base_model_uri=f.p["base_model_uri"],
            base_model_root=f.p["base_model_root"],
            release_dir=f.get("release_dir"),
        )
        f.task(base, "build-base-model")
        trained = _train(f, validated.outputs["clean"], base.outputs["base_model"])
        _tail(f, trained.outputs["model"], eval_set.output, pinned, base_model=base.outputs["base_model"])


def _continue_training(f: _Form) -> None:
    raw = _import(f.p["dataset_uri"], dsl.Dataset, "import-dataset")
    eval_set = _import(f.p["eval_dataset_uri"], dsl.Dataset, "import-eval-dataset")
    model = _import(f.p["model_uri"], dsl.Model, "import-model", f.p["model_root"])
    ckpt = _import(f.p["checkpoint_uri"], dsl.Artifact, "import-checkpoints", f.p["checkpoint_root"])
    pinned = _pin(f)
    validated = _validate(f, raw.output, pinned)
    with dsl.If(validated.outputs["Output"] == True, name="data-gate-passed"):  # noqa: E712
        trained = _train(f, validated.outputs["clean"], model.output, ckpt.output)
        _tail(
            f,
            trained.outputs["model"],
            eval_set.output,
            pinned,
            base_model=model.output,
            base_model_root=f.p["model_root"],
        )


def _evaluate_deploy(f: _Form) -> None:
    model = _import(f.p["model_uri"], dsl.Model, "import-model", f.p["model_root"])
    eval_set = _import(f.p["eval_dataset_uri"], dsl.Dataset, "import-eval-dataset")
    _tail(f, model.output, eval_set.output, _pin(f), f.p["model_root"])


SHAPES = {
    "release": (
        "llmops-release",
        _release,
        "Validate SFT data, train with DeepSpeed ZeRO-3 and Merkle-verified checkpoints, evaluate, verify "
        "the watermark, and roll out to Triton as a canary.",
    ),
    "continue-training": (
        "llmops-continue-training",
        _continue_training,
        "Validate new data and continue training a model from a verified checkpoint, then "
        "evaluate, verify the watermark and deploy.",
    ),
    "evaluate-deploy": (
        "llmops-evaluate-deploy",
        _evaluate_deploy,
        "Evaluate an existing model (its Merkle root pinned), verify its watermark and roll it out "
        "to Triton as a canary.",
    ),
}


def _pipeline(key: str, cluster: bool):
    """A pipeline function whose signature and docstring come from `params.py`."""
    name, body, description = SHAPES[key]
    declared = P.for_pipeline(key, "cluster" if cluster else "local")

    def fn(*values):
        f = _Form(cluster, dict(zip([p.name for p in declared], values, strict=False)))
        record = write_release_record(
            release_dir=f.get("release_dir"),
            signing_key_file=f.get("signing_key_file"),
            pipeline_spec_sha256=f.p["pipeline_spec_sha256"],
        )
        with dsl.ExitHandler(f.task(record, "release-record", signing=True), name="release"):
            body(f)

    fn.__signature__ = inspect.Signature(
        [
            inspect.Parameter(
                p.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=str,
                default=inspect.Parameter.empty if p.default is None else p.default,
            )
            for p in declared
        ]
    )
    fn.__name__ = fn.__qualname__ = key.replace("-", "_")
    fn.__doc__ = P.docstring(description, declared)
    return dsl.pipeline(name=name, description=description)(fn)


def make_pipelines(cluster: bool) -> dict:
    return {key: _pipeline(key, cluster) for key in SHAPES}


PIPELINES = make_pipelines(cluster=True)
LOCAL_PIPELINES = make_pipelines(cluster=False)
