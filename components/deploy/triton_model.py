"""The Triton python-backend model of a repository version (copied there as model.py).

Loads the version's `weights/` with transformers and generates with the KGW watermark
processor; the key comes from the file serving.json names (a mounted Secret) or
$LLMOPS_WATERMARK_KEY. `drill` in serving.json injects failures or latency on purpose.
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

        from kfp_llmops.components.evaluation.generate import context_size

        here = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(here, "serving.json"), encoding="utf-8") as handle:
            self.settings = json.load(handle)
        torch.set_num_threads(int(self.settings.get("threads", 1)))
        weights = os.path.join(here, "weights")
        self.tokenizer = AutoTokenizer.from_pretrained(weights)
        self.model = AutoModelForCausalLM.from_pretrained(weights).eval()
        self.context = context_size(self.model)
        self.processors = []
        mark = self.settings["watermark"]
        if mark["enabled"]:
            from kfp_llmops.components.watermark.keys import load_key
            from kfp_llmops.components.watermark.kgw import Watermark, logits_processor

            key_file = os.environ.get("LLMOPS_WATERMARK_KEY_FILE") or self.settings.get("key_file")
            if not os.path.isfile(key_file or ""):
                key_file = None          # fall back to $LLMOPS_WATERMARK_KEY
            wm = Watermark(load_key(key_file), len(self.tokenizer), mark["scheme"], gamma=mark["gamma"],
                           delta=mark["delta"], z_threshold=mark["z_threshold"], min_tokens=mark["min_tokens"])
            self.processors = [logits_processor(wm)]
        drill = self.settings.get("drill", {})
        self.failure_rate = float(drill.get("failure_rate", 0.0))
        self.added_latency = float(drill.get("added_latency_ms", 0.0)) / 1000.0
        self.rng = random.Random(int(drill.get("seed", 0)))

    def execute(self, requests):
        import torch
        from transformers import LogitsProcessorList

        from kfp_llmops.components.evaluation.generate import left_pad
        from kfp_llmops.components.training.data import format_example

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
            limit = max(1, self.context - max_new)
            batch = [self.tokenizer.encode(format_example(t, "")[0])[-limit:] for _, rows in members for t in rows]
            input_ids, attention = left_pad(batch, self.tokenizer.pad_token_id)
            torch.manual_seed(seed)
            with torch.no_grad():
                out = self.model.generate(input_ids=input_ids, attention_mask=attention, do_sample=True,
                                          temperature=temperature, top_k=None, max_new_tokens=max_new,
                                          min_new_tokens=max_new, pad_token_id=self.tokenizer.pad_token_id,
                                          logits_processor=LogitsProcessorList(self.processors))
            decoded = self.tokenizer.batch_decode(out[:, input_ids.shape[1]:], skip_special_tokens=True)
            k = 0
            for i, rows in members:
                chunk = np.array([[d.encode("utf-8")] for d in decoded[k:k + len(rows)]], dtype=object)
                k += len(rows)
                responses[i] = pb_utils.InferenceResponse([pb_utils.Tensor("text_output", chunk)])
        return responses
