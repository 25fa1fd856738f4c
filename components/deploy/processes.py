"""The servers' processes on this machine: free loopback ports, waiting for a server to
answer, children that die with their parent, stopping a process group with everything it
started. Shared by Triton, nginx, the key checker, the OpenAI front end and Prometheus."""

from __future__ import annotations

import collections
import os
import random
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

from kfp_llmops.components.common.errors import LlmopsError

LOOPBACK = "127.0.0.1"  # where every server but nginx listens


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_handed_out: collections.deque[int] = collections.deque(maxlen=512)
_handed_lock = threading.Lock()


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct ports nothing listens on, from below the kernel's ephemeral range.

    A server is given its port before it binds it, and Triton binds only after loading
    its model (20 s and more). A port from bind(0) is in the ephemeral range, which every
    outgoing connection and every bind(0) of the server's own engine also draws from, so
    in that gap it was taken (or held in TIME_WAIT) now and then and the server failed to
    start. Below the range only another explicit pick can collide; this process never
    hands the same port out twice in a row of 512."""
    top = _ephemeral_low()
    bottom = max(1024, top - 16384)
    if top - bottom < 1024:  # the range reaches low: pick as the kernel would
        return _kernel_ports(n, host)
    picked: list[int] = []
    rng = random.SystemRandom()
    with _handed_lock:
        for _ in range(64 * n):
            port = rng.randrange(bottom, top)
            if port in picked or port in _handed_out or not _bindable(host, port):
                continue
            picked.append(port)
            if len(picked) == n:
                _handed_out.extend(picked)
                return picked
    raise LlmopsError(f"no {n} free ports on {host} in {bottom}-{top - 1}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:  # no SO_REUSEADDR: a port in TIME_WAIT counts as taken
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _kernel_ports(n: int, host: str) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for_http(url: str, proc: subprocess.Popen, timeout: float, what: str) -> None:
    """Until `url` answers 200; LlmopsError naming `what` if `proc` exits first or the
    time runs out (the caller stops what it started)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LlmopsError(f"{what} exited with {proc.returncode}")
        try:
            if http_get(url, 1.0)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise LlmopsError(f"{what} not ready after {timeout:.0f} s")


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the process that started it dies (Linux's
    PR_SET_PDEATHSIG), so a rollout killed outright does not leave its servers running."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def proc_stat(pid: int | str) -> tuple[int, int, str] | None:
    """(process group, start time, state) of a process, from /proc (state Z: a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[2]), int(fields[19]), fields[0]
    except (OSError, IndexError, ValueError):
        return None


def group_members(pgid: int, command: str) -> list[int]:
    """The processes of group `pgid` whose command line contains `command` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        stat = proc_stat(entry) if entry.isdigit() else None
        if stat is None or stat[0] != pgid:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if command.encode() in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def stop_group(proc: subprocess.Popen | None, first: signal.Signals | None, grace: float = 10.0) -> None:
    """Send `first` to the process group started with `start_new_session` and give it
    `grace` seconds, then SIGKILL the group (children included) and reap the leader."""
    if proc is None:
        return
    if first is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, first)
            proc.wait(timeout=grace)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
