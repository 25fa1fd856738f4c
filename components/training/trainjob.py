"""Multi-node runs: a Kubeflow Trainer `TrainJob` on the `deepspeed-distributed` runtime
that starts the same per-rank worker as the in-pod path (DeepSpeed finds its ranks
through MPI), instead of torchrun inside one pod."""
from __future__ import annotations

from kfp_llmops.components import images
from kfp_llmops.components.common.k8s import namespace as resolve_namespace


def render_trainjob(name: str, spec_path: str, num_nodes: int = 2, procs_per_node: int = 8,
                    gpus_per_node: int = 8, namespace: str = "", image: str | None = None,
                    cpu: str = "16", memory: str = "128Gi", service_account: str = "llmops-train") -> dict:
    """`spec_path` is the run spec (`launch.train` writes one) on storage every node mounts.

    The pods' service account goes through `runtimePatches` (Trainer v2.3's field for
    per-job pod settings; `podTemplateOverrides` does not exist there)."""
    resources = {"limits": {"cpu": cpu, "memory": memory}}
    if gpus_per_node:
        resources["limits"]["nvidia.com/gpu"] = str(gpus_per_node)
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": resolve_namespace(namespace),
                     "labels": {"app.kubernetes.io/part-of": "kfp-llmops", "kfp-llmops/stage": "train_zero3"}},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                           "name": "deepspeed-distributed"},
            "trainer": {
                "image": image or images.TRAIN,
                "command": ["python", "-m", "kfp_llmops.components.training.worker", spec_path],
                "numNodes": num_nodes,
                "numProcPerNode": procs_per_node,
                "resourcesPerNode": resources,
                "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "HF_HUB_OFFLINE", "value": "1"}],
            },
            "runtimePatches": [{"manager": "kfp-llmops", "trainingRuntimeSpec": {"template": {"spec": {
                "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                    "serviceAccountName": service_account}}}}}]}}}}],
        },
    }
