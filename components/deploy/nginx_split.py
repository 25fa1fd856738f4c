"""nginx in front of stable and canary: weighted upstreams (reloaded at each step, no
dropped traffic), and responses passed through unbuffered so a stream's pieces arrive as
they are generated.

It passes the answer endpoints only: Triton's generate and generate_stream, server and
model readiness and model metadata, and the OpenAI-compatible paths (`/v1/` to the front
ends, split by the same weights); every other path (Triton's model-repository, shared
memory, statistics, trace, logging and model-config APIs) is a 404 here. Each side is a
Triton server and its OpenAI front end (`Backend`), listening on loopback only.

Pinning a request to one side (`X-Canary: always|never`) and the serving upstream's
address (`X-Upstream`, which the controller's load and smoke tests use to attribute each
response) are for the operator alone: honoured and sent only with `X-Operator-Key`, a
secret made for each nginx and known to the process that started it; from anyone else
both are ignored, and neither header reaches the servers."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

from kfp_llmops.components.common import atomic
from kfp_llmops.components.common.errors import InputError, LlmopsError

from .api_keys import CHALLENGE, REQUIRED, KeyChecker
from .config import FrontDoor
from .processes import die_with_parent, free_ports, http_get, stop_group

OPERATOR_HEADER = "X-Operator-Key"
_CONF = """worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log off;
    server_tokens off;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    upstream weighted {{
        {weighted}
        keepalive 16;
    }}
    upstream weighted_v1 {{
        {weighted_v1}
        keepalive 16;
    }}
    upstream stable {{ server {stable}; keepalive 8; }}
    upstream canary {{ server {canary}; keepalive 8; }}
    upstream stable_v1 {{ server {stable_v1}; keepalive 8; }}
    upstream canary_v1 {{ server {canary_v1}; keepalive 8; }}
    map $http_x_operator_key $operator {{ default 0; "{operator}" 1; }}
    map "$operator:$http_x_canary" $pool {{ default weighted; "1:always" canary; "1:never" stable; }}
    map $operator $shown_upstream {{ default ""; 1 $upstream_addr; }}
    # Per client address; the operator's own load (one address, many streams) is not counted.
    map $operator $client {{ default $binary_remote_addr; 1 ""; }}
    limit_conn_zone $client zone=conns:4m;
{key_zone}{rate_zone}    limit_conn_status 429;
    limit_req_status 429;
    client_header_timeout {body_timeout}s;
    client_body_timeout {body_timeout}s;
    client_max_body_size {body_bytes};
    client_body_buffer_size {body_bytes};
    send_timeout 60s;
    keepalive_timeout 30s;
{auth_upstream}
    server {{
        listen {host}:{port};
        location = /nginx-health {{ return 200 "ok"; }}
        location = /v2/health/ready {{
            proxy_pass http://$pool;
{proxied}
        }}
        location ~ ^/v2/models/{model}(/versions/[0-9]+)?(/ready|/generate|/generate_stream)?$ {{
{auth}
            proxy_pass http://$pool;
{proxied}
        }}
        location ~ ^/v1/(chat/completions|completions|models)$ {{
{auth}
            proxy_pass http://${{pool}}_v1;
{proxied}
        }}
        location @busy {{
            default_type application/json;
            add_header Retry-After 1 always;
            return 429 '{busy}';
        }}
        location @too_large {{
            default_type application/json;
            return 413 '{too_large}';
        }}
{auth_locations}
        location / {{
            default_type application/json;
            return 404 '{{"error": "not found"}}';
        }}
    }}
}}
"""
_PROXIED = """            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Operator-Key "";
            proxy_set_header X-Canary "";
            proxy_next_upstream error timeout;
            proxy_read_timeout 120s;
            proxy_buffering off;              # server-sent events reach the client as each piece is sent
            proxy_set_header Authorization "";   # API keys stop here
            limit_conn conns {connections};
{key_limit}{rate_limit}            error_page 429 = @busy;
            error_page 413 = @too_large;
            add_header X-Upstream $shown_upstream always;"""
_AUTH = """            auth_request /_auth;
            error_page 401 = @unauthorized;"""
# Where keys are asked, a client is its key as well as its address: one key used from many
# addresses holds no more open than from one. The key as sent (any case of "Bearer", any
# spaces) is read as api_keys reads it; a wrong one is refused after this, at auth_request.
_KEY_ZONE = """    map $http_authorization $bearer { default ""; "~*^bearer +(?<token>[\\x21-\\x7e]+) *$" $token; }
    map $operator $key_client { default $bearer; 1 ""; }
    limit_conn_zone $key_client zone=keyconns:4m;
"""
_AUTH_UPSTREAM = "    upstream auth {{ server {checker}; keepalive 8; }}"
_AUTH_LOCATIONS = """        location = /_auth {
            internal;
            proxy_pass http://auth/check;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
        location @unauthorized {
            default_type application/json;
            add_header WWW-Authenticate '%s' always;
            return 401 '%s';
        }"""


def _error(message: str, kind: str = "invalid_request_error", code: str | None = None) -> str:
    """An OpenAI-style error body nginx answers itself (no quote in it: it sits in '...')."""
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


_AUTH_LOCATIONS %= (CHALLENGE, _error(REQUIRED, code="invalid_api_key"))


@dataclass(frozen=True)
class Backend:
    """One side of the split: its Triton server's and its OpenAI front end's host:port."""

    triton: str
    openai: str


def find_nginx() -> str:
    path = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if not path:
        raise InputError("nginx not found: install it (`apt-get install -y nginx`; make does)")
    return path


def upstream_lines(stable: str | None, canary: str, canary_percent: int) -> str:
    """Weights as percentages; a 0 % side is marked down (nginx has no weight 0)."""
    if stable is None:  # first release: nothing to split with
        return f"server {canary};"
    rows = []
    for addr, weight in ((stable, 100 - canary_percent), (canary, canary_percent)):
        rows.append(f"server {addr} weight={max(weight, 1)}{' down' if weight == 0 else ''};")
    return "\n        ".join(rows)


class NginxSplit:
    def __init__(
        self,
        work: str,
        stable: Backend | None,
        canary: Backend,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "llm",
        api_keys: str | None = None,
        limits: FrontDoor | None = None,
    ):
        """`port` 0: a free one; `model`: the served model's name, the one whose endpoints
        pass (Triton reads /v2/models/stats as statistics, not a model named stats);
        `api_keys`: a file of the keys clients must send (None: no key asked);
        `limits`: what one client may send and hold open."""
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", model) or model == "stats":
            raise InputError(f"serving.model_name: {model!r} cannot be served behind nginx")
        self.model = model
        self.limits = limits or FrontDoor()
        self.checker = KeyChecker(api_keys, os.path.join(work, "nginx")) if api_keys else None
        self.dir = os.path.abspath(os.path.join(work, "nginx"))
        self.stable, self.canary, self.host = stable, canary, host
        self.port = port
        self.canary_percent = 0
        self.proc: subprocess.Popen | None = None
        self.nginx = find_nginx()
        self.operator_key = secrets.token_urlsafe(24)  # [A-Za-z0-9_-]: safe inside the config's quotes

    @property
    def operator_headers(self) -> dict:
        """What the operator's own requests carry: X-Canary honoured, X-Upstream sent back,
        not counted against a client's limits; and an API key where one is asked."""
        return {OPERATOR_HEADER: self.operator_key, **self.client_headers}

    @property
    def client_headers(self) -> dict:
        """What a client of this nginx sends: the first API key, where keys are asked."""
        return {"Authorization": f"Bearer {self.checker.first_key}"} if self.checker else {}

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _write(self) -> None:
        for sub in ("tmp/body", "tmp/proxy", "tmp/fastcgi", "tmp/uwsgi", "tmp/scgi"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        stable, canary, lim = self.stable, self.canary, self.limits
        rated = lim.requests_per_s_per_client > 0  # 0: connections bounded, rate not
        rate_limit = f"            limit_req zone=reqs burst={lim.burst} nodelay;\n" if rated else ""
        text = _CONF.format(
            dir=self.dir,
            host=self.host,
            port=self.port,
            stable=stable.triton if stable else f"{canary.triton} down",
            canary=canary.triton,
            stable_v1=stable.openai if stable else f"{canary.openai} down",
            canary_v1=canary.openai,
            weighted=upstream_lines(stable and stable.triton, canary.triton, self.canary_percent),
            weighted_v1=upstream_lines(stable and stable.openai, canary.openai, self.canary_percent),
            proxied=_PROXIED.format(
                connections=lim.connections_per_client,
                rate_limit=rate_limit,
                key_limit=f"            limit_conn keyconns {lim.connections_per_client};\n" if self.checker else "",
            ),
            key_zone=_KEY_ZONE if self.checker else "",
            operator=self.operator_key,
            model=re.escape(self.model),
            rate_zone=f"    limit_req_zone $client zone=reqs:4m rate={lim.requests_per_s_per_client}r/s;\n"
            if rated
            else "",
            body_timeout=lim.body_timeout_s,
            body_bytes=lim.max_body_bytes,
            busy=_error("too many requests from this client; retry shortly", "rate_limit_exceeded"),
            too_large=_error(f"request body: above the bound of {lim.max_body_bytes} bytes"),
            auth=_AUTH if self.checker else "",
            auth_upstream=_AUTH_UPSTREAM.format(checker=self.checker.address) if self.checker else "",
            auth_locations=_AUTH_LOCATIONS if self.checker else "",
        )
        path = os.path.join(self.dir, "nginx.conf")
        atomic.write_text(path, text)
        os.chmod(path, 0o600)  # it holds the operator key

    def _cmd(self, *extra: str) -> list[str]:
        return [self.nginx, "-p", self.dir, "-c", os.path.join(self.dir, "nginx.conf"), *extra]

    def start(self, canary_percent: int = 0) -> NginxSplit:
        self.port = self.port or free_ports(1, self.host)[0]
        self.canary_percent = canary_percent
        if self.checker is not None:
            self.checker.start()
        self._write()
        check = subprocess.run(self._cmd("-t", "-q"), capture_output=True, text=True)
        if check.returncode:
            self.stop()
            raise LlmopsError(f"nginx config rejected: {check.stderr.strip().splitlines()[-1:]}")
        self.proc = subprocess.Popen(
            self._cmd("-g", "daemon off;"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if http_get(f"{self.url}/nginx-health", 1.0)[0] == 200:
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise LlmopsError(f"nginx did not start: see {self.dir}/error.log")

    def set_canary_percent(self, percent: int) -> None:
        """Rewrite the weights and reload: old workers finish their requests, new ones split."""
        self.canary_percent = percent
        self._write()
        result = subprocess.run(self._cmd("-s", "reload"), capture_output=True, text=True)
        if result.returncode:
            raise LlmopsError(f"nginx reload failed: {result.stderr.strip()}")
        time.sleep(0.2)  # the master starts new workers asynchronously

    def stop(self) -> None:
        """SIGQUIT lets workers finish their requests; SIGKILL after 5 s."""
        stop_group(self.proc, signal.SIGQUIT, 5.0)
        if self.checker is not None:
            self.checker.stop()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in (self.proc, self.checker and self.checker.proc) if p is not None]
