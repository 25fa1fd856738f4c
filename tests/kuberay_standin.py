"""A stand-in for the slice of the Kubernetes API that `rayjob` uses (CustomObjectsApi for
RayJobs, CoreV1Api for their pods and the submitter's log), answering as KubeRay 1.7 does
in K8sJobMode: a created RayJob must pass strict validation (unknown fields refused);
what runs is `start(job)`; its status is KubeRay's (jobDeploymentStatus Running, then
Complete with jobStatus SUCCEEDED, or Failed with FAILED and reason AppFailed); the
submitter Job's pod carries the job's log with the kubelet's timestamps."""
from __future__ import annotations

import time
from types import SimpleNamespace

from kubernetes.client.exceptions import ApiException
from strict_schema import validate as strict
from trainer_standin import Run, stamp

__all__ = ["KubeRayStandIn", "Run"]


class KubeRayStandIn:
    def __init__(self, start):
        self.start = start
        self.jobs: dict[tuple[str, str], dict] = {}
        self.created: list[dict] = []

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        assert (group, version, plural) == ("ray.io", "v1", "rayjobs")
        strict(body)
        assert body["metadata"]["namespace"] == namespace
        key = (namespace, body["metadata"]["name"])
        if key in self.jobs:
            raise ApiException(status=409, reason="Conflict")
        self.created.append(body)
        self.jobs[key] = {"body": body, "run": self.start(body)}
        return body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        job = self.jobs.get((namespace, name))
        if job is None:
            raise ApiException(status=404, reason="Not Found")
        code = job["run"].state()
        if code is None:
            status = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
        elif code == 0:
            status = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}
        else:
            status = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed",
                      "message": f"Job entrypoint command failed with exit code {code}"}
        return {**job["body"], "status": {**status, "rayClusterName": f"{name}-raycluster"}}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, **kwargs):
        job = self.jobs.pop((namespace, name), None)
        if job is None:
            raise ApiException(status=404, reason="Not Found")
        job["run"].stop()

    def _pods(self, namespace: str, selector: str):
        key, _, value = selector.partition("=")
        for (ns, name), job in self.jobs.items():
            if ns != namespace or value != name:
                continue
            for pod, role, code, reason in job["run"].pods():
                if key == "ray.io/originated-from-cr-name" or role == "submitter":
                    yield pod, role, code, reason

    def list_namespaced_pod(self, namespace, label_selector=""):
        items = []
        for pod, role, code, reason in self._pods(namespace, label_selector):
            terminated = None if code is None else SimpleNamespace(exit_code=code, reason=reason)
            items.append(SimpleNamespace(metadata=SimpleNamespace(name=pod), status=SimpleNamespace(
                container_statuses=[SimpleNamespace(name=role, state=SimpleNamespace(terminated=terminated))])))
        return SimpleNamespace(items=items)

    def read_namespaced_pod_log(self, name, namespace, container=None, timestamps=False, since_seconds=None):
        assert container == "ray-job-submitter"
        for job in self.jobs.values():
            run = job["run"]
            if any(pod == name and role == "submitter" for pod, role, _, _ in run.pods()):
                now = time.time()
                with run.lock:
                    lines = [(at, text) for at, text in run.log if since_seconds is None or at >= now - since_seconds]
                return "".join(f"{stamp(at) + ' ' if timestamps else ''}{text}\n" for at, text in lines)
        raise ApiException(status=404, reason="Not Found")
