"""The cluster deploy path up to the API boundary: the repository upload (real fsspec
filesystems, re-hashed after upload), and ClusterTarget's calls against a recording
stand-in for the Kubernetes API that refuses, as a strict API server does, any body
with unknown fields, and answers with KServe-shaped status."""

import copy
import os

import pytest
from kubernetes.client.exceptions import ApiException

from kfp_llmops.components.common import integrity, storage
from kfp_llmops.components.common.errors import InputError, LlmopsError
from kfp_llmops.components.deploy import DeployConfig
from kfp_llmops.components.deploy.cluster import FIELD_MANAGER, ClusterTarget
from strict_schema import validate as strict


def _repo(tmp_path) -> tuple[str, str]:
    repo = tmp_path / "repo"
    (repo / "llm" / "1" / "weights").mkdir(parents=True)
    (repo / "llm" / "config.pbtxt").write_text('name: "llm"\n')
    (repo / "llm" / "1" / "weights" / "model.safetensors").write_bytes(os.urandom(3 * 4096 + 17))
    root = integrity.write_manifest(
        str(repo / integrity.MANIFEST_NAME), integrity.hash_directory(str(repo), chunk_size=4096)
    )
    return str(repo), root


def test_upload_lands_under_the_root_is_reverified_and_idempotent(tmp_path):
    repo, root = _repo(tmp_path)
    uri = storage.upload(repo, f"file://{tmp_path}/bucket/models", log=lambda *_: None)
    assert uri == f"file://{tmp_path}/bucket/models/{root}"
    stored = tmp_path / "bucket" / "models" / root
    assert integrity.verify_sealed(str(stored), root) == root
    assert storage.upload(repo, f"file://{tmp_path}/bucket/models", log=lambda *_: None) == uri  # kept
    weights = stored / "llm" / "1" / "weights" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[2 * 4096 + 5] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"model.safetensors: stored bytes differ .*chunk 2"):
        storage.upload(repo, f"file://{tmp_path}/bucket/models", log=lambda *_: None)
    (stored / "llm" / "extra.txt").write_text("x")
    with pytest.raises(InputError, match="unexpected llm/extra.txt"):
        storage.upload(repo, f"file://{tmp_path}/bucket/models", log=lambda *_: None)


def test_pvc_uris_go_through_the_claims_mount(tmp_path):
    repo, root = _repo(tmp_path)
    mounts = {"llmops-release": str(tmp_path / "mnt")}
    uri = storage.upload(repo, "pvc://llmops-release/models", mounts, log=lambda *_: None)
    assert uri == f"pvc://llmops-release/models/{root}"
    assert integrity.verify_sealed(str(tmp_path / "mnt" / "models" / root), root) == root
    with pytest.raises(InputError, match="claim 'other' is not mounted"):
        storage.upload(repo, "pvc://other/models", mounts, log=lambda *_: None)


class RecordingApi:
    """CustomObjectsApi's slice the target uses. Applied bodies must pass strict
    validation; each apply bumps generation and the object turns Ready after `lag` gets."""

    def __init__(self, lag: int = 1, ready: bool = True):
        self.objects, self.calls, self.lag, self.ready = {}, [], lag, ready

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        obj = self.objects.get((plural, namespace, name))
        if obj is None:
            raise ApiException(status=404, reason="Not Found")
        obj["_gets"] += 1
        if self.ready and obj["_gets"] > self.lag:
            pred = obj["status"].setdefault("components", {}).setdefault("predictor", {})
            obj["status"].update(
                observedGeneration=obj["metadata"]["generation"], conditions=[{"type": "Ready", "status": "True"}]
            )
            pred["latestCreatedRevision"] = f"llm-predictor-{obj['metadata']['generation']:05d}"
        return {k: v for k, v in copy.deepcopy(obj).items() if k != "_gets"}

    def patch_namespaced_custom_object(self, group, version, namespace, plural, name, body, **kwargs):
        strict(body)
        self.calls.append((body, kwargs))
        old = self.objects.get((plural, namespace, name))
        generation = old["metadata"]["generation"] + 1 if old else 1
        obj = copy.deepcopy(body)  # apply: the body is the whole intent of this manager
        obj["metadata"]["generation"] = generation
        obj["status"] = {"conditions": [{"type": "Ready", "status": "False", "message": "Revision missing"}]}
        obj["_gets"] = 0
        self.objects[(plural, namespace, name)] = obj
        return obj


def _target(tmp_path, api, text="", kind="kserve"):
    cfg = DeployConfig.load(
        f"target: {kind}\ncluster: {{namespace: team-a, storage_uri: 'file://{tmp_path}/s3', "
        f"ready_timeout_s: 30}}\n{text}"
    )
    return ClusterTarget(cfg, api=api, log=lambda *_: None)


def test_first_release_creates_the_inference_service_by_server_side_apply(tmp_path, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    repo, root = _repo(tmp_path)
    api = RecordingApi()
    target = _target(tmp_path, api)
    target.start(repo)
    assert target.stable is None and target.interfaces() is None
    target.set_canary_percent(100)
    (body, kwargs) = api.calls[0]
    assert kwargs == {"field_manager": FIELD_MANAGER, "force": True, "_content_type": "application/apply-patch+yaml"}
    assert body["metadata"]["namespace"] == "team-a"
    assert body["spec"]["predictor"]["model"]["storageUri"] == f"file://{tmp_path}/s3/{root}"
    assert "canaryTrafficPercent" not in body["spec"]["predictor"]
    assert integrity.verify_sealed(str(tmp_path / "s3" / root), root) == root  # uploaded before it is named


def test_canary_steps_promote_by_leaving_the_field_out_and_rollback_restores_the_old_spec(tmp_path, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    repo, root = _repo(tmp_path)
    api = RecordingApi()
    old = _target(tmp_path, api)
    assert old.production_root() == (True, None)  # nothing serves yet
    old.repository_root, old.model_root = "cd" * 32, "ef" * 32
    old.set_canary_percent(100)  # what serves before this rollout
    target = _target(tmp_path, api)
    target.start(repo, {"model_root": "12" * 32})
    assert target.stable == "cluster" and target.stable_at_start["repository_root"] == "cd" * 32
    assert target.production_root() == (True, "ef" * 32)  # read back from the live annotation
    target.set_canary_percent(5)
    assert api.calls[-1][0]["spec"]["predictor"]["canaryTrafficPercent"] == 5
    assert api.calls[-1][0]["spec"]["predictor"]["model"]["storageUri"].endswith(root)
    target.promote({})
    assert "canaryTrafficPercent" not in api.calls[-1][0]["spec"]["predictor"]
    assert api.calls[-1][0]["metadata"]["annotations"]["kfp-llmops/model-root"] == "12" * 32
    target.rollback()
    restored = api.calls[-1][0]
    assert restored["spec"]["predictor"]["model"]["storageUri"].endswith("cd" * 32)
    assert restored["metadata"]["annotations"]["kfp-llmops/model-root"] == "ef" * 32
    assert "canaryTrafficPercent" not in restored["spec"]["predictor"]


def test_a_gateway_route_names_the_promoted_model_for_the_next_release(tmp_path, monkeypatch):
    """Behind a Gateway the HTTPRoute carries the production model's root: kept while the
    canary takes part of the traffic, the canary's once it takes all, the old one again
    on rollback; the next release reads it as the production it replaces."""
    monkeypatch.setattr("time.sleep", lambda s: None)
    repo, _ = _repo(tmp_path)
    api = RecordingApi()
    first = _target(tmp_path, api, kind="gateway")
    assert first.production_root() == (True, None)  # no route yet: a first release
    first.start(repo, {"model_root": "ef" * 32})
    first.promote({})
    assert first.production_root() == (True, "ef" * 32)
    second = _target(tmp_path, api, kind="gateway")
    second.start(repo, {"model_root": "12" * 32})
    second.set_canary_percent(25)
    assert api.calls[-1][0]["metadata"]["annotations"]["kfp-llmops/model-root"] == "ef" * 32
    assert second.production_root() == (True, "ef" * 32)  # mid-rollout, production is still the old
    second.rollback()
    assert second.production_root() == (True, "ef" * 32)
    second.promote({})
    assert second.production_root() == (True, "12" * 32)
    del api.objects[next(k for k in api.objects if k[0] == "httproutes")]["metadata"]["annotations"]
    assert _target(tmp_path, api, kind="gateway").production_root() == (False, None)  # written by an older release


def test_an_inference_service_that_never_gets_ready_fails_with_its_own_reason(tmp_path, monkeypatch):
    clock = iter(range(0, 10_000, 5))
    monkeypatch.setattr("time.monotonic", lambda: next(clock))
    monkeypatch.setattr("time.sleep", lambda s: None)
    repo, _ = _repo(tmp_path)
    target = _target(tmp_path, RecordingApi(ready=False))
    target.start(repo)
    with pytest.raises(LlmopsError, match=r"team-a/llm not Ready after 30 s: Revision missing"):
        target.set_canary_percent(100)


def test_cluster_defaults_need_no_settings_beyond_the_namespace(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMOPS_NAMESPACE", "team-b")
    monkeypatch.setattr("kfp_llmops.components.common.k8s.POD_NAMESPACE_FILE", str(tmp_path / "none"))
    target = ClusterTarget(DeployConfig.load("target: kserve\n"), api=RecordingApi())
    # answers through the front door at the InferenceService's address, the config from the predictor
    assert (target.url, target.model_url, target.api_kind) == (
        "http://llm.team-b.svc.cluster.local",
        "http://llm-predictor.team-b.svc.cluster.local",
        "openai",
    )
    without = ClusterTarget(DeployConfig.load("target: kserve\ncluster: {front_door: false}\n"), api=RecordingApi())
    assert (without.url, without.model_url, without.api_kind) == (("http://llm.team-b.svc.cluster.local",) * 2) + (
        "triton",
    )
    assert target.promql.url == "http://prometheus-operated.monitoring.svc:9090"
    (tmp_path / "ns").write_text("team-c\n")
    monkeypatch.setattr("kfp_llmops.components.common.k8s.POD_NAMESPACE_FILE", str(tmp_path / "ns"))
    assert ClusterTarget(DeployConfig.load("target: kserve\n"), api=RecordingApi()).namespace == "team-c"


def test_the_signature_travels_and_lineage_rehashes_the_stored_copy(tmp_path):
    from kfp_llmops.components.common import signing
    from kfp_llmops.components.release.lineage import _stored

    repo, root = _repo(tmp_path)
    signing.generate_keys(str(tmp_path / "k.pem"), str(tmp_path / "k.pub"))
    signing.sign_folder(repo, str(tmp_path / "k.pem"))
    uri = storage.upload(repo, f"file://{tmp_path}/bucket/models", log=lambda *_: None)
    stored = tmp_path / "bucket" / "models" / root
    assert signing.verify_folder(str(stored), str(tmp_path / "k.pub"))  # stored next to the model
    assert storage.verify_stored(uri, root) == root and _stored(uri, root).ok
    weights = stored / "llm" / "1" / "weights" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[5] ^= 1
    weights.write_bytes(bytes(data))
    link = _stored(uri, root)
    assert not link.ok and "model.safetensors: stored bytes differ" in link.detail
    assert _stored("nosuch://bucket/models/x", root).ok  # not reachable from here: not proof
    assert "not reachable" in _stored("nosuch://bucket/models/x", root).detail


# KServe's kserve-tritonserver ClusterServingRuntime (config/runtimes/kserve-tritonserver.yaml):
# no command, these arguments; KServe keeps the InferenceService's command and appends its args.
KSERVE_TRITON_ARGS = ["tritonserver", "--model-store=/mnt/models", "--grpc-port=9000", "--http-port=8080"]


def test_the_predictor_verifies_its_repository_before_the_server_starts(tmp_path):
    """The predictor's command line as KServe composes it verifies the fetched repository
    against the InferenceService's root, then becomes the server (same process, same
    arguments); a changed file, a missing root or an unclear repository stops it first."""
    import subprocess
    import sys

    from kfp_llmops.components.deploy.cluster import render_inference_service
    from kfp_llmops.components.deploy.triton_local import REPOSITORY_ROOT_ENV
    from kfp_llmops.components.deploy.verified_start import model_store

    repo, root = _repo(tmp_path)
    model = render_inference_service(DeployConfig(), root, None)["spec"]["predictor"]["model"]
    argv = model["command"] + KSERVE_TRITON_ARGS + model["args"]
    assert argv[:3] == ["python3", "-m", "kfp_llmops.components.deploy.verified_start"]
    assert model_store(argv[3:]) == "/mnt/models"
    env = {e["name"]: e["value"] for e in model["env"]}
    assert env[REPOSITORY_ROOT_ENV] == root

    # here: this Python for python3, the repository for /mnt/models, a server that says who it is
    server = [sys.executable, "-c", "import os, sys; print('server', os.getpid(), sys.argv[1:])"]
    here = [sys.executable, *argv[1:3], *server, f"--model-store={repo}", *model["args"]]

    def run(root_env):
        proc = subprocess.Popen(
            here, env={**os.environ, REPOSITORY_ROOT_ENV: root_env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = proc.communicate(timeout=60)
        return proc.pid, proc.returncode, out.decode(), err.decode()

    pid, code, out, _ = run(root)
    assert code == 0 and f"server {pid} ['--model-store={repo}', '--strict-model-config=true'" in out
    with open(os.path.join(repo, "llm", "config.pbtxt"), "a") as handle:
        handle.write("# changed in storage\n")
    _, code, out, err = run(root)
    assert code == 1 and "server" not in out and err.startswith("refusing to serve:") and "config.pbtxt" in err
    _, code, out, err = run("")
    assert code == 1 and "server" not in out and f"{REPOSITORY_ROOT_ENV} is not set" in err
    for bad, message in (
        (["t"], "name 0 model repositories"),
        (["t", "--model-store=/a", "--model-repository", "/b"], "name 2 model repositories"),
        (["t", "--model-store"], "no folder given"),
    ):
        with pytest.raises(InputError, match=message):
            model_store(bad)


def test_the_controller_sends_a_key_through_the_doors(tmp_path):
    """With front doors, the controller's load and smoke tests (through the gateway form's
    route, or the kserve form's transformer) carry the first key of the mounted Secret's
    file (or cluster.api_keys_file); without one, a line that says what to mount. Its
    interface check reads stable's own Triton Service: a door passes no model config."""
    keys = tmp_path / "keys"
    keys.write_text("# the controller's\nsk-controller-0123456789abcdef\nsk-other-0123456789abcdef\n")

    def target(extra: str, form: str = "gateway") -> ClusterTarget:
        cfg = DeployConfig.load(f"target: {form}\ncluster: {{namespace: team-a, {extra}}}\n")
        return ClusterTarget(cfg, api=RecordingApi(), log=lambda *_: None)

    load = target(f"api_keys_file: '{keys}'").load()
    assert load.headers == {"Host": "llm.example.com", "Authorization": "Bearer sk-controller-0123456789abcdef"}
    kserve = target(f"api_keys_file: '{keys}'", "kserve").load()
    assert kserve.headers == {"Authorization": "Bearer sk-controller-0123456789abcdef"}
    assert kserve.build.__name__ == "request"  # the OpenAI API; without doors, the generate extension
    assert target("front_door: false", "kserve").load().build.__name__ == "generate_body"
    assert target("front_door: false").load().headers == {"Host": "llm.example.com"}
    with pytest.raises(InputError, match=r"mount the Secret llmops-api-keys at /var/run/secrets/kfp-llmops/api-keys"):
        target(f"api_keys_file: '{tmp_path / 'missing'}'").load()
    gateway = target(f"api_keys_file: '{keys}'")
    gateway.stable = "cluster"
    with pytest.raises(InputError, match=r"^http://llm-stable\.team-a\.svc\.cluster\.local:8000/v2/models/llm: "):
        gateway.interfaces()
