"""The release record: the run's final status and every stage's roots, as JSON and
Markdown, built from the stages' lineage notes."""

from __future__ import annotations

import json
import os
import time

from kfp_llmops.components.common import atomic, records


def build(release_dir: str, status: dict) -> dict:
    notes = records.read_notes(release_dir) if release_dir else {}
    stages = {name: note.model_dump(mode="json") for name, note in notes.items()}
    deploy = stages.get("triton_canary_deploy", {})
    return {
        "format": "kfp-llmops-release/1",
        "status": status.get("state", "UNKNOWN"),
        "error": status.get("error") or None,
        "run": status.get("pipeline_job_resource_name"),
        "task": status.get("pipeline_task_name"),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "release_dir": os.path.abspath(release_dir) if release_dir else None,
        "decision": deploy.get("result"),
        "stages": stages,
        "note": None if release_dir else "no release_dir: stages wrote no lineage notes",
    }


def _root(v) -> str:
    return f"`{v[:16]}…`" if isinstance(v, str) and len(v) > 16 else f"`{v}`" if v else "-"


def markdown(record: dict) -> str:
    lines = [
        f"# Release record: {record['status']}",
        "",
        f"- run: `{record.get('run') or '-'}`",
        f"- written: {record['written_at']}",
        f"- deployment decision: **{record.get('decision') or 'none'}**",
    ]
    if record.get("error"):
        lines.append(f"- error: {record['error']}")
    lines += ["", "| stage | result | input roots | output roots |", "|---|---|---|---|"]
    for name, s in record["stages"].items():
        ins = ", ".join(f"{k} {_root(v)}" for k, v in sorted(s.get("inputs", {}).items()))
        outs = ", ".join(
            f"{k} {_root(v.get('root') if isinstance(v, dict) else v)}" for k, v in sorted(s.get("outputs", {}).items())
        )
        lines.append(f"| {name} | {s.get('result', '-')} | {ins or '-'} | {outs or '-'} |")
    if not record["stages"]:
        lines.append("| (no stage wrote lineage) | | | |")
    lines += ["", "Check it: `llmops lineage verify record.json`."]
    return "\n".join(lines) + "\n"


def write(release_dir: str, status: dict, out_json: str | None = None, out_md: str | None = None) -> dict:
    record = build(release_dir, status)
    paths = [
        (out_json or os.path.join(release_dir, "record.json"), json.dumps(record, indent=2) + "\n"),
        (out_md or os.path.join(release_dir, "record.md"), markdown(record)),
    ]
    for path, text in paths:
        atomic.write_text(path, text)
    return record
