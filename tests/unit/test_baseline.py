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
    record = {
        "run": name,
        "decision": "promoted",
        "stages": {
            "validate_dataset": {"outputs": {"stats": {"root": sha256_file(str(stats)), "path": str(stats)}}},
            "evaluate_llm": {"metrics": {"exact_match": 0.9, "perplexity": 1.5}},
            "triton_canary_deploy": {"inputs": {"model_root": "ab" * 32}},
        },
    }
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
    found = baseline.load(str(tmp_path / "run-2"))  # the next run's folder, same volume
    assert found.run == "run-1" and found.model_root == "ab" * 32
    assert found.eval_metrics == {"exact_match": 0.9, "perplexity": 1.5}
    assert found.stats_path == str(run / "validate_dataset.stats.json")
    assert "promoted release run-1 " in baseline.note(found) and found.record == str(run / "record.json")
    assert baseline.load("/elsewhere/run-9", pointer).run == "run-1"  # named explicitly


@pytest.mark.parametrize(
    "damage,message",
    [
        ("record", "record .* does not verify"),
        ("stats", "data stats .* do not verify"),
        ("pointer", "not a promoted-release pointer"),
    ],
)
def test_a_baseline_that_does_not_verify_fails_loudly(tmp_path, damage, message):
    run, record = _release(tmp_path)
    baseline.promote(str(run), str(run / "record.json"), record)
    target = {
        "record": run / "record.json",
        "stats": run / "validate_dataset.stats.json",
        "pointer": tmp_path / "promoted.json",
    }[damage]
    target.write_text(target.read_text().replace("3", "4", 1) if damage != "pointer" else "{}")
    with pytest.raises(InputError, match=message):
        baseline.load(str(tmp_path / "run-2"))


def test_a_pinned_record_that_is_not_a_record_is_refused(tmp_path):
    """The digest and the parse come from one read: a pin that matches bytes which are
    not a record object is a one-line error naming the file."""
    bad = tmp_path / "record.json"
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match=r"record.json: not a release record: not a JSON object"):
        baseline.load("", f"{bad}{baseline.PIN}{sha256_file(str(bad))}")


def test_an_explicit_pointer_that_is_missing_is_an_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        baseline.load(str(tmp_path / "run-2"), str(tmp_path / "nope.json"))


def test_a_pinned_baseline_is_what_was_promoted_when_the_run_began(tmp_path):
    """pin-baseline fixes the comparison for the run (and the cached stages' keys): a later
    promotion changes the pin, and a record edited after pinning is refused."""
    assert baseline.pin(str(tmp_path / "run-1")) == "none"
    run, record = _release(tmp_path)
    baseline.promote(str(run), str(run / "record.json"), record)
    pinned = baseline.pin(str(tmp_path / "run-2"))
    assert pinned == f"{run / 'record.json'}#sha256={sha256_file(str(run / 'record.json'))}"
    found = baseline.load("", pinned)  # no release folder needed
    assert found.run == "run-1" and found.model_root == "ab" * 32 and found.eval_metrics["exact_match"] == 0.9
    run2, record2 = _release(tmp_path, "run-2")
    baseline.promote(str(run2), str(run2 / "record.json"), record2)
    assert baseline.pin(str(tmp_path / "run-3")) != pinned  # a new promotion, a new cache key
    assert baseline.load("", pinned).run == "run-1"  # the pinned one still reads as it was
    (run / "record.json").write_text(json.dumps({**record, "decision": "rolled_back"}))
    with pytest.raises(InputError, match="baseline_release: the promoted release record .* does not verify"):
        baseline.load("", pinned)


def test_a_cached_stage_note_is_filed_with_its_stats_beside_it(tmp_path):
    """file-validate-note copies the stats the note names into the release folder (the next
    release's drift reference) and refuses stats that are not the ones the stage wrote."""
    from kfp_llmops.components.common import records

    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    stats = artifacts / "stats"
    stats.write_text('{"rows": 3}')
    note = artifacts / "note"
    records.write(
        str(note),
        records.ValidateDataset(
            result="passed",
            outputs=records.ValidateOutputs(
                clean=records.CleanData(root="cd" * 32, path=str(artifacts / "clean")),
                stats=records.Artifact(root=sha256_file(str(stats)), path=str(stats)),
            ),
        ),
    )
    release = tmp_path / "release" / "run-1"
    filed = records.file_note(str(release), str(note), str(stats))
    kept = release / "validate_dataset.stats.json"
    assert filed.outputs.stats.path == str(kept) and kept.read_text() == '{"rows": 3}'
    assert records.read_notes(str(release))["validate_dataset"].outputs.stats.path == str(kept)
    stats.write_text('{"rows": 4}')
    with pytest.raises(InputError, match=r"stats: SHA-256 .* the note .* says"):
        records.file_note(str(release), str(note), str(stats))
    with pytest.raises(InputError, match="none were given"):
        records.file_note(str(release), str(note))


def test_the_argo_runner_pins_once_per_run(tmp_path):
    """Validate and evaluate of one Argo run compare with the same release, even when
    another run promotes between them."""
    from kfp_llmops.pipelines.standalone.runner import pinned_baseline

    run, record = _release(tmp_path)
    baseline.promote(str(run), str(run / "record.json"), record)
    work = tmp_path / "run-3" / "work"
    work.mkdir(parents=True)
    first = pinned_baseline(str(work), str(tmp_path / "run-3"), "auto")
    run2, record2 = _release(tmp_path, "run-2")
    baseline.promote(str(run2), str(run2 / "record.json"), record2)
    assert pinned_baseline(str(work), str(tmp_path / "run-3"), "auto") == first
    assert baseline.load("", first).run == "run-1"
    other = tmp_path / "run-4" / "work"
    other.mkdir(parents=True)
    assert baseline.load("", pinned_baseline(str(other), str(tmp_path / "run-4"), "auto")).run == "run-2"


def test_promoted_json_moves_only_from_the_release_a_promotion_replaced(tmp_path):
    """Compare-and-swap: a promotion that replaced model A moves the pointer only while it
    names A; one that came between is never overwritten by a promotion that did not see it."""

    def release(name, model, replaced):
        run = tmp_path / name
        run.mkdir()
        record = {
            "run": name,
            "decision": "promoted",
            "stages": {"triton_canary_deploy": {"inputs": {"model_root": model, "production_root": replaced}}},
        }
        (run / "record.json").write_text(json.dumps(record))
        return str(run), str(run / "record.json"), record

    baseline.promote(*release("run-1", "aa" * 32, None))  # first release
    b = release("run-2", "bb" * 32, "aa" * 32)
    c = release("run-3", "cc" * 32, "aa" * 32)  # also replaced A: raced B
    baseline.promote(*b)
    with pytest.raises(
        InputError,
        match=r"promoted.json: not moved to run run-3: it names run run-2 \(model bbbb"
        r".*this promotion replaced model aaaa.*another promotion came between",
    ):
        baseline.promote(*c)
    assert baseline.load(str(tmp_path / "run-9")).run == "run-2"
    baseline.promote(*release("run-4", "dd" * 32, "bb" * 32))  # saw B: moves on
    assert baseline.load(str(tmp_path / "run-9")).model_root == "dd" * 32


def test_a_blessing_records_what_it_was_compared_with_and_deploy_says_when_that_went_stale():
    from kfp_llmops.components.deploy import stale_baseline

    assert baseline.compared_with(None) == {"release": "none", "model_root": None}
    judged = {"release": "/vol/releases/run-1/record.json#sha256=" + "0" * 64, "model_root": "aa" * 32}
    assert stale_baseline(judged, (True, "aa" * 32)) is None
    unknown = stale_baseline(judged, (False, None))  # cannot be told: not promoted over it either
    assert "which model serves now cannot be told" in unknown and "(release run-1)" in unknown
    assert stale_baseline(None, (True, "bb" * 32)) is None  # the blessing did not say
    why = stale_baseline(judged, (True, "bb" * 32))
    assert why.startswith(
        "the blessing judged this model against production model aaaaaaaaaaaaaaaa… (release "
        "run-1), but production is now model bbbbbbbbbbbbbbbb…"
    )
    assert "no model (a first release)" in stale_baseline({"release": "none", "model_root": None}, (True, "bb" * 32))
