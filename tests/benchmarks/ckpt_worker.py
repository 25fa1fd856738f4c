"""One rank of the checkpoint benchmark (run by torchrun from bench_ckpt.py): a ~2 GB
ZeRO-3 checkpoint saved by DeepSpeed's stock engine, by the hashing engine, and by the
hashing engine with torch's zip CRC-32 kept, in rotating order, then a durable commit;
rank 0 writes the timings."""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time


def main(out_dir: str, width: int, layers: int, rounds: int) -> None:
    import deepspeed
    import torch
    import torch.distributed as dist
    from deepspeed.utils import logger

    from kfp_llmops.components.common import merkle
    from kfp_llmops.components.training import checkpoints
    from kfp_llmops.components.training.ckpt_engine import HashingCheckpointEngine

    logger.setLevel(logging.WARNING)
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "torch_adam": True}},
           "zero_optimization": {"stage": 3}, "steps_per_print": 10 ** 9}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    loss = engine(torch.randn(1, width)).square().mean()
    engine.backward(loss)
    engine.step()
    params = sum(p.ds_numel for p in model.parameters())

    def timed(fn) -> float:
        dist.barrier()
        start = time.perf_counter()
        fn()
        dist.barrier()
        return time.perf_counter() - start

    stock = engine.checkpoint_engine          # DeepSpeed's own engine, as configured
    engines = {"plain": stock, "hashed": HashingCheckpointEngine(durable=False),
               "hashed_crc": HashingCheckpointEngine(durable=False, zip_crc32=True)}
    times: dict[str, list[float]] = {mode: [] for mode in engines}
    order = list(engines)
    for r in range(rounds + 1):               # round 0 warms the allocator and page cache, untimed
        for mode in order[r % len(order):] + order[:r % len(order)]:
            target = os.path.join(out_dir, mode)
            if rank == 0:
                shutil.rmtree(target, ignore_errors=True)
                os.sync()                      # no writeback of an earlier round in this one
            dist.barrier()
            engine.checkpoint_engine = engines[mode]
            if mode != "plain":
                engines[mode].begin(os.path.join(target, "t"))
            seconds = timed(lambda: engine.save_checkpoint(target, tag="t", save_latest=False))
            if r:
                times[mode].append(seconds)

    # The durable path: hashing engine with fsync, then rank 0's commit (manifest, fsyncs, renames).
    durable = HashingCheckpointEngine(durable=True)
    engine.checkpoint_engine = durable
    root = os.path.join(out_dir, "durable")
    staging = os.path.join(root, ".staging-step-00000001")
    if rank == 0:
        shutil.rmtree(root, ignore_errors=True)
    dist.barrier()
    durable.begin(os.path.join(staging, "step-00000001"))
    save_s = timed(lambda: engine.save_checkpoint(staging, tag="step-00000001", save_latest=False))
    digests = [None] * world
    dist.all_gather_object(digests, [d.to_json() for d in durable.digests.values()])
    commit_s = None
    if rank == 0:
        res = checkpoints.commit(root, staging, "step-00000001",
                                 [merkle.FileDigest.from_json(d) for part in digests for d in part],
                                 merkle.DEFAULT_CHUNK_SIZE, {"step": 1}, durable=True)
        commit_s = res.commit_seconds
        size = res.bytes
        with open(os.path.join(out_dir, "save.json"), "w") as handle:
            json.dump({"params": params, "bytes": size, "plain_s": times["plain"], "hashed_s": times["hashed"],
                       "hashed_crc_s": times["hashed_crc"],
                       "durable_save_s": save_s, "durable_commit_s": commit_s,
                       "tag_dir": os.path.join(root, "step-00000001")}, handle, indent=2)
    dist.barrier()
    for mode in engines:
        if rank == 0:
            shutil.rmtree(os.path.join(out_dir, mode), ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
