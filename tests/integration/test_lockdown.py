"""What the serving front door lets through, read as an attacker would: real nginx, as the
local target and `deploy serve` configure it, in front of two real HTTP servers that say
who they are and what reached them. Only the answer endpoints pass; Triton's admin APIs
(model load/unload, shared memory, statistics, trace, logging, model config) are 404s at
nginx; a client cannot pin canary or stable nor learn the upstream's address, and the
operator's own headers never reach a server."""

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kfp_llmops.components.deploy.nginx_split import OPERATOR_HEADER, Backend, NginxSplit

ALLOWED = [
    ("GET", "/v2/health/ready"),
    ("GET", "/v2/models/llm"),
    ("GET", "/v2/models/llm/versions/3"),
    ("GET", "/v2/models/llm/ready"),
    ("POST", "/v2/models/llm/generate"),
    ("POST", "/v2/models/llm/versions/3/generate_stream"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("GET", "/v1/models"),
]
# Triton's admin and introspection APIs (its HTTP/REST protocol extensions), and paths
# that normalise onto them.
DENIED = [
    ("POST", "/v2/repository/index"),
    ("POST", "/v2/repository/models/llm/load"),
    ("POST", "/v2/repository/models/llm/unload"),
    ("POST", "/v2/systemsharedmemory/region/r/register"),
    ("GET", "/v2/systemsharedmemory/status"),
    ("POST", "/v2/cudasharedmemory/region/r/unregister"),
    ("GET", "/v2/models/stats"),
    ("GET", "/v2/models/llm/stats"),
    ("GET", "/v2/models/llm/config"),
    ("POST", "/v2/trace/setting"),
    ("POST", "/v2/models/llm/trace/setting"),
    ("POST", "/v2/logging"),
    ("GET", "/v2"),
    ("GET", "/metrics"),
    ("GET", "/"),
    ("POST", "/v2/models/llm/../../repository/index"),
    ("POST", "/v2/models/llm/generate/../../../repository/models/llm/unload"),
    ("POST", "/v1/../v2/logging"),
    ("GET", "/v1/models/../../v2/models/stats"),
]


class _Echo(BaseHTTPRequestHandler):
    """An upstream that answers with its name, the path and the headers that reached it."""

    protocol_version = "HTTP/1.1"

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.seen.append(self.path)
        body = json.dumps({"who": self.server.name, "path": self.path, "headers": dict(self.headers)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


def _upstream(name):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.name, server.seen = name, []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def split(tmp_path):
    """nginx over stable and canary (each side's Triton and front end one echo server
    here), all traffic on stable: the canary at 0 %."""
    ups = {name: _upstream(name) for name in ("stable", "canary")}
    side = {n: Backend(f"127.0.0.1:{u.server_port}", f"127.0.0.1:{u.server_port}") for n, u in ups.items()}
    nginx = NginxSplit(str(tmp_path), side["stable"], side["canary"]).start(0)
    yield nginx, ups
    nginx.stop()
    for u in ups.values():
        u.shutdown()


def _send(nginx, method, path, headers=None):
    conn = http.client.HTTPConnection(nginx.host, nginx.port, timeout=10)
    try:
        conn.request(method, path, body=b"{}" if method == "POST" else None, headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, dict(resp.getheaders()), body
    finally:
        conn.close()


def test_only_the_answer_endpoints_pass(split):
    nginx, ups = split
    for method, path in ALLOWED:
        status, _, body = _send(nginx, method, path)
        assert status == 200 and json.loads(body)["path"] == path, (method, path, status)
    reached = len(ups["stable"].seen)
    refused = {}
    for method, path in DENIED:
        status, _, body = _send(nginx, method, path)
        refused[(method, path)] = status
    assert set(refused.values()) == {404}, {k: v for k, v in refused.items() if v != 404}
    assert len(ups["stable"].seen) == reached and not ups["canary"].seen  # nothing of them reached a server


def test_a_client_cannot_pin_a_side_nor_see_the_upstream(split):
    nginx, ups = split
    body = "/v1/chat/completions"
    for pin in ("always", "never", "ALWAYS"):
        status, headers, got = _send(nginx, "POST", body, {"X-Canary": pin})
        assert status == 200 and json.loads(got)["who"] == "stable", pin  # the split's 0 %, not the header
        assert "X-Upstream" not in headers
    status, headers, got = _send(nginx, "POST", body, {"X-Canary": "always", OPERATOR_HEADER: "guessed"})
    assert json.loads(got)["who"] == "stable" and "X-Upstream" not in headers
    status, headers, got = _send(nginx, "POST", body, {"X-Canary": "always", **nginx.operator_headers})
    answer = json.loads(got)
    assert answer["who"] == "canary" and headers["X-Upstream"] == f"127.0.0.1:{ups['canary'].server_port}"
    sent = {k.lower() for k in answer["headers"]}
    assert "x-canary" not in sent and OPERATOR_HEADER.lower() not in sent  # neither reaches a server
    status, headers, got = _send(nginx, "GET", "/v2/health/ready", {"X-Canary": "never", **nginx.operator_headers})
    assert json.loads(got)["who"] == "stable" and headers["X-Upstream"].endswith(str(ups["stable"].server_port))


def test_the_operator_key_is_nginxs_own_and_kept_from_other_users(split, tmp_path):
    import os
    import stat

    nginx, _ = split
    other = NginxSplit(str(tmp_path / "other"), None, Backend("127.0.0.1:1", "127.0.0.1:1"))
    assert other.operator_key != nginx.operator_key and len(nginx.operator_key) >= 32
    conf = os.path.join(nginx.dir, "nginx.conf")
    assert stat.S_IMODE(os.stat(conf).st_mode) == 0o600
