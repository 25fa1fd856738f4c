"""What the Kubernetes stand-ins for a job operator share (TrainJobs, RayJobs): a created
job must pass strict validation (unknown fields refused); what runs is `start(job)`; its
pods carry their containers' exit codes and reasons; the log pod's lines come with the
kubelet's RFC 3339 timestamps. A subclass names its API, its status and its pods."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from kubernetes.client.exceptions import ApiException

from strict_schema import validate as strict


def stamp(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1e9):09d}Z"


class Run:
    """What a started job does. `state()`: None while it runs, else its exit code;
    `pods()`: [(name, role, exit code or None, reason)]; `log`: the log pod's lines as
    (epoch seconds, text)."""

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


class JobStandIn:
    API: tuple[str, str, str]  # (group, version, plural)
    LOG_ROLE: str  # the pod whose log the job's follower reads
    LOG_CONTAINER: str  # and its container

    def __init__(self, start):
        self.start = start
        self.jobs: dict[tuple[str, str], dict] = {}
        self.created: list[dict] = []

    def admit(self, body: dict) -> None:
        """What the operator's webhook refuses beyond the schema (ApiException)."""

    def status(self, code: int | None) -> dict:
        raise NotImplementedError

    def select(self, selector: str, name: str, role: str) -> bool:
        """Whether the pod of job `name` in `role` matches `selector`."""
        raise NotImplementedError

    def container(self, role: str) -> str:
        return self.LOG_CONTAINER

    # -- CustomObjectsApi --------------------------------------------------------------------

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        assert (group, version, plural) == self.API
        strict(body)
        assert body["metadata"]["namespace"] == namespace
        key = (namespace, body["metadata"]["name"])
        if key in self.jobs:
            raise ApiException(status=409, reason="Conflict")
        self.admit(body)
        self.created.append(body)
        self.jobs[key] = {"body": body, "run": self.start(body)}
        return body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        job = self.jobs.get((namespace, name))
        if job is None:
            raise ApiException(status=404, reason="Not Found")
        return {**job["body"], "status": self.status(job["run"].state())}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, **kwargs):
        job = self.jobs.pop((namespace, name), None)
        if job is None:
            raise ApiException(status=404, reason="Not Found")
        job["run"].stop()

    # -- CoreV1Api -----------------------------------------------------------------------------

    def list_namespaced_pod(self, namespace, label_selector=""):
        items = []
        for (ns, name), job in self.jobs.items():
            if ns != namespace:
                continue
            for pod, role, code, reason in job["run"].pods():
                if not self.select(label_selector, name, role):
                    continue
                terminated = None if code is None else SimpleNamespace(exit_code=code, reason=reason)
                items.append(
                    SimpleNamespace(
                        metadata=SimpleNamespace(name=pod),
                        status=SimpleNamespace(
                            container_statuses=[
                                SimpleNamespace(name=self.container(role), state=SimpleNamespace(terminated=terminated))
                            ]
                        ),
                    )
                )
        return SimpleNamespace(items=items)

    def read_namespaced_pod_log(self, name, namespace, container=None, timestamps=False, since_seconds=None):
        assert container == self.LOG_CONTAINER
        for job in self.jobs.values():
            run = job["run"]
            if any(pod == name and role == self.LOG_ROLE for pod, role, _, _ in run.pods()):
                now = time.time()
                with run.lock:
                    lines = [(at, text) for at, text in run.log if since_seconds is None or at >= now - since_seconds]
                return "".join(f"{stamp(at) + ' ' if timestamps else ''}{text}\n" for at, text in lines)
        raise ApiException(status=404, reason="Not Found")


class ProcessRun(Run):
    """A job whose log pod is a process here (`follow`): its output is the log."""

    def follow(self, command: list[str], **popen) -> None:
        import subprocess

        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.say(line.rstrip("\n"))

    def state(self):
        code = self.proc.poll()
        if code is not None:
            self.reader.join()
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
