"""A custom resource that runs a job (Kubeflow Trainer's TrainJob, KubeRay's RayJob),
followed from inside a task's pod: submitted, or found again by its name when the task
is retried (a running one is followed again, a finished one read, a failed one
replaced), its log copied line by line with the kubelet's timestamps, its end told in
one line with its own reason, the pods' exit reasons and the last error it logged.
Subclasses say which kind, which pods log, and how the status reads."""

from __future__ import annotations

import calendar
import sys
import time
from collections.abc import Callable

from .errors import LlmopsError
from .k8s import namespace as resolve_namespace


class FollowedJob:
    GROUP = VERSION = PLURAL = KIND = ""
    LOG_PODS = ""  # label selector of the pod whose log is the job's, {name} filled in
    LOG_CONTAINER = ""
    JOB_PODS = ""  # label selector of every pod of the job
    STAGE = ""  # the log prefix: "[train]"
    RETRY_NOTE = ""  # what a retry of the task does, said when the job failed
    RESTART_NOTE = ""  # how a failed job found again starts over

    def __init__(
        self,
        custom,
        core,
        manifest: dict,
        log_path: str,
        poll_s: float = 10.0,
        log=print,
        sleep=time.sleep,
        show: Callable[[str], bool] = lambda line: True,
    ):
        self.custom, self.core, self.manifest = custom, core, manifest
        self.name = manifest["metadata"]["name"]
        self.namespace = resolve_namespace(manifest["metadata"].get("namespace", ""))
        self.where = f"{self.namespace}/{self.name}"
        self.log_path, self.poll_s, self.log, self.sleep, self.show = log_path, poll_s, log, sleep, show
        self.seen = 0.0  # newest log timestamp already written (epoch seconds)
        self.tail = ""  # the log's last lines, for the failure message

    def end_of(self, job: dict) -> tuple[bool, str, str] | None:
        """(succeeded, reason, message) once the job has ended, else None."""
        raise NotImplementedError

    def last_error(self, tail: str) -> str:
        lines = [line for line in tail.splitlines() if line.strip()]
        return lines[-1] if lines else "(no log)"

    # -- the API --------------------------------------------------------------------------------

    def _api_error(self, exc, doing: str) -> LlmopsError:
        return LlmopsError(
            f"{self.KIND} {self.where}: {doing}: {getattr(exc, 'status', '')} {getattr(exc, 'reason', exc)}".rstrip()
        )

    def get(self) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                self.GROUP, self.VERSION, self.namespace, self.PLURAL, self.name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self._api_error(exc, "cannot read it") from None

    def delete(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.delete_namespaced_custom_object(
                self.GROUP, self.VERSION, self.namespace, self.PLURAL, self.name, propagation_policy="Foreground"
            )
        except ApiException as exc:
            if exc.status != 404:
                raise self._api_error(exc, "cannot delete it") from None

    def submit(self) -> str:
        """'created', or what was found under this name: 'running' (followed again),
        'complete' (read), or a failed job replaced: 'recreated'."""
        from kubernetes.client.exceptions import ApiException

        found = self.get()
        if found is not None:
            ended = self.end_of(found)
            if ended is None:
                return "running"
            if ended[0]:
                return "complete"
            self.log(
                f"{self.STAGE} {self.KIND} {self.where} failed before ({ended[1]}); starting it again"
                f"{self.RESTART_NOTE}"
            )
            self.delete()
            for _ in range(120):
                if self.get() is None:
                    break
                self.sleep(self.poll_s / 2)
            else:
                raise LlmopsError(f"{self.KIND} {self.where}: the failed job is still being deleted")
        try:
            self.custom.create_namespaced_custom_object(
                self.GROUP, self.VERSION, self.namespace, self.PLURAL, self.manifest
            )
        except ApiException as exc:
            raise self._api_error(exc, "refused") from None
        return "recreated" if found is not None else "created"

    # -- following it ---------------------------------------------------------------------------

    def run(self, timeout_s: float) -> dict:
        """Submit, then follow until it succeeds; a failed job raises with its own reason."""
        how = self.submit()
        self.log(f"{self.STAGE} {self.KIND} {self.where}: {how}")
        deadline = time.monotonic() + timeout_s
        with open(self.log_path, "a", encoding="utf-8") as sink:
            while True:
                job = self.get()
                if job is None:
                    raise LlmopsError(f"{self.KIND} {self.where} disappeared while it ran (deleted by someone?)")
                self._copy_log(sink)
                ended = self.end_of(job)
                if ended is not None:
                    break
                if time.monotonic() > deadline:
                    raise LlmopsError(
                        f"{self.KIND} {self.where} still runs after {timeout_s:.0f} s; it is left "
                        "running and a retry of this task follows it again"
                    )
                self.sleep(self.poll_s)
        succeeded, reason, message = ended
        if succeeded:
            return job
        raise LlmopsError(
            f"{self.KIND} {self.where} failed: {reason}: {message}{self._pod_reasons()}; "
            f"last log line: {self.last_error(self.tail)}; {self.RETRY_NOTE}"
        )

    def _copy_log(self, sink) -> None:
        """New lines of the job's log into the log file; the ones `show` picks shown live."""
        from kubernetes.client.exceptions import ApiException

        try:
            pods = self.core.list_namespaced_pod(
                self.namespace, label_selector=self.LOG_PODS.format(name=self.name)
            ).items
        except ApiException:
            return
        for pod in pods:
            since = max(1, int(time.time() - self.seen) + 1) if self.seen else None
            try:
                text = self.core.read_namespaced_pod_log(
                    pod.metadata.name,
                    self.namespace,
                    container=self.LOG_CONTAINER,
                    timestamps=True,
                    since_seconds=since,
                )
            except ApiException:
                continue  # not started yet
            for line in (text or "").splitlines():
                stamp, _, body = line.partition(" ")
                at = epoch(stamp)
                if at is None or at <= self.seen:
                    continue
                self.seen = at
                sink.write(body + "\n")
                self.tail = (self.tail + body + "\n")[-20000:]
                if self.show(body):
                    sys.stderr.write(body + "\n")
            sink.flush()

    def _pod_reasons(self) -> str:
        """Containers that ended badly (OOMKilled, Error), from every pod of the job."""
        from kubernetes.client.exceptions import ApiException

        try:
            pods = self.core.list_namespaced_pod(
                self.namespace, label_selector=self.JOB_PODS.format(name=self.name)
            ).items
        except ApiException:
            return ""
        found = []
        for pod in pods:
            for status in (pod.status.container_statuses or []) if pod.status else []:
                ended = status.state.terminated if status.state else None
                if ended is not None and ended.exit_code:
                    found.append(f"{pod.metadata.name}: {ended.reason or 'Error'} (exit {ended.exit_code})")
        return f" ({'; '.join(found)})" if found else ""


def epoch(stamp: str) -> float | None:
    """RFC 3339 with nanoseconds (the kubelet's log timestamps) to epoch seconds."""
    try:
        whole, _, frac = stamp.rstrip("Z").partition(".")
        return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float(f"0.{frac or 0}")
    except ValueError:
        return None
