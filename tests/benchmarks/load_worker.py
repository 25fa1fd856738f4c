"""One rank of the load benchmark (run by torchrun): load the base model the old way
(every rank `from_pretrained` on the whole model, then ZeRO-3 partitions it) or the way
train_zero3 does (partitioned while loading), with DeepSpeed's default ZeRO-3 sizes or,
as training now does, sizes from the model; then `deepspeed.initialize` and one
optimizer step. Both modes end the load phase in the same state, every parameter
partitioned. A thread samples /proc/self/status every few milliseconds and this rank
writes, per phase, its peak anonymous memory (RssAnon: what the process itself holds)
and its peak resident set (VmRSS: that plus mapped file pages)."""

import json
import os
import sys
import threading
import time

FIELDS = ("RssAnon:", "VmRSS:")


def sample() -> dict:
    out = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            for field in FIELDS:
                if line.startswith(field):
                    out[field[:-1]] = int(line.split()[1]) / 1024
    return out


class Peaks:
    """Peak of each field since the last `mark`, sampled every `every` seconds."""

    def __init__(self, every: float = 0.003):
        self.every, self.peak, self.marks = every, sample(), {}
        self.lock, self.stop = threading.Lock(), False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.stop:
            self._take()
            time.sleep(self.every)

    def _take(self) -> None:
        now = sample()
        with self.lock:
            self.peak = {k: max(self.peak[k], now[k]) for k in now}

    def mark(self, phase: str) -> None:
        self._take()
        with self.lock:
            self.marks[phase], self.peak = dict(self.peak), sample()


def main(mode: str, model_dir: str, out: str) -> None:
    import deepspeed
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from kfp_llmops.components.training import partitioned_load
    from kfp_llmops.components.training.config import TrainConfig, hidden_size

    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    cfg = TrainConfig(world_size=torch.distributed.get_world_size(), micro_batch=1, seq_len=64, min_lr=0.0)
    # what training does now: ZeRO-3 sized from the model; before: DeepSpeed's defaults
    sized = mode == "partitioned"
    ds_config = cfg.deepspeed_config(hidden_size(AutoConfig.from_pretrained(model_dir)) if sized else None)
    # the architecture's modelling code is imported before the baseline mark (about 0.1 of
    # this model, the same for both modes): it is code, not weights
    AutoModelForCausalLM._model_mapping[type(AutoConfig.from_pretrained(model_dir))]
    peaks = Peaks()
    peaks.mark("imports")
    if mode.startswith("partitioned"):
        model = partitioned_load.load(AutoModelForCausalLM, model_dir, ds_config, rank)
        if sized:
            partitioned_load.map_large_allocations()  # as the training worker does after the load
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        deepspeed.zero.Init(module=model, config_dict_or_path=ds_config)  # what initialize would do
    torch.distributed.barrier()
    peaks.mark("load")
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    torch.distributed.barrier()
    peaks.mark("engine")
    ids = torch.randint(0, model.config.vocab_size, (1, 64))
    loss = engine(input_ids=ids, labels=ids).loss
    engine.backward(loss)
    engine.step()
    peaks.mark("first_step")
    peaks.stop = True
    with open(f"{out}.rank{rank}", "w") as handle:
        json.dump(peaks.marks, handle)


if __name__ == "__main__":
    main(*sys.argv[1:4])
    os._exit(0)
