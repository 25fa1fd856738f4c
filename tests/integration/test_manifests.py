"""manifests/: generated from the same code the stages use and committed (golden); every
kustomization builds with `kubectl kustomize`; every object validates with unknown fields
rejected (core kinds with kubernetes-validate, custom resources against the official
CRDs, tests/strict_schema.py); RBAC is least
privilege; checkov finds nothing in the built output."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from kfp_llmops.pipelines import manifests
from strict_schema import validate as strict


def _kustomizations():
    root = manifests.MANIFESTS_DIR
    return sorted(os.path.relpath(d, root) for d, _, files in os.walk(root) if "kustomization.yaml" in files)


def _build(rel: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.fail("kubectl (with kustomize) is needed to build manifests/")
    out = subprocess.run(
        [kubectl, "kustomize", os.path.join(manifests.MANIFESTS_DIR, rel)], capture_output=True, text=True, check=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_manifests_are_generated_and_committed():
    assert manifests.write_all(check=True) == []


@pytest.mark.parametrize("rel", _kustomizations())
def test_every_kustomization_builds_and_validates(rel):
    docs = _build(rel)
    assert docs
    for doc in docs:
        if doc["kind"] == "Application":  # Argo CD: no schema in ../shared; check the essentials
            assert doc["spec"]["source"]["path"] and doc["spec"]["destination"]["namespace"]
        else:
            strict(doc)  # CRDs, Argo and core kinds, unknown fields rejected
        if rel != "gitops":
            assert doc["metadata"].get("namespace") == manifests.NS


def test_rbac_is_least_privilege_and_secrets_are_references():
    docs = _build(".")
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert {r["kind"] for r in roles} == {"Role"}  # namespaced only
    for role in roles:
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
            assert "secrets" not in rule["resources"]
    deploy = next(r for r in roles if r["metadata"]["name"] == "llmops-deploy")
    assert {res for rule in deploy["rules"] for res in rule["resources"]} == {
        "inferenceservices",
        "httproutes",
        "leases",
    }
    for rule in deploy["rules"]:  # each object named, but a Lease's create (a POST names none)
        assert rule.get("resourceNames") or (rule["resources"], rule["verbs"]) == (["leases"], ["create"]), rule
        assert not {"list", "watch", "delete", "update"} & set(rule["verbs"]) or rule["resources"] == ["leases"]
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    served = _build("serving/kserve")[0]["spec"]["predictor"]
    assert served["serviceAccountName"] == "llmops-serving" and served["automountServiceAccountToken"] is False
    assert accounts["llmops-serving"]["automountServiceAccountToken"] is False
    bound = {s["name"] for d in docs if d["kind"] == "RoleBinding" for s in d["subjects"]}
    assert "llmops-serving" not in bound  # the served model holds no Role
    data = next(r for r in roles if r["metadata"]["name"] == "llmops-data")  # the RayJob path only
    assert {res for rule in data["rules"] for res in rule["resources"]} == {"rayjobs", "pods", "pods/log"}
    assert {res for rule in data["rules"] if "create" in rule["verbs"] for res in rule["resources"]} == {"rayjobs"}
    everything = json.dumps([_build(r) for r in _kustomizations()])
    assert '"kind": "Secret"' not in everything and "llmops-watermark-key" in everything  # referenced, never defined


def test_network_policies_match_the_pods_and_ports_that_exist():
    """Selectors read as the API server will: each allowed peer is a pod some part of the
    project really makes (Ray's head, workers and submitter; a TrainJob's nodes; the
    pipelines' task pods, labelled in both compiled forms), and the serving ports are the
    ones KServe's Triton, Knative's queue-proxy and the gateway form's Triton listen on."""
    docs = {d["metadata"]["name"]: d["spec"] for d in _build(".") if d["kind"] == "NetworkPolicy"}
    ray = docs["llmops-ray"]
    head = {"app.kubernetes.io/part-of": "kfp-llmops", "ray.io/cluster": "c", "ray.io/node-type": "head"}
    submitter = {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "j"}
    assert _selects(ray["podSelector"], head)
    assert _lets_in(ray, {"ray.io/cluster": "c", "ray.io/node-type": "worker"}) and _lets_in(ray, submitter)
    node = {"app.kubernetes.io/part-of": "kfp-llmops", "trainer.kubeflow.org/trainjob-name": "t"}
    assert _selects(docs["llmops-trainjob"]["podSelector"], node) and _lets_in(docs["llmops-trainjob"], node)
    serving = docs["llmops-serving"]
    pod = {"serving.kserve.io/inferenceservice": "llm", "app.kubernetes.io/part-of": "kfp-llmops"}
    assert _selects(serving["podSelector"], pod)  # the gateway form's pods
    predictor = {**pod, "component": "predictor"}  # as KServe labels an InferenceService's pods
    door_pod = {**pod, "component": "transformer"}
    assert _selects(serving["podSelector"], predictor) and not _selects(serving["podSelector"], door_pod)
    door = docs["llmops-front-door"]
    assert _selects(door["podSelector"], door_pod) and not _selects(door["podSelector"], predictor)
    assert _lets_in(serving, door_pod) and not _lets_in(door, door_pod) and not _lets_in(door, predictor)
    assert not any("ipBlock" in t for r in door["egress"] for t in r["to"])  # the front door reaches nothing outside
    assert any(_selects(t["podSelector"], predictor) for r in door["egress"] for t in r["to"] if "podSelector" in t)
    compiled = os.path.join(manifests.MANIFESTS_DIR, "..", "pipelines", "compiled")
    labels = yaml.safe_load(open(os.path.join(compiled, "argo", "release.yaml")))["spec"]["podMetadata"]["labels"]
    assert _lets_in(serving, labels) and not _lets_in(serving, {"app.kubernetes.io/part-of": "kfp-llmops"})
    assert _lets_in(door, labels)  # the controller's smoke tests at the canary's own door
    kfp = open(os.path.join(compiled, "release.yaml")).read()
    assert kfp.count("kfp-llmops/pipeline-task: 'true'") >= 8  # every task's pod, in the KFP form too
    ports = {p["port"] for rule in serving["ingress"] for p in rule["ports"]}
    assert {8080, 9000, 8012, 8000, 8002} <= ports
    assert {r["ports"][0]["port"] for r in serving["egress"]} == {53, 443}
    blocks = [t["ipBlock"] for r in serving["egress"] for t in r["to"] if "ipBlock" in t]
    assert blocks and all(b["except"] for b in blocks)  # never the cluster's own ranges


def test_the_gateway_forms_doors_stand_before_each_side():
    """The gateway form: the route's backends are the two front doors, each door's pods are
    its own Service's only (no side's Service selects the other's or a door's pods), a door
    relays to its side's Triton Service, and the policies hold for the doors' labels: in
    from the gateway, out to Triton's port, Triton lets them in."""
    docs = _build("serving/gateway")
    route = next(d for d in docs if d["kind"] == "HTTPRoute")
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    backends = {(b["name"], b["port"]) for b in route["spec"]["rules"][0]["backendRefs"]}
    assert backends == {("llm-stable-door", 8080), ("llm-canary-door", 8080)}
    paths = {m["path"]["value"] for m in route["spec"]["rules"][0]["matches"]}
    assert {"/v1/chat/completions", "/v1/completions", "/v1/models", "/v2/models/llm/generate"} <= paths
    policies = {d["metadata"]["name"]: d["spec"] for d in _build(".") if d["kind"] == "NetworkPolicy"}
    door_policy, serving = policies["llmops-front-door"], policies["llmops-serving"]
    for side in ("stable", "canary"):
        pod = deployments[f"llm-{side}-door"]["spec"]["template"]["metadata"]["labels"]
        triton_pod = {"serving.kserve.io/inferenceservice": "llm", "kfp-llmops/track": side}
        assert _selects({"matchLabels": services[f"llm-{side}-door"]["spec"]["selector"]}, pod)
        for name, service in services.items():
            selects_door = _selects({"matchLabels": service["spec"]["selector"]}, pod)
            assert selects_door == (name == f"llm-{side}-door"), name
            assert _selects({"matchLabels": service["spec"]["selector"]}, triton_pod) == (name == f"llm-{side}"), name
        args = deployments[f"llm-{side}-door"]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--triton") + 1] == f"http://llm-{side}:8000"
        assert _selects(door_policy["podSelector"], pod) and not _selects(serving["podSelector"], pod)
        assert _selects(serving["podSelector"], triton_pod) and _lets_in(serving, pod)
        assert any(
            _selects(t["podSelector"], triton_pod) and 8000 in {p["port"] for p in r["ports"]}
            for r in door_policy["egress"]
            for t in r["to"]
            if "podSelector" in t
        )


def _selects(selector: dict, labels: dict) -> bool:
    """A LabelSelector as the API server matches it (matchLabels and Exists/DoesNotExist/In/NotIn)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        op, present = e["operator"], e["key"] in labels
        if (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
        if op == "In" and labels.get(e["key"]) not in e["values"]:
            return False
        if op == "NotIn" and labels.get(e["key"]) in e["values"]:
            return False
    return True


def _lets_in(spec: dict, labels: dict) -> bool:
    """Whether an ingress rule of the policy lets in a pod with `labels` from its own namespace."""
    return any(
        _selects(peer["podSelector"], labels)
        for rule in spec["ingress"]
        for peer in rule.get("from", [])
        if "podSelector" in peer and "namespaceSelector" not in peer
    )


def _checkov() -> str:
    for path in (
        os.environ.get("LLMOPS_CHECKOV"),
        os.path.join(sys.prefix, "checkov", "bin", "checkov"),
        shutil.which("checkov"),
    ):
        if path and os.path.exists(path):
            return path
    pytest.fail("checkov not installed (make installs it into .venv/checkov)")


def test_checkov_finds_nothing_in_the_built_manifests(tmp_path):
    for rel in _kustomizations():
        (tmp_path / f"{rel.replace('/', '_').replace('.', 'root')}.yaml").write_text(
            yaml.safe_dump_all(_build(rel), sort_keys=False)
        )
    result = subprocess.run(
        [_checkov(), "-d", str(tmp_path), "--framework", "kubernetes", "--compact", "-o", "json"],
        capture_output=True,
        text=True,
    )
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [(c["check_id"], c["resource"]) for r in reports for c in r.get("results", {}).get("failed_checks", [])]
    assert failed == []
    # the one check skipped, with its reason in the manifest: the doors' image digest, which
    # exists only once the images are pushed and is set where the manifests are applied
    skipped = {(c["check_id"], c["resource"]) for r in reports for c in r.get("results", {}).get("skipped_checks", [])}
    assert skipped == {("CKV_K8S_43", f"Deployment.{manifests.NS}.llm-{side}-door") for side in ("stable", "canary")}
    assert sum(r.get("summary", {}).get("passed", 0) for r in reports) > 20
