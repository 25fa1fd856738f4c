"""vLLM logits processors of the served model, run inside vLLM's engine on every decoding
step of the running batch: the KGW watermark (the parameters verify_watermark verified,
the key read from the mounted Secret here, never passed through vLLM's config) and the
rollout drills that make a canary slow to its first token or between tokens.

vLLM builds them in its engine process from `additional_config[SETTINGS]`, which
`engine_vllm` fills from the version's serving.json. The watermark's bias is the one
`common.watermark.kgw` adds in the transformers path: the same green lists from the same
context tokens (each row's prompt followed by its answer so far)."""

from __future__ import annotations

import time

import numpy as np
import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

SETTINGS = "kfp_llmops"


def _settings(vllm_config) -> dict:
    return (getattr(vllm_config, "additional_config", None) or {}).get(SETTINGS) or {}


class _Rows(LogitsProcessor):
    """Per batch row: the request's prompt and its output list (vLLM appends to it)."""

    def __init__(self, vllm_config, device, is_pin_memory):
        self.rows: dict[int, tuple[list[int], list[int]]] = {}

    def is_argmax_invariant(self) -> bool:
        return False  # both change what greedy decoding chooses (or when)

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.rows, batch_update, lambda _p, prompt, output: (list(prompt or []), output))


class KGWProcessor(_Rows):
    def __init__(self, vllm_config, device, is_pin_memory):
        super().__init__(vllm_config, device, is_pin_memory)
        mark = _settings(vllm_config).get("watermark")
        self.watermark = None
        if mark:
            from kfp_llmops.components.common.watermark.keys import load_key
            from kfp_llmops.components.common.watermark.params import KGW

            self.watermark = KGW.parse(mark["kgw"], "serving.json").watermark(
                load_key(mark.get("key_file")), int(mark["vocab_size"])
            )

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.watermark is None or not self.rows:
            return logits
        width, n = self.watermark.width, logits.shape[0]
        context = np.zeros((n, width), dtype=np.int64)
        marked = np.zeros(n, dtype=bool)
        for index, (prompt, output) in self.rows.items():
            tail = output[-width:]
            if len(tail) < width:
                tail = (prompt[-width:] + list(tail))[-width:]
            if index < n and len(tail) == width:  # a shorter context seeds no green list: left as it is
                context[index] = tail
                marked[index] = True
        if marked.all():
            return self.watermark.bias(torch.from_numpy(context), logits)
        if marked.any():
            rows = torch.from_numpy(np.flatnonzero(marked))
            logits[rows] = self.watermark.bias(torch.from_numpy(context[marked]), logits[rows])
        return logits


class DrillProcessor(_Rows):
    """Rehearses a slow engine: every decoding step that chooses some row's first token
    sleeps `first_token_latency_ms`, every other step `token_latency_ms`, for the whole
    batch, as a slow prefill or slow decoding would."""

    def __init__(self, vllm_config, device, is_pin_memory):
        super().__init__(vllm_config, device, is_pin_memory)
        drill = _settings(vllm_config).get("drill") or {}
        self.first = float(drill.get("first_token_latency_ms", 0.0)) / 1000.0
        self.step = float(drill.get("token_latency_ms", 0.0)) / 1000.0

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.rows:
            first = any(not output for _, output in self.rows.values())
            pause = self.first if first else self.step
            if pause:
                time.sleep(pause)
        return logits
