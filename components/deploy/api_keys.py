"""API keys of the serving front door: a client sends `Authorization: Bearer <key>`
(what the `openai` SDK sends with `api_key=`), nginx asks this checker about every
request to a model endpoint (`auth_request`) and answers 401 unless it says yes.

A check of its own because nginx compares strings with memcmp, whose time tells how much
of a guess was right: here each key is compared with `hmac.compare_digest` and every key
is compared, whatever matched. Keys come from a file (one per line, `#` comments; a
mounted Secret's file works as it is) that is read again when it changes, so a key is
added or revoked without a restart.

`python -m kfp_llmops.components.deploy.api_keys --keys FILE --port N` runs the checker;
`KeyChecker` starts and stops that process beside nginx. In the cluster the front end
asks `Keys` itself (openai_frontend.py, the InferenceService's transformer)."""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kfp_llmops.components.common.errors import InputError, LlmopsError

from .processes import LOOPBACK, die_with_parent, free_ports, stop_group, wait_for_http

REQUIRED = "an API key is required: send Authorization: Bearer <key>"  # the 401's message
CHALLENGE = 'Bearer realm="llmops"'  # its WWW-Authenticate
# Printable ASCII, no spaces: what a header carries as it is; at most 255 characters, the
# longest key nginx's per-key connection bound counts (a longer one would be let past it).
_KEY = re.compile(r"[\x21-\x7e]{16,255}")
_BEARER = re.compile(r"bearer +(\S+) *", re.IGNORECASE)


def read_keys(path: str) -> list[bytes]:
    """The keys in `path`; InputError naming the file and line of a bad one (never the key)."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the API keys ({type(exc).__name__})") from None
    keys = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not _KEY.fullmatch(line):
            raise InputError(
                f"{path}:{number}: not an API key (16 to 255 printable ASCII characters without spaces, one per line)"
            )
        keys.append(line.encode())
    if not keys:
        raise InputError(f"{path}: holds no API key (one per line; blank lines and # comments are skipped)")
    return keys


def controller_key(path: str) -> str:
    """The key the controller's own requests carry: the file's first."""
    return read_keys(path)[0].decode()


def make_key_file(path: str) -> bool:
    """A new random key in `path` (0600) unless the file exists; True when one was made."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as handle:
        handle.write(f"sk-llmops-{secrets.token_urlsafe(32)}\n")
        handle.flush()
        os.fsync(handle.fileno())
    return True


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def keys_for(host: str, keys_file: str, state_dir: str) -> str | None:
    """The API key file nginx on `host` asks clients for: `keys_file` where given; none on
    loopback; elsewhere `<state_dir>/api-keys`, made with a new key if absent, so a server
    that others can reach is never open by default."""
    if keys_file:
        read_keys(keys_file)
        return os.path.abspath(keys_file)
    if is_loopback(host):
        return None
    path = os.path.abspath(os.path.join(state_dir, "api-keys"))
    make_key_file(path)
    read_keys(path)
    return path


def matched(header: str | None, keys: list[bytes]) -> bytes | None:
    """The one of `keys` an Authorization header carries (None: none), found in time that
    does not depend on which key matched or how much of one did: every key is compared."""
    match = _BEARER.fullmatch(header or "")
    given = (match.group(1) if match else "").encode("utf-8", "replace")
    found = None
    for key in keys:
        if hmac.compare_digest(key, given):
            found = key
    return found if match else None


def authorized(header: str | None, keys: list[bytes]) -> bool:
    return matched(header, keys) is not None


class Keys:
    """The file's keys, read again when its modification time or size changes; a file
    that turns bad keeps the last good keys (and says so on stderr) rather than locking
    everyone out or letting everyone in."""

    def __init__(self, path: str):
        self.path, self.lock = path, threading.Lock()
        self.stamp = self._stamp()
        self.keys = read_keys(path)

    def _stamp(self):
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size, info.st_ino

    def current(self) -> list[bytes]:
        stamp = self._stamp()
        if stamp != self.stamp:
            with self.lock:
                try:
                    self.keys = read_keys(self.path)
                except InputError as exc:
                    print(f"keeping the previous API keys: {exc}", file=sys.stderr, flush=True)
                self.stamp = stamp
        return self.keys


class _Check(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # nginx keeps its connections to the checker open

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/health":
            status = 200
        else:
            status = 204 if authorized(self.headers.get("Authorization"), self.server.keys.current()) else 401
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Answers nginx's auth_request: 204 for a known API key, else 401.")
    parser.add_argument("--keys", required=True, help="File of API keys, one per line.")
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        keys = Keys(args.keys)
    except InputError as exc:
        sys.exit(f"error: {exc}")
    server = ThreadingHTTPServer((args.host, args.port), _Check)
    server.daemon_threads = True
    server.keys = keys
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


class KeyChecker:
    """The checker as a process of its own, on loopback, for one nginx."""

    def __init__(self, keys_file: str, work: str):
        # a bad file stops the server from starting, naming the line; the first key is the
        # one the controller's own requests carry
        self.first_key = controller_key(keys_file)
        self.keys_file, self.work = os.path.abspath(keys_file), work
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(work, "api-keys.log")

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 20.0) -> KeyChecker:
        os.makedirs(self.work, exist_ok=True)
        self.port = free_ports(1, LOOPBACK)[0]
        cmd = [sys.executable, "-m", __name__, "--keys", self.keys_file, "--port", str(self.port)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent
            )
        try:
            wait_for_http(f"http://{self.address}/health", self.proc, timeout, "the API key checker")
        except LlmopsError as exc:
            self.stop()
            raise LlmopsError(f"{exc} (log: {self.log_path})") from None
        return self

    def stop(self) -> None:
        stop_group(self.proc, signal.SIGTERM, 5.0)


if __name__ == "__main__":
    main()
