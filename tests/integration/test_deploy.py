"""triton_canary_deploy against real Triton servers (tritonserver from nvidia-pytriton)
behind real nginx: first release, promotion, rollbacks on failures, latency and a crash,
a blocked interface change, and refused repositories. Every server is stopped after."""
import json
import os
import re
import shutil
import threading

import pytest

from kfp_llmops.components.common import integrity
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.deploy import DeployConfig, build_repository, deploy, repository, watermark_params
from kfp_llmops.components.common.records import read_serving_state as read_state
from kfp_llmops.components.deploy.local_target import undo
from kfp_llmops.pipelines.cli.main import main
from helpers import tiny_model

pytestmark = pytest.mark.timeout(300)

FAST = ("interval_s: 3\nsteps: [50, 100]\nsla: {min_requests: 10}\n"
        "smoke: {max_new_tokens: 48, requests: 3}\nlocal: {startup_timeout_s: 150}\n"
        "metrics: {source: prometheus}\n")    # a real Prometheus scrapes both servers; PromQL reads it


KGW = watermark_params({"kgw": {"delta": 4.0}})      # as verify_watermark records it


def _cfg(**drill) -> DeployConfig:
    cfg = DeployConfig.load(FAST)
    return cfg.model_copy(update={"drill": cfg.drill.model_copy(update=drill)})


def _no_servers_left() -> bool:
    procs = os.popen("ps -eo args").read()
    return "tritonserver --model-repository" not in procs and "triton_python_backend_stub" not in procs


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """A tiny blessed model, a key, and a serving state where version 1 was released."""
    root = tmp_path_factory.mktemp("deploy")
    _, _, model, model_root = tiny_model(root)
    key = root / "key"
    key.write_text("987654321")
    state = str(root / "state")
    build_repository(model, model_root, str(root / "repo-v1"), _cfg(), state, KGW)
    record = deploy(str(root / "repo-v1"), model_root, str(root / "out-v1"), _cfg(), state, str(key))
    return {"root": root, "model": model, "model_root": model_root, "key": str(key), "state": state,
            "first": record}


def _canary(released, tmp_path, cfg, tamper=None, before_interval=None):
    state = str(tmp_path / "state")
    shutil.copytree(released["state"], state)
    repo = str(tmp_path / "repo")
    built = build_repository(released["model"], released["model_root"], repo, cfg, state, KGW)
    if tamper:
        tamper(repo, built)
    record = deploy(repo, released["model_root"], str(tmp_path / "out"), cfg, state, released["key"],
                    before_interval=before_interval)
    return record, state


def test_first_release_is_promoted_with_watermark_found_in_serving(released):
    record = released["first"]
    assert record["decision"] == "promoted" and record["first_release"] and record["version"] == 1
    assert [iv["percent"] for iv in record["intervals"]] == [100]
    smoke = {c["metric"]: c for c in record["smoke"][0]["checks"]}
    assert smoke["watermark"]["verdict"] == "pass", smoke["watermark"]["reason"]
    assert read_state(released["state"])["stable"]["repository_root"] == record["repository_root"]
    assert _no_servers_left()


def test_healthy_canary_is_promoted_and_one_step_undo_restores_stable(released, tmp_path):
    record, state = _canary(released, tmp_path, _cfg())
    assert record["decision"] == "promoted", record["reason"]
    percents = [iv["percent"] for iv in record["intervals"]]
    assert percents[-1] == 100 and set(percents) == {50, 100}          # a noisy interval may hold a step
    assert record["interface"] == [] and record["stable_version"] == 1
    half = record["intervals"][0]
    assert half["canary"]["requests"] >= 10 and half["stable"]["requests"] >= 10       # the split really split
    requests = [json.loads(line) for line in open(tmp_path / "out" / "requests.jsonl")]
    assert all(r["ok"] for r in requests)
    s = read_state(state)
    assert s["stable"]["version"] == 2 and s["previous"]["version"] == 1
    repository.verify(os.path.join(state, "stable"), released["model_root"], s["stable"]["repository_root"])
    assert undo(state)["stable"]["version"] == 1
    assert os.path.getsize(tmp_path / "out" / "timeline.png") > 5000
    assert "Canary: promoted" in open(tmp_path / "out" / "report.html").read()
    assert _no_servers_left()


def test_canary_failing_ten_percent_is_rolled_back_and_stable_untouched(released, tmp_path):
    before = read_state(released["state"])
    # seed 8: the drill fails 7 of its first 60 requests, from the 5th on (seed 0's first
    # failure is the 36th, and latency noise could decide the rollout before any came)
    record, state = _canary(released, tmp_path, _cfg(failure_rate=0.10, seed=8))
    assert record["decision"] == "rolled_back"
    assert record["rollback"] == {"canary_percent": 0, "canary_running": False, "stable_ready": True}
    assert read_state(state)["stable"] == before["stable"]
    requests = [json.loads(line) for line in open(tmp_path / "out" / "requests.jsonl")]
    assert all(r["ok"] for r in requests if r["backend"] == "stable")
    assert any(not r["ok"] for r in requests if r["backend"] == "canary")
    assert _no_servers_left()


def test_canary_with_added_latency_is_rolled_back(released, tmp_path):
    record, _ = _canary(released, tmp_path, _cfg(added_latency_ms=250))
    assert record["decision"] == "rolled_back"
    failed = {c["metric"] for iv in record["intervals"] for c in iv["checks"] if c["verdict"] == "fail"}
    assert failed & {"p99_vs_stable", "p95_vs_stable", "p50_vs_stable", "sequential"}, failed
    assert _no_servers_left()


def test_canary_killed_mid_rollout_is_rolled_back_while_stable_serves(released, tmp_path):
    def crash(n, target):
        if n == 0:
            threading.Timer(1.0, target.canary.kill).start()

    record, state = _canary(released, tmp_path, _cfg(), before_interval=crash)
    assert record["decision"] == "rolled_back"
    requests = [json.loads(line) for line in open(tmp_path / "out" / "requests.jsonl")]
    stable = [r for r in requests if r["backend"] == "stable"]
    assert stable and all(r["ok"] for r in stable)                      # no request routed to stable failed
    assert read_state(state)["stable"]["version"] == 1
    assert _no_servers_left()


def test_breaking_interface_change_is_blocked_before_traffic_moves(released, tmp_path):
    def make_input_required(repo, built):
        path = os.path.join(repo, built["model_name"], "config.pbtxt")
        text = open(path).read()
        text = re.sub(r'(name: "max_new_tokens" data_type: TYPE_INT32 dims: \[ 1 \]) optional: true', r"\1", text)
        open(path, "w").write(text)
        integrity.seal("repository", repo)             # a sealed repository, same blessed weights, new interface

    record, _ = _canary(released, tmp_path, _cfg(), tamper=make_input_required)
    assert record["decision"] == "rolled_back" and "breaking interface" in record["reason"]
    assert record["intervals"] == [] and record["smoke"] == []          # no traffic moved
    assert any("max_new_tokens" in d["what"] and d["breaking"] for d in record["interface"])
    assert _no_servers_left()


def test_repository_not_matching_the_blessed_root_is_refused(released, tmp_path, capsys):
    cfg = _cfg()
    repo = str(tmp_path / "repo")
    built = build_repository(released["model"], released["model_root"], repo, cfg, released["state"], KGW)
    with pytest.raises(InputError, match="weights are not the blessed model"):
        repository.verify(repo, "0" * 64)
    with pytest.raises(InputError, match="no blessed model root"):
        build_repository(released["model"], None, str(tmp_path / "r2"), cfg, released["state"])
    weights = os.path.join(repo, built["model_name"], str(built["version"]), "weights", "model.safetensors")
    with open(weights, "r+b") as handle:
        handle.seek(100)
        handle.write(b"\x00\x01")
    with pytest.raises(InputError, match="model repository does not verify"):
        repository.verify(repo, released["model_root"])
    integrity.seal("repository", repo)                 # re-sealed around swapped weights: the blessed root still says no
    with pytest.raises(InputError, match="weights are not the blessed model"):
        repository.verify(repo, released["model_root"])
    code = main(["deploy", "canary", "--repository", repo, "--blessed-root", released["model_root"],
                 "--out", str(tmp_path / "cli"), "--state", str(tmp_path / "st"), "--key-file", released["key"]])
    assert code == 2 and "weights are not the blessed model" in capsys.readouterr().err


def test_healthy_canary_with_the_default_config_is_promoted(released, tmp_path):
    """The defaults a new user gets (steps 5/25/50/100 %, 10 s intervals, min_requests 20):
    the load is sized to the 5 % step and a short interval extends until it has its
    samples, so a healthy version is not rolled back for this machine being slow."""
    cfg = DeployConfig()
    record, state = _canary(released, tmp_path, cfg)
    assert record["decision"] == "promoted", record["reason"]
    assert [iv["percent"] for iv in record["intervals"]][0] == 5
    assert {iv["percent"] for iv in record["intervals"]} == {5, 25, 50, 100}
    for iv in record["intervals"]:
        assert iv["canary"]["requests"] > 0
        assert iv["seconds"] <= cfg.max_interval_s + cfg.traffic.timeout_s
    assert read_state(state)["stable"]["version"] == 2
    assert _no_servers_left()


def test_too_little_traffic_extends_the_interval_instead_of_failing_it(released, tmp_path):
    """A machine too slow for min_requests at the 5 % step (here: min_requests far above
    what 2 s can bring): each interval waits up to max_interval_s, then judges what came.
    Latency is not what this test judges: two servers of the same model on two cores
    differ by up to 2x in a short interval, so the tolerance is wide here."""
    cfg = DeployConfig.load("interval_s: 2\nmax_interval_s: 5\nsla: {min_requests: 400, latency_tolerance: 3.0}\n")
    record, _ = _canary(released, tmp_path, cfg)
    assert record["decision"] == "promoted", record["reason"]
    first = record["intervals"][0]
    assert first["percent"] == 5 and 0 < first["canary"]["requests"] < 400
    assert first["seconds"] >= 4.5                                   # it waited out the bound
    check = next(c for c in first["checks"] if c["metric"] == "canary_requests")
    assert check["verdict"] == "pass" and "of 400" in check["reason"]
    assert _no_servers_left()


def test_the_declared_interface_is_what_triton_reports(released, tmp_path):
    """The cluster target compares the live model with the new repository's declared
    interface; that declaration must be exactly what a Triton server says of it."""
    from kfp_llmops.components.deploy import interface
    from kfp_llmops.components.deploy.repository import declared_interface
    from kfp_llmops.components.deploy.triton_local import TritonServer, http_get
    server = TritonServer(os.path.join(released["state"], "stable"), str(tmp_path), "stable",
                          env={"LLMOPS_WATERMARK_KEY_FILE": released["key"]}).start()
    try:
        server.wait_ready(150)
        live = [json.loads(http_get(server.url + p)[1]) for p in ("/v2/models/llm", "/v2/models/llm/config")]
    finally:
        server.stop()
    assert interface.compare(*live, *declared_interface(_cfg())) == []
    unbatched = DeployConfig.load(FAST + "serving: {max_batch_size: 1}\n")
    assert interface.compare(*live, *declared_interface(unbatched)) == []
    assert _no_servers_left()


def _infer(url: str, prompt: str, **inputs) -> tuple[int, str]:
    """One request to Triton's HTTP API: (status, text_output or the error)."""
    import urllib.error
    import urllib.request
    types = {"max_new_tokens": "INT32", "min_new_tokens": "INT32", "top_k": "INT32", "seed": "INT64",
             "temperature": "FP32", "top_p": "FP32", "stop": "BYTES"}
    body = {"inputs": [{"name": "text_input", "shape": [1, 1], "datatype": "BYTES", "data": [prompt]}] +
            [{"name": k, "shape": [1, 1], "datatype": types[k], "data": [v]} for k, v in inputs.items()]}
    request = urllib.request.Request(url + "/v2/models/llm/infer", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, json.loads(resp.read())["outputs"][0]["data"][0]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()).get("error", "")


def test_the_server_answers_as_evaluation_judged(released, tmp_path):
    """A request that sets nothing gets the blessed decoding: greedy, with the verified
    watermark, ending at EOS or the bound, exactly the answer the one generation routine
    gives in evaluation. max_new_tokens bounds; stop cuts; bad values are 400s naming
    the input while the server keeps answering."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kfp_llmops.components.common.generation import generate
    from kfp_llmops.components.common.watermark.kgw import logits_processor
    from kfp_llmops.components.deploy.triton_local import TritonServer

    prompts = ["Tell me about item 3 and its color.", "Tell me about item 17 and its color."]
    tokenizer = AutoTokenizer.from_pretrained(released["model"])
    model = AutoModelForCausalLM.from_pretrained(released["model"]).eval()
    processor = logits_processor(KGW.watermark(987654321, len(tokenizer)))
    def judge(max_new: int) -> list[str]:
        return [tokenizer.decode(c.tokens, skip_special_tokens=True).strip()
                for c in generate(model, tokenizer, prompts, max_new_tokens=max_new, batch_size=1, seed=0,
                                  do_sample=False, processors=[processor])]
    judged, bounded = judge(24), judge(3)
    server = TritonServer(os.path.join(released["state"], "stable"), str(tmp_path), "stable",
                          env={"LLMOPS_WATERMARK_KEY_FILE": released["key"]}).start()
    try:
        server.wait_ready(150)
        served = [_infer(server.url, p) for p in prompts]
        short = _infer(server.url, prompts[0], max_new_tokens=3)
        cut = _infer(server.url, prompts[0], stop=judged[0].split()[1])
        zero = _infer(server.url, prompts[0], max_new_tokens=0)
        over = _infer(server.url, prompts[0], max_new_tokens=10_000)
        cold = _infer(server.url, prompts[0], temperature=0.0)
        after = _infer(server.url, prompts[1])
    finally:
        server.stop()
    assert served == [(200, judged[0]), (200, judged[1])]
    assert short == (200, bounded[0]) and len(short[1]) < len(judged[0])
    assert cut == (200, judged[0].split(judged[0].split()[1], 1)[0].strip())
    assert zero[0] == 400 and "max_new_tokens: 0 is outside 1..256" in zero[1]
    assert over[0] == 400 and "max_new_tokens: 10000" in over[1]
    assert cold[0] == 400 and "temperature" in cold[1]
    assert after == (200, judged[1])
    assert _no_servers_left()


def test_a_watermark_nobody_verified_is_never_served(released, tmp_path, capsys):
    with pytest.raises(InputError, match="no verified parameters to serve"):
        build_repository(released["model"], released["model_root"], str(tmp_path / "r"), _cfg(), released["state"])
    code = main(["deploy", "repository", "--model", released["model"], "--blessed-root", released["model_root"],
                 "--out", str(tmp_path / "cli"), "--state", released["state"]])
    assert code == 2 and "pass verify_watermark's metrics.json (`--watermark`)" in capsys.readouterr().err
    off = DeployConfig.load(FAST + "watermark: {enabled: false}\n")
    built = build_repository(released["model"], released["model_root"], str(tmp_path / "plain"), off,
                             released["state"])
    settings = repository.describe(str(tmp_path / "plain"))["settings"]
    assert built["model_root"] == released["model_root"] and settings["watermark"] == {"enabled": False, "kgw": None}
    assert settings["decoding"]["do_sample"] is False and settings["max_new_tokens_limit"] == 256
