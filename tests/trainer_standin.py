"""A stand-in for the slice of the Kubernetes API that `trainjob_run` uses
(CustomObjectsApi for TrainJobs, CoreV1Api for their pods and logs), answering as
Kubeflow Trainer v2.3 with JobSet does: a created TrainJob must pass strict validation
(unknown fields refused) and name a known runtime; its pods are what `start(job)` runs;
its conditions are JobSet's, copied as Trainer copies them; the launcher's log comes
with the kubelet's RFC 3339 timestamps."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from job_standin import JobStandIn, Run, stamp

__all__ = ["TrainerStandIn", "Run", "stamp", "COMPLETE", "FAILED"]

COMPLETE = {
    "type": "Complete",
    "status": "True",
    "reason": "AllJobsCompleted",
    "message": "jobset completed successfully",
}
FAILED = {
    "type": "Failed",
    "status": "True",
    "reason": "FailedJobs",
    "message": "jobset failed due to one or more job failures",
}


class TrainerStandIn(JobStandIn):
    API = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
    LOG_ROLE = "launcher"
    LOG_CONTAINER = "node"

    def __init__(self, start, runtimes=("kfp-llmops-deepspeed",), secrets: dict | None = None):
        super().__init__(start)
        self.runtimes, self.secrets = set(runtimes), secrets or {}

    def admit(self, body):
        ref = body["spec"]["runtimeRef"]
        if ref["kind"] != "TrainingRuntime" or ref["name"] not in self.runtimes:
            raise ApiException(status=422, reason=f"Unprocessable Entity: {ref['kind']} {ref['name']} not found")
        for env in body["spec"]["trainer"]["env"]:
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref and ref["name"] not in self.secrets:
                raise ApiException(status=422, reason=f"secret {ref['name']} not found")

    def status(self, code):
        return {"conditions": [] if code is None else [COMPLETE if code == 0 else FAILED]}

    def select(self, selector, name, role):
        want = dict(part.split("=", 1) for part in selector.split(","))
        return (
            want.get("jobset.sigs.k8s.io/jobset-name") == name
            and want.get("jobset.sigs.k8s.io/replicatedjob-name", role) == role
        )
