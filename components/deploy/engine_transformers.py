"""The transformers engine of the served model (`engine: transformers`): the requests Triton
hands over together are generated as one batch to its end through the project's one
generation routine, exactly as evaluation generates. The fallback where vLLM is not
installed, and the reference the vLLM engine is compared with."""

from __future__ import annotations

import time

from kfp_llmops.components.common.detokenize import TextStream, answer_text
from kfp_llmops.components.common.generation import generate

from . import serving_metrics as names


class TransformersEngine:
    def __init__(self, weights: str, settings: dict, metrics, processors_for):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from kfp_llmops.components.common.generation import context_size

        torch.set_num_threads(int(settings.get("threads", 1)))
        self.tokenizer = AutoTokenizer.from_pretrained(weights)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32).eval()
        self.context = context_size(self.model)
        self.metrics = metrics
        self.processors = processors_for(len(self.tokenizer))
        drill = settings.get("drill", {})
        self.first_token_latency = float(drill.get("first_token_latency_ms", 0.0)) / 1000.0
        self.token_latency = float(drill.get("token_latency_ms", 0.0)) / 1000.0
        self.added_latency = float(drill.get("added_latency_ms", 0.0)) / 1000.0

    def submit(self, members: list) -> None:
        """Answer `members` (requests read and tokenized, one decoding) before returning:
        one batch, each request streamed or collected, each ending with a final response."""
        if self.added_latency:
            time.sleep(self.added_latency)
        first = members[0].served
        streams = [TextStream(self.tokenizer, m.served.stops) for m in members]
        started = time.monotonic()
        step = [0]
        self.metrics.set(names.RUNNING, len(members))
        for live in members:
            self.metrics.observe(names.QUEUE, started - live.arrived)

        def on_token(i, token):
            live, text = members[i], streams[i]
            live.tokens += 1
            if live.tokens > step[0]:  # the batch's next decoding step: drills sleep once per step
                step[0] = live.tokens
                pause = self.first_token_latency if step[0] == 1 else self.token_latency
                if pause:
                    time.sleep(pause)
            now = time.monotonic()
            self.metrics.observe(names.TTFT if live.last is None else names.ITL, now - (live.last or live.arrived))
            live.last = now
            if token is None:
                return True
            self.metrics.add(names.GENERATION_TOKENS, 1)
            piece = text.push(token)
            if live.cancelled():
                return True
            if piece:
                live.piece(piece)
            return text.stopped

        try:
            generate(
                self.model,
                self.tokenizer,
                [m.served.prompt for m in members],
                batch_size=len(members),
                seed=first.seed,
                min_new_tokens=first.min_new_tokens,
                max_prompt_tokens=self.context,
                processors=self.processors,
                on_token=on_token,
                **first.decoding.generate_kwargs(),
            )
        except Exception as exc:  # noqa: BLE001 - every request still gets its final response
            for live in members:
                live.fail(f"generation failed: {type(exc).__name__}")
            return
        finally:
            self.metrics.set(names.RUNNING, 0)
        now = time.monotonic()
        for live, text in zip(members, streams, strict=False):
            self.metrics.observe(names.E2E, now - live.arrived)
            if text.stopped or len(text.tokens) < live.served.decoding.max_new_tokens:
                reason = "stop"
            else:
                reason = "length"
            rest = text.finish() if live.served.stream else answer_text(self.tokenizer, text.tokens, live.served.stops)
            live.finish(rest, reason, len(text.tokens))

    def close(self) -> None:
        pass
