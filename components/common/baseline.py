"""The last promoted release, as the baseline of the next one.

When a run's canary is promoted, its release record is the new production, and the exit
handler writes `promoted.json` beside the run folders on the release volume: which
record, its SHA-256 and the model it released. The next run's validate_dataset reads
that release's data statistics (drift, PSI) and evaluate_llm its blessed metrics (the
change thresholds: "no worse than production"). The record names each file with its
SHA-256, so a baseline that does not verify fails the stage, loudly, rather than being
skipped; a first release, with no promoted.json, says it has no baseline.

`baseline_release`: "auto" (the default: `promoted.json` in the folder that holds
`release_dir`, i.e. the release volume's root), "none", or the path of a promoted.json.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from . import atomic
from .errors import InputError
from .integrity import sha256_file

FORMAT = "kfp-llmops-promoted/1"
POINTER = "promoted.json"


@dataclass
class Baseline:
    pointer: str
    record: str                          # the promoted release's record.json (its folder names the run)
    run: str | None
    model_root: str | None
    eval_metrics: dict | None           # evaluate_llm's metrics of the promoted model
    stats_path: str | None              # validate_dataset's stats of the data it was trained on

    def describe(self) -> str:
        return (f"promoted release {os.path.basename(os.path.dirname(self.record))} (model "
                f"{str(self.model_root or '?')[:16]}…, {self.record})")


def pointer_path(release_dir: str, setting: str = "auto") -> str | None:
    setting = (setting or "auto").strip()
    if setting == "none":
        return None
    if setting == "auto":
        return os.path.join(os.path.dirname(os.path.abspath(release_dir)), POINTER) if release_dir else None
    return setting


def promote(release_dir: str, record_path: str, record: dict) -> str:
    """Point the release volume's promoted.json at this run's record (the exit handler's job)."""
    path = pointer_path(release_dir)
    deploy = record.get("stages", {}).get("triton_canary_deploy", {})
    atomic.write_text(path, json.dumps({"format": FORMAT, "run": record.get("run"), "record": os.path.abspath(record_path),
                                        "record_sha256": sha256_file(record_path),
                                        "model_root": deploy.get("inputs", {}).get("model_root")}, indent=2) + "\n")
    return path


def load(release_dir: str, setting: str = "auto") -> Baseline | None:
    """The promoted release's baseline, verified; None when there is none yet."""
    path = pointer_path(release_dir, setting)
    if path is None or not os.path.exists(path):
        if path is not None and setting not in ("", "auto"):
            raise InputError(f"baseline_release: {path}: no such file")
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            pointer = json.load(handle)
        if pointer.get("format") != FORMAT:
            raise ValueError(f"format is {pointer.get('format')!r}, expected {FORMAT!r}")
        record_path, expected = pointer["record"], pointer["record_sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a promoted-release pointer: {exc}") from None
    if not os.path.isfile(record_path):
        raise InputError(f"{path}: the promoted release record {record_path} is missing")
    got = sha256_file(record_path)
    if got != expected:
        raise InputError(f"{path}: the promoted release record {record_path} does not verify "
                         f"(SHA-256 {got}, the pointer says {expected})")
    with open(record_path, encoding="utf-8") as handle:
        record = json.load(handle)
    stages = record.get("stages", {})
    stats = stages.get("validate_dataset", {}).get("outputs", {}).get("stats") or {}
    stats_path = stats.get("path")
    if stats_path:
        if not os.path.isfile(stats_path):
            raise InputError(f"{record_path}: the baseline data stats {stats_path} are missing")
        got = sha256_file(stats_path)
        if got != stats.get("root"):
            raise InputError(f"{record_path}: the baseline data stats {stats_path} do not verify "
                             f"(SHA-256 {got}, the record says {stats.get('root')})")
    evaluated = stages.get("evaluate_llm", {})
    return Baseline(path, record_path, pointer.get("run"), pointer.get("model_root"), evaluated.get("metrics") or None,
                    stats_path)


def note(baseline: Baseline | None) -> str:
    return f"baseline: {baseline.describe()}" if baseline else "first release: no promoted release to compare with"
