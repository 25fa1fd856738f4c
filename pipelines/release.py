"""The pipelines, each inside an exit handler whose task writes the release record
(every stage's roots) whatever happened:

- `release`: validate_dataset -> [gate passed] -> build_base_model -> train_zero3 ->
  evaluate_llm -> [blessed] -> verify_watermark -> [verified] -> triton_canary_deploy.
  The demo base model is built from the clean data; production imports its base model
  (the `continue-training` pipeline shows how).
- `continue-training`: validate new data, resume training from a checkpoint of an
  earlier run (its Merkle root pinned), then the same evaluate/watermark/deploy tail.
- `evaluate-deploy`: an existing model (its root pinned) through evaluate, watermark
  and deploy.

`PIPELINES` are the compiled, cluster forms: GPU type and count, a GPU toleration, the
checkpoint and release PVCs (a folder per run on each; `checkpoint_dir` and
`release_dir` apply to local runs), the watermark-key Secret, object-storage credentials
(for DVC and the model repository) and the registry pull secret come from
kfp-kubernetes. `LOCAL_PIPELINES` are the same DAGs without those settings, for
kfp.local.
"""

from kfp import dsl

from kfp_llmops.components.data_validation.component import validate_dataset
from kfp_llmops.components.deploy.component import triton_canary_deploy
from kfp_llmops.components.evaluation.component import evaluate_llm
from kfp_llmops.components.release.component import write_release_record
from kfp_llmops.components.training.component import build_base_model, train_zero3
from kfp_llmops.components.watermark.component import verify_watermark

KEY_SECRET, KEY_MOUNT = "llmops-watermark-key", "/var/run/secrets/kfp-llmops/watermark"
# Object-storage credentials (DVC remote, model repository upload) as environment variables.
STORAGE_SECRET = "llmops-storage"
STORAGE_ENV = {"access_key_id": "AWS_ACCESS_KEY_ID", "secret_access_key": "AWS_SECRET_ACCESS_KEY"}
PULL_SECRET = "llmops-registry"
CHECKPOINT_MOUNT, RELEASE_MOUNT = "/mnt/checkpoints", "/mnt/release"


class _Cluster:
    """kfp-kubernetes settings, applied only to the compiled (cluster) form."""

    def __init__(self, enabled: bool, release_pvc=None):
        self.enabled, self.release_pvc = enabled, release_pvc

    def folder(self, mount: str, param):
        """On a cluster: a per-run folder on the PVC (retries of a task find it again)."""
        return f"{mount}/{dsl.PIPELINE_JOB_ID_PLACEHOLDER}" if self.enabled else param

    def task(self, task, key: bool = False, storage: bool = False):
        if not self.enabled:
            return task
        from kfp import kubernetes
        kubernetes.set_image_pull_secrets(task, [PULL_SECRET])
        kubernetes.mount_pvc(task, pvc_name=self.release_pvc, mount_path=RELEASE_MOUNT)
        if key:
            kubernetes.use_secret_as_volume(task, secret_name=KEY_SECRET, mount_path=KEY_MOUNT)
        if storage:
            kubernetes.use_secret_as_env(task, secret_name=STORAGE_SECRET, secret_key_to_env=STORAGE_ENV)
        return task

    def training(self, task, gpu_type, gpu_count, checkpoint_pvc):
        if not self.enabled:
            return task
        from kfp import kubernetes
        task.set_accelerator_type(gpu_type).set_accelerator_limit(gpu_count)
        kubernetes.add_toleration(task, key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        kubernetes.mount_pvc(task, pvc_name=checkpoint_pvc, mount_path=CHECKPOINT_MOUNT)
        return self.task(task)


def _tail(c: _Cluster, model, eval_set, release_dir, eval_config, watermark_config, watermark_key_file,
          deploy_config, serving_state_dir) -> None:
    """evaluate_llm -> [blessed] -> verify_watermark -> [verified] -> triton_canary_deploy."""
    evaluated = evaluate_llm(model=model, eval_dataset=eval_set, config=eval_config, release_dir=release_dir)
    c.task(evaluated.set_display_name("evaluate-llm").set_caching_options(False))
    with dsl.If(evaluated.outputs["Output"] == True, name="blessed"):  # noqa: E712
        marked = verify_watermark(model=model, eval_dataset=eval_set, config=watermark_config,
                                  key_file=watermark_key_file, release_dir=release_dir)
        c.task(marked.set_display_name("verify-watermark").set_caching_options(False), key=True)
        with dsl.If(marked.outputs["Output"] == True, name="verified"):  # noqa: E712
            deployed = triton_canary_deploy(model=model, blessing=evaluated.outputs["blessing"], config=deploy_config,
                                            key_file=watermark_key_file, state_dir=serving_state_dir,
                                            release_dir=release_dir)
            c.task(deployed.set_display_name("triton-canary-deploy").set_caching_options(False), key=True,
                   storage=True)


def _train(c: _Cluster, dataset, base_model, resume_from, train_config, checkpoint_dir, release_dir, gpu_type,
           gpu_count, checkpoint_pvc):
    """train_zero3 with its retry policy; checkpoints on the PVC survive the retries."""
    kwargs = {"resume_from": resume_from} if resume_from is not None else {}
    trained = train_zero3(dataset=dataset, base_model=base_model, config=train_config,
                          checkpoint_dir=c.folder(CHECKPOINT_MOUNT, checkpoint_dir), release_dir=release_dir, **kwargs)
    trained.set_display_name("train-zero3").set_caching_options(False).set_retry(num_retries=2)
    return c.training(trained, gpu_type, gpu_count, checkpoint_pvc)


def _validate(c: _Cluster, raw, data_config, pii_policy, release_dir):
    """validate_dataset with the object-storage credentials; its `Output` is the data gate."""
    validated = validate_dataset(raw=raw, config=data_config, policy=pii_policy, release_dir=release_dir)
    return c.task(validated.set_display_name("validate-dataset").set_caching_options(False), storage=True)


def _recorder(c: _Cluster, release_dir):
    recorder = write_release_record(release_dir=release_dir)
    return c.task(recorder.set_display_name("release-record").set_caching_options(False))


def _import(uri, cls, name: str, root=None):
    task = dsl.importer(artifact_uri=uri, artifact_class=cls, reimport=False,
                        metadata={"merkle_root": root} if root is not None else None)
    return task.set_display_name(name)


def make_pipelines(cluster: bool) -> dict:
    @dsl.pipeline(name="llmops-release",
                  description="Validate SFT data, train with DeepSpeed ZeRO-3 and Merkle-verified checkpoints, "
                              "evaluate, verify the watermark, and roll out to Triton as a canary.")
    def release(dataset_uri: str, eval_dataset_uri: str, data_config: str = "", pii_policy: str = "balanced",
                base_model_size: str = "demo", train_config: str = "", checkpoint_dir: str = "",
                eval_config: str = "", watermark_config: str = "", watermark_key_file: str = "",
                deploy_config: str = "", serving_state_dir: str = "", release_dir: str = "",
                gpu_type: str = "nvidia.com/gpu", gpu_count: str = "1",
                checkpoint_pvc: str = "llmops-checkpoints", release_pvc: str = "llmops-release"):
        c = _Cluster(cluster, release_pvc)
        release_dir = c.folder(RELEASE_MOUNT, release_dir)
        with dsl.ExitHandler(_recorder(c, release_dir), name="release"):
            raw = _import(dataset_uri, dsl.Dataset, "import-dataset")
            eval_set = _import(eval_dataset_uri, dsl.Dataset, "import-eval-dataset")
            validated = _validate(c, raw.output, data_config, pii_policy, release_dir)
            with dsl.If(validated.outputs["Output"] == True, name="data-gate-passed"):  # noqa: E712
                base = build_base_model(dataset=validated.outputs["clean"], size=base_model_size,
                                        release_dir=release_dir)
                c.task(base.set_display_name("build-base-model").set_caching_options(False))
                trained = _train(c, validated.outputs["clean"], base.outputs["base_model"], None, train_config,
                                 checkpoint_dir, release_dir, gpu_type, gpu_count, checkpoint_pvc)
                _tail(c, trained.outputs["model"], eval_set.output, release_dir, eval_config, watermark_config,
                      watermark_key_file, deploy_config, serving_state_dir)

    @dsl.pipeline(name="llmops-continue-training",
                  description="Validate new data and continue training a model from a verified checkpoint, "
                              "then evaluate, verify the watermark and deploy.")
    def continue_training(dataset_uri: str, eval_dataset_uri: str, model_uri: str, model_root: str,
                          checkpoint_uri: str, data_config: str = "", pii_policy: str = "balanced",
                          train_config: str = "", checkpoint_dir: str = "", eval_config: str = "",
                          watermark_config: str = "", watermark_key_file: str = "", deploy_config: str = "",
                          serving_state_dir: str = "", release_dir: str = "", gpu_type: str = "nvidia.com/gpu",
                          gpu_count: str = "1", checkpoint_pvc: str = "llmops-checkpoints",
                          release_pvc: str = "llmops-release"):
        c = _Cluster(cluster, release_pvc)
        release_dir = c.folder(RELEASE_MOUNT, release_dir)
        with dsl.ExitHandler(_recorder(c, release_dir), name="release"):
            raw = _import(dataset_uri, dsl.Dataset, "import-dataset")
            eval_set = _import(eval_dataset_uri, dsl.Dataset, "import-eval-dataset")
            model = _import(model_uri, dsl.Model, "import-model", model_root)
            ckpt = _import(checkpoint_uri, dsl.Artifact, "import-checkpoints")
            validated = _validate(c, raw.output, data_config, pii_policy, release_dir)
            with dsl.If(validated.outputs["Output"] == True, name="data-gate-passed"):  # noqa: E712
                trained = _train(c, validated.outputs["clean"], model.output, ckpt.output, train_config,
                                 checkpoint_dir, release_dir, gpu_type, gpu_count, checkpoint_pvc)
                _tail(c, trained.outputs["model"], eval_set.output, release_dir, eval_config, watermark_config,
                      watermark_key_file, deploy_config, serving_state_dir)

    @dsl.pipeline(name="llmops-evaluate-deploy",
                  description="Evaluate an existing model (its Merkle root pinned), verify its watermark and "
                              "roll it out to Triton as a canary.")
    def evaluate_deploy(model_uri: str, model_root: str, eval_dataset_uri: str, eval_config: str = "",
                        watermark_config: str = "", watermark_key_file: str = "", deploy_config: str = "",
                        serving_state_dir: str = "", release_dir: str = "", release_pvc: str = "llmops-release"):
        c = _Cluster(cluster, release_pvc)
        release_dir = c.folder(RELEASE_MOUNT, release_dir)
        with dsl.ExitHandler(_recorder(c, release_dir), name="release"):
            model = _import(model_uri, dsl.Model, "import-model", model_root)
            eval_set = _import(eval_dataset_uri, dsl.Dataset, "import-eval-dataset")
            _tail(c, model.output, eval_set.output, release_dir, eval_config, watermark_config, watermark_key_file,
                  deploy_config, serving_state_dir)

    return {"release": release, "continue-training": continue_training, "evaluate-deploy": evaluate_deploy}


PIPELINES = make_pipelines(cluster=True)
LOCAL_PIPELINES = make_pipelines(cluster=False)
release_pipeline = PIPELINES["release"]
