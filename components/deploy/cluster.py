"""Cluster targets: a KServe InferenceService on the Triton runtime (canary steps through
`canaryTrafficPercent`, promotion by removing it, rollback by 0) or, for RawDeployment
where KServe ignores that field, a Gateway API HTTPRoute whose `backendRefs` weights
split stable and canary Services.

The manifests are rendered here and validated against the official CRDs, unknown fields
rejected, in the tests; `ClusterTarget` applies them with the Kubernetes client behind the
LocalTarget's interface. No API server can run where this project is tested: that thin
path is tested against a recording stand-in for the API (every body it sends is
validated strictly), its storage upload against a real filesystem, its PromQL against a
real Prometheus.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.request

from kfp_llmops.components.common.errors import InputError, LlmopsError
from kfp_llmops.components.common.k8s import namespace

from . import smoke
from .config import CLUSTER_PROMETHEUS, DeployConfig
from .loadgen import LoadGenerator
from .prometheus import PromQL
from .triton_local import REPOSITORY_ROOT_ENV

KEY_MOUNT = "/var/run/secrets/kfp-llmops/watermark"
API_KEYS_MOUNT = "/var/run/secrets/kfp-llmops/api-keys"
FRONT_DOOR_RESOURCES = {"cpu": "1", "memory": "1Gi"}  # an asynchronous relay: no model, no tokenizer
_LOCKED = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
DOOR_PORT = 8080
# Which side a gateway-form pod serves (stable, canary): Triton's pods by the first, the
# front doors' by the second, so neither side's Service selects the other's pods.
TRACK_LABEL, DOOR_LABEL = "kfp-llmops/track", "kfp-llmops/door"
MODEL_ROOT_ANNOTATION = "kfp-llmops/model-root"
VERIFIED_START = ("python3", "-m", "kfp_llmops.components.deploy.verified_start")
LABELS = {"app.kubernetes.io/part-of": "kfp-llmops", "kfp-llmops/stage": "triton_canary_deploy"}


def _storage(cfg: DeployConfig, repository_root: str) -> str:
    """Each repository lives under its own root: what is served is addressed by content."""
    from kfp_llmops.components.common.storage import destination

    return destination(cfg.cluster.storage_uri, repository_root)


def render_inference_service(
    cfg: DeployConfig, repository_root: str, canary_percent: int | None, model_root: str = ""
) -> dict:
    """`model_root` (the served weights' root) is annotated: the next rollout reads which
    model is in production from it (`on_stale_baseline`)."""
    c = cfg.cluster
    limits = {"cpu": c.cpu, "memory": c.memory}
    if c.gpus:
        limits["nvidia.com/gpu"] = str(c.gpus)
    predictor: dict = {
        "serviceAccountName": c.service_account,
        "automountServiceAccountToken": False,  # the model never talks to the Kubernetes API
        "minReplicas": 1,
        "model": {
            "modelFormat": {"name": "triton"},
            "protocolVersion": "v2",
            "runtime": "kserve-tritonserver",
            "storageUri": _storage(cfg, repository_root),
            # The runtime's arguments (`tritonserver --model-store=/mnt/models ...`) run after
            # this: the repository is re-hashed by the image's code before the server starts.
            "command": list(VERIFIED_START),
            "args": ["--strict-model-config=true", "--model-control-mode=none"],
            "env": [
                {"name": "LLMOPS_WATERMARK_KEY_FILE", "value": f"{KEY_MOUNT}/key"},
                {"name": REPOSITORY_ROOT_ENV, "value": repository_root},  # what is verified before it starts
            ],
            "resources": {"requests": dict(limits), "limits": limits},
            "volumeMounts": [{"name": "watermark-key", "mountPath": KEY_MOUNT, "readOnly": True}],
            "securityContext": dict(_LOCKED),
        },
        "volumes": [{"name": "watermark-key", "secret": {"secretName": c.key_secret}}],
    }
    if canary_percent is not None:
        predictor["canaryTrafficPercent"] = canary_percent
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": c.service_name,
            "namespace": namespace(c.namespace),
            "labels": dict(LABELS),
            "annotations": {
                "serving.kserve.io/deploymentMode": c.mode,
                "kfp-llmops/repository-root": repository_root,
                **({MODEL_ROOT_ANNOTATION: model_root} if model_root else {}),
            },
        },
        "spec": {"predictor": predictor, **({"transformer": front_door(cfg)} if c.front_door else {})},
    }


def _door_container(cfg: DeployConfig, name: str, upstream: list[str]) -> dict:
    """The deploy image's OpenAI front end as a container: the OpenAI API and Triton's
    answer endpoints on port 8080, model endpoints only for a key from the mounted Secret,
    each key bounded; `upstream` names the Triton it relays to (none: KServe appends
    `--predictor_host`)."""
    from kfp_llmops.components import images

    running, waiting = cfg.frontend_limits
    return {
        "name": name,
        "image": images.DEPLOY,
        "command": ["python", "-m", "kfp_llmops.components.deploy.openai_frontend"],
        "args": [
            *upstream,
            *["--model_name", cfg.serving.model_name, "--http_port", str(DOOR_PORT), "--host", "0.0.0.0"],
            *["--api-keys", f"{API_KEYS_MOUNT}/keys"],
            *["--max-per-key", str(cfg.front_door.connections_per_client)],
            *["--max-running", str(running), "--max-waiting", str(waiting)],
        ],
        "resources": {"requests": dict(FRONT_DOOR_RESOURCES), "limits": dict(FRONT_DOOR_RESOURCES)},
        "volumeMounts": [{"name": "api-keys", "mountPath": API_KEYS_MOUNT, "readOnly": True}],
        "securityContext": dict(_LOCKED),
    }


def _api_keys_volume(cfg: DeployConfig) -> dict:
    return {"name": "api-keys", "secret": {"secretName": cfg.cluster.api_keys_secret}}


def front_door(cfg: DeployConfig) -> dict:
    """The InferenceService's transformer: the front door in front of the predictor (KServe
    routes the service's traffic here and appends `--predictor_host`), the only way in. Its
    own account has no token and no Role."""
    c = cfg.cluster
    return {
        "serviceAccountName": c.service_account,
        "automountServiceAccountToken": False,
        "minReplicas": 1,
        "containers": [_door_container(cfg, "kserve-container", [])],
        "volumes": [_api_keys_volume(cfg)],
    }


# Said where the deploy image has no digest (none exists before `make push`): the digest is
# set where the manifests are applied, by kustomize, from build/images/digests.json.
UNPINNED = (  # checkov reads ID=reason: no other '=' in the reason
    "CKV_K8S_43=no digest before the images are pushed; pin it where applied with "
    "kustomize's images field (newName, digest from build/images/digests.json)"
)


def door_name(service: str) -> str:
    """The gateway form's front door of one side's Service."""
    return f"{service}-door"


def render_gateway_doors(cfg: DeployConfig) -> list[dict]:
    """The gateway form's front doors: one Deployment and Service per side, in front of that
    side's Triton Service; the HTTPRoute's weights split between them. Their pods carry the
    labels KServe gives a transformer (as the gateway form's Triton pods carry the
    InferenceService's), so the same NetworkPolicies hold."""
    from kfp_llmops.components import images

    c = cfg.cluster
    pod_security = {
        "runAsNonRoot": True,
        "runAsUser": images.UID,  # the images' own user
        "runAsGroup": images.UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    docs = []
    for service, track in ((c.stable_service, "stable"), (c.canary_service, "canary")):
        pods = {"serving.kserve.io/inferenceservice": c.service_name, "component": "transformer", DOOR_LABEL: track}
        upstream = ["--triton", f"http://{service}:{c.port}"]
        container = _door_container(cfg, "front-door", upstream)
        container["ports"] = [{"name": "http", "containerPort": DOOR_PORT, "protocol": "TCP"}]
        container["imagePullPolicy"] = "Always"
        # ready while its Triton is; alive while it listens (a Triton down is not its fault)
        container["readinessProbe"] = {"httpGet": {"path": "/health", "port": DOOR_PORT}, "periodSeconds": 10}
        container["livenessProbe"] = {"tcpSocket": {"port": DOOR_PORT}, "periodSeconds": 10}
        meta = {"name": door_name(service), "labels": dict(LABELS)}
        unpinned = {} if "@sha256:" in container["image"] else {"annotations": {"checkov.io/skip1": UNPINNED}}
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {**meta, **unpinned},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": pods},
                    "template": {
                        "metadata": {"labels": {**LABELS, **pods}},
                        "spec": {
                            "serviceAccountName": c.service_account,
                            "automountServiceAccountToken": False,
                            "securityContext": dict(pod_security),
                            "containers": [container],
                            "volumes": [_api_keys_volume(cfg)],
                        },
                    },
                },
            }
        )
        port = {"name": "http", "port": DOOR_PORT, "targetPort": DOOR_PORT, "protocol": "TCP"}
        docs.append(
            {"apiVersion": "v1", "kind": "Service", "metadata": dict(meta), "spec": {"selector": pods, "ports": [port]}}
        )
    return docs


def predictor_url(cfg: DeployConfig) -> str:
    """The predictor's in-cluster address (KServe names its service `<name>-predictor`):
    where the controller reads the live model's config when the front door holds the
    InferenceService's own address (a door passes none), and where the door relays. The
    canary split happens here, between the predictor's revisions."""
    c = cfg.cluster
    return f"http://{c.service_name}-predictor.{namespace(c.namespace)}.svc.cluster.local"


OPENAI_PATHS = ["/v1/chat/completions", "/v1/completions", "/v1/models"]


def answer_paths(cfg: DeployConfig) -> list[str]:
    """What the route passes: server readiness and the served model's metadata, readiness
    and generate endpoints, and the OpenAI API where front doors answer it. Everything else
    (Triton's model-repository, shared-memory, statistics, trace and logging APIs) matches
    no rule, which the Gateway answers 404."""
    model = f"/v2/models/{cfg.serving.model_name}"
    paths = ["/v2/health/ready", model, f"{model}/ready", f"{model}/generate", f"{model}/generate_stream"]
    return paths + (OPENAI_PATHS if cfg.cluster.front_door else [])


def render_httproute(cfg: DeployConfig, canary_percent: int, model_root: str | None = None) -> dict:
    """`model_root`: the model production serves through this route (the promoted one),
    kept as an annotation so the next release knows what it replaces. No rule lets a
    client pick a side: the controller smoke-tests the canary at its own Service."""
    c = cfg.cluster

    def backend(service):  # with front doors, each side's door (which asks for the key)
        name, port = (door_name(service), DOOR_PORT) if c.front_door else (service, c.port)
        return {"group": "", "kind": "Service", "name": name, "port": port}

    canary, stable = backend(c.canary_service), backend(c.stable_service)
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": c.service_name,
            "namespace": namespace(c.namespace),
            "labels": dict(LABELS),
            **({"annotations": {MODEL_ROOT_ANNOTATION: model_root}} if model_root else {}),
        },
        "spec": {
            "parentRefs": [{"name": c.gateway_name}],
            "hostnames": [c.hostname],
            "rules": [
                {
                    "matches": [{"path": {"type": "Exact", "value": path}} for path in answer_paths(cfg)],
                    "backendRefs": [dict(stable, weight=100 - canary_percent), dict(canary, weight=canary_percent)],
                },
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


FIELD_MANAGER = "kfp-llmops"
PLURALS = {"InferenceService": "inferenceservices", "HTTPRoute": "httproutes"}
# Knative names a revision's pods <revision>-deployment-<hash>-<hash>.
REVISION_SELECTOR = 'pod=~"{revision}-deployment-.*"'


def kubernetes_api():
    """The CustomObjectsApi of the cluster this pod runs in (kubeconfig outside one)."""
    from kfp_llmops.components.common.k8s import clients

    return clients()[0]


class ClusterTarget:
    """Same methods as LocalTarget, on KServe (or Gateway API): the repository uploaded
    under its root and verified, every change server-side applied (so a field left out,
    like canaryTrafficPercent at promotion, is removed) and waited on until Ready,
    counters from Prometheus, the interface checked against the live model's metadata
    (Open Inference Protocol) before any traffic moves. `api` is a CustomObjectsApi."""

    name = "cluster"
    attributes = False  # KServe does not say which revision answered

    def __init__(self, cfg: DeployConfig, api=None, log=print):
        self.cfg, self.log = cfg, log
        c = cfg.cluster
        self.namespace = namespace(c.namespace)
        # where clients are answered: through the front door (with one, in the OpenAI API)
        self.url = c.url or f"http://{c.service_name}.{self.namespace}.svc.cluster.local"
        # where the live model's own Triton protocol answers (its config, which no door passes):
        # the gateway form's stable Service, the kserve form's predictor behind a front door
        if cfg.target == "gateway":
            self.model_url = f"http://{c.stable_service}.{self.namespace}.svc.cluster.local:{c.port}"
        else:
            self.model_url = predictor_url(cfg) if c.front_door else self.url
        self.api_kind = "openai" if c.front_door else "triton"
        self.headers = {"Host": c.hostname} if cfg.target == "gateway" else {}
        self._door_key: str | None = None
        self.promql = PromQL(cfg.metrics.prometheus_url or CLUSTER_PROMETHEUS)
        self._api = api
        self.repository_root = ""
        self.model_root = ""
        self.storage_uri = ""
        self.live: dict | None = None  # the InferenceService before this rollout
        self.route_root: str | None = None  # the model the HTTPRoute served before it (gateway)
        self.stable: str | None = None  # "cluster" when something already serves
        self.stable_at_start: dict | None = None

    @property
    def api(self):
        if self._api is None:
            self._api = kubernetes_api()
        return self._api

    # -- the API -------------------------------------------------------------------------

    def _get(self, kind: str) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        group, version = (
            ("serving.kserve.io", "v1beta1") if kind == "InferenceService" else ("gateway.networking.k8s.io", "v1")
        )
        try:
            return self.api.get_namespaced_custom_object(
                group, version, self.namespace, PLURALS[kind], self.cfg.cluster.service_name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise LlmopsError(
                f"{kind} {self.namespace}/{self.cfg.cluster.service_name}: {exc.status} {exc.reason}"
            ) from None

    def _apply(self, manifest: dict) -> dict:
        """Server-side apply: create or update; fields this manager set before and omits now are removed."""
        from kubernetes.client.exceptions import ApiException

        group, version = manifest["apiVersion"].split("/")
        meta = manifest["metadata"]
        try:
            return self.api.patch_namespaced_custom_object(
                group,
                version,
                meta["namespace"],
                PLURALS[manifest["kind"]],
                meta["name"],
                manifest,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
            )
        except ApiException as exc:
            raise LlmopsError(
                f"{manifest['kind']} {meta['namespace']}/{meta['name']}: apply refused: {exc.status} {exc.reason}"
            ) from None

    def _wait_ready(self) -> dict:
        """Until the InferenceService reports Ready for its newest generation, or the timeout."""
        deadline = time.monotonic() + self.cfg.cluster.ready_timeout_s
        last = ""
        while True:
            isvc = self._get("InferenceService") or {}
            status = isvc.get("status", {})
            ready = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), {})
            current = status.get("observedGeneration", 0) >= isvc.get("metadata", {}).get("generation", 1)
            if current and ready.get("status") == "True":
                return isvc
            last = ready.get("message") or ready.get("reason") or "no Ready condition yet"
            if time.monotonic() >= deadline:
                raise LlmopsError(
                    f"InferenceService {self.namespace}/{self.cfg.cluster.service_name} not Ready "
                    f"after {self.cfg.cluster.ready_timeout_s:.0f} s: {last}"
                )
            time.sleep(2.0)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, canary_repo: str, info: dict | None = None) -> None:
        """Upload the verified repository (`info`: what `repository.verify` said of it)
        under its root; find what serves now."""
        from kfp_llmops.components.common import integrity, storage

        self.repository_root = integrity.load_manifest(f"{canary_repo}/{integrity.MANIFEST_NAME}")[1]
        self.model_root = (info or {}).get("model_root", "")
        self.storage_uri = storage.upload(
            canary_repo, self.cfg.cluster.storage_uri, self.cfg.cluster.pvc_mounts, self.log
        )
        self.live = self._get("InferenceService") if self.cfg.target == "kserve" else None
        route = self._get("HTTPRoute") if self.cfg.target == "gateway" else None
        self.route_root = (route or {}).get("metadata", {}).get("annotations", {}).get(MODEL_ROOT_ANNOTATION)
        if self.cfg.target == "gateway" or self.live is not None:
            self.stable = "cluster"
            annotations = (self.live or {}).get("metadata", {}).get("annotations", {})
            self.stable_at_start = {"version": None, "repository_root": annotations.get("kfp-llmops/repository-root")}

    def close(self) -> None:
        pass

    def production_root(self) -> tuple[bool, str | None]:
        """(known, the model root serving now): the InferenceService's (or the HTTPRoute's)
        annotation; unknown on one an older release wrote without it."""
        live = self._get("HTTPRoute" if self.cfg.target == "gateway" else "InferenceService")
        if live is None:
            return True, None
        root = live.get("metadata", {}).get("annotations", {}).get(MODEL_ROOT_ANNOTATION)
        return (True, root) if root else (False, None)

    def set_canary_percent(self, percent: int) -> None:
        if self.cfg.target == "gateway":  # the route names the model that takes all of it
            self._apply(render_httproute(self.cfg, percent, self.model_root if percent >= 100 else self.route_root))
            return
        first = self.stable is None
        self._apply(
            render_inference_service(
                self.cfg, self.repository_root, None if first or percent >= 100 else percent, self.model_root
            )
        )
        self._wait_ready()

    def canary_alive(self) -> bool | None:
        return None

    def stable_alive(self) -> bool | None:
        """Kubernetes restarts a dead predictor; its readiness is what _wait_ready sees."""
        return None

    def _revisions(self) -> dict[str, str]:
        predictor = (self._get("InferenceService") or {}).get("status", {}).get("components", {}).get("predictor", {})
        return {
            "canary": predictor.get("latestCreatedRevision", ""),
            "stable": predictor.get("previousRolledoutRevision") or predictor.get("latestRolledoutRevision", ""),
        }

    def _selector(self, role: str) -> str | None:
        selector = self.cfg.metrics.stable_selector if role == "stable" else self.cfg.metrics.canary_selector
        if not selector or "{revision}" in selector:
            revision = self._revisions().get(role) if self.cfg.target == "kserve" else ""
            if not revision:
                return None
            selector = (selector or REVISION_SELECTOR).replace("{revision}", revision)
        return selector

    def scrape(self, role: str) -> dict | None:
        try:
            selector = self._selector(role)
            if selector is None:
                return None
            return self.promql.counters_now(self.cfg.serving.model_name, selector, self.cfg.metrics.freshness_timeout_s)
        except (OSError, LlmopsError):
            return None

    def token_latency(self, role: str, delta: dict | None, seconds: float) -> dict | None:
        """TTFT and ITL quantiles over the interval, by PromQL's histogram_quantile."""
        try:
            selector = self._selector(role)
            return (
                None if selector is None else self.promql.token_latency(self.cfg.serving.model_name, selector, seconds)
            )
        except (OSError, LlmopsError):
            return None

    def _key_header(self) -> dict:
        """Where front doors ask for a key, the Authorization the controller's own requests
        carry: the first key of `cluster.api_keys_file` (by default the Secret's file as the
        compiled pipelines mount it), read once; else nothing."""
        c = self.cfg.cluster
        if not c.front_door:
            return {}
        if self._door_key is None:
            from .api_keys import controller_key

            path = c.api_keys_file or f"{API_KEYS_MOUNT}/keys"
            try:
                self._door_key = controller_key(path)
            except InputError as exc:
                raise InputError(
                    f"{exc}: the front doors ask the controller for a key too (mount the Secret "
                    f"{c.api_keys_secret} at {API_KEYS_MOUNT}, as the compiled pipelines do, or set "
                    "cluster.api_keys_file)"
                ) from None
        return {"Authorization": f"Bearer {self._door_key}"}

    def _route_headers(self) -> dict:
        """What requests to `self.url` carry: the Host the gateway form's route matches, and the key."""
        return {**self.headers, **self._key_header()}

    def load(self) -> LoadGenerator:
        """Clients' traffic as clients send it: through the front door in the OpenAI API
        (the kserve form's transformer relays to the predictor, whose revisions Knative
        splits; the gateway form's route splits between the doors), else Triton's generate
        extension."""
        from urllib.parse import urlsplit

        u = urlsplit(self.url)
        t = self.cfg.traffic
        return LoadGenerator(
            u.hostname,
            u.port or 80,
            self.cfg.serving.model_name,
            {},
            t.prompts,
            t.max_new_tokens,
            t.concurrency,
            t.timeout_s,
            headers=self._route_headers(),
            api=self.api_kind,
        )

    def smoke(self, watermark=None, tokenizer=None) -> dict:
        """Gateway target: at the canary's own door (or its Triton Service without doors),
        in the cluster; with `cluster.url` set, through the route, weighted. KServe: through
        the InferenceService, weighted."""
        c = self.cfg.cluster
        if self.cfg.target == "gateway" and not c.url:
            side, port = (door_name(c.canary_service), DOOR_PORT) if c.front_door else (c.canary_service, c.port)
            url = f"http://{side}.{self.namespace}.svc.cluster.local:{port}"
            return smoke.run(url, self.cfg, watermark, tokenizer, self._key_header(), self.api_kind)
        return smoke.run(self.url, self.cfg, watermark, tokenizer, self._route_headers(), api=self.api_kind)

    def interfaces(self):
        """(stable metadata, stable config) from the live model over the Open Inference
        Protocol, and the new repository's declared interface; None on a first release."""
        if self.stable is None:
            return None
        from . import repository

        name, url = self.cfg.serving.model_name, self.model_url
        live = []
        for path in (f"/v2/models/{name}", f"/v2/models/{name}/config"):
            req = urllib.request.Request(url + path)
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    live.append(json.load(resp))
            except OSError as exc:
                raise InputError(f"{url}{path}: the live model did not describe itself: {exc}") from None
        return (*live, *repository.declared_interface(self.cfg))

    def rollback(self) -> dict:
        if self.cfg.target == "gateway":
            self._apply(render_httproute(self.cfg, 0, self.route_root))
        elif self.live is not None:
            self._apply(self.live_manifest())  # the spec that served before, canary removed
            self._wait_ready()
        return {"canary_percent": 0}

    def live_manifest(self) -> dict:
        """What served before this rollout, as an apply body (its spec, our metadata)."""
        old = self.live or {}
        annotations = old.get("metadata", {}).get("annotations", {})
        doc = render_inference_service(
            self.cfg,
            annotations.get("kfp-llmops/repository-root", ""),
            None,
            annotations.get(MODEL_ROOT_ANNOTATION, ""),
        )
        doc["spec"] = copy.deepcopy(old.get("spec", doc["spec"]))
        doc["spec"].get("predictor", {}).pop("canaryTrafficPercent", None)
        return doc

    def promote(self, info: dict) -> None:
        self.set_canary_percent(100)


def to_yaml(manifests: list[dict]) -> str:
    import yaml

    return "---\n".join(yaml.safe_dump(copy.deepcopy(m), sort_keys=False) for m in manifests)
