"""The watermark as vLLM's engine runs it: the logits processor follows the persistent
batch through vLLM's updates (rows added, finished, moved, swapped) and biases each row
exactly as the transformers processor biases the same context; the drill sleeps once a
step, longer on a step that chooses a first token."""

import time

import pytest
import torch

pytest.importorskip("vllm")

from vllm import SamplingParams  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality  # noqa: E402

from kfp_llmops.components.common.watermark.params import KGW  # noqa: E402
from kfp_llmops.components.deploy.vllm_processors import SETTINGS, DrillProcessor, KGWProcessor  # noqa: E402

VOCAB = 300


class _Config:
    def __init__(self, settings):
        self.additional_config = {SETTINGS: settings}


def _update(size, removed=(), added=(), moved=()):
    return BatchUpdate(batch_size=size, removed=list(removed), added=list(added), moved=list(moved))


@pytest.mark.parametrize("scheme", ["lefthash", "selfhash"])
def test_each_row_is_biased_as_the_transformers_processor_biases_its_context(tmp_path, scheme):
    key = tmp_path / "key"
    key.write_text("987654321")
    params = KGW(scheme=scheme, delta=3.0)
    settings = {"watermark": {"kgw": params.model_dump(), "key_file": str(key), "vocab_size": VOCAB}}
    proc = KGWProcessor(_Config(settings), torch.device("cpu"), False)
    mark = params.watermark(987654321, VOCAB)
    out = {i: [] for i in range(4)}
    prompts = {0: [5, 6, 7, 8, 9], 1: [11, 12], 2: [13, 14, 15, 16, 17, 18], 3: [1, 2, 3, 4, 5, 6]}
    sp = SamplingParams()
    proc.update_state(_update(3, added=[(i, sp, prompts[i], out[i]) for i in range(3)]))
    out[0] += [40, 41]
    out[2] += [42]

    def expected(rows):
        logits = torch.randn(len(rows), VOCAB)
        want = logits.clone()
        for r, seq in enumerate(rows):
            if seq is not None and len(seq) >= mark.width:
                want[r : r + 1] = mark.bias(torch.tensor([seq[-mark.width :]]), want[r : r + 1].clone())
        return logits, want

    logits, want = expected([prompts[0] + out[0], prompts[1] + out[1], prompts[2] + out[2]])
    assert torch.equal(proc.apply(logits), want)
    # Row 1 finishes and row 3 joins in its place (vLLM names a refilled slot as added
    # only), rows 0 and 2 swap.
    proc.update_state(_update(3, added=[(1, sp, prompts[3], out[3])], moved=[(0, 2, MoveDirectionality.SWAP)]))
    out[3] += [43]
    logits, want = expected([prompts[2] + out[2], prompts[3] + out[3], prompts[0] + out[0]])
    assert torch.equal(proc.apply(logits), want)
    # Row 2 moves to 0 (row 0 finished): one row left.
    proc.update_state(_update(1, removed=[0], moved=[(2, 0, MoveDirectionality.UNIDIRECTIONAL)]))
    logits, want = expected([prompts[0] + out[0]])
    assert torch.equal(proc.apply(logits), want)


def test_without_a_watermark_the_logits_are_untouched():
    proc = KGWProcessor(_Config({"watermark": None}), torch.device("cpu"), False)
    proc.update_state(_update(1, added=[(0, SamplingParams(), [1, 2], [])]))
    logits = torch.randn(1, VOCAB)
    assert torch.equal(proc.apply(logits.clone()), logits)


@pytest.mark.alone
def test_the_drill_sleeps_once_a_step_longer_when_a_first_token_is_chosen():
    proc = DrillProcessor(
        _Config({"drill": {"first_token_latency_ms": 80, "token_latency_ms": 20}}), torch.device("cpu"), False
    )
    out = [[], []]
    proc.update_state(_update(2, added=[(i, SamplingParams(), [1], out[i]) for i in range(2)]))

    def step():
        t0 = time.perf_counter()
        proc.apply(torch.zeros(2, VOCAB))
        return time.perf_counter() - t0

    first = step()
    out[0].append(5)
    out[1].append(6)
    later = step()
    assert first >= 0.08 and 0.02 <= later < 0.06
