"""One rollout per served model: the local state's flock across real processes (waiting,
refusing with the holder named, a killed holder's lock free at once, nesting), and the
cluster's Lease against a stand-in for the coordination API that keeps resourceVersions
as the server does (a write against a stale one is a 409) and refuses, as a strict API
server does, any body with unknown fields."""

import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from kubernetes.client.exceptions import ApiException

from kfp_llmops.components.common.errors import InputError, LlmopsError
from kfp_llmops.components.deploy.config import Lock
from kfp_llmops.components.deploy.rollout_lock import LOCK_FILE, Lease, state_lock
from strict_schema import validate as strict

HOLD = """
import sys, time
from kfp_llmops.components.deploy.config import Lock
from kfp_llmops.components.deploy.rollout_lock import state_lock
with state_lock(sys.argv[1], Lock(), log=lambda *_: None):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(state, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(state), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_rollout_is_refused_naming_the_holder_or_waits_until_it_is_released(tmp_path):
    proc = _holder(tmp_path, 2.0)
    try:
        with pytest.raises(InputError, match=rf"serving state .*another rollout holds it \(\S+_{proc.pid} since "):
            with state_lock(str(tmp_path), Lock(on_busy="refuse"), log=lambda *_: None):
                pass
        said = []
        t0 = time.monotonic()
        with state_lock(str(tmp_path), Lock(wait_s=60), log=said.append) as held:
            assert held["waited_s"] >= 1.0 and time.monotonic() - t0 >= 1.0  # only once the first let go
        assert f"_{proc.pid} since" in said[0] and "taken after waiting" in said[-1]
    finally:
        proc.kill()
        proc.wait()


def test_waiting_is_bounded(tmp_path):
    proc = _holder(tmp_path, 30.0)
    try:
        with pytest.raises(InputError, match=r"still held after waiting 1 s \(lock.wait_s\) by "):
            with state_lock(str(tmp_path), Lock(wait_s=1), log=lambda *_: None):
                pass
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holders_lock_is_free_at_once_and_nested_holds_share_the_outer(tmp_path):
    proc = _holder(tmp_path, 30.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["holder"].endswith(f"_{proc.pid}")  # stale text left
    with state_lock(str(tmp_path), Lock(on_busy="refuse")) as outer:
        with state_lock(str(tmp_path), Lock(on_busy="refuse")) as inner:  # same thread: no deadlock
            assert inner is outer
        seen = []  # another thread waits
        other = threading.Thread(target=lambda: seen.append(_try(tmp_path)))
        other.start()
        other.join()
        assert "another rollout holds it" in seen[0]
    assert _try(tmp_path) == "taken"


def _try(path) -> str:
    try:
        with state_lock(str(path), Lock(on_busy="refuse")):
            return "taken"
    except InputError as exc:
        return str(exc)


class _Resp:
    def __init__(self, obj):
        self.data = json.dumps(obj).encode()


class LeaseApi:
    """CoordinationV1Api's Lease calls, with the server's optimistic concurrency: every
    write names the resourceVersion it read, a stale one is refused with 409."""

    def __init__(self):
        self.obj, self.version, self.writes = None, 0, []
        self.lock = threading.Lock()

    def read_namespaced_lease(self, name, namespace, _preload_content=True):
        with self.lock:
            if self.obj is None:
                raise ApiException(status=404, reason="Not Found")
            return _Resp(self.obj)

    def _store(self, body):
        strict(body)
        self.version += 1
        self.obj = copy.deepcopy(body)
        self.obj["metadata"]["resourceVersion"] = str(self.version)
        self.writes.append(copy.deepcopy(body))
        return _Resp(self.obj)

    def create_namespaced_lease(self, namespace, body, _preload_content=True):
        with self.lock:
            if self.obj is not None:
                raise ApiException(status=409, reason="AlreadyExists")
            assert "resourceVersion" not in body["metadata"]
            return self._store(body)

    def replace_namespaced_lease(self, name, namespace, body, _preload_content=True):
        with self.lock:
            if body["metadata"].get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
                raise ApiException(status=409, reason="Conflict")
            return self._store(body)


def _lease(api, holder, **lock):
    return Lease(api, "team-a", "llm-rollout", Lock(**{"lease_duration_s": 5, **lock}), holder, log=lambda *_: None)


def test_a_lease_is_held_by_one_run_renewed_and_released(monkeypatch):
    api = LeaseApi()
    first = _lease(api, "run-a")
    with first as info:
        assert info["holder"] == "run-a" and api.obj["spec"]["holderIdentity"] == "run-a"
        with pytest.raises(InputError, match=r"Lease team-a/llm-rollout: another rollout holds it \(run-a since "):
            with _lease(api, "run-b", on_busy="refuse"):
                pass
        renewed = api.obj["spec"]["renewTime"]
        time.sleep(2.0)  # a third of the duration: renewed once
        assert api.obj["spec"]["renewTime"] > renewed and api.obj["spec"]["holderIdentity"] == "run-a"
        first.check()
    assert "holderIdentity" not in api.obj["spec"]  # released: the next need not wait
    with _lease(api, "run-b", on_busy="refuse"):
        assert api.obj["spec"]["holderIdentity"] == "run-b" and api.obj["spec"]["leaseTransitions"] == 1


def test_an_expired_lease_is_taken_over_and_its_old_holder_learns_it_lost(monkeypatch):
    api = LeaseApi()
    dead = _lease(api, "run-a")
    dead._take()  # taken, then its holder "died": never renewed
    with pytest.raises(InputError, match="still held after waiting"):
        with _lease(api, "run-b", wait_s=1):
            pass
    later = time.time() + 6
    monkeypatch.setattr("time.time", lambda: later)
    with _lease(api, "run-b", wait_s=1):
        assert api.obj["spec"]["holderIdentity"] == "run-b" and api.obj["spec"]["leaseTransitions"] == 1
    monkeypatch.undo()
    # a holder whose Lease another run took is told before it changes the model again
    api2 = LeaseApi()
    mine = _lease(api2, "run-a")
    with mine:
        thief = _lease(api2, "run-c")
        body = thief._body(json.loads(api2.read_namespaced_lease("", "").data), "run-c")
        api2.replace_namespaced_lease("", "", body)
        time.sleep(2.0)
        with pytest.raises(LlmopsError, match="taken over by run-c; stopping this rollout"):
            mine.check()
    assert api2.obj["spec"]["holderIdentity"] == "run-c"  # not cleared by the loser


def test_two_runs_taking_a_free_lease_at_once_never_both_get_it():
    api = LeaseApi()
    with _lease(api, "run-0"):
        pass  # exists, free
    barrier = threading.Barrier(2)
    real_read = api.read_namespaced_lease

    def read(*args, **kwargs):
        got = real_read(*args, **kwargs)
        barrier.wait(timeout=5)  # both read the same resourceVersion
        return got

    api.read_namespaced_lease = read
    a, b = _lease(api, "run-a"), _lease(api, "run-b")
    results = {}
    threads = [threading.Thread(target=lambda x=x: results.update({x.holder: x._take()})) for x in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(v is None for v in results.values()) == [False, True]
    loser = next(k for k, v in results.items() if v is not None)
    assert "changed while being taken" in results[loser] and api.obj["spec"]["holderIdentity"] != loser


def test_a_holder_whose_renewals_fail_gives_up_at_two_thirds_of_the_duration(monkeypatch):
    """Another run may take the Lease once its full duration passed since the last renewTime;
    the holder must stop before then, asked at each change, not at the renewal thread's pace."""
    api = LeaseApi()
    mine = _lease(api, "run-a", lease_duration_s=6)
    with mine:
        start = time.monotonic()

        def down(*args, **kwargs):
            raise ApiException(status=503, reason="Service Unavailable")

        monkeypatch.setattr(api, "replace_namespaced_lease", down)
        mine.check()  # renewed a moment ago
        clock = time.monotonic
        monkeypatch.setattr(time, "monotonic", lambda: clock() + 4.05)  # 2/3 of 6 s later, no renewal since
        with pytest.raises(LlmopsError, match=r"not renewed for 4 s \(2/3 of its duration\); stopping"):
            mine.check()
        monkeypatch.setattr(time, "monotonic", clock)
        assert time.monotonic() - start < 2  # said at once, by check, not after a renewal period
    assert api.obj["spec"]["holderIdentity"] == "run-a"  # a lost hold is not released by its loser
