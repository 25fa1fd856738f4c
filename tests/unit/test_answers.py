"""The degenerate-output checks: each one flags the failure it is for and leaves a good
answer alone."""

import pytest

from kfp_llmops.components.common import answers
from kfp_llmops.components.evaluation.config import GateConfig
from kfp_llmops.components.evaluation.gate import evaluate_gate

REFS = ["The capital of Cuba is Havana.", "7 plus 5 is 12.", "The opposite of hot is cold.", "A cow says moo."]


def _metrics(responses, ended=None):
    ended = ended or [True] * len(responses)
    samples = [answers.per_sample(r, ref, e) for r, ref, e in zip(responses, REFS, ended, strict=False)]
    return answers.summarize(samples, responses, REFS)


def test_normalized_exact_match():
    assert answers.normalize("The capital of Cuba is Havana.") == answers.normalize("capital of cuba is  havana")
    assert answers.normalize("7 plus 5 is 12.") != answers.normalize("7 plus 5 is 13.")


@pytest.mark.parametrize(
    "text,low,high",
    [
        ("The18The18The18The18 of 51.", 0.4, 1.0),
        ("我叫张伟。我叫张伟。我叫张伟。", 0.5, 1.0),
        ("The capital of Cuba is Havana.", 0.0, 0.0),
        ("", 0.0, 0.0),
    ],
)
def test_repetition(text, low, high):
    assert low <= answers.repetition(text) <= high


def test_good_answers_pass_every_default_check():
    m = _metrics(list(REFS))
    assert m["exact_match"] == 1.0 and m["repetition_rate"] == 0.0 and m["distinct_2_ratio"] == 1.0
    assert m["empty_rate"] == 0.0 and m["unfinished_rate"] == 0.0
    blessed, checks = evaluate_gate(
        {**m, "bertscore_f1": 0.9, "perplexity": 3.0, "toxicity_flagged_rate": 0.0}, GateConfig(), None
    )
    assert blessed, [c for c in checks if not c.passed]


@pytest.mark.parametrize(
    "responses,ended,failing",
    [
        (["3 plus 3 is 34."] * 4, None, {"exact_match", "distinct_2_ratio"}),  # one answer to everything
        (
            ["The18The18The18The18 of 51."] * 4,
            [False] * 4,
            {"exact_match", "repetition_rate", "distinct_2_ratio", "unfinished_rate"},
        ),
        (["", "", "7 plus 5 is 12.", ""], None, {"exact_match", "empty_rate"}),
    ],
)
def test_degenerate_answers_fail_the_default_gate(responses, ended, failing):
    m = _metrics(responses, ended)
    blessed, checks = evaluate_gate(
        {**m, "bertscore_f1": 0.9, "perplexity": 3.0, "toxicity_flagged_rate": 0.0}, GateConfig(), None
    )
    assert not blessed
    assert {c.metric for c in checks if c.verdict == "fail"} == failing
