"""A stand-in for the slice of the Kubernetes API that `rayjob` uses (CustomObjectsApi for
RayJobs, CoreV1Api for their pods and the submitter's log), answering as KubeRay 1.7 does
in K8sJobMode: its status is KubeRay's (jobDeploymentStatus Running, then Complete with
jobStatus SUCCEEDED, or Failed with FAILED and reason AppFailed); the submitter Job's pod
carries the job's log."""

from __future__ import annotations

from job_standin import JobStandIn, Run

__all__ = ["KubeRayStandIn", "Run"]


class KubeRayStandIn(JobStandIn):
    API = ("ray.io", "v1", "rayjobs")
    LOG_ROLE = "submitter"
    LOG_CONTAINER = "ray-job-submitter"

    def status(self, code):
        if code is None:
            return {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}
        if code == 0:
            return {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}
        return {
            "jobDeploymentStatus": "Failed",
            "jobStatus": "FAILED",
            "reason": "AppFailed",
            "message": f"Job entrypoint command failed with exit code {code}",
        }

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        job = super().get_namespaced_custom_object(group, version, namespace, plural, name)
        job["status"]["rayClusterName"] = f"{name}-raycluster"
        return job

    def select(self, selector, name, role):
        key, _, value = selector.partition("=")
        return value == name and (key == "ray.io/originated-from-cr-name" or role == "submitter")

    def container(self, role):
        return role
