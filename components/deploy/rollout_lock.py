"""One rollout per served model at a time.

Two releases of one model in flight at once are ordinary under GitOps. Unserialised, both
read the same stable, both call themselves the next version and both promote, the second
copying the first's model over the one `undo` needs. So a rollout holds the served model
from before it reads anything until it ends:

- the local target: an exclusive `flock` on `<state>/.rollout.lock`. The kernel drops it
  when its holder dies, so a crashed rollout never leaves it held; the file names the
  holder for whoever waits.
- the cluster targets: a `coordination.k8s.io/v1` Lease named after the InferenceService
  (client-go's leader election): holder, duration and renew time, renewed while the
  rollout runs, taken over only once it expired, every write conditional on the
  `resourceVersion` read (optimistic concurrency), so two runs never both take it.

A second rollout waits (`lock.wait_s`, reporting who holds it and since when) and then
reads the stable the first left, or with `lock.on_busy: refuse` gives up at once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import threading
import time

from kfp_llmops.components.common.errors import InputError, LlmopsError

from .config import DeployConfig, Lock

LOCK_FILE = ".rollout.lock"
POLL_S = 0.5
SAY_EVERY_S = 30.0
_HELD: dict[tuple[str, int], dict] = {}  # (lock, thread) -> what this process holds (re-entrant)
_GUARD = threading.Lock()


def identity() -> str:
    """Who holds it: the pod (its hostname) and process."""
    return f"{socket.gethostname()}_{os.getpid()}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _wait(take, what: str, lock: Lock, log) -> float:
    """Call `take()` (None once taken, else who holds it) until it succeeds, the wait
    bound passes, or at once under `on_busy: refuse`; the seconds waited."""
    t0 = time.monotonic()
    said = -SAY_EVERY_S
    while True:
        holder = take()
        waited = time.monotonic() - t0
        if holder is None:
            if waited >= POLL_S:
                log(f"[deploy] {what}: taken after waiting {waited:.0f} s")
            return waited
        if lock.on_busy == "refuse":
            raise InputError(f"{what}: another rollout holds it ({holder}); refusing (lock.on_busy: refuse)")
        if waited >= lock.wait_s:
            raise InputError(f"{what}: still held after waiting {waited:.0f} s (lock.wait_s) by {holder}")
        if waited - said >= SAY_EVERY_S:
            log(f"[deploy] {what}: held by {holder}; waiting (up to {lock.wait_s:.0f} s)")
            said = waited
        time.sleep(POLL_S)


@contextlib.contextmanager
def _reentrant(key: str):
    """Yield the hold this thread already has on `key` (then nothing else is taken), or None."""
    with _GUARD:
        held = _HELD.get((key, threading.get_ident()))
        if held is not None:
            held["depth"] += 1
    try:
        yield held
    finally:
        if held is not None:
            with _GUARD:
                held["depth"] -= 1


@contextlib.contextmanager
def _holding(key: str, entry: dict):
    """This thread's hold on `key`, seen by the holds nested in it until it ends."""
    with _GUARD:
        _HELD[(key, threading.get_ident())] = {"depth": 0, **entry}
    try:
        yield
    finally:
        with _GUARD:
            _HELD.pop((key, threading.get_ident()), None)


@contextlib.contextmanager
def state_lock(state_dir: str, lock: Lock, log=print):
    """The local serving state, held exclusively; yields {"waited_s", "holder"}. Nested
    holds in one thread share the outer one (and are told how long it waited)."""
    os.makedirs(state_dir, exist_ok=True)
    path = os.path.join(os.path.abspath(state_dir), LOCK_FILE)
    with _reentrant(path) as outer:
        if outer is not None:
            yield outer["info"]
            return
        import fcntl

        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:

            def take():
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return None
                except BlockingIOError:
                    try:
                        who = json.loads(os.pread(fd, 4096, 0) or b"{}")
                    except ValueError:
                        who = {}
                    return f"{who.get('holder', 'another process')} since {who.get('since', '?')}"

            waited = _wait(take, f"serving state {state_dir}", lock, log)
            info = {"waited_s": round(waited, 3), "holder": identity(), "since": _now()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
            try:
                with _holding(path, {"info": info}):
                    yield info
            finally:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _parse(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Lease:
    """A coordination.k8s.io/v1 Lease held by this run. `api` is a CoordinationV1Api;
    bodies are read raw (`_preload_content=False`) so what is compared is the server's JSON."""

    def __init__(self, api, namespace: str, name: str, lock: Lock, holder: str | None = None, log=print):
        self.api, self.namespace, self.name, self.lock, self.log = api, namespace, name, lock, log
        self.holder = holder or identity()
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.acquired = ""
        self._renewed = time.monotonic()  # when the last write that holds it was sent

    def _read(self) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise LlmopsError(f"Lease {self.namespace}/{self.name}: {exc.status} {exc.reason}") from None
        return json.loads(resp.data)

    def _body(self, old: dict | None, holder: str | None) -> dict:
        spec = (old or {}).get("spec", {})
        now = _now()
        taking = holder is not None and spec.get("holderIdentity") != holder
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/part-of": "kfp-llmops"},
            },
            "spec": {
                "leaseDurationSeconds": self.lock.lease_duration_s,
                "leaseTransitions": spec.get("leaseTransitions", 0) + (1 if taking and old else 0),
            },
        }
        if old is not None:
            body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if holder is not None:
            body["spec"].update(
                holderIdentity=holder, renewTime=now, acquireTime=now if taking else spec.get("acquireTime", now)
            )
        return body

    def _write(self, old: dict | None, holder: str | None) -> bool:
        """Create or replace conditionally on what was read; False when another writer won."""
        from kubernetes.client.exceptions import ApiException

        body = self._body(old, holder)
        try:
            if old is None:
                self.api.create_namespaced_lease(self.namespace, body, _preload_content=False)
            else:
                self.api.replace_namespaced_lease(self.name, self.namespace, body, _preload_content=False)
        except ApiException as exc:
            if exc.status in (409, 422):
                return False
            raise LlmopsError(f"Lease {self.namespace}/{self.name}: {exc.status} {exc.reason}") from None
        return True

    def _take(self) -> str | None:
        sent = time.monotonic()
        old = self._read()
        spec = (old or {}).get("spec", {})
        holder = spec.get("holderIdentity")
        renewed = _parse(spec.get("renewTime") or spec.get("acquireTime"))
        duration = spec.get("leaseDurationSeconds") or self.lock.lease_duration_s
        if holder and holder != self.holder and renewed is not None and time.time() < renewed + duration:
            return f"{holder} since {spec.get('acquireTime', '?')}, renewed {time.time() - renewed:.0f} s ago"
        if self._write(old, self.holder):
            self.acquired = spec.get("acquireTime", "") if holder == self.holder else _now()
            self._renewed = sent
            return None
        return f"{holder or 'another run'} (it changed while being taken)"

    def _renew(self) -> None:
        period = self.lock.lease_duration_s / 3
        while not self._stop.wait(period):
            sent = time.monotonic()  # the renewTime written is no later than this
            try:
                old = self._read()
                holder = (old or {}).get("spec", {}).get("holderIdentity")
                if holder not in (None, self.holder):
                    self.lost = f"Lease {self.namespace}/{self.name} was taken over by {holder}"
                elif self._write(old, self.holder):
                    self._renewed = sent
            except (LlmopsError, OSError) as exc:
                self.log(f"[deploy] renewing Lease {self.namespace}/{self.name} failed: {exc}")
            if self._expiring():
                self.log(f"[deploy] {self.lost}: this rollout no longer owns the model")
                return

    def _expiring(self) -> bool:
        """Lost once two thirds of the duration passed without a renewal (client-go's
        renew deadline): another run may take it at the full duration, measured from a
        renewTime this clock cannot see exactly, so this run stops well before."""
        deadline = self.lock.lease_duration_s * 2 / 3
        if not self.lost and time.monotonic() - self._renewed >= deadline:
            self.lost = f"Lease {self.namespace}/{self.name} not renewed for {deadline:.0f} s (2/3 of its duration)"
        return self.lost is not None

    def check(self) -> None:
        """Raise when another run may own the model now, or may soon: nothing more may
        change it (asked before each change, not only when the renewal thread wakes)."""
        if self._expiring():
            raise LlmopsError(f"{self.lost}; stopping this rollout before it changes the model again")

    def __enter__(self) -> dict:
        waited = _wait(self._take, f"Lease {self.namespace}/{self.name}", self.lock, self.log)
        self._thread = threading.Thread(target=self._renew, name="lease-renewal", daemon=True)
        self._thread.start()
        return {"waited_s": round(waited, 3), "holder": self.holder, "since": self.acquired}

    def __exit__(self, *exc) -> None:
        """Released (holder cleared) unless lost: the next rollout need not wait for it to expire."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lost:
            return
        with contextlib.suppress(LlmopsError, OSError):
            old = self._read()
            if old is not None and old.get("spec", {}).get("holderIdentity") == self.holder:
                self._write(old, None)


@contextlib.contextmanager
def rollout_lock(cfg: DeployConfig, state_dir: str, log=print, api=None):
    """The served model, held for one rollout; yields (the hold's info, a check that
    raises once the hold is lost: called before each change to what serves)."""
    if cfg.target == "local":
        with state_lock(state_dir, cfg.lock, log) as info:
            yield info, lambda: None
        return
    from kfp_llmops.components.common.k8s import namespace

    key = f"lease:{namespace(cfg.cluster.namespace)}/{cfg.cluster.service_name}"
    with _reentrant(key) as outer:
        if outer is not None:
            yield outer["info"], outer["check"]
            return
        if api is None:
            from kfp_llmops.components.common.k8s import coordination

            api = coordination()
        lease = Lease(api, namespace(cfg.cluster.namespace), f"{cfg.cluster.service_name}-rollout", cfg.lock, log=log)
        with lease as info, _holding(key, {"info": info, "check": lease.check}):
            yield info, lease.check
