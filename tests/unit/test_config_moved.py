"""Gate bounds live under one `gate:` section per stage; the keys they had before are
still read, with a note, and both at once is a one-line error."""

import pytest

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.data_validation.config import DataValidationConfig
from kfp_llmops.components.evaluation.config import EvalConfig


def test_an_old_gate_key_is_read_into_the_gate_section_with_a_note(tmp_path, capsys):
    path = tmp_path / "eval.yaml"
    path.write_text("win_rate:\n  min_win_rate: 0.3\n  bootstrap: 500\nforgetting: {max_increase: null}\n")
    cfg = EvalConfig.load(str(path))
    assert cfg.gate.min_win_rate == 0.3 and cfg.gate.max_forgetting is None
    assert cfg.win_rate.bootstrap == 500 and cfg.gate.min_win_rate_lower_bound == 0.35
    assert "win_rate.min_win_rate is now gate.min_win_rate" in capsys.readouterr().err
    moved = DataValidationConfig.load("drift: {psi_threshold: 0.5}\n")
    assert moved.gate.max_psi == 0.5 and moved == DataValidationConfig.load("gate: {max_psi: 0.5}\n")


def test_an_old_and_a_new_key_for_the_same_bound_are_refused_in_one_line(tmp_path):
    path = tmp_path / "data.yaml"
    path.write_text("drift:\n  psi_threshold: 0.5\ngate:\n  max_psi: 0.3\n")
    with pytest.raises(InputError, match=r"data\.yaml: drift\.psi_threshold and gate\.max_psi are both set"):
        DataValidationConfig.load(str(path))
    with pytest.raises(InputError, match=r"drift: Extra inputs"):  # the rest of an old section is still checked
        DataValidationConfig.load("drift: {psi_threshold: 0.5, psi: 1}\n")


def test_deploys_sla_section_and_threshold_are_read_into_its_gate():
    from kfp_llmops.components.deploy.config import DeployConfig

    old = DeployConfig.load("threshold: 3\nsla: {max_p99_ms: 900, min_requests: 7}\nsequential: {alpha: 0.02}\n")
    new = DeployConfig.load("gate: {threshold: 3, max_p99_ms: 900, min_requests: 7}\nsequential: {alpha: 0.02}\n")
    assert old == new and new.gate.threshold == 3 and new.gate.max_p99_ms == 900
    with pytest.raises(InputError, match=r"sla\.min_requests and gate\.min_requests are both set"):
        DeployConfig.load("sla: {min_requests: 7}\ngate: {min_requests: 8}\n")
    with pytest.raises(InputError, match=r"<inline config>:1: gate.threshold"):
        DeployConfig.load("gate: {threshold: 0}\n")
