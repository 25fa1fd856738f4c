"""The component and the release pipeline through kfp.local, and the GitOps compile check."""
import json
import os

import pytest
import yaml

from kfp_llmops.components import images
from kfp_llmops.components.common import merkle
from kfp_llmops.pipelines import compile as compile_mod
from kfp_llmops.pipelines.local_run import format_summary, run_local


def test_release_pipeline_runs_through_kfp_local(tmp_path):
    summary = run_local(str(tmp_path / "run"), rows=800)
    (stage,) = summary["stages"]
    assert stage["gate"] == "passed"
    assert stage["rows_in"] == 800 == stage["rows_out"] + stage["rows_quarantined"]
    clean = stage["outputs"]["clean"]
    digest = merkle.hash_file(clean, "clean.jsonl")
    assert merkle.Manifest(merkle.DEFAULT_CHUNK_SIZE, [digest]).root.hex() == stage["merkle_root"]
    report = open(stage["outputs"]["report"]).read()
    assert report.startswith("# Data validation: PASSED")
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stages"][0]["gate"] == "passed"
    assert "validate_dataset" in format_summary(summary)


def test_gate_failure_surfaces_as_false_output(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(["not json"] * 10 + ['{"text": "fine row"}']) + "\n")
    summary = run_local(str(tmp_path / "run"), dataset=str(bad))
    assert summary["stages"][0]["gate"] == "failed"


def test_compile_is_deterministic_and_check_detects_drift(tmp_path):
    first = compile_mod.compile_one("release")
    assert compile_mod.compile_one("release") == first
    assert compile_mod.compile_all(str(tmp_path)) == ["release"]
    assert compile_mod.compile_all(str(tmp_path), check=True) == []
    path = tmp_path / "release.yaml"
    path.write_text(path.read_text().replace("balanced", "strict", 1))
    assert compile_mod.compile_all(str(tmp_path), check=True) == ["release"]


def test_committed_yaml_is_current_and_uses_the_versioned_image():
    assert compile_mod.compile_all(compile_mod.COMPILED_DIR, check=True) == []
    spec = yaml.safe_load(open(os.path.join(compile_mod.COMPILED_DIR, "release.yaml")))
    executors = spec["deploymentSpec"]["executors"]
    images_used = {e["container"]["image"] for e in executors.values() if "container" in e}
    assert images_used == {images.DATA}
    assert "pip install" not in json.dumps(executors)   # air-gapped clusters: nothing installed at run time
