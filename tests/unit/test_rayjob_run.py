"""validate_dataset on a cluster up to the API boundary: the RayJob it submits (strictly
validated by the stand-in), the job's entrypoint really run (a process here), the
outputs read back and verified, a failed job told with its own reason
and its last error, a corrupted output refused, and a retried task finding its job."""

import importlib
import json
import os
import sys

import pytest

from job_standin import ProcessRun, Run
from kfp_llmops.components.common.errors import InputError, LlmopsError
from kfp_llmops.components.data_validation import rayjob
from kfp_llmops.components.data_validation.config import DataValidationConfig
from kfp_llmops.components.data_validation.outputs import OutputPaths
from kuberay_standin import KubeRayStandIn
from tests.benchmarks.corpus import write_corpus

engines = importlib.import_module("kfp_llmops.components.data_validation.engines")


def _engine_here(spec_path: str) -> None:
    """The job's spec run by the single process here: the engine on a Ray cluster is
    tests/containers/test_rayjob.py's (a head and a worker of the data image)."""
    spec = json.load(open(spec_path))
    spec["config"]["engine"] = "local"
    json.dump(spec, open(spec_path, "w"))


class Entrypoint(ProcessRun):
    """The RayJob's entrypoint as a process here (the submitter's log is its output)."""

    def __init__(self, job: dict):
        super().__init__()
        self.name = job["metadata"]["name"]
        command = job["spec"]["entrypoint"].split()
        assert command[0] == "python"
        _engine_here(command[-1])
        self.follow([sys.executable, *command[1:]], env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})

    def pods(self):
        code = self.proc.poll()
        return [
            (f"{self.name}-submitter-x", "submitter", code, "Completed" if code == 0 else "Error"),
            (f"{self.name}-head-x", "head", None, ""),
        ]


class Scripted(Run):
    def __init__(self, code, lines):
        super().__init__()
        self.code, self.lines = code, list(lines)

    def state(self):
        if self.lines:
            self.say(self.lines.pop(0))
            return None
        return self.code

    def pods(self):
        return [("j-submitter", "submitter", self.code, "Error" if self.code else "Completed")]


def _config(claim, workers=2) -> DataValidationConfig:
    cfg = DataValidationConfig()
    cfg.gate.max_reject_rate = 1.0
    cfg.pii.names.enabled = False
    cfg.engine = "ray"
    cfg.ray.workers = workers
    cfg.ray.kuberay.enabled = True
    cfg.ray.kuberay.mount_path = str(claim)
    cfg.ray.kuberay.namespace = "team-a"
    cfg.ray.kuberay.poll_s = 0.2
    return cfg


def _run(tmp_path, api, data, cfg, name="out"):
    out = OutputPaths.in_dir(str(tmp_path / name))
    return out, rayjob.validate_on_kuberay(str(data), out, cfg, None, apis=(api, api), log=lambda *_: None)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "in.jsonl"
    write_corpus(str(path), 300_000, seed=9)
    return path


def test_the_job_runs_and_its_outputs_are_the_local_engines(tmp_path, corpus):
    claim = tmp_path / "claim"
    claim.mkdir()
    api = KubeRayStandIn(Entrypoint)
    cfg = _config(claim)
    out, result = _run(tmp_path, api, corpus, cfg)
    (body,) = api.created
    assert body["metadata"]["namespace"] == "team-a" and body["spec"]["submissionMode"] == "K8sJobMode"
    pods = [body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]] + [
        g["template"] for g in body["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    ]
    assert all(p["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == str(claim) for p in pods)
    assert not api.jobs  # deleted once read back
    local_cfg = DataValidationConfig()
    local_cfg.gate.max_reject_rate = 1.0
    local_cfg.pii.names.enabled = False
    local = OutputPaths.in_dir(str(tmp_path / "local"))
    want = engines.validate(str(corpus), local, local_cfg, show_progress=False)
    for a, b in ((out.clean, local.clean), (out.quarantine, local.quarantine), (out.stats, local.stats)):
        assert open(a, "rb").read() == open(b, "rb").read()
    assert result.metrics["merkle_root"] == want.metrics["merkle_root"] and result.samples == want.samples
    assert result.metrics["rayjob"].startswith("team-a/llmops-validate-")
    assert "[validate] rows_in=" in (claim / "llmops-validate" / body["metadata"]["name"] / "job.log").read_text()


def test_a_folder_of_parts_is_copied_whole_and_validated_as_the_local_engine_does(tmp_path, corpus):
    folder = tmp_path / "parts"
    (folder / "b").mkdir(parents=True)
    lines = corpus.read_bytes().splitlines(keepends=True)
    (folder / "a.jsonl").write_bytes(b"".join(lines[: len(lines) // 2]))
    (folder / "b" / "c.jsonl").write_bytes(b"".join(lines[len(lines) // 2 :]))
    (folder / "_SUCCESS").write_bytes(b"")
    claim = tmp_path / "claim"
    claim.mkdir()
    api = KubeRayStandIn(Entrypoint)
    out, result = _run(tmp_path, api, folder, _config(claim))
    local_cfg = _config(claim)
    local_cfg.engine = "local"
    local = OutputPaths.in_dir(str(tmp_path / "local"))
    want = engines.validate(str(folder), local, local_cfg, show_progress=False)
    for a, b in ((out.clean, local.clean), (out.quarantine, local.quarantine), (out.stats, local.stats)):
        assert open(a, "rb").read() == open(b, "rb").read()
    assert result.metrics["input_files"] == want.metrics["input_files"] == 2
    (run,) = (claim / "llmops-validate").iterdir()
    assert sorted(p.relative_to(run / "parts").as_posix() for p in (run / "parts").rglob("*") if p.is_file()) == [
        "a.jsonl",
        "b/c.jsonl",
    ]  # the data files copied under their names, the marker not


def test_a_failed_job_says_its_reason_and_last_error(tmp_path, corpus):
    claim = tmp_path / "claim"
    claim.mkdir()
    api = KubeRayStandIn(lambda job: Scripted(2, ["starting", "error: /mnt/x: binary data (...)"]))
    with pytest.raises(
        LlmopsError,
        match=r"RayJob team-a/llmops-validate-\w+ failed: AppFailed: .*exit code 2 "
        r"\(j-submitter: Error \(exit 2\)\); last log line: error: /mnt/x: binary",
    ):
        _run(tmp_path, api, corpus, _config(claim))
    assert len(api.jobs) == 1  # a failed job stays for inspection


def test_a_retried_task_finds_its_job_and_a_corrupted_output_is_refused(tmp_path, corpus):
    claim = tmp_path / "claim"
    claim.mkdir()
    cfg = _config(claim)
    cfg.ray.kuberay.delete_on_success = False
    runs = []

    def finished(job):  # the job's work, done here as the entrypoint would
        spec_path = job["spec"]["entrypoint"].split()[-1]
        _engine_here(spec_path)
        assert not runs and engines.main([spec_path]) == 0
        runs.append(job)
        return Scripted(0, [])

    api = KubeRayStandIn(finished)
    _, first = _run(tmp_path, api, corpus, cfg, "a")
    _, again = _run(tmp_path, api, corpus, cfg, "b")  # found Complete: read, not run again
    assert len(api.created) == 1 and first.metrics["merkle_root"] == again.metrics["merkle_root"]
    name = api.created[0]["metadata"]["name"]
    clean = claim / "llmops-validate" / name / "out" / "clean.jsonl"
    clean.write_bytes(clean.read_bytes().replace(b"a", b"b", 1))
    with pytest.raises(InputError, match="does not match the pinned root"):
        _run(tmp_path, api, corpus, cfg, "c")
    assert not (tmp_path / "c" / "clean.jsonl").exists()


def test_no_claim_mounted_is_one_line(tmp_path, corpus):
    with pytest.raises(InputError, match="ray.kuberay.mount_path: .* is not mounted here"):
        _run(tmp_path, KubeRayStandIn(lambda job: None), corpus, _config(tmp_path / "nowhere"))


def test_the_entrypoint_says_unusable_input_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bin.jsonl"
    bad.write_bytes(bytes(range(32)) * 100)
    spec = tmp_path / "spec.json"
    cfg = DataValidationConfig()
    spec.write_text(
        json.dumps(
            {
                "input": str(bad),
                "out": str(tmp_path / "o"),
                "reference": None,
                "config": cfg.model_dump(mode="json", by_alias=True),
            }
        )
    )
    assert engines.main([str(spec)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "binary data" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o" / "clean.jsonl").exists()
