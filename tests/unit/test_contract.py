"""One contract per stage: the KFP component, its `run_component` and the stage table
name the same arguments, every one typed and passed by keyword, and a failed gate of any
stage is raised the one way."""

import importlib
import inspect

import pytest

from kfp_llmops.components.common import contract, records
from kfp_llmops.components.common.errors import GateFailed
from kfp_llmops.pipelines import stages

COMPONENT = {"release_record": "write_release_record"}


def _component(stage: records.Stage):
    module = importlib.import_module(f"kfp_llmops.components.{stage.package}.component")
    return getattr(module, COMPONENT.get(stage.name, stage.name))


@pytest.mark.parametrize("stage", stages.ALL, ids=lambda s: s.name)
def test_the_entry_is_keyword_only_typed_and_named_as_the_components_inputs(stage):
    params = inspect.signature(stages.entry(stage)).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values()), stage.entry
    assert all(p.annotation is not inspect.Parameter.empty for p in params.values()), stage.entry
    spec = _component(stage).component_spec
    assert set(params) == set(spec.inputs) | set(spec.outputs) - {"Output"}
    assert inspect.signature(stages.entry(stage)).return_annotation == "StageResult"


@pytest.mark.parametrize("stage", stages.ALL, ids=lambda s: s.name)
def test_the_runner_gives_every_required_argument_from_the_stage_table(stage):
    params = inspect.signature(stages.entry(stage)).parameters
    given = dict(stage.inputs)
    assert set(given) <= set(params), set(given) - set(params)
    required = {n for n, p in params.items() if p.default is inspect.Parameter.empty}
    assert required <= set(given), required - set(given)
    for source in given.values():  # a runner rule that does not exist would fail only at run time
        if isinstance(source, records.Resolved):
            from kfp_llmops.pipelines.standalone.runner import _Run

            assert callable(getattr(_Run, source.name, None)), source.name
        if isinstance(source, records.Upstream):
            assert source.stage in stages.BY_NAME


def test_every_config_model_the_table_names_is_a_stage_config():
    from kfp_llmops.components.common.config import StageConfig

    named = [s for s in stages.ALL if s.config]
    assert [s.name for s in named] == [
        "validate_dataset",
        "train_zero3",
        "evaluate_llm",
        "verify_watermark",
        "triton_canary_deploy",
    ]
    assert all(issubclass(stages.config_model(s), StageConfig) for s in named)


def test_a_failed_gate_of_any_stage_is_raised_one_way_with_its_reason():
    from kfp_llmops.components import deploy, evaluation, watermark

    failed = {"metric": "bertscore_f1", "value": 0.1, "bound": ">= 0.8", "verdict": "fail", "reason": ""}
    results = [
        evaluation.stage_result({"blessed": False, "checks": [{**failed, "kind": "value"}], "metrics": {"x": 1}}),
        watermark.stage_result({"verified": False, "checks": [{**failed, "metric": "tpr"}], "metrics": {}}),
        deploy.stage_result({"decision": "rolled_back", "reason": "p99_ms 900 (needs <= 500)", "intervals": []}),
    ]
    for result, words in zip(
        results, ("not blessed: bertscore_f1", "not verified: tpr", "rolled back: p99_ms"), strict=True
    ):
        assert not result.passed
        with pytest.raises(GateFailed, match=words):
            contract.raise_unless_passed(result)
    contract.raise_unless_passed(deploy.stage_result({"decision": "promoted", "reason": "", "intervals": []}))


@pytest.mark.parametrize(
    "raised, code, line",
    [
        ('InputError("raw.jsonl:3: prompt: missing")', 2, "error: raw.jsonl:3: prompt: missing"),
        ('GateFailed("not blessed: bertscore_f1")', 1, "error: not blessed: bertscore_f1"),
        ('OSError(errno.ENOSPC, "No space left on device", "/nonexistent/vol/out.json")', 2, "error: writing /"),
        ('ValueError("a bug")', 1, "Traceback"),  # a bug keeps its traceback
    ],
)
def test_a_kfp_tasks_user_facing_error_ends_it_in_one_line_with_the_clis_exit_code(raised, code, line):
    import subprocess
    import sys

    program = (
        "import errno\n"
        "from kfp_llmops.components.common.contract import said_in_one_line\n"
        "from kfp_llmops.components.common.errors import GateFailed, InputError\n"
        f"with said_in_one_line():\n    raise {raised}\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == code and done.stderr.startswith(line), done.stderr
    if code == 2 or raised.startswith("GateFailed"):
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
