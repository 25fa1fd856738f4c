"""The local serving state under a kill at any instant: a promotion killed while copying,
before state.json names the new version, or after it but before the links, leaves
state.json naming the old stable or the new one (each verifying), `undo` working, and a
rerun that finishes the job; the processes a killed rollout left are stopped by the next."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from helpers import tiny_model
from kfp_llmops.components.common.records import REPOS_DIR, read_serving_state, served_dir
from kfp_llmops.components.deploy import DeployConfig, build_repository, repository, serving_state
from kfp_llmops.components.deploy.local_target import undo
from kfp_llmops.components.deploy.processes import proc_stat

PROMOTE = """
import sys
from kfp_llmops.components.deploy import repository, serving_state
info = repository.verify(sys.argv[2], sys.argv[3])
serving_state.commit_promotion(sys.argv[1], sys.argv[2], {k: info[k] for k in
                               ("model_name", "version", "repository_root", "model_root")})
"""


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving-state")
    _, _, model, model_root = tiny_model(root)
    out = {}
    for version in (1, 2, 3):
        cfg = DeployConfig.load(f"version: {version}\nwatermark: {{enabled: false}}\n")
        out[version] = build_repository(model, model_root, str(root / f"repo-v{version}"), cfg, str(root / "x"))
        out[version]["path"] = str(root / f"repo-v{version}")
    state = root / "state"
    for version in (1, 2):
        _promote(state, out[version], model_root)
    return {"repos": out, "model_root": model_root, "state": str(state)}


def _promote(state, built, model_root, kill_at: str | None = None) -> int:
    env = {**os.environ, serving_state.KILL_AT: kill_at} if kill_at else dict(os.environ)
    env.pop(serving_state.KILL_AT, None) if not kill_at else None
    return subprocess.run(
        [sys.executable, "-c", PROMOTE, str(state), built["path"], model_root],
        env=env,
        capture_output=True,
        timeout=120,
    ).returncode


def _versions(state) -> tuple:
    s = read_serving_state(state)
    return tuple((s.get(role) or {}).get("version") for role in ("stable", "previous"))


def _verifies(state, model_root) -> None:
    s = read_serving_state(state)
    for role in ("stable", "previous"):
        if s.get(role):
            repository.verify(served_dir(state, role), model_root, s[role]["repository_root"])


@pytest.mark.parametrize("point,after", [("promotion_copy", (2, 1)), ("before_state", (2, 1)), ("after_state", (3, 2))])
def test_a_promotion_killed_anywhere_leaves_one_version_or_the_other_and_the_rerun_finishes(
    repos, tmp_path, point, after
):
    state = str(tmp_path / "state")
    shutil.copytree(repos["state"], state, symlinks=True)
    assert _promote(state, repos["repos"][3], repos["model_root"], kill_at=point) == -signal.SIGKILL
    assert _versions(state) == after
    _verifies(state, repos["model_root"])  # whatever it names is whole
    undone = str(tmp_path / "undone")
    shutil.copytree(state, undone, symlinks=True)
    assert undo(undone)["stable"]["version"] == after[1]  # undo always works
    _verifies(undone, repos["model_root"])
    assert os.path.realpath(os.path.join(undone, "stable")) == served_dir(undone)  # links re-pointed
    assert _promote(state, repos["repos"][3], repos["model_root"]) == 0  # the rerun finishes
    assert _versions(state) == (3, 2)
    _verifies(state, repos["model_root"])
    kept = sorted(os.listdir(os.path.join(state, REPOS_DIR)))
    assert kept == sorted(repos["repos"][v]["repository_root"] for v in (2, 3))  # nothing else left
    assert os.path.realpath(os.path.join(state, "previous")) == served_dir(state, "previous")


def test_a_state_folder_from_before_repos_is_moved_in_place(repos, tmp_path):
    """stable/ and previous/ as plain folders (the earlier layout) become repos/ entries."""
    state = tmp_path / "state"
    shutil.copytree(repos["state"], state, symlinks=True)
    for role in ("stable", "previous"):
        real = os.path.realpath(state / role)
        os.unlink(state / role)
        shutil.move(real, state / role)
    assert not os.listdir(state / REPOS_DIR)
    _verifies(str(state), repos["model_root"])  # read from the old places
    serving_state.repair(str(state))
    assert os.path.islink(state / "stable") and len(os.listdir(state / REPOS_DIR)) == 2
    _verifies(str(state), repos["model_root"])


def test_process_groups_a_killed_rollout_left_are_stopped_by_the_next(tmp_path):
    leader = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300"], start_new_session=True)
    time.sleep(0.3)
    serving_state.note_process(str(tmp_path), leader.pid)
    os.kill(leader.pid, signal.SIGKILL)  # the leader dies, its child lives on
    leader.wait()
    assert _group(leader.pid)
    assert serving_state.stop_leftovers(str(tmp_path), log=lambda *_: None) == 1
    time.sleep(0.3)
    assert not _group(leader.pid) and not os.path.exists(tmp_path / serving_state.PIDS)


def _group(pgid: int) -> list[int]:
    stats = [(p, proc_stat(p)) for p in os.listdir("/proc") if p.isdigit()]
    return [int(p) for p, st in stats if st and st[0] == pgid and st[2] != "Z"]  # zombies are dead
