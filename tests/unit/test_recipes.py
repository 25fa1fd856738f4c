"""Training recipes (what a pretrained model is fine-tuned with when the config does not
say), ZeRO-3 sized from the model, and the warning when seq_len cuts examples."""

import pytest

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.training.config import RECIPES, TrainConfig, zero3_sizes
from kfp_llmops.components.training.launch import warn_truncation


def test_a_pretrained_model_gets_the_lora_recipe_and_a_model_from_scratch_the_demo_settings():
    scratch = TrainConfig().for_model(from_scratch=True, context=128)
    assert (
        scratch.recipe,
        scratch.lr,
        scratch.min_lr,
        scratch.warmup_steps,
        scratch.seq_len,
        scratch.lora.enabled,
    ) == ("scratch", 1.5e-3, 1.5e-4, 10, 64, False)
    tuned = TrainConfig(steps=200).for_model(from_scratch=False, context=8192)
    assert (
        tuned.recipe,
        tuned.lr,
        tuned.min_lr,
        tuned.warmup_steps,
        tuned.seq_len,
        tuned.micro_batch,
        tuned.lora.enabled,
    ) == ("lora", 2e-4, 0.0, 20, 1024, 4, True)
    full = TrainConfig(recipe="full", steps=50).for_model(from_scratch=False, context=512)
    assert (full.lr, full.warmup_steps, full.seq_len, full.lora.enabled) == (2e-5, 5, 512, False)  # capped


def test_what_the_config_says_wins_over_the_recipe():
    cfg = TrainConfig.from_yaml("lr: 5.0e-5\nseq_len: 96\nwarmup_steps: 3\nlora: {r: 4}\n")
    tuned = cfg.for_model(from_scratch=False, context=8192)
    assert (tuned.lr, tuned.seq_len, tuned.warmup_steps, tuned.lora.r, tuned.lora.enabled) == (5e-5, 96, 3, 4, True)
    assert tuned.for_model(from_scratch=False, context=8192) == tuned  # resolving again changes nothing
    assert set(RECIPES) == {"scratch", "full", "lora"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("recipe: full\nlora: {enabled: true}\n", "recipe full trains every weight"),
        ("recipe: lora\nlora: {enabled: false}\n", "recipe lora with lora.enabled false"),
        ("warmup_steps: 5\nwarmup_ratio: 0.1\n", "warmup_steps and warmup_ratio: give one"),
        ("recipe: qlora\n", "recipe: Input should be 'scratch', 'full' or 'lora'"),
    ],
)
def test_contradicting_settings_are_refused_in_one_line(text, message):
    with pytest.raises(InputError, match=message):
        TrainConfig.from_yaml(text, "train.yaml")


def test_zero3_is_sized_from_the_model_and_the_passthrough_still_wins():
    sizes = zero3_sizes(1024)
    assert sizes["reduce_bucket_size"] == 1 << 22 and sizes["stage3_param_persistence_threshold"] == 10_240
    assert sizes["stage3_max_live_parameters"] == 10 * 1024 * 1024 == sizes["stage3_max_reuse_distance"]
    big = zero3_sizes(4096)  # a 7 B model's width: h² buckets
    assert big["reduce_bucket_size"] == 4096**2 and big["stage3_prefetch_bucket_size"] == int(0.9 * 4096**2)
    zero = TrainConfig(deepspeed={"zero_optimization": {"reduce_bucket_size": 123}}).deepspeed_config(576)
    assert zero["zero_optimization"]["reduce_bucket_size"] == 123 and zero["zero_optimization"]["stage"] == 3
    assert "reduce_bucket_size" not in TrainConfig().deepspeed_config()["zero_optimization"]  # no model: DeepSpeed's


def test_seq_len_that_cuts_more_than_one_percent_of_the_examples_is_warned_about(capsys):
    warn_truncation({"truncated": 1, "rows": 100, "seq_len": 64})
    assert capsys.readouterr().err == ""
    warn_truncation({"truncated": 12, "rows": 100, "seq_len": 64})
    assert "seq_len 64 cuts 12 of 100 examples (12.0%)" in capsys.readouterr().err


def test_the_ranks_progress_is_passed_on_in_whole_lines_whatever_the_pipe_cuts():
    """An unbuffered rank writes a message and its newline apart and the pipe cuts
    anywhere: our lines and the bar's refreshes are shown whole, DeepSpeed's chatter not, nor
    a library's warning written onto the end of a bar refresh."""
    import io

    from kfp_llmops.components.training.launch import Progress

    out = io.BytesIO()
    stream = (
        b"[train] 2 ranks on 1 host(s): vm\n[2026-12-02 INFO] [deepspeed] chatter\n"
        b"\rtrain:  50%|#####     | 3/6\rtrain:  67%|######    | 4/6]/venv/torch/c10d_logger.py:83: "
        b"FutureWarning: deprecated\n  warnings.warn(\n\rtrain: 100%|##########| 6/6\n[tr"
        b"ain] done\nDeepSpeed bye"
    )
    for cut in (1, 2, 3, 7, 33, 34, 200):  # every chunking of the same bytes shows the same
        out.seek(0)
        out.truncate()
        shown = Progress(out)
        for i in range(0, len(stream), cut):
            shown.feed(stream[i : i + cut])
        shown.close()
        assert out.getvalue() == (
            b"[train] 2 ranks on 1 host(s): vm\n\rtrain:  50%|#####     | 3/6\r"
            b"\rtrain: 100%|##########| 6/6\n[train] done\n"
        ), cut
