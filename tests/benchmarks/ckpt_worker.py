"""One rank of the checkpoint benchmark (run by torchrun from bench_ckpt.py) on a ~2 GB
ZeRO-3 checkpoint, in one of two phases, rounds interleaved (the order rotates) after
one untimed warm-up round; rank 0 writes the timings.

- `compute`: DeepSpeed's stock engine vs the hashing engine (and the hashing engine with
  torch's zip CRC-32 kept), no fsync, into a memory-backed folder (tmpfs): the cost of
  hashing without the disk, as wall time and each rank's CPU seconds.
- `durable`: saves that are durable, as a checkpoint must be to be useful: the stock
  engine plus an fsync of every file it wrote and of the folders, vs the hashing engine
  with its own fsyncs and the commit (manifest, renames, `latest`). Before every round
  the previous round's files are removed, writeback drained (`sync`) and the page cache
  dropped where the machine allows it.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import sys
import time


def _cpu_seconds() -> float:
    """This process's CPU time, every thread included (the hashing helper too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def drop_page_cache() -> bool:
    """Drain writeback, then drop the page cache where the machine allows it (root)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return True
    except OSError:
        return False


def main(out_dir: str, width: int, layers: int, rounds: int, phase: str) -> None:
    import deepspeed
    import torch
    import torch.distributed as dist
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    from deepspeed.utils import logger

    from kfp_llmops.components.common import atomic, merkle
    from kfp_llmops.components.training import checkpoints
    from kfp_llmops.components.training.ckpt_engine import HashingCheckpointEngine

    class FsyncEngine(TorchCheckpointEngine):
        """DeepSpeed's stock save, then an fsync of the file it wrote."""

        def save(self, state_dict, path: str) -> None:
            super().save(state_dict, path)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    logger.setLevel(logging.WARNING)
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    cfg = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "torch_adam": True}},
        "zero_optimization": {"stage": 3},
        "steps_per_print": 10**9,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    loss = engine(torch.randn(1, width)).square().mean()
    engine.backward(loss)
    engine.step()
    params = sum(p.ds_numel for p in model.parameters())
    stock = engine.checkpoint_engine
    dropped = [False]

    def prepare(target: str) -> None:
        if rank == 0:
            # compute: one checkpoint in memory at a time (three would crowd out the
            # page cache and make the kernel reclaim during the timed saves)
            stale = [os.path.join(out_dir, m) for m in modes] if phase == "compute" else [target]
            for old in stale:
                shutil.rmtree(old, ignore_errors=True)
            if phase == "durable":
                dropped[0] = drop_page_cache()
            else:
                os.sync()
        dist.barrier()

    def save_plain(eng, target: str) -> None:
        engine.checkpoint_engine = eng
        engine.save_checkpoint(target, tag="t", save_latest=False)

    def save_hashed(eng, target: str) -> None:
        engine.checkpoint_engine = eng
        eng.begin(os.path.join(target, "t"))
        engine.save_checkpoint(target, tag="t", save_latest=False)

    def save_stock_durable(target: str) -> None:
        save_plain(FsyncEngine(None), target)
        parts["write"] = time.perf_counter()
        dist.barrier()
        if rank == 0:
            atomic.fsync_dir(os.path.join(target, "t"))
            atomic.fsync_dir(target)

    def save_hashed_durable(target: str) -> None:
        """What train_zero3 does: write, hash back while fsync runs, then rank 0 commits."""
        eng = HashingCheckpointEngine(durable=True)
        staging = os.path.join(target, ".staging")
        save_hashed(eng, staging)
        parts["write"] = time.perf_counter()
        digests = [None] * world
        dist.all_gather_object(digests, [d.to_json() for d in eng.digests.values()])
        if rank == 0:
            checkpoints.commit(
                target,
                staging,
                "t",
                [merkle.FileDigest.from_json(d) for part in digests for d in part],
                merkle.DEFAULT_CHUNK_SIZE,
                {"step": 1},
                durable=True,
            )

    if phase == "compute":
        modes = {
            "plain": lambda t: save_plain(stock, t),
            "hashed": lambda t: save_hashed(HashingCheckpointEngine(durable=False), t),
            "hashed_crc": lambda t: save_hashed(HashingCheckpointEngine(durable=False, zip_crc32=True), t),
        }
    else:
        modes = {"plain": save_stock_durable, "hashed": save_hashed_durable}
    wall: dict[str, list[float]] = {m: [] for m in modes}
    parts: dict[str, float] = {}
    split: dict[str, list[float]] = {m: [] for m in modes}  # rank 0: the files written and fsynced
    cpu: dict[str, list[list[float]]] = {m: [] for m in modes}
    order = list(modes)
    for r in range(rounds + 1):  # round 0 warms the allocator, untimed
        for mode in order[r % len(order) :] + order[: r % len(order)]:
            target = os.path.join(out_dir, mode)
            prepare(target)
            cpu0 = _cpu_seconds()
            dist.barrier()
            start = time.perf_counter()
            modes[mode](target)
            dist.barrier()
            seconds = time.perf_counter() - start
            used = [None] * world
            dist.all_gather_object(used, _cpu_seconds() - cpu0)
            if r:
                wall[mode].append(seconds)
                split[mode].append(parts.pop("write", start + seconds) - start)
                cpu[mode].append(used)
    # durable: the hashing engine's save (it has a manifest to verify); compute keeps only the last
    tag_dir = os.path.join(out_dir, "hashed", "t") if phase == "durable" else os.path.join(target, "t")
    size = sum(os.path.getsize(os.path.join(tag_dir, f)) for f in os.listdir(tag_dir) if f.endswith(".pt"))
    if rank == 0:
        with open(os.path.join(out_dir, f"{phase}.json"), "w") as handle:
            json.dump(
                {
                    "phase": phase,
                    "params": params,
                    "bytes": size,
                    "wall_s": wall,
                    "cpu_s": cpu,
                    "write_s": split,
                    "cache_dropped": dropped[0],
                    "tag_dir": tag_dir,
                },
                handle,
                indent=2,
            )
    dist.barrier()
    if rank == 0 and phase == "compute":
        for mode in modes:
            shutil.rmtree(os.path.join(out_dir, mode), ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
