"""A stand-in for the slice of the Kubernetes API that `trainjob_run` uses
(CustomObjectsApi for TrainJobs, CoreV1Api for their pods and logs), answering as
Kubeflow Trainer v2.3 with JobSet does: a created TrainJob must pass strict validation
(unknown fields refused) and name a known runtime; its pods are what `start(job)` runs;
its conditions are JobSet's, copied as Trainer copies them; the launcher's log comes
with the kubelet's RFC 3339 timestamps."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from kubernetes.client.exceptions import ApiException
from strict_schema import validate as strict

COMPLETE = {"type": "Complete", "status": "True", "reason": "AllJobsCompleted",
            "message": "jobset completed successfully"}
FAILED = {"type": "Failed", "status": "True", "reason": "FailedJobs",
          "message": "jobset failed due to one or more job failures"}


def stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1e9):09d}Z"


class Run:
    """What a started TrainJob does. `state()`: None while it runs, else its exit code;
    `pods()`: [(name, replicated job, exit code or None, reason)]; `log`: the launcher's
    lines as (epoch seconds, text)."""

    def __init__(self):
        self.log: list[tuple[float, str]] = []
        self.lock = threading.Lock()

    def say(self, text: str) -> None:
        with self.lock:
            self.log.append((time.time(), text))

    def state(self) -> int | None:
        raise NotImplementedError

    def pods(self) -> list[tuple[str, str, int | None, str]]:
        raise NotImplementedError

    def stop(self) -> None:
        pass


class TrainerStandIn:
    def __init__(self, start, runtimes=("kfp-llmops-deepspeed",), secrets: dict | None = None):
        self.start, self.runtimes, self.secrets = start, set(runtimes), secrets or {}
        self.jobs: dict[tuple[str, str], dict] = {}
        self.created: list[dict] = []

    # -- CustomObjectsApi --------------------------------------------------------------------

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        assert (group, version, plural) == ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
        strict(body)
        assert body["metadata"]["namespace"] == namespace
        key = (namespace, body["metadata"]["name"])
        if key in self.jobs:
            raise ApiException(status=409, reason="Conflict")
        ref = body["spec"]["runtimeRef"]
        if ref["kind"] != "TrainingRuntime" or ref["name"] not in self.runtimes:
            raise ApiException(status=422, reason=f"Unprocessable Entity: {ref['kind']} {ref['name']} not found")
        for env in body["spec"]["trainer"]["env"]:
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref and ref["name"] not in self.secrets:
                raise ApiException(status=422, reason=f"secret {ref['name']} not found")
        self.created.append(body)
        self.jobs[key] = {"body": body, "run": self.start(body)}
        return body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        job = self.jobs.get((namespace, name))
        if job is None:
            raise ApiException(status=404, reason="Not Found")
        code = job["run"].state()
        conditions = [] if code is None else [COMPLETE if code == 0 else FAILED]
        return {**job["body"], "status": {"conditions": conditions}}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, **kwargs):
        job = self.jobs.pop((namespace, name), None)
        if job is None:
            raise ApiException(status=404, reason="Not Found")
        job["run"].stop()

    # -- CoreV1Api -----------------------------------------------------------------------------

    def _pods(self, namespace: str, selector: str):
        want = dict(part.split("=", 1) for part in selector.split(","))
        for (ns, name), job in self.jobs.items():
            if ns != namespace or want.get("jobset.sigs.k8s.io/jobset-name") != name:
                continue
            for pod, rjob, code, reason in job["run"].pods():
                if want.get("jobset.sigs.k8s.io/replicatedjob-name", rjob) == rjob:
                    yield job, pod, code, reason

    def list_namespaced_pod(self, namespace, label_selector=""):
        items = []
        for _, pod, code, reason in self._pods(namespace, label_selector):
            terminated = None if code is None else SimpleNamespace(exit_code=code, reason=reason)
            items.append(SimpleNamespace(metadata=SimpleNamespace(name=pod), status=SimpleNamespace(
                container_statuses=[SimpleNamespace(name="node", state=SimpleNamespace(terminated=terminated))])))
        return SimpleNamespace(items=items)

    def read_namespaced_pod_log(self, name, namespace, container=None, timestamps=False, since_seconds=None):
        assert container == "node"
        for job in self.jobs.values():
            run = job["run"]
            if any(pod == name and rjob == "launcher" for pod, rjob, _, _ in run.pods()):
                now = time.time()
                with run.lock:
                    lines = [(at, text) for at, text in run.log if since_seconds is None or at >= now - since_seconds]
                return "".join(f"{stamp(at) + ' ' if timestamps else ''}{text}\n" for at, text in lines)
        raise ApiException(status=404, reason="Not Found")
