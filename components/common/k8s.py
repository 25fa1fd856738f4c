"""Where kfp-llmops's Kubernetes objects live, decided in one place.

In a multi-user Kubeflow each profile has its own namespace and a pipeline pod runs in
its user's; so an empty setting means "the namespace this pod runs in" (the service
account's namespace file), then `$LLMOPS_NAMESPACE`, then the single-user default."""

from __future__ import annotations

import os

DEFAULT_NAMESPACE = "kubeflow"
# Every task pod of the pipelines carries this label (Argo's podMetadata, KFP's pod
# labels): the NetworkPolicies let those pods, and no others, reach the served model.
TASK_LABEL = {"kfp-llmops/pipeline-task": "true"}
POD_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def namespace(explicit: str = "") -> str:
    if explicit:
        return explicit
    try:
        with open(POD_NAMESPACE_FILE, encoding="utf-8") as handle:
            found = handle.read().strip()
        if found:
            return found
    except OSError:
        pass
    return os.environ.get("LLMOPS_NAMESPACE") or DEFAULT_NAMESPACE


def _client():
    """The kubernetes client, configured for the cluster this pod runs in (kubeconfig outside one)."""
    from .errors import InputError

    try:
        from kubernetes import client, config
    except ImportError:
        raise InputError("talking to the cluster needs the `kubernetes` package") from None
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client


def clients():
    """(CustomObjectsApi, CoreV1Api)."""
    client = _client()
    return client.CustomObjectsApi(), client.CoreV1Api()


def coordination():
    """CoordinationV1Api: the Leases one rollout per served model holds."""
    return _client().CoordinationV1Api()
