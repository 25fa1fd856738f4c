"""Cluster targets: a KServe InferenceService on the Triton runtime (canary steps through
`canaryTrafficPercent`, promotion by removing it, rollback by 0) or, for RawDeployment
where KServe ignores that field, a Gateway API HTTPRoute whose `backendRefs` weights
split stable and canary Services.

The manifests are rendered here and validated against the official CRDs in the tests;
`ClusterTarget` applies them with the Kubernetes client behind the LocalTarget's
interface. No API server is reachable where this project is tested, so that last thin
path is not exercised there.
"""
from __future__ import annotations

import copy
import urllib.request

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.k8s import namespace

from . import metrics as prom
from . import smoke
from .config import DeployConfig
from .loadgen import LoadGenerator

KEY_MOUNT = "/var/run/secrets/kfp-llmops/watermark"
LABELS = {"app.kubernetes.io/part-of": "kfp-llmops", "kfp-llmops/stage": "triton_canary_deploy"}


def _storage(cfg: DeployConfig, repository_root: str) -> str:
    """Each repository lives under its own root: what is served is addressed by content."""
    return cfg.cluster.storage_uri.rstrip("/") + f"/{repository_root}"


def render_inference_service(cfg: DeployConfig, repository_root: str, canary_percent: int | None) -> dict:
    c = cfg.cluster
    limits = {"cpu": c.cpu, "memory": c.memory}
    if c.gpus:
        limits["nvidia.com/gpu"] = str(c.gpus)
    predictor: dict = {
        "serviceAccountName": c.service_account,
        "minReplicas": 1,
        "model": {
            "modelFormat": {"name": "triton"},
            "protocolVersion": "v2",
            "runtime": "kserve-tritonserver",
            "storageUri": _storage(cfg, repository_root),
            "args": ["--strict-model-config=true", "--model-control-mode=none"],
            "env": [{"name": "LLMOPS_WATERMARK_KEY_FILE", "value": f"{KEY_MOUNT}/key"}],
            "resources": {"requests": dict(limits), "limits": limits},
            "volumeMounts": [{"name": "watermark-key", "mountPath": KEY_MOUNT, "readOnly": True}],
            "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
        },
        "volumes": [{"name": "watermark-key", "secret": {"secretName": c.key_secret}}],
    }
    if canary_percent is not None:
        predictor["canaryTrafficPercent"] = canary_percent
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": c.service_name, "namespace": namespace(c.namespace), "labels": dict(LABELS),
                     "annotations": {"serving.kserve.io/deploymentMode": c.mode,
                                     "kfp-llmops/repository-root": repository_root}},
        "spec": {"predictor": predictor},
    }


def render_httproute(cfg: DeployConfig, canary_percent: int) -> dict:
    c = cfg.cluster
    canary = {"group": "", "kind": "Service", "name": c.canary_service, "port": c.port}
    stable = {"group": "", "kind": "Service", "name": c.stable_service, "port": c.port}
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": c.service_name, "namespace": namespace(c.namespace), "labels": dict(LABELS)},
        "spec": {
            "parentRefs": [{"name": c.gateway_name}],
            "hostnames": [c.hostname],
            "rules": [
                {"matches": [{"headers": [{"type": "Exact", "name": "X-Canary", "value": "always"}]}],
                 "backendRefs": [dict(canary, weight=1)]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                 "backendRefs": [dict(stable, weight=100 - canary_percent), dict(canary, weight=canary_percent)]},
            ],
        },
    }


def rollout_manifests(cfg: DeployConfig, repository_root: str) -> list[tuple[str, dict]]:
    """What the cluster target applies, step by step: (label, manifest)."""
    out = []
    if cfg.target == "gateway":
        for p in cfg.steps:
            out.append((f"step {p} %", render_httproute(cfg, p)))
        out.append(("rollback", render_httproute(cfg, 0)))
    else:
        for p in cfg.steps[:-1]:
            out.append((f"step {p} %", render_inference_service(cfg, repository_root, p)))
        out.append(("promote", render_inference_service(cfg, repository_root, None)))
        out.append(("rollback", render_inference_service(cfg, repository_root, 0)))
    return out


class ClusterTarget:
    """Same methods as LocalTarget; the Kubernetes client is imported only here."""

    name = "cluster"
    attributes = False       # KServe does not say which revision answered
    stable = "cluster"       # a stable revision is assumed to be serving
    stable_at_start = None   # not verifiable from here

    def __init__(self, cfg: DeployConfig):
        if not cfg.cluster.url:
            raise InputError("cluster.url: needed to send traffic and smoke tests to the cluster target")
        self.cfg = cfg
        self.repository_root = ""

    def _api(self):
        try:
            from kubernetes import client, config
        except ImportError:
            raise InputError("the cluster targets need the `kubernetes` package") from None
        config.load_incluster_config()
        return client.CustomObjectsApi()

    def _apply(self, manifest: dict) -> None:
        group, version = manifest["apiVersion"].split("/")
        plural = {"InferenceService": "inferenceservices", "HTTPRoute": "httproutes"}[manifest["kind"]]
        self._api().patch_namespaced_custom_object(group, version, manifest["metadata"]["namespace"], plural,
                                                   manifest["metadata"]["name"], manifest)

    def start(self, canary_repo: str) -> None:
        """The repository is already verified and uploaded under its root (`_storage`)."""
        from kfp_llmops.components.common import integrity
        self.repository_root = integrity.load_manifest(f"{canary_repo}/{integrity.MANIFEST_NAME}")[1]

    def close(self) -> None:
        pass

    def set_canary_percent(self, percent: int) -> None:
        if self.cfg.target == "gateway":
            self._apply(render_httproute(self.cfg, percent))
        else:
            self._apply(render_inference_service(self.cfg, self.repository_root, percent if percent < 100 else None))

    def canary_alive(self) -> bool | None:
        return None

    def scrape(self, role: str) -> dict | None:
        url = self.cfg.cluster.canary_metrics_url if role == "canary" else self.cfg.cluster.stable_metrics_url
        if not url:
            return None
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return prom.parse(resp.read().decode(), self.cfg.serving.model_name)
        except OSError:
            return None

    def load(self) -> LoadGenerator:
        from urllib.parse import urlsplit
        u = urlsplit(self.cfg.cluster.url)
        t = self.cfg.traffic
        return LoadGenerator(u.hostname, u.port or 80, self.cfg.serving.model_name, {}, t.prompts, t.max_new_tokens,
                             t.concurrency, t.timeout_s, headers={"Host": self.cfg.cluster.hostname})

    def smoke(self, watermark=None, tokenizer=None) -> dict:
        return smoke.run(self.cfg.cluster.url, self.cfg, watermark, tokenizer)

    def interfaces(self):
        return None

    def rollback(self) -> dict:
        self.set_canary_percent(0)
        return {"canary_percent": 0}

    def promote(self, info: dict) -> None:
        self.set_canary_percent(100)


def to_yaml(manifests: list[dict]) -> str:
    import yaml
    return "---\n".join(yaml.safe_dump(copy.deepcopy(m), sort_keys=False) for m in manifests)


