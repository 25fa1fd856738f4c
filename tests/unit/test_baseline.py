"""The promoted release as the next release's baseline: found, verified, or refused."""
import json

import pytest

from kfp_llmops.components.common import baseline
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.integrity import sha256_file


def _release(volume, name="run-1"):
    run = volume / name
    run.mkdir(parents=True)
    stats = run / "validate_dataset.stats.json"
    stats.write_text('{"rows": 3}')
    record = {"run": name, "decision": "promoted", "stages": {
        "validate_dataset": {"outputs": {"stats": {"root": sha256_file(str(stats)), "path": str(stats)}}},
        "evaluate_llm": {"metrics": {"exact_match": 0.9, "perplexity": 1.5}},
        "triton_canary_deploy": {"inputs": {"model_root": "ab" * 32}}}}
    (run / "record.json").write_text(json.dumps(record))
    return run, record


def test_a_first_release_has_no_baseline_and_says_so(tmp_path):
    assert baseline.load(str(tmp_path / "run-1")) is None
    assert baseline.note(None).startswith("first release")
    assert baseline.load("", "auto") is None and baseline.load(str(tmp_path / "x"), "none") is None


def test_the_promoted_release_is_found_beside_the_run_folders(tmp_path):
    run, record = _release(tmp_path)
    pointer = baseline.promote(str(run), str(run / "record.json"), record)
    assert pointer == str(tmp_path / "promoted.json")
    found = baseline.load(str(tmp_path / "run-2"))              # the next run's folder, same volume
    assert found.run == "run-1" and found.model_root == "ab" * 32
    assert found.eval_metrics == {"exact_match": 0.9, "perplexity": 1.5}
    assert found.stats_path == str(run / "validate_dataset.stats.json")
    assert "promoted release run-1 " in baseline.note(found) and found.record == str(run / "record.json")
    assert baseline.load("/elsewhere/run-9", pointer).run == "run-1"      # named explicitly


@pytest.mark.parametrize("damage,message", [
    ("record", "record .* does not verify"),
    ("stats", "data stats .* do not verify"),
    ("pointer", "not a promoted-release pointer"),
])
def test_a_baseline_that_does_not_verify_fails_loudly(tmp_path, damage, message):
    run, record = _release(tmp_path)
    baseline.promote(str(run), str(run / "record.json"), record)
    target = {"record": run / "record.json", "stats": run / "validate_dataset.stats.json",
              "pointer": tmp_path / "promoted.json"}[damage]
    target.write_text(target.read_text().replace("3", "4", 1) if damage != "pointer" else "{}")
    with pytest.raises(InputError, match=message):
        baseline.load(str(tmp_path / "run-2"))


def test_an_explicit_pointer_that_is_missing_is_an_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        baseline.load(str(tmp_path / "run-2"), str(tmp_path / "nope.json"))
