"""What the serving front door lets through, read as an attacker would: real nginx, as the
local target and `deploy serve` configure it, in front of two real HTTP servers that say
who they are and what reached them. Only the answer endpoints pass; Triton's admin APIs
(model load/unload, shared memory, statistics, trace, logging, model config) are 404s at
nginx; a client cannot pin canary or stable nor learn the upstream's address, and the
operator's own headers never reach a server. With API keys, a model endpoint answers
only a client that sends one (the key itself never reaches a server); one client's
oversized, slow or too many requests are refused at nginx while others are answered."""

import contextlib
import http.client
import json
import os
import socket
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.deploy.api_keys import authorized, keys_for, make_key_file, read_keys
from kfp_llmops.components.deploy.config import FrontDoor
from kfp_llmops.components.deploy.nginx_split import OPERATOR_HEADER, Backend, NginxSplit

pytestmark = pytest.mark.alone  # slow clients and request rates, timed

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
        if self.path.endswith("/generate"):
            self.server.release.wait(10)  # held open until the test lets it go
        body = json.dumps({"who": self.server.name, "path": self.path, "headers": dict(self.headers)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


class _Triton(_Echo):
    """A Triton stand-in for what the front door relays: the model's metadata and its
    `generate_stream` events as Triton's generate extension sends them (pieces, then the
    final reason and counts); it keeps every request's headers."""

    def _answer(self):
        self.server.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        path = self.path
        if path == "/v2/models/llm":
            body = json.dumps(
                {
                    "name": "llm",
                    "versions": ["2"],
                    "inputs": [{"name": "text_input"}],
                    "outputs": [{"name": "text_output"}],
                }
            ).encode()
        elif path == "/v2/models/llm/generate_stream":
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.server.seen.append(path)
            final = {"text_output": "", "finish_reason": "length", "prompt_tokens": 5, "completion_tokens": 2}
            events = [{"text_output": "a lighthouse "}, {"text_output": "keeper"}, final]
            body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        else:
            return super()._answer()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if path.endswith("_stream") else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


def _upstream(name, handler=_Echo):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.name, server.seen, server.release, server.headers_seen = name, [], threading.Event(), []
    server.release.set()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _split(tmp_path, **kwargs):
    ups = {name: _upstream(name) for name in ("stable", "canary")}
    side = {n: Backend(f"127.0.0.1:{u.server_port}", f"127.0.0.1:{u.server_port}") for n, u in ups.items()}
    return NginxSplit(str(tmp_path), side["stable"], side["canary"], **kwargs).start(0), ups


@pytest.fixture
def split(tmp_path):
    """nginx over stable and canary (each side's Triton and front end one echo server
    here), all traffic on stable: the canary at 0 %."""
    nginx, ups = _split(tmp_path)
    yield nginx, ups
    nginx.stop()
    for u in ups.values():
        u.shutdown()


@pytest.fixture
def keyed(tmp_path):
    """The same, asking for API keys (two in the file), with a short body timeout."""
    keys = tmp_path / "keys"
    keys.write_text("# clients\nsk-first-0123456789abcdef\n\nsk-second-0123456789abcdef\n")
    nginx, ups = _split(tmp_path / "n", api_keys=str(keys), limits=FrontDoor(body_timeout_s=1, max_body_bytes=4096))
    yield nginx, ups, keys
    nginx.stop()
    for u in ups.values():
        u.shutdown()


def _send(nginx, method, path, headers=None, body=b"{}", source="127.0.0.1"):
    conn = http.client.HTTPConnection(nginx.host, nginx.port, timeout=10, source_address=(source, 0))
    try:
        conn.request(method, path, body=body if method == "POST" else None, headers=headers or {})
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
    nginx, _ = split
    other = NginxSplit(str(tmp_path / "other"), None, Backend("127.0.0.1:1", "127.0.0.1:1"))
    assert other.operator_key != nginx.operator_key and len(nginx.operator_key) >= 32
    conf = os.path.join(nginx.dir, "nginx.conf")
    assert stat.S_IMODE(os.stat(conf).st_mode) == 0o600


def test_model_endpoints_answer_only_a_client_with_a_key(keyed):
    nginx, ups, keys = keyed
    bearer = {"Authorization": "Bearer sk-second-0123456789abcdef"}
    for method, path in ALLOWED:
        status, headers, body = _send(nginx, method, path)
        if path == "/v2/health/ready":  # probes and load balancers ask without a key
            assert status == 200
            continue
        assert status == 401, (method, path, status)
        assert json.loads(body)["error"]["code"] == "invalid_api_key"
        assert headers["WWW-Authenticate"].startswith("Bearer")
        status, _, body = _send(nginx, method, path, bearer)
        assert status == 200, (method, path, status)
        assert "authorization" not in {k.lower() for k in json.loads(body)["headers"]}  # the key stops at nginx
    for wrong in (
        "Bearer sk-second-0123456789abcdeF",
        "Bearer sk-second-0123456789abcde",
        "sk-second-0123456789abcdef",
        "Basic c2stc2Vjb25kLTAxMjM0NTY3ODlhYmNkZWY=",
        "Bearer ",
        "Bearer sk-first-0123456789abcdef x",
    ):
        assert _send(nginx, "POST", "/v1/chat/completions", {"Authorization": wrong})[0] == 401, wrong
    assert (
        _send(nginx, "POST", "/v1/chat/completions", {"Authorization": "bearer  sk-first-0123456789abcdef"})[0] == 200
    )
    # DENIED paths stay 404 with a key too, and nothing unauthorized reached a server
    assert {_send(nginx, m, p, bearer)[0] for m, p in DENIED} == {404}
    # a key revoked and another added in the file: read again, no restart
    keys.write_text("sk-third-0123456789abcdef\n")
    time.sleep(0.05)
    assert _send(nginx, "GET", "/v1/models", bearer)[0] == 401
    assert _send(nginx, "GET", "/v1/models", {"Authorization": "Bearer sk-third-0123456789abcdef"})[0] == 200
    keys.write_text("not a key\n")  # a file turned bad keeps the last good keys
    assert _send(nginx, "GET", "/v1/models", {"Authorization": "Bearer sk-third-0123456789abcdef"})[0] == 200
    assert nginx.operator_headers["Authorization"] == "Bearer sk-first-0123456789abcdef"  # read when it started


def test_one_client_cannot_hold_the_door(keyed):
    """Oversized bodies are 413s, a body that does not come is cut off at the timeout, and
    a client's connections beyond its bound are 429s with Retry-After; meanwhile another
    request is answered at once."""
    nginx, ups, _ = keyed
    bearer = {"Authorization": "Bearer sk-first-0123456789abcdef"}
    status, _, body = _send(nginx, "POST", "/v1/chat/completions", bearer, b"x" * 8192)
    assert status == 413 and "request body" in json.loads(body)["error"]["message"]
    slow = []
    for _ in range(40):  # bodies promised and never sent: each holds a connection
        sock = socket.create_connection((nginx.host, nginx.port))
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-first-0123456789abcdef\r\n"
            b"Content-Length: 1000\r\n\r\n{"
        )
        slow.append(sock)
    time.sleep(0.3)
    status, headers, body = _send(nginx, "POST", "/v1/chat/completions", bearer)
    assert status == 429 and headers["Retry-After"] == "1" and "retry" in json.loads(body)["error"]["message"]
    started = time.monotonic()
    status, _, _ = _send(nginx, "POST", "/v1/chat/completions", {**nginx.operator_headers})
    assert status == 200 and time.monotonic() - started < 1.0  # the operator is not one of the slow client's
    time.sleep(1.5)  # past body_timeout_s: nginx has closed the slow ones
    answers = []
    for sock in slow:
        sock.settimeout(2)
        answers.append(sock.recv(200).split(b"\r\n", 1)[0])
        sock.close()
    assert set(answers) <= {b"HTTP/1.1 408 Request Time-out", b"HTTP/1.1 429 Too Many Requests", b""}, set(answers)
    assert _send(nginx, "POST", "/v1/chat/completions", bearer)[0] == 200  # the client's bound is free again


def _unfinished(nginx, key: str, source: str) -> socket.socket:
    """A request from `source` whose body never comes: it holds a connection."""
    sock = socket.create_connection((nginx.host, nginx.port), source_address=(source, 0))
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {key}\r\nContent-Length: 1000\r\n\r\n{{"
    sock.sendall(head.encode())
    return sock


def test_one_key_is_one_client_whatever_its_address(tmp_path):
    """A key's requests count against one bound whether they come from one address or many
    (loopback's 127.0.0.0/8 stands for many hosts), however the key is written; another
    key, from the same addresses, is answered."""
    keys = tmp_path / "keys"
    keys.write_text("sk-first-0123456789abcdef\nsk-second-0123456789abcdef\n")
    limits = FrontDoor(connections_per_client=3, body_timeout_s=2)
    nginx, ups = _split(tmp_path / "n", api_keys=str(keys), limits=limits)
    try:
        written = (
            "Bearer sk-first-0123456789abcdef",
            "bearer   sk-first-0123456789abcdef",
            "BEARER sk-first-0123456789abcdef ",
        )
        held = [_unfinished(nginx, key, f"127.0.0.{2 + i}") for i, key in enumerate(written)]
        time.sleep(0.3)
        first = {"Authorization": "Bearer sk-first-0123456789abcdef"}
        status, headers, _ = _send(nginx, "POST", "/v1/chat/completions", first, source="127.0.0.9")
        assert status == 429 and headers["Retry-After"] == "1"
        second = {"Authorization": "Bearer sk-second-0123456789abcdef"}
        assert _send(nginx, "POST", "/v1/chat/completions", second, source="127.0.0.2")[0] == 200
        assert _send(nginx, "POST", "/v1/chat/completions", second, source="127.0.0.9")[0] == 200
        for sock in held:
            sock.close()
        time.sleep(0.3)
        assert _send(nginx, "POST", "/v1/chat/completions", first, source="127.0.0.9")[0] == 200  # free again
    finally:
        nginx.stop()
        for u in ups.values():
            u.shutdown()


def test_api_key_files(tmp_path):
    bad = tmp_path / "keys"
    bad.write_text("# ok\nsk-good-0123456789abcdef\nshort\n")
    with pytest.raises(InputError, match=r"keys:3: not an API key") as info:
        read_keys(str(bad))
    assert "short" not in str(info.value)  # a key is never quoted
    (tmp_path / "empty").write_text("# none\n\n")
    with pytest.raises(InputError, match="holds no API key"):
        read_keys(str(tmp_path / "empty"))
    keys = [b"sk-good-0123456789abcdef", b"sk-more-0123456789abcdef"]
    assert authorized("Bearer sk-more-0123456789abcdef", keys)
    assert not authorized(None, keys) and not authorized("Bearer sk-more", keys) and not authorized("", [b""])
    # loopback serves without a key unless one is given; any other host gets one made, 0600, kept
    assert keys_for("127.0.0.1", "", str(tmp_path)) is None and keys_for("::1", "", str(tmp_path)) is None
    made = keys_for("0.0.0.0", "", str(tmp_path / "state"))
    assert made == str(tmp_path / "state" / "api-keys") and stat.S_IMODE(os.stat(made).st_mode) == 0o600
    first = read_keys(made)
    assert keys_for("10.1.2.3", "", str(tmp_path / "state")) == made and read_keys(made) == first
    assert not make_key_file(made)
    os.remove(made)
    os.symlink(str(tmp_path / "elsewhere"), made)
    assert not make_key_file(made) and not os.path.exists(tmp_path / "elsewhere")  # a planted link is not followed


def test_a_request_rate_is_bounded_only_where_one_is_set(tmp_path):
    """Off by default: a client asking one question after another is never refused for
    asking fast. Set, requests beyond the rate and its burst are 429s with Retry-After."""
    for limits, expect_refused in ((FrontDoor(), False), (FrontDoor(requests_per_s_per_client=1, burst=2), True)):
        nginx, ups = _split(tmp_path / str(expect_refused), limits=limits)
        try:
            got = [_send(nginx, "GET", "/v1/models") for _ in range(60)]
        finally:
            nginx.stop()
            for u in ups.values():
                u.shutdown()
        statuses = [status for status, _, _ in got]
        if expect_refused:
            assert statuses[:3] == [200] * 3 and statuses.count(429) >= 50, statuses
            assert all(h["Retry-After"] == "1" for status, h, _ in got if status == 429)
        else:
            assert statuses == [200] * 60, statuses


_BODIES = {  # what the OpenAI paths need to reach the predictor
    "/v1/chat/completions": json.dumps({"model": "llm", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    "/v1/completions": json.dumps({"model": "llm", "prompt": "hi"}).encode(),
}


def _as_kserve_starts_it(container: dict, isvc: str, namespace: str) -> list[str]:
    """The transformer's command line as KServe's controller completes it (its custom
    transformer's GetContainer): `--model_name`, `--predictor_host` and `--http_port`
    appended where the spec does not already pass them."""
    args = list(container["args"])
    for flag, value in (
        ("--model_name", isvc),
        ("--predictor_host", f"{isvc}-predictor.{namespace}"),
        ("--http_port", "8080"),
    ):
        if flag not in args:
            args += [flag, value]
    return container["command"] + args


@contextlib.contextmanager
def _cluster_door(tmp_path, cfg, keys: str, form: str = "kserve", handler=_Echo):
    """A cluster front door run here from its rendered command line (the InferenceService's
    transformer as KServe completes it, or the gateway form's stable door as its Deployment
    says), in front of one echo server for the Triton behind it: (door, predictor, argv)."""
    import subprocess
    import sys

    from kfp_llmops.components.deploy.cluster import render_gateway_doors, render_inference_service
    from kfp_llmops.components.deploy.processes import free_ports, stop_group, wait_for_http

    if form == "kserve":
        container = render_inference_service(cfg, "ab" * 32, 5)["spec"]["transformer"]["containers"][0]
        argv = _as_kserve_starts_it(container, cfg.cluster.service_name, "team-a")
    else:
        container = render_gateway_doors(cfg)[0]["spec"]["template"]["spec"]["containers"][0]
        argv = container["command"] + container["args"]
    predictor = _upstream("predictor", handler)
    (tmp_path / "keys").write_text(keys)
    port = free_ports(1, "127.0.0.1")[0]
    here = {"--predictor_host": f"127.0.0.1:{predictor.server_port}", "--http_port": str(port), "--host": "127.0.0.1"}
    here.update({"--api-keys": str(tmp_path / "keys"), "--triton": f"http://127.0.0.1:{predictor.server_port}"})
    args = [here.get(argv[i - 1], a) for i, a in enumerate(argv)]
    proc = subprocess.Popen([sys.executable, *args[1:]], start_new_session=True)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/health", proc, 30, "the front door")
        yield type("Door", (), {"host": "127.0.0.1", "port": port}), predictor, argv
    finally:
        predictor.release.set()
        stop_group(proc, 15, 5.0)
        predictor.shutdown()


@pytest.mark.parametrize("form", ["kserve", "gateway"])
def test_the_clusters_front_door_passes_only_the_answer_endpoints_and_asks_for_a_key(tmp_path, form):
    """The cluster's front door (KServe's transformer; the gateway form's door of a side):
    Triton's answer endpoints and the OpenAI API answer only a client with a key, the key
    never reaches Triton, probes pass without one, and nothing else of Triton's API
    exists at the door."""
    from kfp_llmops.components.deploy.cluster import API_KEYS_MOUNT
    from kfp_llmops.components.deploy.config import DeployConfig
    from kfp_llmops.components.deploy.openai_frontend import arguments

    cfg = DeployConfig.load(f"target: {form}\n")
    with _cluster_door(tmp_path, cfg, "sk-cluster-0123456789abcdef\n", form) as (door, predictor, argv):
        assert argv[:3] == ["python", "-m", "kfp_llmops.components.deploy.openai_frontend"]
        parsed = arguments(argv[3:])
        upstream = "http://llm-predictor.team-a" if form == "kserve" else "http://llm-stable:8000"
        assert (parsed.triton, parsed.model, parsed.port) == (upstream, "llm", 8080)
        assert parsed.host == "0.0.0.0"  # in its pod, behind Knative's queue-proxy
        assert parsed.api_keys == f"{API_KEYS_MOUNT}/keys" and parsed.max_per_key == 32
        bearer = {"Authorization": "Bearer sk-cluster-0123456789abcdef", "Content-Type": "application/json"}
        for method, path in ALLOWED:
            status, headers, body = _send(door, method, path)
            if path == "/v2/health/ready":
                assert status == 200
                continue
            assert status == 401, (method, path, status)
            assert json.loads(body)["error"]["code"] == "invalid_api_key"
            assert headers["WWW-Authenticate"].startswith("Bearer")
            status, _, body = _send(door, method, path, bearer, _BODIES.get(path, b"{}"))
            assert status == 200, (method, path, status, body)
            if path.startswith("/v2/"):
                seen = json.loads(body)
                assert seen["path"] == path and "authorization" not in {k.lower() for k in seen["headers"]}
        assert {_send(door, m, p, bearer)[0] for m, p in DENIED} == {404}
        assert not [p for p in predictor.seen if not p.startswith(("/v2/health/ready", "/v2/models/llm"))]
        assert predictor.seen.count("/v2/models/llm/generate_stream") == 2  # the OpenAI paths, translated
        assert _send(door, "GET", "/v1/models", {"Authorization": "Bearer sk-cluster-0123456789abcdeF"})[0] == 401


def test_the_clusters_front_door_bounds_each_key(tmp_path):
    """Every client reaches the front door from the gateway's address: a key holding its
    bound of open requests gets 429s with Retry-After, another key is answered, and the
    bound frees as the requests end."""
    import concurrent.futures

    from kfp_llmops.components.deploy.config import DeployConfig

    cfg = DeployConfig.model_validate({"front_door": {"connections_per_client": 2}})
    keys = "sk-first-0123456789abcdef\nsk-second-0123456789abcdef\n"
    first = {"Authorization": "Bearer sk-first-0123456789abcdef"}
    second = {"Authorization": "Bearer sk-second-0123456789abcdef"}
    with _cluster_door(tmp_path, cfg, keys) as (door, predictor, _), concurrent.futures.ThreadPoolExecutor(2) as pool:
        predictor.release.clear()
        held = [pool.submit(_send, door, "POST", "/v2/models/llm/generate", first) for _ in range(2)]
        deadline = time.monotonic() + 10
        while predictor.seen.count("/v2/models/llm/generate") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        status, headers, body = _send(door, "GET", "/v2/models/llm", first)
        assert status == 429 and headers["Retry-After"] == "1", (status, body)
        assert "this API key" in json.loads(body)["error"]["message"]
        assert _send(door, "GET", "/v2/models/llm", second)[0] == 200
        predictor.release.set()
        assert [f.result()[0] for f in held] == [200, 200]
        assert _send(door, "GET", "/v2/models/llm", first)[0] == 200


@pytest.mark.parametrize("form", ["kserve", "gateway"])
def test_the_cluster_controllers_own_requests_go_through_the_door(tmp_path, form):
    """The cluster canary's load and smoke tests speak what clients speak: the OpenAI API
    at the front door (its rendered command line), with the first key of the controller's
    key file; the door relays them to the predictor's generate_stream, the key never
    reaches it. With a key the door does not know, every request is refused."""
    from kfp_llmops.components.deploy.cluster import ClusterTarget
    from kfp_llmops.components.deploy.config import DeployConfig

    keys = "sk-controller-0123456789abcdef\nsk-client-0123456789abcdef\n"
    cfg = DeployConfig.load(f"target: {form}\ncluster: {{api_keys_file: '{tmp_path / 'keys'}'}}\n")
    with _cluster_door(tmp_path, cfg, keys, form, _Triton) as (door, predictor, _):
        cfg.cluster.url = f"http://{door.host}:{door.port}"
        target = ClusterTarget(cfg, api=object(), log=lambda *_: None)
        samples = target.load().run(1.0)
        assert samples and all(s.ok and s.status == 200 and s.pieces >= 2 for s in samples), samples[:3]
        report = target.smoke()
        assert report["passed"], report["checks"]
        assert "openai_models" in {c["metric"] for c in report["checks"]}
        relayed = [p for p in predictor.seen if p.endswith(("/generate", "/generate_stream"))]
        assert relayed and set(relayed) == {"/v2/models/llm/generate_stream"}
        assert not [h for h in predictor.headers_seen if "authorization" in h]
        (tmp_path / "other").write_text("sk-unknown-0123456789abcdef\n")
        cfg.cluster.api_keys_file = str(tmp_path / "other")
        refused = ClusterTarget(cfg, api=object(), log=lambda *_: None).load().run(0.5)
        assert refused and {s.status for s in refused} == {401}
