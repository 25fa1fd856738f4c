"""The vLLM engine of the served model (`engine: vllm`), as Triton's vLLM backend runs it:
vLLM's async engine on the version's `weights/`, driven from an event loop of its own, so
Triton hands each request over and returns at once. The engine batches continuously (a
request that arrives mid-generation joins the running batch at its next step), keeps a
paged KV cache with prefix caching, and runs the watermark and the drills as logits
processors (`vllm_processors`).

What is served is what evaluation judged: the prompt is tokenized by the project's one
prompt format (not vLLM's chat handling), the blessed decoding becomes vLLM's sampling
parameters, answers end at the model's EOS or a stop string, and the text users read is
made from the chosen tokens by the one detokenizing rule (`common.detokenize`). The
metrics are vLLM's own statistics, exported under its names through Triton
(`serving_metrics`)."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid

from kfp_llmops.components.common.detokenize import TextStream, answer_text

from . import serving_metrics as names
from .vllm_processors import SETTINGS

PROCESSORS = [
    "kfp_llmops.components.deploy.vllm_processors:KGWProcessor",
    "kfp_llmops.components.deploy.vllm_processors:DrillProcessor",
]


def engine_args(weights: str, settings: dict, context: int, vocab_size: int, key_file: str | None) -> dict:
    """vLLM's engine arguments for a repository version (serving.json's `vllm` section)."""
    v = settings.get("vllm") or {}
    mark = settings["watermark"]
    watermark = None
    if mark["enabled"]:
        watermark = {"kgw": mark["kgw"], "key_file": key_file, "vocab_size": vocab_size}
    return {
        "model": weights,
        "skip_tokenizer_init": True,  # one tokenizer, the project's, makes prompts and answers
        "dtype": v.get("dtype", "float32"),
        "max_model_len": context,
        "max_num_seqs": int(v.get("max_num_seqs", 16)),
        "enable_prefix_caching": bool(v.get("prefix_caching", True)),
        "enforce_eager": not v.get("compile", False),
        "kv_cache_memory_bytes": int(float(v.get("kv_cache_gib", 1.0)) * (1 << 30)),
        "seed": 0,
        "distributed_executor_backend": "uni",  # one worker: in the engine's process, not one more
        "generation_config": "vllm",  # the blessed decoding, not the checkpoint's defaults
        "logits_processors": PROCESSORS,
        "additional_config": {SETTINGS: {"watermark": watermark, "drill": settings.get("drill") or {}}},
        "disable_log_stats": False,
        "enable_log_requests": False,
    }


def _environment(settings: dict) -> None:
    """Before vLLM is imported: no network (no usage reports, no hub), a shared-memory ring
    that fits a container's /dev/shm, and on a CPU the
    engine's threads bound to serving.json's cores, else to every core this server may
    use (its affinity: the local target gives stable and canary half each; vLLM's own
    default keeps one of two cores for its front end)."""
    cores = (settings.get("vllm") or {}).get("cpu_cores")
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cores or ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    for name in ("VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "HF_HUB_OFFLINE"):
        os.environ.setdefault(name, "1")
    # The engine talks to its worker through a ring of 10 shared-memory chunks: 4 MiB each
    # (vLLM's 16 would ask 160 MiB of a container's 64 MiB /dev/shm; larger messages
    # go over a socket instead).
    os.environ.setdefault("VLLM_MQ_MAX_CHUNK_BYTES_MB", "4")


def sampling_params(served, eos: int):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    d = served.decoding
    return SamplingParams(
        n=1,
        temperature=d.temperature if d.do_sample else 0.0,
        top_p=d.top_p if d.do_sample else 1.0,
        top_k=d.top_k if d.do_sample and d.top_k else 0,
        seed=served.seed if d.do_sample else None,
        max_tokens=d.max_new_tokens,
        min_tokens=served.min_new_tokens,
        stop_token_ids=[eos],
        detokenize=False,
        output_kind=RequestOutputKind.DELTA,
    )


def _stat_logger(metrics):
    """A vLLM stat logger writing its scheduler and iteration statistics to `metrics`."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class TritonStatLogger(StatLoggerBase):
        def __init__(self, vllm_config, engine_index: int = 0):
            pass

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
            if scheduler_stats is not None:
                metrics.set(names.RUNNING, scheduler_stats.num_running_reqs)
                metrics.set(names.WAITING, scheduler_stats.num_waiting_reqs)
            if iteration_stats is None:
                return
            metrics.add(names.PROMPT_TOKENS, iteration_stats.num_prompt_tokens)
            metrics.add(names.GENERATION_TOKENS, iteration_stats.num_generation_tokens)
            for seconds in iteration_stats.time_to_first_tokens_iter:
                metrics.observe(names.TTFT, seconds)
            for seconds in iteration_stats.inter_token_latencies_iter:
                metrics.observe(names.ITL, seconds)
            for done in iteration_stats.finished_requests:
                metrics.observe(names.E2E, done.e2e_latency)
                metrics.observe(names.QUEUE, done.queued_time)

        def log_engine_initialized(self):
            pass

    return TritonStatLogger


def check_kernels() -> None:
    """vLLM's CPU build only warns when its compiled ops fail to load (libnuma.so.1 missing,
    say) and its engine then dies in a worker on an op it lacks; this says why at load."""
    import torch
    from vllm.platforms import current_platform

    if current_platform.device_type != "cpu":
        return
    current_platform.import_kernels()
    if not hasattr(torch.ops._C, "init_cpu_memory_env"):
        raise RuntimeError(
            "vLLM's CPU kernels did not load (the warning 'Failed to import from vllm._C...' above says why; "
            "libnuma1 is one of their libraries)"
        )


class VllmEngine:
    def __init__(self, weights: str, settings: dict, metrics, key_file: str | None):
        from transformers import AutoConfig, AutoTokenizer

        from kfp_llmops.components.common.generation import context_of

        _environment(settings)
        self.tokenizer = AutoTokenizer.from_pretrained(weights)
        self.eos = self.tokenizer.eos_token_id
        self.context = context_of(AutoConfig.from_pretrained(weights)) or 2048
        self.added_latency = float((settings.get("drill") or {}).get("added_latency_ms", 0.0)) / 1000.0
        args = engine_args(weights, settings, self.context, len(self.tokenizer), key_file)
        check_kernels()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vllm-engine", daemon=True)
        self.thread.start()
        self.engine = asyncio.run_coroutine_threadsafe(self._start(args, metrics), self.loop).result()
        asyncio.run_coroutine_threadsafe(self._warm_up(), self.loop).result()

    async def _warm_up(self) -> None:
        """One token generated before the model reports ready: a model the engine cannot run
        (an attention shape its kernels lack) fails its load, not every request after."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, detokenize=False, stop_token_ids=[self.eos])
        async for _ in self.engine.generate({"prompt_token_ids": [self.eos]}, params, "warm-up"):
            pass

    @staticmethod
    async def _start(args: dict, metrics):
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(AsyncEngineArgs(**args), stat_loggers=[_stat_logger(metrics)])

    def submit(self, members: list) -> None:
        """Hand each request to the engine and return: they are answered as they finish."""
        for live in members:
            asyncio.run_coroutine_threadsafe(self._answer(live), self.loop)

    async def _answer(self, live) -> None:
        served = live.served
        text = TextStream(self.tokenizer, served.stops)
        request_id = uuid.uuid4().hex
        reason = None
        try:
            if self.added_latency:
                await asyncio.sleep(self.added_latency)
            outputs = self.engine.generate(
                {"prompt_token_ids": live.prompt_ids}, sampling_params(served, self.eos), request_id
            )
            async for out in outputs:
                if live.cancelled():
                    break
                choice = out.outputs[0]
                for token in choice.token_ids:
                    if token == self.eos:
                        reason = "stop"
                        break
                    piece = text.push(token)
                    if piece:
                        live.piece(piece)
                    if text.stopped:
                        reason = "stop"
                        break
                if reason is None and out.finished:
                    reason = "length" if choice.finish_reason == "length" else "stop"
                if reason is not None:
                    break
        except Exception as exc:  # noqa: BLE001 - one request's failure is answered for it alone
            live.fail(f"generation failed: {type(exc).__name__}: {str(exc)[:200]}")
            return
        finally:
            if reason is None or text.stopped:  # the engine may still be generating it
                await self.engine.abort(request_id)
        if reason is None:  # the client went away: nothing more is sent
            live.finish("", "abort", len(text.tokens))
            return
        rest = text.finish() if served.stream else answer_text(self.tokenizer, text.tokens, served.stops)
        live.finish(rest, reason, len(text.tokens))

    def close(self) -> None:
        try:
            self.engine.shutdown()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
