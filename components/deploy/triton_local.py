"""One real Triton Inference Server process on this machine, with the OpenAI-compatible
front end of its model beside it (`openai_frontend`) when a model name is given: start
on free ports, wait until the model is ready, scrape its metrics, stop it with
everything it started."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time

from kfp_llmops.components.common.errors import LlmopsError

from . import serving_env
from .processes import die_with_parent, free_ports, group_members, http_get, stop_group

# The repository root a server's model verifies its folder against as it loads.
REPOSITORY_ROOT_ENV = "LLMOPS_REPOSITORY_ROOT"
# Triton's APIs that change or reveal the server rather than answer: model load/unload,
# shared-memory regions, statistics, tracing and logging settings.
ADMIN_APIS = "model-repository,shared-memory,statistics,trace,logging"
_ADMIN_HEADER = "triton-admin-key"


def _start_on(cpus: list[int] | None):
    """preexec_fn: `die_with_parent`, and the child (with every process it starts) kept to
    `cpus` when given."""

    def start() -> None:
        die_with_parent()
        if cpus:
            os.sched_setaffinity(0, cpus)

    return start


class TritonServer:
    """`role` names it in logs and errors (stable, canary); `model`: the served model's
    name, whose OpenAI-compatible front end is started too (`limits`: its max_running and
    max_waiting); `cpus`: the cores the server and its engine run on (all: None);
    `launcher`: a command the server's own runs after (the cluster's `verified_start`)."""

    def __init__(
        self,
        repository: str,
        work: str,
        role: str,
        host: str = "127.0.0.1",
        env: dict | None = None,
        model: str | None = None,
        limits: tuple[int, int] = (16, 64),
        cpus: list[int] | None = None,
        launcher: tuple[str, ...] = (),
    ):
        self.repository, self.work, self.role, self.host = repository, work, role, host
        self.cpus, self.launcher = cpus, launcher
        self.extra_env = env or {}
        self.model, self.limits = model, limits
        self.proc: subprocess.Popen | None = None
        self.frontend = None  # OpenAIFrontend, with a model
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.log_path = os.path.join(work, f"tritonserver-{role}.log")
        self._log_from = 0  # where this start's lines begin in the log
        self.on_start = None  # called with the new pids after each start (a retry starts again)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def backend(self):
        """This side of an nginx split: Triton and its front end."""
        from .nginx_split import Backend

        return Backend(self.address, self.frontend.address if self.frontend else self.address)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in (self.proc, self.frontend and self.frontend.proc) if p is not None]

    def start(self) -> TritonServer:
        env_path = serving_env.check_env()
        paths = serving_env.triton_paths()
        os.makedirs(self.work, exist_ok=True)
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3, self.host)
        cmd = [
            *self.launcher,
            paths["server"],
            "--model-repository",
            os.path.abspath(self.repository),
            "--backend-directory",
            serving_env.backend_dir(self.work),
            "--http-address",
            self.host,
            "--http-port",
            str(self.http_port),
            "--grpc-address",
            self.host,
            "--grpc-port",
            str(self.grpc_port),
            "--metrics-address",
            self.host,
            "--metrics-port",
            str(self.metrics_port),
            "--allow-gpu-metrics",
            "false",
            "--allow-cpu-metrics",
            "false",
            "--log-verbose",
            "0",
            "--exit-timeout-secs",
            "5",
            # Triton's admin APIs need a header whose value nobody is given: closed even to
            # a process on this host (nginx passes the answer endpoints only anyway).
            f"--http-restricted-api={ADMIN_APIS}:{_ADMIN_HEADER}={secrets.token_urlsafe(24)}",
            f"--grpc-restricted-protocol={ADMIN_APIS}:{_ADMIN_HEADER}={secrets.token_urlsafe(24)}",
        ]
        log = open(self.log_path, "ab")
        self._log_from = log.tell()
        self.proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**serving_env.server_environment(env_path), **self.extra_env},
            start_new_session=True,
            cwd=self.work,
            preexec_fn=_start_on(self.cpus),
        )
        log.close()
        if self.model:
            from .openai_frontend import OpenAIFrontend

            self.frontend = OpenAIFrontend(self.url, self.model, self.work, self.role, self.host, 0, *self.limits)
            self.frontend.start()
        if self.on_start is not None:
            self.on_start(self.pids)
        return self

    def log_tail(self, lines: int = 6) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                tail = [ln.strip() for ln in handle.readlines() if ln.strip()][-lines:]
        except OSError:
            return ""
        return " | ".join(tail)

    def load_error(self) -> str | None:
        """Why Triton failed to load the model (its log line, without the Python traceback)."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as handle:
                lines = [ln for ln in handle if "failed to load '" in ln and "' version " in ln]
        except OSError:
            return None
        if not lines:
            return None
        text = lines[-1].split('] "', 1)[-1]
        return text.split("\\n\\nAt:", 1)[0].rstrip('"\n')[:600]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and (not self.frontend or self.frontend.alive())

    def ready(self) -> bool:
        try:
            return http_get(f"{self.url}/v2/health/ready", 2.0)[0] == 200
        except OSError:
            return False

    def _log_since(self, offset: int) -> str:
        """The server's log from byte `offset` on ("" if it cannot be read)."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(offset)
                return handle.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _lost_a_port(self) -> bool:
        """Whether this start failed because one of its ports was taken before Triton
        bound it (it binds after loading the model; see free_ports)."""
        return "already in use" in self._log_since(self._log_from)

    def wait_ready(self, timeout: float, port_retries: int = 2) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                if port_retries > 0 and self.proc.poll() is not None and self._lost_a_port():
                    port_retries -= 1  # started again on new ports, within the same deadline
                    self.stop()
                    self.start()
                    continue
                why = self.load_error() or self.log_tail()
                raise LlmopsError(f"{self.role} tritonserver exited with {self.proc.returncode}: {why}")
            if self.ready():
                if self.frontend is not None:
                    self.frontend.wait_ready(max(5.0, deadline - time.monotonic()))
                return
            time.sleep(0.25)
        tail, stacks = self.log_tail(), self.model_stacks()
        self.stop()
        where = f"; where its model was: {stacks}" if stacks else ""
        raise LlmopsError(f"{self.role} tritonserver not ready after {timeout:.0f} s: {tail}{where}")

    def model_stacks(self, wait: float = 2.0, frames: int = 10) -> str:
        """The Python threads of the model's backend stubs, innermost `frames` of each:
        each dumps them to the log on SIGUSR1 (faulthandler, registered by model.py)."""
        if self.proc is None or self.proc.poll() is not None:
            return ""
        try:
            start = os.path.getsize(self.log_path)
        except OSError:
            return ""
        stubs = group_members(self.proc.pid, "triton_python_backend_stub")
        if not stubs:
            return ""
        for pid in stubs:
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        time.sleep(wait)
        out, kept = [], 0
        for line in (ln.strip() for ln in self._log_since(start).splitlines()):
            if "(most recent call first)" in line:
                out.append(line)
                kept = 0
            elif line.startswith(("File ", "<")) and kept < frames:
                out.append(line)
                kept += 1
        return " | ".join(out)

    def metrics_text(self) -> str:
        status, body = http_get(f"http://{self.host}:{self.metrics_port}/metrics", 3.0)
        if status != 200:
            raise OSError(f"metrics endpoint answered {status}")
        return body.decode("utf-8", "replace")

    def kill(self) -> None:
        """SIGKILL the server and its backend stubs (a crash, for drills and tests)."""
        stop_group(self.proc, None)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL the whole process group: a stub in a bad state can keep
        tritonserver alive past SIGTERM. The front end goes first."""
        if self.frontend is not None:
            self.frontend.stop()
        stop_group(self.proc, signal.SIGTERM, grace)
