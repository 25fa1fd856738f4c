"""validate_dataset on a Ray cluster, as on Kubernetes with KubeRay: the task copies the
input to the claim and creates its RayJob through the API; the stand-in for the API
server runs the job as KubeRay lays it out, with real containers of the data image on
one docker network: the head pod (`ray start --head`), a worker pod joining it, and the
submitter running the job's entrypoint against the cluster (RAY_ADDRESS, as KubeRay's
job supervisor sets it). The task follows the job to its end, reads the outputs back
from the claim and verifies them; they are the single process's, byte for byte."""

import importlib
import json
import uuid

import pytest

from helpers import docker, fs_group
from job_standin import ProcessRun
from kfp_llmops.components import images
from kfp_llmops.components.data_validation import rayjob
from kfp_llmops.components.data_validation.config import DataValidationConfig
from kfp_llmops.components.data_validation.outputs import OutputPaths
from kfp_llmops.pipelines import containers
from kuberay_standin import KubeRayStandIn
from tests.benchmarks.corpus import write_corpus

engines = importlib.import_module("kfp_llmops.components.data_validation.engines")
pytestmark = pytest.mark.timeout(600)


class DockerRay(ProcessRun):
    """A RayJob's pods as containers: the head, its workers, then the submitter."""

    def __init__(self, job: dict, claim: str):
        super().__init__()
        self.name, tag = job["metadata"]["name"], uuid.uuid4().hex[:6]
        self.network = f"llmops-ray-{tag}"
        docker("network", "create", self.network)
        cluster = job["spec"]["rayClusterSpec"]
        fs_group(claim, cluster["headGroupSpec"]["template"]["spec"]["securityContext"]["fsGroup"])
        self.containers = {}

        def pod(role: str, template: dict, command: list[str]) -> None:
            spec = template["spec"]
            (container,) = spec["containers"]
            mount = container["volumeMounts"][0]["mountPath"]
            cid = docker(
                "run",
                "-d",
                "--name",
                f"{self.name}-{role}-{tag}",
                "--network",
                self.network,
                "--hostname",
                role,
                "--network-alias",
                role,
                "--shm-size",
                "256m",
                "--cpus",
                "1",
                "--group-add",
                str(spec["securityContext"]["fsGroup"]),
                "-v",
                f"{claim}:{mount}",
                container["image"],
                *command,
            ).stdout.strip()
            self.containers[role] = cid

        common = ["--num-cpus=1", "--disable-usage-stats", "--block"]
        pod(
            "head",
            cluster["headGroupSpec"]["template"],
            ["ray", "start", "--head", "--port=6379", "--include-dashboard=false", *common],
        )
        for group in cluster.get("workerGroupSpecs", []):
            for i in range(group["replicas"]):
                pod(f"worker-{i}", group["template"], ["ray", "start", "--address=head:6379", *common])
        want = 1 + sum(g["replicas"] for g in cluster.get("workerGroupSpecs", []))
        probe = (
            "import ray, time\nfor _ in range(120):\n    try:\n"
            "        ray.init(address='head:6379', logging_level='ERROR')\n        break\n"
            "    except ConnectionError:\n        time.sleep(0.5)\n"
            f"for _ in range(120):\n    if len([n for n in ray.nodes() if n['Alive']]) >= {want}: break\n"
            "    time.sleep(0.5)\nelse: raise SystemExit('nodes missing')"
        )
        docker("exec", self.containers["head"], "python", "-c", probe)
        # The submitter: the entrypoint against the cluster, its output the job's log.
        self.follow(
            [
                "docker",
                "exec",
                "-e",
                "RAY_ADDRESS=head:6379",
                self.containers["head"],
                "sh",
                "-c",
                job["spec"]["entrypoint"],
            ]
        )

    def pods(self):
        code = self.proc.poll()
        return [(f"{self.name}-submitter", "submitter", code, "Completed" if code == 0 else "Error")] + [
            (f"{self.name}-{role}", role, None, "") for role in self.containers
        ]

    def stop(self):
        super().stop()
        for cid in self.containers.values():
            docker("rm", "-f", cid, check=False)
        docker("network", "rm", self.network, check=False)


@pytest.fixture(scope="module", autouse=True)
def runnable():
    containers.docker_ready()
    containers.check_runnable(["data"])


def test_validate_runs_as_a_rayjob_on_a_head_and_a_worker_of_the_data_image(tmp_path):
    corpus = tmp_path / "in.jsonl"
    write_corpus(str(corpus), 2_000_000, seed=12)
    claim = tmp_path / "claim"
    claim.mkdir()
    runs = []

    def start(job):
        runs.append(DockerRay(job, str(claim)))
        return runs[-1]

    api = KubeRayStandIn(start)
    cfg = DataValidationConfig()
    cfg.gate.max_reject_rate = 1.0
    cfg.pii.names.enabled = False
    cfg.engine = "ray"
    cfg.ray.workers = 7  # a local Ray would cut 7 partitions; the cluster has 2 CPUs
    cfg.ray.kuberay.enabled = True
    cfg.ray.kuberay.workers = 1
    cfg.ray.kuberay.mount_path = str(claim)
    cfg.ray.kuberay.namespace = "team-a"
    cfg.ray.kuberay.image = images.image("data", pinned=False)
    cfg.ray.kuberay.poll_s = 1
    out = OutputPaths.in_dir(str(tmp_path / "out"))
    try:
        result = rayjob.validate_on_kuberay(str(corpus), out, cfg, None, apis=(api, api), log=print)
    finally:
        for run in runs:
            run.stop()
    name = api.created[0]["metadata"]["name"]
    log = (claim / "llmops-validate" / name / "job.log").read_text()
    assert "on 2 node(s)" in log and "2 partition(s)" in log, log[-3000:]  # the cluster's, not a local Ray
    local_cfg = DataValidationConfig()
    local_cfg.gate.max_reject_rate = 1.0
    local_cfg.pii.names.enabled = False
    local = OutputPaths.in_dir(str(tmp_path / "local"))
    want = engines.validate(str(corpus), local, local_cfg, show_progress=False)
    for a, b in ((out.clean, local.clean), (out.quarantine, local.quarantine), (out.stats, local.stats)):
        assert open(a, "rb").read() == open(b, "rb").read()
    assert result.metrics["merkle_root"] == want.metrics["merkle_root"]
    assert json.loads(open(out.metrics).read())["rows_in"] == want.metrics["rows_in"]
    assert not api.jobs  # deleted once read back
