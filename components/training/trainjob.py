"""Multi-node runs: a Kubeflow Trainer `TrainJob` on the `deepspeed-distributed` runtime
that starts the same per-rank worker as the in-pod path, instead of torchrun inside one
pod. That runtime runs the trainer's command on its launcher pod, which is also the
first host of the MPI hostfile it mounts (`runLauncherAsNode`), so the command is
`mpirun` over that hostfile with rank 0's address passed to every rank; the worker reads
its rank from Open MPI's variables (`worker.ranks_from_mpi`). Tests run this command with
real Open MPI across two network namespaces."""
from __future__ import annotations

from kfp_llmops.components import images
from kfp_llmops.components.common.k8s import namespace as resolve_namespace


HOSTFILE = "/etc/mpi/hostfile"          # where Trainer's MPI plugin mounts the hostfile
MASTER_PORT = 29500
# The launcher's environment the ranks get (mpirun -x NAME forwards it; the TrainJob sets them).
ENV = {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def mpi_command(spec_path: str, ranks: int, master_addr: str, hostfile: str = HOSTFILE, port: int = MASTER_PORT,
                python: str = "python", mca: dict[str, str] | None = None, forward: tuple[str, ...] = tuple(ENV),
                as_root: bool = False) -> list[str]:
    """`mpirun` starting the worker once per rank, one rank per slot of `hostfile`."""
    cmd = ["mpirun", "--hostfile", hostfile, "-np", str(ranks), "--map-by", "slot"]
    if as_root:
        cmd.append("--allow-run-as-root")
    for key, value in (mca or {}).items():
        cmd += ["--mca", key, value]
    cmd += ["-x", f"MASTER_ADDR={master_addr}", "-x", f"MASTER_PORT={port}"]
    for name in forward:
        cmd += ["-x", name]
    return cmd + [python, "-m", "kfp_llmops.components.training.worker", spec_path]


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
                "command": mpi_command(spec_path, num_nodes * procs_per_node, f"{name}-launcher-0-0.{name}"),
                "numNodes": num_nodes,
                "numProcPerNode": procs_per_node,
                "resourcesPerNode": resources,
                "env": [{"name": k, "value": v} for k, v in ENV.items()],
            },
            "runtimePatches": [{"manager": "kfp-llmops", "trainingRuntimeSpec": {"template": {"spec": {
                "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                    "serviceAccountName": service_account}}}}}]}}}}],
        },
    }
