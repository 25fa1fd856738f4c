"""Multi-node runs: a Kubeflow Trainer `TrainJob` on this project's TrainingRuntime (Trainer's
`deepspeed-distributed` with the train image on every node) that starts the same per-rank
worker as the in-pod path, instead of torchrun inside one pod. The runtime runs the
trainer's command on its launcher pod, which is also a host of the MPI hostfile it mounts
(`runLauncherAsNode`), and sshd on the other nodes; so the command is `mpirun` over that
hostfile with rank 0's address passed to every rank, and the worker reads its rank from
Open MPI's variables (`worker.ranks_from_mpi`). `trainjob_run` creates and follows the
job. Tests run this command with real Open MPI across two network namespaces, and across
two containers of the train image over ssh."""

from __future__ import annotations

from kfp_llmops.components import images
from kfp_llmops.components.common.k8s import namespace as resolve_namespace

from .config import MultiNodeSettings

HOSTFILE = "/etc/mpi/hostfile"  # where Trainer's MPI plugin mounts the hostfile
MASTER_PORT = 29500
SSH_PORT = 2222  # the nodes' sshd (the train image's ssh_config says so too)
RUNTIME = MultiNodeSettings.model_fields["runtime"].default
RUN_VOLUME = "llmops-run"
PART_OF = {"app.kubernetes.io/part-of": "kfp-llmops"}
LABELS = {**PART_OF, "kfp-llmops/stage": "train_zero3"}
# The launcher's environment the ranks get (mpirun -x NAME forwards it; the TrainJob sets them).
# TORCH_EXTENSIONS_DIR: where the train image built DeepSpeed's CPU op (images/Dockerfile.train);
# a rank started through sshd does not get the image's ENV, and would try to build it.
ENV = {
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TORCH_EXTENSIONS_DIR": "/opt/torch_extensions",
}


def mpi_command(
    spec_path: str,
    ranks: int,
    master_addr: str,
    hostfile: str = HOSTFILE,
    port: int = MASTER_PORT,
    python: str = "python",
    mca: dict[str, str] | None = None,
    forward: tuple[str, ...] = tuple(ENV),
    as_root: bool = False,
) -> list[str]:
    """`mpirun` starting the worker once per rank, one rank per slot of `hostfile`."""
    cmd = ["mpirun", "--hostfile", hostfile, "-np", str(ranks), "--map-by", "slot"]
    if as_root:
        cmd.append("--allow-run-as-root")
    for key, value in (mca or {}).items():
        cmd += ["--mca", key, value]
    # PATH too: a rank started through sshd gets sshd's PATH, not the image's.
    cmd += ["-x", f"MASTER_ADDR={master_addr}", "-x", f"MASTER_PORT={port}", "-x", "PATH"]
    for name in forward:
        cmd += ["-x", name]
    return cmd + [python, "-m", "kfp_llmops.components.training.worker", spec_path]


def first_host(name: str) -> str:
    """Rank 0's pod: the launcher. It is a host of the hostfile (`runLauncherAsNode`), and
    Open MPI 4 (the train image's) maps from mpirun's own node first, whatever the
    hostfile's order (Trainer writes the nodes first). The worker checks it on rank 0."""
    return f"{name}-launcher-0-0.{name}"


def render_trainjob(
    name: str,
    spec_path: str,
    settings: MultiNodeSettings,
    procs_per_node: int,
    env: dict[str, str] | None = None,
    secret_env: dict[str, tuple[str, str]] | None = None,
) -> dict:
    """The TrainJob that runs the ranks of the run spec at `spec_path` (on `settings.claim`,
    which every node mounts at `settings.mount_path`, as the task does).

    `env` reaches every rank (the TrainJob's env on the launcher, then `mpirun -x`);
    `secret_env` maps a name to (Secret, key), so a secret never enters the spec. Pod
    settings go through `runtimePatches` (Trainer v2.3 patches env, volume mounts and the
    pod's service account and volumes there, not the image: the runtime names it)."""
    s = settings
    env = {**ENV, **(env or {})}
    secret_env = secret_env or {}
    resources = {"limits": {"cpu": s.cpu, "memory": s.memory}}
    if s.gpus_per_node:
        resources["limits"]["nvidia.com/gpu"] = str(s.gpus_per_node)
    pod = {
        "serviceAccountName": s.service_account,
        "volumes": [{"name": RUN_VOLUME, "persistentVolumeClaim": {"claimName": s.claim}}],
        "containers": [{"name": "node", "volumeMounts": [{"name": RUN_VOLUME, "mountPath": s.mount_path}]}],
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": resolve_namespace(s.namespace), "labels": dict(LABELS)},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": s.runtime},
            "activeDeadlineSeconds": s.timeout_s,
            "trainer": {
                "image": s.image or images.TRAIN,
                "command": mpi_command(
                    spec_path,
                    s.nodes * procs_per_node,
                    first_host(name),
                    forward=tuple(sorted(env)) + tuple(sorted(secret_env)),
                ),
                "numNodes": s.nodes,
                "numProcPerNode": procs_per_node,
                "resourcesPerNode": resources,
                "env": [{"name": k, "value": v} for k, v in sorted(env.items())]
                + [
                    {"name": k, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
                    for k, (secret, key) in sorted(secret_env.items())
                ],
            },
            "runtimePatches": [
                {
                    "manager": "kfp-llmops",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {"name": job, "template": {"spec": {"template": {"spec": pod}}}}
                                    for job in ("node", "launcher")
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }


def render_runtime(name: str = RUNTIME, image: str | None = None) -> dict:
    """The TrainingRuntime the TrainJobs use, in the namespace they run in: Trainer's
    `deepspeed-distributed` (Open MPI, the launcher also a node, sshd on the other nodes)
    with this release's train image on every node (a TrainJob can set only the launcher's),
    running as the image's user, whose home holds the SSH keys."""
    image = image or images.TRAIN
    home = f"/home/{images.USER}"
    security = {"runAsUser": images.UID, "runAsGroup": images.UID}

    def job(container: dict, labels: dict | None = None) -> dict:
        out = {
            "spec": {
                "template": {
                    "spec": {
                        "securityContext": {"fsGroup": images.UID},
                        "containers": [{"name": "node", "image": image, "securityContext": security, **container}],
                    }
                }
            }
        }
        if labels:
            out["metadata"] = {"labels": labels}
        return out

    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "labels": {**PART_OF, "trainer.kubeflow.org/framework": "deepspeed"}},
        "spec": {
            "mlPolicy": {
                "numNodes": 1,
                "mpi": {
                    "numProcPerNode": 1,
                    "mpiImplementation": "OpenMPI",
                    "sshAuthMountPath": f"{home}/.ssh",
                    "runLauncherAsNode": True,
                },
            },
            "template": {
                "spec": {
                    "network": {"publishNotReadyAddresses": True},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": job(
                                {
                                    "command": ["/usr/sbin/sshd"],
                                    "args": ["-De", "-f", f"{home}/.sshd_config"],
                                    "readinessProbe": {"tcpSocket": {"port": SSH_PORT}, "initialDelaySeconds": 5},
                                }
                            ),
                        },
                        {
                            "name": "launcher",
                            "dependsOn": [{"name": "node", "status": "Ready"}],
                            "template": job({}, {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}),
                        },
                    ],
                }
            },
        },
    }
