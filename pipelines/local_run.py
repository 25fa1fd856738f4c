"""`llmops run` / `make demo`: the release pipeline through kfp.local on the bundled
dataset, with a summary table and `summary.json` in one run folder."""
from __future__ import annotations

import json
import os
import shutil
import time
import warnings

from .demo_data import make_demo_dataset
from .release import PIPELINES


def run_local(out_dir: str, pipeline: str = "release", rows: int = 4000, pii_policy: str = "balanced",
              data_config: str = "", dataset: str | None = None) -> dict:
    """Run `pipeline` locally; returns (and writes) the run summary."""
    from kfp import local

    out_dir = os.path.abspath(out_dir)
    root = os.path.join(out_dir, "pipeline_root")
    for stale in (root, os.path.join(out_dir, "workspace")):
        shutil.rmtree(stale, ignore_errors=True)
    data = {"train": os.path.abspath(dataset)} if dataset else make_demo_dataset(os.path.join(out_dir, "data"), rows)
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=root,
               workspace_root=os.path.join(out_dir, "workspace"))
    started = time.time()
    with warnings.catch_warnings():
        # The stage images hold this package; locally the current venv plays that role.
        warnings.filterwarnings("ignore", message=".*non-Python base image.*")
        task = PIPELINES[pipeline](dataset_uri=data["train"], data_config=data_config, pii_policy=pii_policy)
    outputs = task.outputs
    clean, report, passed = outputs["clean"], outputs["report"], outputs["passed"]
    metrics = outputs["metrics"].metadata
    summary = {
        "pipeline": pipeline, "run_folder": out_dir, "elapsed_s": round(time.time() - started, 1),
        "dataset": data["train"], "eval_dataset": data.get("eval"),
        "stages": [{
            "stage": "validate_dataset", "gate": "passed" if passed else "failed",
            "rows_in": int(metrics["rows_in"]), "rows_out": int(metrics["rows_out"]),
            "rows_quarantined": int(metrics["rows_quarantined"]),
            "merkle_root": clean.metadata.get("merkle_root"),
            "outputs": {"clean": clean.path, "report": report.path},
        }],
    }
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2)
    return summary


def format_summary(summary: dict) -> str:
    rows = [("stage", "gate", "rows in", "rows out", "quarantined", "merkle root")]
    for s in summary["stages"]:
        rows.append((s["stage"], s["gate"], str(s["rows_in"]), str(s["rows_out"]),
                     str(s["rows_quarantined"]), (s["merkle_root"] or "")[:16] + "…"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(f"run folder: {summary['run_folder']}  ({summary['elapsed_s']} s)")
    for s in summary["stages"]:
        lines.append(f"{s['stage']} report: {s['outputs']['report']}")
    lines.append(f"summary: {os.path.join(summary['run_folder'], 'summary.json')}")
    return "\n".join(lines)
