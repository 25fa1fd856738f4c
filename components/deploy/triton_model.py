"""The Triton python-backend model of a repository version (copied there as model.py).

Decoupled: a request with `stream` true gets its answer piece by piece as tokens are
chosen (Triton's generate_stream endpoint, server-sent events), any other request one
response (the generate endpoint). It loads the version's `weights/` with transformers
and answers through the project's one generation routine, by default exactly as
evaluation judged the model (the blessing's decoding in serving.json), each answer ending
at the model's EOS or a request's stop string, with the KGW watermark processor whose
parameters the watermark stage verified. `serving_request` reads and checks each request
(a text or a chat, sampling within the served bound). The key comes from the file
serving.json names (a mounted Secret) or $LLMOPS_WATERMARK_KEY.

It exports, per model and version, what LLM servers are run on: time to first token and
inter-token latency histograms and generated and prompt token counters (Triton's custom
metrics, on its /metrics beside its own). Time to first token counts from when the model
takes the request up (Triton's queue time is its own `nv_inference_queue_duration_us`).
`drill` in serving.json injects failures or latency on purpose.
"""

import json
import os
import random
import time

import numpy as np
import triton_python_backend_utils as pb_utils

TTFT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]
ITL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0]


def _values(request, names) -> dict:
    """The request's inputs as Python scalars; absent ones left out."""
    out = {}
    for name in names:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            continue
        array = tensor.as_numpy().reshape(-1)
        if array.size != 1:
            raise ValueError(f"{name}: one value per request, got {array.size}")
        value = array[0]
        out[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value.item()
    return out


def _error(message: str):
    invalid = getattr(pb_utils.TritonError, "INVALID_ARG", None)  # 400 over HTTP
    error = pb_utils.TritonError(message, invalid) if invalid is not None else pb_utils.TritonError(message)
    return pb_utils.InferenceResponse(error=error)


def _text(piece: str):
    return pb_utils.InferenceResponse(
        [pb_utils.Tensor("text_output", np.array([[piece.encode("utf-8")]], dtype=object))]
    )


class _Live:
    """One request being answered."""

    def __init__(self, sender, served):
        self.sender, self.served = sender, served
        self.last = None  # when its previous token came
        self.tokens = 0
        self.gone = False  # the client went away (or its stream broke): nothing more is sent

    def send(self, response=None, final: bool = False) -> None:
        """Send unless the client is gone; a broken stream ends this request, not the others."""
        if self.gone:
            return
        flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
        try:
            if response is None:
                self.sender.send(flags=flags)
            else:
                self.sender.send(response, flags=flags)
        except Exception:  # noqa: BLE001 - a cancelled or closed request refuses further responses
            self.gone = True


class TritonPythonModel:
    def initialize(self, args):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from kfp_llmops.components.common.decoding import Decoding
        from kfp_llmops.components.deploy import serving_request

        here = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(here, "serving.json"), encoding="utf-8") as handle:
            self.settings = json.load(handle)
        torch.set_num_threads(int(self.settings.get("threads", 1)))
        weights = os.path.join(here, "weights")
        self.tokenizer = AutoTokenizer.from_pretrained(weights)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(weights).eval()
        from kfp_llmops.components.common.generation import context_size

        self.context = context_size(self.model)
        self.requests = serving_request
        self.decoding = Decoding.model_validate(self.settings["decoding"])
        self.limit = int(self.settings["max_new_tokens_limit"])
        self.processors = []
        mark = self.settings["watermark"]
        if mark["enabled"]:
            from kfp_llmops.components.common.watermark.keys import load_key
            from kfp_llmops.components.common.watermark.kgw import logits_processor
            from kfp_llmops.components.common.watermark.params import KGW

            key_file = os.environ.get("LLMOPS_WATERMARK_KEY_FILE") or self.settings.get("key_file")
            if not os.path.isfile(key_file or ""):
                key_file = None  # fall back to $LLMOPS_WATERMARK_KEY
            params = KGW.parse(mark["kgw"], os.path.join(here, "serving.json"))
            self.processors = [logits_processor(params.watermark(load_key(key_file), len(self.tokenizer)))]
        drill = self.settings.get("drill", {})
        self.failure_rate = float(drill.get("failure_rate", 0.0))
        self.added_latency = float(drill.get("added_latency_ms", 0.0)) / 1000.0
        self.first_token_latency = float(drill.get("first_token_latency_ms", 0.0)) / 1000.0
        self.token_latency = float(drill.get("token_latency_ms", 0.0)) / 1000.0
        self.rng = random.Random(int(drill.get("seed", 0)))
        labels = {"model": args["model_name"], "version": args["model_version"]}
        # The families must outlive their metrics: keep both.
        self.families = {
            "ttft": pb_utils.MetricFamily(
                "llm_time_to_first_token_seconds",
                "Time from taking a request up to its first generated token.",
                pb_utils.MetricFamily.HISTOGRAM,
            ),
            "itl": pb_utils.MetricFamily(
                "llm_inter_token_latency_seconds",
                "Time between successive tokens of one answer.",
                pb_utils.MetricFamily.HISTOGRAM,
            ),
            "generated": pb_utils.MetricFamily(
                "llm_generation_tokens_total", "Tokens generated.", pb_utils.MetricFamily.COUNTER
            ),
            "prompt": pb_utils.MetricFamily(
                "llm_prompt_tokens_total", "Prompt tokens read.", pb_utils.MetricFamily.COUNTER
            ),
        }
        self.ttft = self.families["ttft"].Metric(labels=labels, buckets=TTFT_BUCKETS)
        self.itl = self.families["itl"].Metric(labels=labels, buckets=ITL_BUCKETS)
        self.generated = self.families["generated"].Metric(labels=labels)
        self.prompt_tokens = self.families["prompt"].Metric(labels=labels)

    def execute(self, requests):
        from kfp_llmops.components.common.generation import prompt_ids

        if self.added_latency:
            time.sleep(self.added_latency)
        groups = {}
        for request in requests:
            sender = request.get_response_sender()
            if self.failure_rate and self.rng.random() < self.failure_rate:
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("drill: injected failure")),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            try:
                served = self.requests.parse(_values(request, self.requests.INPUTS), self.decoding, self.limit)
                ids = prompt_ids(self.tokenizer, served.prompt)
                self.requests.check_fits(len(ids), served.decoding.max_new_tokens, self.context)
            except (ValueError, TypeError) as exc:
                sender.send(_error(str(exc)), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            self.prompt_tokens.increment(len(ids))
            groups.setdefault(served.batch_key, []).append(_Live(sender, served))
        for members in groups.values():
            self._answer(members)
        return None

    def _answer(self, members):
        """Generate one batch; stream or collect each answer; every request ends with a final response."""
        from kfp_llmops.components.common.detokenize import TextStream, answer_text
        from kfp_llmops.components.common.generation import generate

        first = members[0].served
        streams = [TextStream(self.tokenizer, m.served.stop) for m in members]
        started = time.monotonic()
        step = [0]

        def on_token(i, token):
            live, text = members[i], streams[i]
            live.tokens += 1
            if live.tokens > step[0]:  # the batch's next decoding step: drills sleep once per step
                step[0] = live.tokens
                pause = self.first_token_latency if step[0] == 1 else self.token_latency
                if pause:
                    time.sleep(pause)
            now = time.monotonic()
            if live.last is None:
                self.ttft.observe(now - started)
            else:
                self.itl.observe(now - live.last)
            live.last = now
            if token is None:
                return True
            self.generated.increment(1)
            piece = text.push(token)
            if live.served.stream:
                if live.sender.is_cancelled():
                    live.gone = True
                elif piece:
                    live.send(_text(piece))
            return text.stopped or live.gone

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
                live.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"generation failed: {exc}")), True)
            return
        for live, text in zip(members, streams, strict=False):
            if live.served.stream:
                rest = text.finish()
                live.send(_text(rest) if rest else None, final=True)
            else:
                live.send(_text(answer_text(self.tokenizer, text.tokens, live.served.stop)), final=True)
