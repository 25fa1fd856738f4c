"""Recording the clean dataset with DVC (`dvc add`, then `dvc push` to a remote), so the
exact bytes that trained a model can be fetched again by their hash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import yaml

from kfp_llmops.components.common.errors import LlmopsError

from .config import DvcConfig


def _dvc(repo: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "dvc", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "DVC_NO_ANALYTICS": "1"},
    )
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        raise LlmopsError(f"dvc {args[0]} failed in {repo}: {lines[-1] if lines else 'no output'}")
    return proc.stdout


def record(clean_path: str, cfg: DvcConfig, name: str = "clean.jsonl") -> dict:
    """Add `clean_path` to the DVC repo (created without SCM if missing) and push it."""
    repo = os.path.abspath(cfg.repo_dir or os.path.dirname(clean_path))
    os.makedirs(repo, exist_ok=True)
    if not os.path.isdir(os.path.join(repo, ".dvc")):
        _dvc(repo, "init", "--no-scm", "-q")
    target = os.path.join(repo, name)
    if os.path.abspath(clean_path) != target:
        shutil.copyfile(clean_path, target)
    _dvc(repo, "add", "-q", name)
    with open(f"{target}.dvc", encoding="utf-8") as handle:
        out = yaml.safe_load(handle)["outs"][0]
    info = {"repo": repo, "dvc_file": f"{target}.dvc", "md5": out["md5"], "size": out.get("size"), "remote": None}
    if cfg.remote_url:
        _dvc(repo, "remote", "add", "-f", "-d", cfg.remote_name, cfg.remote_url)
        _dvc(repo, "push", "-q", "-r", cfg.remote_name, name)
        info["remote"] = cfg.remote_url
    return info
