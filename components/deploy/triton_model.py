"""The Triton python-backend model of a repository version (copied there as model.py).

Loads the version's `weights/` with transformers and generates through the project's one
generation routine with the KGW watermark processor, its parameters exactly those the
watermark stage verified (serving.json); the key comes from the file serving.json names
(a mounted Secret) or $LLMOPS_WATERMARK_KEY. `drill` in serving.json injects failures or
latency on purpose.
"""
import json
import os
import random
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _optional(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0].item()


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
            texts = [t.decode("utf-8", "replace") for t in pb_utils.get_input_tensor_by_name(request, "text_input")
                     .as_numpy().reshape(-1)]
            params = (int(_optional(request, "max_new_tokens", self.settings["max_new_tokens"])),
                      float(_optional(request, "temperature", self.settings["temperature"])),
                      int(_optional(request, "seed", 0)))
            groups.setdefault(params, []).append((i, texts))
        for (max_new, temperature, seed), members in groups.items():
            prompts = [t for _, rows in members for t in rows]
            done = generate(self.model, self.tokenizer, prompts, max_new_tokens=max_new, min_new_tokens=max_new,
                            temperature=temperature, batch_size=len(prompts), seed=seed, processors=self.processors)
            decoded = [self.tokenizer.decode(c.tokens, skip_special_tokens=True) for c in done]
            k = 0
            for i, rows in members:
                chunk = np.array([[d.encode("utf-8")] for d in decoded[k:k + len(rows)]], dtype=object)
                k += len(rows)
                responses[i] = pb_utils.InferenceResponse([pb_utils.Tensor("text_output", chunk)])
        return responses
