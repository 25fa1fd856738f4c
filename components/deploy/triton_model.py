"""The Triton python-backend model of a repository version (copied there as model.py).

Loads the version's `weights/` with transformers and answers through the project's one
generation routine, by default exactly as evaluation judged the model (the blessing's
decoding in serving.json: greedy unless it sampled), each answer ending at the model's
EOS or a request's stop string, with the KGW watermark processor whose parameters the
watermark stage verified. A request may sample (temperature, top_k, top_p, seed) and
bound its length (max_new_tokens, at most serving.json's limit). The key comes from the
file serving.json names (a mounted Secret) or $LLMOPS_WATERMARK_KEY. `drill` in
serving.json injects failures or latency on purpose.
"""
import json
import os
import random
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _optional(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    value = tensor.as_numpy().reshape(-1)[0]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value.item()


def request_decoding(request, decoding: dict, limit: int) -> tuple:
    """(max_new, min_new, do_sample, temperature, top_k, top_p, seed, stop) for a request:
    what it sets, the blessed decoding for the rest. ValueError names a bad input."""
    max_new = int(_optional(request, "max_new_tokens", decoding["max_new_tokens"]))
    if not 1 <= max_new <= limit:
        raise ValueError(f"max_new_tokens: {max_new} is outside 1..{limit}")
    min_new = int(_optional(request, "min_new_tokens", 0))
    if not 0 <= min_new <= max_new:
        raise ValueError(f"min_new_tokens: {min_new} is outside 0..max_new_tokens ({max_new})")
    temperature = _optional(request, "temperature", None)
    do_sample = decoding["do_sample"] or temperature is not None
    temperature = float(decoding["temperature"] if temperature is None else temperature)
    if not temperature > 0:
        raise ValueError(f"temperature: {temperature} must be above 0")
    top_k = int(_optional(request, "top_k", decoding["top_k"]))
    top_p = float(_optional(request, "top_p", decoding["top_p"]))
    if top_k < 0 or not 0 < top_p <= 1:
        raise ValueError(f"top_k {top_k} must be >= 0 and top_p {top_p} in (0, 1]")
    stop = _optional(request, "stop", "") or ""
    seed = int(_optional(request, "seed", 0)) if do_sample else 0         # greedy requests batch together
    return (max_new, min_new, do_sample, temperature, top_k, top_p, seed, stop)


class TritonPythonModel:
    def initialize(self, args):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        here = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(here, "serving.json"), encoding="utf-8") as handle:
            self.settings = json.load(handle)
        torch.set_num_threads(int(self.settings.get("threads", 1)))
        weights = os.path.join(here, "weights")
        self.tokenizer = AutoTokenizer.from_pretrained(weights)
        self.model = AutoModelForCausalLM.from_pretrained(weights).eval()
        self.decoding = self.settings["decoding"]
        self.limit = int(self.settings["max_new_tokens_limit"])
        self.processors = []
        mark = self.settings["watermark"]
        if mark["enabled"]:
            from kfp_llmops.components.common.watermark.keys import load_key
            from kfp_llmops.components.common.watermark.kgw import logits_processor
            from kfp_llmops.components.common.watermark.params import KGW

            key_file = os.environ.get("LLMOPS_WATERMARK_KEY_FILE") or self.settings.get("key_file")
            if not os.path.isfile(key_file or ""):
                key_file = None          # fall back to $LLMOPS_WATERMARK_KEY
            params = KGW.parse(mark["kgw"], os.path.join(here, "serving.json"))
            self.processors = [logits_processor(params.watermark(load_key(key_file), len(self.tokenizer)))]
        drill = self.settings.get("drill", {})
        self.failure_rate = float(drill.get("failure_rate", 0.0))
        self.added_latency = float(drill.get("added_latency_ms", 0.0)) / 1000.0
        self.rng = random.Random(int(drill.get("seed", 0)))

    def execute(self, requests):
        from kfp_llmops.components.common.generation import generate

        if self.added_latency:
            time.sleep(self.added_latency)
        responses = [None] * len(requests)
        groups = {}
        for i, request in enumerate(requests):
            if self.failure_rate and self.rng.random() < self.failure_rate:
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError("drill: injected failure"))
                continue
            try:
                params = request_decoding(request, self.decoding, self.limit)
            except (ValueError, TypeError) as exc:
                invalid = getattr(pb_utils.TritonError, "INVALID_ARG", None)     # 400 over HTTP
                error = pb_utils.TritonError(str(exc), invalid) if invalid is not None else pb_utils.TritonError(str(exc))
                responses[i] = pb_utils.InferenceResponse(error=error)
                continue
            texts = [t.decode("utf-8", "replace") for t in pb_utils.get_input_tensor_by_name(request, "text_input")
                     .as_numpy().reshape(-1)]
            groups.setdefault(params[:-1], []).append((i, texts, params[-1]))
        for (max_new, min_new, do_sample, temperature, top_k, top_p, seed), members in groups.items():
            prompts = [t for _, rows, _ in members for t in rows]
            done = generate(self.model, self.tokenizer, prompts, max_new_tokens=max_new, min_new_tokens=min_new,
                            do_sample=do_sample, temperature=temperature, top_k=top_k or None,
                            top_p=top_p if top_p < 1 else None, batch_size=len(prompts), seed=seed,
                            processors=self.processors)
            decoded = [self.tokenizer.decode(c.tokens, skip_special_tokens=True) for c in done]
            k = 0
            for i, rows, stop in members:
                answers = [(d.split(stop, 1)[0] if stop else d).strip() for d in decoded[k:k + len(rows)]]
                k += len(rows)
                chunk = np.array([[a.encode("utf-8")] for a in answers], dtype=object)
                responses[i] = pb_utils.InferenceResponse([pb_utils.Tensor("text_output", chunk)])
        return responses
