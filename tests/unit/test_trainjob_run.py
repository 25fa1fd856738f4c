"""train_zero3's multi-node path up to the API boundary: the TrainJob it creates (strictly
validated by the stand-in), how it follows one (status conditions, the launcher's log
copied once, progress shown), how it ends (Complete; Failed with the job's own reason,
the pods' reasons and the ranks' last error; a deadline), and how a retried task finds
its job again. The job really running on two nodes is tests/containers/test_trainjob.py."""

import copy

import jsonschema
import pytest

from kfp_llmops.components.common.errors import InputError, LlmopsError
from kfp_llmops.components.training.config import MultiNodeSettings, TrainConfig
from kfp_llmops.components.training.launch import RunInputs
from kfp_llmops.components.training.trainjob import first_host, render_trainjob
from kfp_llmops.components.training.trainjob_run import TrainJob, train_multinode
from trainer_standin import Run, TrainerStandIn

SETTINGS = MultiNodeSettings(nodes=2, namespace="team-a", poll_s=0.01)


class Scripted(Run):
    """Runs for `polls` status reads, then exits with `code`; says `lines` meanwhile."""

    def __init__(self, code=0, polls=3, lines=(), pods_reason="Completed"):
        super().__init__()
        self.code, self.polls, self.lines, self.reason = code, polls, list(lines), pods_reason
        self.stopped = False

    def state(self):
        if self.lines:
            self.say(self.lines.pop(0))
        self.polls -= 1
        return None if self.polls > 0 else self.code

    def pods(self):
        ended = self.polls <= 0
        return [
            ("job-node-0-0", "node", self.code if ended else None, self.reason),
            ("job-launcher-0-0", "launcher", self.code if ended else None, self.reason),
        ]

    def stop(self):
        self.stopped = True


def _job(api, tmp_path, name="llmops-train-0123456789"):
    manifest = render_trainjob(name, "/mnt/checkpoints/r.run/run_spec.json", SETTINGS, 1)
    return TrainJob(
        api, api, manifest, str(tmp_path / "ranks.log"), poll_s=0.0, log=lambda *_: None, sleep=lambda _: None
    )


def test_a_job_is_created_followed_and_its_log_copied_once(tmp_path, capsys):
    lines = ["[train] 2 ranks on 2 host(s)", "deepspeed chatter", "train: step 10/20", "[train] done"]
    api = TrainerStandIn(lambda body: Scripted(0, polls=6, lines=lines))
    job = _job(api, tmp_path)
    assert job.run(60)["status"]["conditions"][0]["type"] == "Complete"
    assert len(api.created) == 1 and api.created[0]["metadata"]["namespace"] == "team-a"
    assert (tmp_path / "ranks.log").read_text().splitlines() == lines  # each line once, in order
    shown = capsys.readouterr().err
    assert "train: step 10/20" in shown and "chatter" not in shown


def test_a_failed_job_says_its_own_reason_the_pods_and_the_ranks_error(tmp_path):
    lines = [
        "[train] 2 ranks",
        "[rank1]: RuntimeError: CUDA out of memory",
        "mpirun detected that one or more processes exited with non-zero status",
    ]
    api = TrainerStandIn(lambda body: Scripted(137, lines=lines, pods_reason="OOMKilled"))
    with pytest.raises(LlmopsError) as err:
        _job(api, tmp_path).run(60)
    text = str(err.value)
    assert "\n" not in text
    assert "failed: FailedJobs: jobset failed due to one or more job failures" in text
    assert "job-node-0-0: OOMKilled (exit 137)" in text
    assert "last log line: RuntimeError: CUDA out of memory" in text
    assert "resumes from the newest verified checkpoint" in text


def test_a_retried_task_follows_its_running_job_or_reads_a_complete_one(tmp_path):
    api = TrainerStandIn(lambda body: Scripted(0, polls=4))
    _job(api, tmp_path).submit()
    assert _job(api, tmp_path).submit() == "running"  # the first task's pod died; its job runs on
    assert _job(api, tmp_path).run(60) and len(api.created) == 1
    assert _job(api, tmp_path).submit() == "complete" and len(api.created) == 1


def test_a_retried_task_replaces_a_failed_job(tmp_path):
    runs = []
    api = TrainerStandIn(lambda body: runs.append(Scripted(1 if not runs else 0, polls=1)) or runs[-1])
    with pytest.raises(LlmopsError, match="FailedJobs"):
        _job(api, tmp_path).run(60)
    assert not runs[0].stopped  # a failed job stays for inspection
    job = _job(api, tmp_path)
    assert job.submit() == "recreated" and runs[0].stopped and len(api.created) == 2
    assert job.run(60)  # follows the new one


def test_refusals_and_deadlines_are_one_line_errors(tmp_path):
    api = TrainerStandIn(lambda body: Scripted(0), runtimes=())
    with pytest.raises(
        LlmopsError,
        match=r"TrainJob team-a/llmops-train-0123456789: refused: 422 .*"
        r"TrainingRuntime kfp-llmops-deepspeed not found",
    ):
        _job(api, tmp_path).run(60)
    api = TrainerStandIn(lambda body: Scripted(0, polls=10**6))
    with pytest.raises(LlmopsError, match="still runs after 0 s; it is left running"):
        _job(api, tmp_path).run(0)


def test_the_standin_refuses_what_a_strict_api_server_refuses(tmp_path):
    api = TrainerStandIn(lambda body: Scripted(0))
    job = _job(api, tmp_path)
    bad = copy.deepcopy(job.manifest)
    bad["spec"]["trainer"]["image_pull_policy"] = "Always"  # not a field of the CRD
    with pytest.raises(jsonschema.ValidationError, match="image_pull_policy"):
        api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "team-a", "trainjobs", bad)


def test_the_job_passes_every_setting_to_the_ranks_and_keeps_secrets_out(tmp_path):
    manifest = render_trainjob(
        "j",
        "/mnt/checkpoints/r.run/run_spec.json",
        SETTINGS,
        4,
        {"OMP_NUM_THREADS": "2"},
        {"LLMOPS_WATERMARK_KEY": ("llmops-watermark-key", "key")},
    )
    trainer = manifest["spec"]["trainer"]
    command = trainer["command"]
    forwarded = {command[i + 1] for i, a in enumerate(command) if a == "-x"}
    assert {e["name"] for e in trainer["env"]} | {
        "PATH",
        f"MASTER_ADDR={first_host('j')}",
        "MASTER_PORT=29500",
    } == forwarded
    secret = next(e for e in trainer["env"] if e["name"] == "LLMOPS_WATERMARK_KEY")
    assert "value" not in secret and secret["valueFrom"]["secretKeyRef"]["name"] == "llmops-watermark-key"
    assert command[command.index("-np") + 1] == "8" and trainer["numProcPerNode"] == 4
    for patch in manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
        pod = patch["template"]["spec"]["template"]["spec"]
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "llmops-checkpoints"
        assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == "/mnt/checkpoints"


def test_multinode_settings_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(InputError, match="world_size 3 is not a multiple of multinode.nodes 2"):
        TrainConfig.load(None, {"world_size": 3, "multinode": {"nodes": 2}})
    cfg = TrainConfig(world_size=2, multinode={"nodes": 2, "mount_path": str(tmp_path / "claim")})
    with pytest.raises(
        InputError,
        match=r"multinode.mount_path: checkpoint_dir .*/elsewhere is not under "
        r".*/claim, where every node mounts the claim 'llmops-checkpoints'",
    ):
        train_multinode(RunInputs("data.jsonl", "model", checkpoint_dir=str(tmp_path / "elsewhere")), cfg)


def test_ranks_come_from_open_mpi_and_rank_0_must_be_where_master_addr_points():
    from kfp_llmops.components.training.worker import ranks_from_mpi

    mpi = {
        "OMPI_COMM_WORLD_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
    }
    env = dict(mpi)
    ranks_from_mpi(env)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["MASTER_PORT"]) == (
        "0",
        "4",
        "0",
        "2",
        "29500",
    )
    env = dict(mpi, MASTER_ADDR="192.0.2.7")  # TEST-NET-1: never this machine
    with pytest.raises(SystemExit, match=r"rank 0 runs on .*, not on MASTER_ADDR 192.0.2.7"):
        ranks_from_mpi(env)
    env = dict(mpi, MASTER_ADDR="192.0.2.7", OMPI_COMM_WORLD_RANK="1")
    ranks_from_mpi(env)  # only rank 0 listens there
    assert env["RANK"] == "1"
    env = dict(mpi, RANK="3")  # torchrun's own variables win
    ranks_from_mpi(env)
    assert "WORLD_SIZE" not in env


def test_the_ranks_own_error_is_found_under_mpiruns_summary():
    from kfp_llmops.components.training.launch import last_error

    log = """worker: rank 0 runs on job-launcher-0-0, not on MASTER_ADDR job-node-0-0.job: pass the host
DeepSpeed deepspeed.ops.comm.deepspeed_shm_comm_op built successfully
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[12432,1],0]
  Exit code:    1
--------------------------------------------------------------------------
"""
    assert last_error(log).startswith("worker: rank 0 runs on job-launcher-0-0")
    assert (
        last_error("[rank1]: Traceback\n[rank1]: ValueError: bad\nE1201 torchrun: ChildFailedError")
        == "ValueError: bad"
    )


def test_a_multinode_run_has_one_rank_per_gpu_and_ignores_the_tasks_own_gpus():
    assert TrainConfig(multinode={"nodes": 4, "gpus_per_node": 8}).world_size == 32
    with pytest.raises(InputError, match=r"world_size 16 is not multinode.nodes x gpus_per_node \(4 x 8\)"):
        TrainConfig.load(None, {"world_size": 16, "multinode": {"nodes": 4, "gpus_per_node": 8}})
    assert TrainConfig(world_size=6, multinode={"nodes": 3}).world_size == 6  # CPU ranks: as set
