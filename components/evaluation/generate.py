"""The candidate's answers to the eval set (through `common.generation`, the routine
serving uses too), with the training format."""

from __future__ import annotations

from dataclasses import dataclass

from kfp_llmops.components.common import generation
from kfp_llmops.components.common.detokenize import answer_text

from .config import EvalConfig


@dataclass
class Generated:
    id: str
    prompt: str
    response: str
    tokens: int
    truncated: bool  # the prompt was cut to fit
    ended: bool  # the answer ended (EOS) within max_new_tokens


def generate(model, tokenizer, rows: list[dict], cfg: EvalConfig, progress=None) -> list[Generated]:
    """The eval set's answers through the one generation routine, decoded."""
    gen = cfg.generation
    done = generation.generate(
        model,
        tokenizer,
        [row["prompt"] for row in rows],
        batch_size=gen.batch_size,
        seed=gen.seed,
        max_prompt_tokens=cfg.max_prompt_tokens,
        progress=progress,
        **gen.decoding().generate_kwargs(),
    )
    return [
        Generated(row["id"], row["prompt"], answer_text(tokenizer, c.tokens), len(c.tokens), c.truncated, c.ended)
        for row, c in zip(rows, done, strict=False)
    ]
