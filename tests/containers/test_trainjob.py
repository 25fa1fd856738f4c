"""train_zero3 on two nodes, as on a cluster: `train_multinode` prepares the run on the
claim and creates its TrainJob through the API; the stand-in for the API server runs the
job as Kubeflow Trainer's MPI policy and this project's TrainingRuntime lay it out, with
real containers of the train image on one docker network: the node pod runs the
runtime's sshd, the launcher pod runs the TrainJob's own command (`mpirun` over the
hostfile, the worker on both nodes through ssh), each with the env, SSH keys, hostfile
and claim that Trainer mounts. The task follows the job to its end, then reads the
result and the exported model back from the claim and verifies them."""

import json
import os
import shutil
import subprocess
import uuid

import pytest

from helpers import docker as _docker
from helpers import fs_group, losses, training_inputs
from kfp_llmops.components import images
from kfp_llmops.components.common import integrity
from kfp_llmops.components.common.errors import LlmopsError
from kfp_llmops.components.common.k8s_job import epoch
from kfp_llmops.components.training.config import TrainConfig
from kfp_llmops.components.training.launch import RunInputs
from kfp_llmops.components.training.trainjob import render_runtime
from kfp_llmops.components.training.trainjob_run import train_multinode
from kfp_llmops.pipelines import containers
from trainer_standin import Run, TrainerStandIn

pytestmark = pytest.mark.timeout(900)
RUN = dict(steps=8, checkpoint_interval=4, micro_batch=4, seq_len=48, chunk_size=4096, world_size=2)
# What Trainer's MPI plugin adds to every node's container (pkg/constants, OpenMPI).
MPI_ENV = {
    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
}


class DockerRun(Run):
    """A TrainJob's pods as containers: `numNodes - 1` node pods, then the launcher."""

    def __init__(self, job: dict, runtime: dict, folder, secrets: dict):
        super().__init__()
        self.name, tag = job["metadata"]["name"], uuid.uuid4().hex[:6]
        trainer, spec = job["spec"]["trainer"], runtime["spec"]
        self.network = f"llmops-{tag}"
        _docker("network", "create", self.network)
        patches = {
            p["name"]: p["template"]["spec"]["template"]["spec"]
            for p in job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        }
        # Trainer's Secret of SSH keys and ConfigMap of hosts, mounted as it mounts them.
        keys = folder / f"ssh-{tag}"
        keys.mkdir()
        subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-N", "", "-f", str(keys / "id_rsa")], check=True)
        shutil.copy(keys / "id_rsa.pub", keys / "authorized_keys")
        for f, mode in (("id_rsa", 0o640), ("id_rsa.pub", 0o644), ("authorized_keys", 0o644)):
            os.chown(keys / f, 0, images.UID)
            os.chmod(keys / f, mode)
        nodes = [f"{self.name}-node-0-{i}" for i in range(trainer["numNodes"] - 1)] + [f"{self.name}-launcher-0-0"]
        hostfile = folder / f"hostfile-{tag}"
        hostfile.write_text("".join(f"{pod}.{self.name} slots={trainer['numProcPerNode']}\n" for pod in nodes))
        env = {**MPI_ENV, "OMPI_MCA_orte_set_default_slots": str(trainer["numProcPerNode"])}
        for item in trainer["env"]:
            ref = item.get("valueFrom", {}).get("secretKeyRef")
            env[item["name"]] = secrets[ref["name"]][ref["key"]] if ref else item["value"]
        self.containers = {}
        for pod in nodes:
            rjob = "launcher" if "-launcher-" in pod else "node"
            (template,) = [
                r["template"]["spec"]["template"]["spec"]
                for r in spec["template"]["spec"]["replicatedJobs"]
                if r["name"] == rjob
            ]
            (container,) = template["containers"]
            claim = patches[rjob]["containers"][0]["volumeMounts"][0]["mountPath"]
            fs_group(claim, template["securityContext"]["fsGroup"])
            user = container["securityContext"]
            args = [
                "run",
                "-d",
                "--name",
                f"{pod}-{tag}",
                "--network",
                self.network,
                "--hostname",
                pod,
                "--network-alias",
                f"{pod}.{self.name}",
                "--user",
                f"{user['runAsUser']}:{user['runAsGroup']}",
                "--group-add",
                str(template["securityContext"]["fsGroup"]),
                "-v",
                f"{keys}:{spec['mlPolicy']['mpi']['sshAuthMountPath']}:ro",
                "-v",
                f"{hostfile}:/etc/mpi/hostfile:ro",
                "-v",
                f"{claim}:{claim}",
            ]
            for k, v in env.items():
                args += ["-e", f"{k}={v}"]
            image = trainer["image"] if rjob == "launcher" else container["image"]
            command = trainer["command"] if rjob == "launcher" else container["command"] + container["args"]
            if rjob == "launcher":  # JobSet's dependsOn: the nodes are Ready first
                for other in self.containers.values():
                    _ready(other, container_port=2222)
            self.containers[pod] = _docker(*args, "--entrypoint", command[0], image, *command[1:]).stdout.strip()
        self.launcher = self.containers[nodes[-1]]

    def _inspect(self, cid: str) -> dict:
        return json.loads(_docker("inspect", cid).stdout)[0]["State"]

    def state(self):
        out = _docker("logs", "--timestamps", self.launcher, check=False)
        lines = []
        for line in (out.stdout + out.stderr).splitlines():
            stamp, _, text = line.partition(" ")
            lines.append((epoch(stamp) or 0.0, text))
        with self.lock:
            self.log = sorted(lines, key=lambda x: x[0])
        state = self._inspect(self.launcher)
        return None if state["Running"] else state["ExitCode"]

    def pods(self):
        out = []
        for pod, cid in self.containers.items():
            state = self._inspect(cid)
            code = None if state["Running"] else state["ExitCode"]
            out.append(
                (
                    pod,
                    "launcher" if "-launcher-" in pod else "node",
                    code,
                    "OOMKilled" if state["OOMKilled"] else ("Completed" if code == 0 else "Error"),
                )
            )
        return out

    def stop(self):
        for cid in self.containers.values():
            _docker("rm", "-f", cid, check=False)
        _docker("network", "rm", self.network, check=False)


def _ready(cid: str, container_port: int) -> None:
    probe = (
        "import socket,time\nfor _ in range(100):\n  try:\n"
        f"    socket.create_connection(('127.0.0.1',{container_port}),1); break\n"
        "  except OSError: time.sleep(0.2)\nelse: raise SystemExit(1)"
    )
    _docker("exec", cid, "python", "-c", probe)


@pytest.fixture(scope="module", autouse=True)
def runnable():
    containers.docker_ready()
    containers.check_runnable(["train"])


@pytest.fixture
def cluster(tmp_path):
    runs = []

    def start(job):
        runs.append(DockerRun(job, render_runtime(), tmp_path, {"llmops-watermark-key": {"key": "0x5eed"}}))
        return runs[-1]

    yield TrainerStandIn(start, secrets={"llmops-watermark-key": {"key": "0x5eed"}})
    for run in runs:
        run.stop()


def _artifact(cls, path, **metadata):
    out = cls(name=os.path.basename(str(path)))
    out.path = str(path)
    out.metadata.update(metadata)
    return out


def test_the_train_task_runs_two_nodes_of_the_train_image_through_a_trainjob(tmp_path, cluster, monkeypatch):
    """train_zero3's own entry (`run_component`, as the KFP component calls it)."""
    from kfp.dsl import HTML, Artifact, Dataset, Metrics, Model

    from kfp_llmops.components.training import run_component, trainjob_run

    made = training_inputs(tmp_path / "in")
    claim = tmp_path / "claim"
    claim.mkdir()
    monkeypatch.setattr(trainjob_run, "clients", lambda: (cluster, cluster))
    config = json.dumps(
        dict(
            RUN, multinode={"nodes": 2, "mount_path": str(claim), "namespace": "team-a", "poll_s": 1, "timeout_s": 600}
        )
    )
    out = tmp_path / "outputs"
    model = _artifact(Model, out / "model")
    dataset = _artifact(Dataset, made["clean"], merkle_root=integrity.verify("dataset", made["clean"]))
    base = _artifact(Model, made["base"], merkle_root=integrity.verify("model", made["base"]))
    outputs = [
        _artifact(cls, out / name)
        for cls, name in (
            (Artifact, "checkpoints"),
            (Metrics, "metrics"),
            (HTML, "report.html"),
            (Artifact, "train_log.jsonl"),
        )
    ]
    os.makedirs(out)
    checkpoints, metrics, report, train_log = outputs
    root = run_component(
        dataset=dataset,
        base_model=base,
        config=config,
        resume_from=None,
        checkpoint_dir=str(claim / "run-1"),
        model=model,
        checkpoints=checkpoints,
        metrics=metrics,
        report=report,
        train_log=train_log,
        gpus="8",
    ).value
    assert root == model.metadata["merkle_root"]
    assert integrity.verify_sealed(model.path, root) == root  # the task's output, verified
    assert model.metadata["base_model_root"] == base.metadata["merkle_root"]
    log = (claim / "run-1.run" / "ranks.log").read_text()
    name = cluster.created[0]["metadata"]["name"]
    assert f"[train] 2 ranks on 2 host(s): {name}-launcher-0-0, {name}-node-0-0" in log, log[-3000:]
    assert cluster.created[0]["spec"]["trainer"]["numProcPerNode"] == 1  # `gpus` is this pod's, not the job's
    assert [s for s, _ in losses(str(claim / "run-1.run"))] == list(range(1, RUN["steps"] + 1))
    assert integrity.list_tags(str(claim / "run-1"))  # checkpoints stay on the claim
    assert not cluster.jobs  # deleted once it succeeded


def test_a_job_whose_ranks_fail_fails_the_task_with_the_reason(tmp_path, cluster):
    made = training_inputs(tmp_path / "in")
    claim = tmp_path / "claim"
    claim.mkdir()
    # A DeepSpeed setting only the ranks check: every rank fails at initialize, the
    # launcher exits non-zero, the job fails.
    cfg = TrainConfig(
        **RUN,
        deepspeed={"zero_optimization": {"stage": 9}},
        multinode={"nodes": 2, "mount_path": str(claim), "namespace": "team-a", "poll_s": 1, "timeout_s": 600},
    )
    with pytest.raises(LlmopsError) as err:
        train_multinode(
            RunInputs(
                made["clean"], made["base"], checkpoint_dir=str(claim / "run-2"), model_dir=str(tmp_path / "model")
            ),
            cfg,
            apis=(cluster, cluster),
            log=print,
        )
    text = str(err.value)
    assert "failed: FailedJobs: jobset failed due to one or more job failures" in text and "\n" not in text
    assert "-launcher-0-0: Error (exit" in text and "resumes from the newest verified checkpoint" in text
    assert "DeepSpeedZeroConfig" in text, text  # the ranks' own error
    assert len(cluster.jobs) == 1  # kept for inspection
