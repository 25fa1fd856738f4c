"""manifests/: generated from the same code the stages use and committed (golden); every
kustomization builds with `kubectl kustomize`; core kinds validate with
kubernetes-validate, custom resources against the official CRDs; RBAC is least
privilege; checkov finds nothing in the built output."""
import json
import os
import shutil
import subprocess
import sys

import jsonschema
import kubernetes_validate
import pytest
import yaml

from kfp_llmops.pipelines import manifests

SCHEMAS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "schemas")
K8S_VERSION = "1.32"
CRDS = {("serving.kserve.io/v1beta1", "InferenceService"): ("kserve-v0.20.0-inferenceservices.crd.yaml", "v1beta1"),
        ("gateway.networking.k8s.io/v1", "HTTPRoute"): ("gateway-api-v1.6.1-httproutes.crd.yaml", "v1"),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob"): ("kubeflow-trainer-v2.3.0-trainjobs.crd.yaml", "v1alpha1")}


def _kustomizations():
    root = manifests.MANIFESTS_DIR
    return sorted(os.path.relpath(d, root) for d, _, files in os.walk(root) if "kustomization.yaml" in files)


def _build(rel: str) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.fail("kubectl (with kustomize) is needed to build manifests/")
    out = subprocess.run([kubectl, "kustomize", os.path.join(manifests.MANIFESTS_DIR, rel)],
                         capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _crd_schema(name, version):
    crd = yaml.safe_load(open(os.path.join(SCHEMAS, name)))
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return v["schema"]["openAPIV3Schema"]


def test_manifests_are_generated_and_committed():
    assert manifests.write_all(check=True) == []


@pytest.mark.parametrize("rel", _kustomizations())
def test_every_kustomization_builds_and_validates(rel):
    docs = _build(rel)
    assert docs
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        if key in CRDS:
            jsonschema.validate(doc, _crd_schema(*CRDS[key]))
        elif doc["kind"] == "Application":       # Argo CD: no schema in ../shared; check the essentials
            assert doc["spec"]["source"]["path"] and doc["spec"]["destination"]["namespace"]
        else:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        if rel != "gitops":
            assert doc["metadata"].get("namespace") == manifests.NS


def test_rbac_is_least_privilege_and_secrets_are_references():
    docs = _build(".")
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert {r["kind"] for r in roles} == {"Role"}                     # namespaced only
    for role in roles:
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
            assert "secrets" not in rule["resources"]
    deploy = next(r for r in roles if r["metadata"]["name"] == "llmops-deploy")
    assert {res for rule in deploy["rules"] for res in rule["resources"]} == {"inferenceservices", "httproutes"}
    assert "create" not in {v for rule in deploy["rules"] for v in rule["verbs"]}
    everything = json.dumps([_build(r) for r in _kustomizations()])
    assert '"kind": "Secret"' not in everything and "llmops-watermark-key" in everything   # referenced, never defined


def _checkov() -> str:
    for path in (os.environ.get("LLMOPS_CHECKOV"), os.path.join(sys.prefix, "checkov", "bin", "checkov"),
                 shutil.which("checkov")):
        if path and os.path.exists(path):
            return path
    pytest.fail("checkov not installed (make installs it into .venv/checkov)")


def test_checkov_finds_nothing_in_the_built_manifests(tmp_path):
    for rel in _kustomizations():
        (tmp_path / f"{rel.replace('/', '_').replace('.', 'root')}.yaml").write_text(
            yaml.safe_dump_all(_build(rel), sort_keys=False))
    result = subprocess.run([_checkov(), "-d", str(tmp_path), "--framework", "kubernetes", "--quiet", "--compact",
                             "-o", "json"], capture_output=True, text=True)
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [(c["check_id"], c["resource"]) for r in reports for c in r.get("results", {}).get("failed_checks", [])]
    assert failed == []
    assert sum(r.get("summary", {}).get("passed", 0) for r in reports) > 20
