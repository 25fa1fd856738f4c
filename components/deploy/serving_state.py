"""The local target's state folder, changed only in ways a kill at any instant survives.

state.json is the commit point. A promotion copies the repository whole to
`repos/<root>` (through a partial copy, fsynced) before state.json names it, then re-points the
`stable` / `previous` links and removes what state.json no longer names. A process
killed anywhere leaves state.json naming the old stable or the new one, each folder
complete; `repair` (run by the next rollout, undo or serve under the lock) finishes the
links and removes the leftovers. The processes a rollout starts are listed in
`.rollout.pids`, so a rollout killed with its servers running has them stopped by the
next one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

from kfp_llmops.components.common import atomic
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.records import REPOS_DIR, read_serving_state, served_dir, write_serving_state

from .processes import proc_stat

ROLES = ("stable", "previous")
PIDS = ".rollout.pids"
KILL_AT = "LLMOPS_DRILL_KILL_AT"  # a rehearsal: the process kills itself at this point


def kill_point(name: str) -> None:
    """Drill: SIGKILL this process here when `$LLMOPS_DRILL_KILL_AT` names the point
    (before_traffic, mid_interval, promotion_copy, before_state, after_state)."""
    if os.environ.get(KILL_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _link(state_dir: str, role: str, root: str | None) -> None:
    link = os.path.join(state_dir, role)
    if root is None:
        if os.path.islink(link):
            os.unlink(link)
        elif os.path.isdir(link):
            shutil.rmtree(link)
        return
    if os.path.isdir(link) and not os.path.islink(link):  # a copy made without links: repos/ holds it
        shutil.rmtree(link)
    tmp = f"{link}.new"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.join(REPOS_DIR, root), tmp)
    os.replace(tmp, link)


def repair(state_dir: str) -> None:
    """The folder brought in line with state.json: a folder from before repos/ moved into
    it, the links re-pointed, what state.json does not name removed."""
    state = read_serving_state(state_dir)
    repos = os.path.join(state_dir, REPOS_DIR)
    os.makedirs(repos, exist_ok=True)
    keep = set()
    for role in ROLES:
        rec = state.get(role)
        link = os.path.join(state_dir, role)
        if rec:
            stored = os.path.join(repos, rec["repository_root"])
            if not os.path.isdir(stored) and os.path.isdir(link) and not os.path.islink(link):
                os.replace(link, stored)
            keep.add(rec["repository_root"])
        _link(state_dir, role, rec["repository_root"] if rec else None)
    for name in os.listdir(repos):
        if name not in keep:
            shutil.rmtree(os.path.join(repos, name), ignore_errors=True)
    for name in os.listdir(state_dir):
        if name.startswith(".incoming-"):  # a promotion of an earlier layout
            shutil.rmtree(os.path.join(state_dir, name), ignore_errors=True)


def _copy_file(src: str, dst: str) -> str:
    out = atomic.copy2(src, dst)
    kill_point("promotion_copy")
    return out


def commit_promotion(state_dir: str, repo_dir: str, record: dict) -> dict:
    """`repo_dir` becomes stable, the old stable previous. A real copy (hard links would
    let a later edit of the artifact reach what is served)."""
    root = record["repository_root"]
    old = read_serving_state(state_dir)
    if (old.get("stable") or {}).get("repository_root") == root:  # committed before a kill: links only
        repair(state_dir)
        return old
    dest = os.path.join(state_dir, REPOS_DIR, root)
    if not os.path.isdir(dest):  # on disk, files and folders, before state.json names it
        atomic.copy_tree(repo_dir, dest, link=False, copy_function=_copy_file)
    kill_point("before_state")
    state = {
        "stable": record,
        "previous": old.get("stable"),
        "promoted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_serving_state(state_dir, state)
    kill_point("after_state")
    repair(state_dir)
    return state


def commit_undo(state_dir: str) -> dict:
    """previous becomes stable again (verified first); the undone version is dropped."""
    from . import repository

    state = read_serving_state(state_dir)
    if not state.get("previous"):
        raise InputError(f"{state_dir}: no previous version to roll back to")
    prev = state["previous"]
    repository.verify(served_dir(state_dir, "previous"), prev["model_root"], prev["repository_root"])
    new = {
        "stable": prev,
        "previous": None,
        "promoted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "undone": state["stable"],
    }
    write_serving_state(state_dir, new)
    repair(state_dir)
    return new


# -- processes a rollout started ----------------------------------------------------------


def note_process(state_dir: str, pid: int) -> None:
    """Remember a process group this rollout started (its leader's start time tells it
    from a later process that got the same id)."""
    stat = proc_stat(pid)
    if stat is not None:
        with open(os.path.join(state_dir, PIDS), "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"pgid": pid, "start": stat[1]}) + "\n")


def stop_leftovers(state_dir: str, log=print) -> int:
    """Stop the process groups an earlier, killed rollout left running; how many. A
    group whose leader died may still hold its children (nginx workers, backend stubs):
    while any member lives, its id is not reused, so they are the same group."""
    path = os.path.join(state_dir, PIDS)
    if not os.path.exists(path):
        return 0
    groups = {}
    for line in open(path, encoding="utf-8"):
        try:
            entry = json.loads(line)
            groups[int(entry["pgid"])] = int(entry["start"])
        except (ValueError, KeyError, TypeError):
            continue
    members: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        stat = proc_stat(name) if name.isdigit() else None
        if stat is not None and stat[0] in groups and stat[2] != "Z":
            members.setdefault(stat[0], []).append(int(name))
    stopped = 0
    for pgid in members:
        leader = proc_stat(pgid)
        if leader is not None and (leader[0] != pgid or leader[1] != groups[pgid]):
            continue  # that id is someone else's now
        try:
            os.killpg(pgid, signal.SIGKILL)
            stopped += 1
        except OSError:
            pass
    os.unlink(path)
    if stopped:
        log(f"[deploy] stopped {stopped} process group(s) a killed rollout left running")
    return stopped
