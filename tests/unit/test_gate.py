"""Every blessing rule, table-driven (TFX semantics)."""

import math

import pytest

from kfp_llmops.components.evaluation.config import Bound, Change, GateConfig
from kfp_llmops.components.evaluation.gate import evaluate_gate


def run(metrics, value=None, change=None, baseline=None):
    gate = GateConfig(value=value or {}, change=change or {})
    blessed, checks = evaluate_gate(metrics, gate, baseline)
    return blessed, [(c.kind, c.metric, c.verdict) for c in checks]


CASES = [
    # value thresholds: inclusive bounds
    ({"f1": 0.5}, {"f1": Bound(lower=0.5)}, None, None, True, "pass"),
    ({"f1": 0.4999}, {"f1": Bound(lower=0.5)}, None, None, False, "fail"),
    ({"tox": 0.01}, {"tox": Bound(upper=0.01)}, None, None, True, "pass"),
    ({"tox": 0.0101}, {"tox": Bound(upper=0.01)}, None, None, False, "fail"),
    ({"x": 2.0}, {"x": Bound(lower=1.0, upper=2.0)}, None, None, True, "pass"),
    ({"x": 2.5}, {"x": Bound(lower=1.0, upper=2.0)}, None, None, False, "fail"),
    # a missing or NaN metric fails
    ({}, {"f1": Bound(lower=0.5)}, None, None, False, "fail"),
    ({"f1": float("nan")}, {"f1": Bound(lower=0.5)}, None, None, False, "fail"),
    ({"f1": True}, {"f1": Bound(lower=0.5)}, None, None, False, "fail"),
]


@pytest.mark.parametrize("metrics,value,change,baseline,blessed,verdict", CASES)
def test_value_thresholds(metrics, value, change, baseline, blessed, verdict):
    ok, checks = run(metrics, value=value)
    assert ok is blessed and checks[0][2] == verdict


HIGHER = Change(direction="higher_is_better", absolute=-0.02)
LOWER_REL = Change(direction="lower_is_better", relative=0.10)
CHANGE_CASES = [
    # higher is better, absolute: candidate - baseline >= -0.02
    (0.80, 0.80, HIGHER, "pass"),
    (0.78, 0.80, HIGHER, "pass"),
    (0.7799, 0.80, HIGHER, "fail"),
    (0.90, 0.80, HIGHER, "pass"),
    # lower is better, relative: (candidate - baseline) / baseline <= +10 %
    (11.0, 10.0, LOWER_REL, "pass"),
    (11.01, 10.0, LOWER_REL, "fail"),
    (5.0, 10.0, LOWER_REL, "pass"),
    # relative sign: a negative baseline divides by its magnitude
    (-0.9, -1.0, Change(direction="higher_is_better", relative=0.05), "pass"),
    (-1.1, -1.0, Change(direction="higher_is_better", relative=0.05), "fail"),
    # a zero baseline leaves the relative change undefined: fail
    (0.1, 0.0, Change(direction="lower_is_better", relative=0.1), "fail"),
    # both parts must hold
    (0.79, 0.80, Change(direction="higher_is_better", absolute=-0.02, relative=0.0), "fail"),
]


@pytest.mark.parametrize("candidate,base,change,verdict", CHANGE_CASES)
def test_change_thresholds(candidate, base, change, verdict):
    ok, checks = run({"m": candidate}, change={"m": change}, baseline={"m": base})
    assert checks == [("change", "m", verdict)] and ok is (verdict == "pass")


def test_no_baseline_skips_change_checks_and_still_blesses():
    ok, checks = run({"m": 1.0}, change={"m": HIGHER})
    assert ok and checks == [("change", "m", "skipped")]


def test_missing_baseline_metric_fails():
    ok, checks = run({"m": 1.0}, change={"m": HIGHER}, baseline={"other": 1.0})
    assert not ok and checks == [("change", "m", "fail")]


def test_nan_baseline_metric_fails():
    ok, _ = run({"m": 1.0}, change={"m": HIGHER}, baseline={"m": math.nan})
    assert not ok


def test_config_rejects_empty_thresholds():
    with pytest.raises(ValueError):
        Bound()
    with pytest.raises(ValueError):
        Change(direction="higher_is_better")
