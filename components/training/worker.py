"""One rank of train_zero3, started by torchrun or mpirun (`launch.py`): a `Trainer` that
sets up, resumes from the newest intact checkpoint, trains, checkpoints and exports."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import socket
import sys
import time

import numpy as np

from kfp_llmops.components.common import integrity


def lr_lambda(cfg):
    """Warmup, then cosine or linear decay to min_lr over the full `steps` horizon."""
    floor = cfg.min_lr / cfg.lr

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
        shape = 0.5 * (1 + math.cos(math.pi * progress)) if cfg.schedule == "cosine" else 1 - progress
        return floor + (1 - floor) * shape

    return factor


def rng_state(torch) -> dict:
    """Plain containers and tensors only, so the file loads with weights_only=True."""
    py = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [kind, keys.tolist(), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(torch, state: dict) -> None:
    random.setstate((state["python"][0], tuple(state["python"][1]), state["python"][2]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Trainer:
    """One rank's run: set up (`__init__`), `resume()` from the newest checkpoint every
    rank's share verifies, then `run()`: `train_step()` to the stop, `save()` at each
    interval, `export()` at the end. Every rank runs the same calls in the same order
    (they meet in collectives); rank 0 alone writes the log, commits and exports."""

    def __init__(self, spec: dict):
        import deepspeed
        import torch
        import torch.distributed as dist
        from deepspeed.utils import logger as ds_logger
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        from kfp_llmops.components.training import lora, partitioned_load
        from kfp_llmops.components.training.ckpt_engine import HashingCheckpointEngine
        from kfp_llmops.components.training.config import TrainConfig, hidden_size
        from kfp_llmops.components.training.data import Sampler

        ds_logger.setLevel(logging.WARNING)
        hf_logging.disable_progress_bar()
        self.spec, self.torch, self.dist = spec, torch, dist
        self.cfg = cfg = TrainConfig.model_validate(spec["config"])
        ranks_from_mpi(os.environ)
        deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
        self.rank, self.world = rank, world = dist.get_rank(), dist.get_world_size()
        hosts = [None] * world
        dist.all_gather_object(hosts, socket.gethostname())
        self.say(f"{world} ranks on {len(set(hosts))} host(s): {', '.join(sorted(set(hosts)))}")
        torch.set_num_threads(cfg.threads_per_rank)
        random.seed(cfg.seed + rank)
        np.random.seed(cfg.seed + rank)
        torch.manual_seed(cfg.seed + rank)

        # memory-mapped [N, seq_len] int32: each batch's rows are read when it is taken
        self.input_ids, self.labels, self.lengths = (
            np.load(spec["tokens"][name], mmap_mode="r") for name in ("input_ids", "labels", "lengths")
        )
        ds_config = cfg.deepspeed_config(hidden_size(AutoConfig.from_pretrained(spec["base_model"])))
        model = partitioned_load.load(AutoModelForCausalLM, spec["base_model"], ds_config, rank)
        if cfg.return_freed_memory:  # initialize's copies and the gathered layers come and go without growing the heap
            partitioned_load.map_large_allocations()
        if cfg.lora.enabled:
            model = lora.wrap(model, cfg.lora)
            train_params, total = lora.trainable(model)
            self.say(f"LoRA: {train_params:,} of {total:,} parameters train ({train_params / total:.2%})")
        model.train()
        self.watermark_loss = attach_weight_watermark(model, cfg)
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=model,
            model_parameters=[p for p in model.parameters() if p.requires_grad],
            config=ds_config,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg)),
        )
        self.hce = HashingCheckpointEngine(cfg.chunk_size, cfg.durable)
        self.engine.checkpoint_engine = self.hce

        self.ckpt_root = spec["checkpoint_dir"]
        os.makedirs(self.ckpt_root, exist_ok=True)
        self.step, self.sampler, self.prev_root = 0, Sampler(len(self.input_ids), cfg.seed), None
        self.resumed = {"tag": None, "skipped": [], "verify_seconds": 0.0}
        self.stop = min(cfg.steps, spec.get("stop_after") or cfg.steps)
        self.saves, self.step_times = [], []
        self.tokens_seen = self.tokens_processed = self.examples_seen = 0
        self.log = None

    def say(self, message: str) -> None:
        """A line in the job's log, once (rank 0's)."""
        if self.rank == 0:
            print(f"[train] {message}", file=sys.stderr, flush=True)

    def resume(self) -> None:
        """Load the newest checkpoint that every rank's share verifies; refuse the rest."""
        from kfp_llmops.components.training.data import Sampler

        started = time.perf_counter()
        for _, tag in integrity.list_tags(self.ckpt_root):
            ok, summary = verify_shared(os.path.join(self.ckpt_root, tag), self.rank, self.world, self.dist)
            if ok:
                _, client = self.engine.load_checkpoint(self.ckpt_root, tag)
                state = client["llmops"]
                self.step, self.sampler = state["step"], Sampler.from_state(state["sampler"])
                # the hash chain continues from this checkpoint
                self.prev_root = integrity.load_checkpoint(os.path.join(self.ckpt_root, tag))[1]["root"]
                set_rng_state(self.torch, state["rng"][self.rank])
                self.resumed["tag"] = tag
                break
            self.resumed["skipped"].append(f"{tag}: {summary}")
            self.say(f"refusing checkpoint {tag}: {summary}")
        self.resumed["verify_seconds"] = time.perf_counter() - started
        if self.resumed["tag"]:
            self.say(
                f"resumed from {self.resumed['tag']} (step {self.step}, verified in "
                f"{self.resumed['verify_seconds']:.2f} s)"
            )

    def _open_log(self) -> None:
        """Rank 0's step log, cut back to the step training resumes from."""
        if self.rank != 0:
            return
        path, keep = self.spec["train_log"], []
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                keep = [line for line in handle if json.loads(line)["step"] <= self.step]
        self.log = open(path, "w", encoding="utf-8")
        self.log.writelines(keep)
        self.log.flush()

    def _log_step(self, loss: float) -> None:
        """One line of rank 0's step log; a full disk is said naming the log."""
        row = {
            "step": self.step,
            "loss": loss,
            "lr": self.scheduler.get_last_lr()[0],
            "epoch": self.sampler.epoch,
            "step_time_s": round(self.step_times[-1], 4),
        }
        try:
            self.log.write(json.dumps(row) + "\n")
            self.log.flush()
        except OSError as exc:
            from kfp_llmops.components.common.errors import raise_as_environment_problem

            raise_as_environment_problem(exc, self.spec["train_log"], "writing the step log")

    def train_step(self) -> float:
        """One optimizer step over the global batch; the loss averaged over the ranks.
        Every rank plans the whole step from the same sampler state, then takes its rows."""
        from kfp_llmops.components.training.data import pack, packed_batch

        cfg, torch, rank, world = self.cfg, self.torch, self.rank, self.world
        input_ids, labels, lengths, device = self.input_ids, self.labels, self.lengths, self.engine.device
        t0 = time.perf_counter()
        global_batch = cfg.micro_batch * cfg.grad_accum * world
        plan = (
            pack(self.sampler, lengths, global_batch, cfg.seq_len) if cfg.packing else self.sampler.take(global_batch)
        )
        losses = []
        for micro in range(cfg.grad_accum):
            lo = (micro * world + rank) * cfg.micro_batch
            rows = plan[lo : lo + cfg.micro_batch]
            if cfg.packing:
                inputs = {
                    k: torch.from_numpy(v).to(device)
                    for k, v in packed_batch(rows, input_ids, labels, lengths, self.spec["tokens"]["pad_id"]).items()
                }
            else:  # padded to the batch's longest example: what follows it is padding
                width = int(lengths[rows].max())
                inputs = {
                    "input_ids": torch.from_numpy(input_ids[rows, :width].astype(np.int64)).to(device),
                    "labels": torch.from_numpy(labels[rows, :width].astype(np.int64)).to(device),
                }
            out = self.engine(**inputs)
            self.engine.backward(out.loss + self.watermark_loss())
            self.engine.step()
            losses.append(out.loss.detach().float())
        loss = torch.stack(losses).mean()
        self.dist.all_reduce(loss)
        self.step += 1
        self.step_times.append(time.perf_counter() - t0)
        examples = [i for row in plan for i in row] if cfg.packing else plan
        self.tokens_seen += int((labels[examples] != -100).sum()) - (
            int((labels[examples, 0] != -100).sum()) if cfg.packing else 0
        )
        self.tokens_processed += processed_tokens(plan, lengths, cfg)
        self.examples_seen += len(examples)
        return float(loss) / world

    def save(self) -> None:
        """Checkpoint this step: every rank writes its share into a staging folder, hashed
        as written; rank 0 commits the tag with the manifest of every rank's digests."""
        from kfp_llmops.components.training import checkpoints

        dist, rank, world, tag = self.dist, self.rank, self.world, checkpoints.tag_for(self.step)
        staging = os.path.join(self.ckpt_root, f".staging-{tag}")
        if rank == 0 and os.path.exists(staging):
            import shutil

            shutil.rmtree(staging)
        dist.barrier()
        t0 = time.perf_counter()
        rngs = [None] * world
        dist.all_gather_object(rngs, rng_state(self.torch))
        client = {"llmops": {"step": self.step, "sampler": self.sampler.state(), "rng": rngs}}
        self.hce.begin(os.path.join(staging, tag))
        try:
            self.engine.save_checkpoint(staging, tag=tag, client_state=client, save_latest=False)
        except Exception as exc:
            # Our engine names the file it could not write; DeepSpeed's own writes into
            # the folder (its recovery scripts) are named by the folder.
            from kfp_llmops.components.common.errors import raise_as_environment_problem

            raise_as_environment_problem(exc, staging + os.sep, "writing checkpoint")
        save_s = time.perf_counter() - t0
        digests = [None] * world
        dist.all_gather_object(digests, [d.to_json() for d in self.hce.digests.values()])
        result = [None]
        if rank == 0:
            from kfp_llmops.components.common import merkle

            cfg = self.cfg
            meta = dict(self.spec["meta"], step=self.step, tag=tag, previous_root=self.prev_root)
            res = checkpoints.commit(
                self.ckpt_root,
                staging,
                tag,
                [merkle.FileDigest.from_json(d) for part in digests for d in part],
                cfg.chunk_size,
                meta,
                cfg.durable,
                cfg.keep_last,
            )
            result = [
                {
                    "tag": tag,
                    "root": res.root,
                    "bytes": res.bytes,
                    "files": res.files,
                    "save_seconds": save_s,
                    "commit_seconds": res.commit_seconds,
                }
            ]
        dist.broadcast_object_list(result, src=0)
        self.prev_root = result[0]["root"]
        self.saves.append(result[0])

    def export(self) -> str | None:
        """The trained model, consolidated on rank 0 (LoRA merged) and sealed; its root."""
        from transformers import AutoModelForCausalLM

        from kfp_llmops.components.training import lora

        state = self.engine._zero3_consolidated_16bit_state_dict()
        if self.rank != 0:
            return None
        if self.cfg.lora.enabled:
            state = lora.merged_state(AutoModelForCausalLM, self.spec["base_model"], self.cfg.lora, state)
        return export(AutoModelForCausalLM, self.spec, state)

    def run(self) -> None:
        """Train from the resumed step to the stop, then export and write the result."""
        cfg = self.cfg
        self._open_log()
        bar = None
        if self.rank == 0 and self.step < self.stop:
            from kfp_llmops.components.common.progress import progress

            bar = progress(self.stop, "train", unit="step")
            bar.update(self.step)
        while self.step < self.stop:
            loss = self.train_step()
            if self.rank == 0:
                self._log_step(loss)
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}")
            if self.step % cfg.checkpoint_interval == 0 or self.step == self.stop:
                self.save()
        if bar is not None:
            bar.close()
        model_root = self.export() if self.step >= cfg.steps and self.spec.get("model_dir") else None
        if self.rank == 0:
            self.log.close()
            self._write_result(model_root)

    def _write_result(self, model_root: str | None) -> None:
        times, path = self.step_times, self.spec["train_log"]
        timed = times[1:] or times
        result = {
            "step": self.step,
            "done": self.step >= self.cfg.steps,
            "final_loss": _last_loss(path),
            "tokens_per_s": self.tokens_seen / sum(times) if times else None,
            "processed_tokens_per_s": self.tokens_processed / sum(times) if times else None,
            "examples_per_step": self.examples_seen / len(times) if times else None,
            "step_time_s": sum(timed) / len(timed) if timed else None,
            "saves": self.saves,
            "resumed_from": self.resumed["tag"],
            "skipped_checkpoints": self.resumed["skipped"],
            "resume_verify_seconds": self.resumed["verify_seconds"],
            "model_root": model_root,
            "checkpoint_root": self.prev_root,
            "world_size": self.world,
        }
        with open(self.spec["result"], "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)


def main(spec_path: str) -> None:
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    trainer = Trainer(spec)
    trainer.resume()
    trainer.run()
    trainer.dist.barrier()
    # Every output is written and fsynced; leave now. Tearing down gloo and DeepSpeed's
    # CPU communication threads at interpreter exit sometimes aborts a rank
    # ("terminate called without an active exception"), failing a finished run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def processed_tokens(plan, lengths, cfg) -> int:
    """Tokens every rank's forward passes took in one step, padding included: a packed row
    is seq_len long, any other micro-batch as long as its longest example."""
    if cfg.packing:
        return len(plan) * cfg.seq_len
    return sum(
        len(plan[lo : lo + cfg.micro_batch]) * int(lengths[plan[lo : lo + cfg.micro_batch]].max())
        for lo in range(0, len(plan), cfg.micro_batch)
    )


def attach_weight_watermark(model, cfg):
    """With the weight watermark on, a forward hook on the target layer computes the
    Uchida regularizer while ZeRO-3 has the layer's weights gathered (the hook is
    registered before DeepSpeed's, so it runs before they are released again)."""
    wcfg = cfg.weight_watermark
    if not wcfg.enabled:
        return lambda: 0.0
    from kfp_llmops.components.common.watermark import weights
    from kfp_llmops.components.common.watermark.keys import load_key

    key = load_key()
    module_name, _, param = wcfg.target.rpartition(".")
    module = model.get_submodule(module_name)
    held = {}

    def hook(mod, args, output):
        held["reg"] = weights.regularizer(getattr(mod, param), key, wcfg.bits)

    module.register_forward_hook(hook)
    return lambda: wcfg.strength * held.pop("reg")


def verify_shared(tag_dir: str, rank: int, world: int, dist) -> tuple[bool, str]:
    """Each rank checks every world-th file; rank 0 also the file set and the roots."""

    try:
        manifest, _ = integrity.load_checkpoint(tag_dir)
        mine = [f.path for i, f in enumerate(sorted(manifest.files, key=lambda f: f.path)) if i % world == rank]
        report = integrity.verify_checkpoint(tag_dir, only=mine, extras=rank == 0)
        verdict = (report.ok, report.summary())
    except Exception as exc:  # noqa: BLE001 - a broken manifest is a failed check, not a crash
        verdict = (False, f"unreadable: {exc}")
    verdicts = [None] * world
    dist.all_gather_object(verdicts, verdict)
    bad = [v[1] for v in verdicts if not v[0]]
    return (not bad), ("; ".join(bad) if bad else "intact")


# Everything a tokenizer is saved as (transformers' save_pretrained), the chat template too.
TOKENIZER_FILES = ("tokenizer", "special_tokens", "chat_template", "added_tokens", "vocab", "merges")


def ranks_from_mpi(env) -> None:
    """Under mpirun (Kubeflow Trainer's deepspeed-distributed runtime, or `mpirun` by
    hand), the rank, world and local rank come from Open MPI's variables, and rank 0's
    address from MASTER_ADDR, which the launcher passes (`mpirun -x MASTER_ADDR=...`);
    torch's env:// rendezvous then needs no mpi4py. torchrun's own variables win."""
    if "RANK" in env or "OMPI_COMM_WORLD_RANK" not in env:
        return
    if not env.get("MASTER_ADDR"):
        raise SystemExit(
            "worker: started by mpirun without MASTER_ADDR; pass rank 0's address "
            "(mpirun -x MASTER_ADDR=<address> -x MASTER_PORT=<port>)"
        )
    env["RANK"], env["WORLD_SIZE"] = env["OMPI_COMM_WORLD_RANK"], env["OMPI_COMM_WORLD_SIZE"]
    env["LOCAL_RANK"] = env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")
    env["LOCAL_WORLD_SIZE"] = env.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1")
    from kfp_llmops.components.training.trainjob import MASTER_PORT

    env.setdefault("MASTER_PORT", str(MASTER_PORT))
    if env["RANK"] == "0":  # else every rank waits out the rendezvous timeout
        import socket

        try:
            with socket.socket() as probe:
                probe.bind((socket.gethostbyname(env["MASTER_ADDR"]), 0))
        except OSError:
            raise SystemExit(
                f"worker: rank 0 runs on {socket.gethostname()}, not on MASTER_ADDR "
                f"{env['MASTER_ADDR']}: pass the host mpirun maps rank 0 to"
            ) from None


def export(auto_cls, spec: dict, state: dict) -> str:
    """Consolidated safetensors weights + the base model's tokenizer files (its chat
    template included), sealed with a manifest."""
    import shutil

    from transformers import AutoConfig

    model_dir = spec["model_dir"]
    os.makedirs(model_dir, exist_ok=True)
    model = auto_cls.from_config(AutoConfig.from_pretrained(spec["base_model"]))
    loaded = model.load_state_dict(state, strict=False)
    out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
    tied = out_emb is not None and out_emb.weight is in_emb.weight
    missing = [k for k in loaded.missing_keys if not (tied and k.startswith("lm_head."))]
    if missing or loaded.unexpected_keys:  # only a tied output embedding may be absent
        raise RuntimeError(f"export: missing {missing}, unexpected {loaded.unexpected_keys}")
    model.save_pretrained(model_dir, safe_serialization=True)
    for name in os.listdir(spec["base_model"]):
        if name.startswith(TOKENIZER_FILES):
            shutil.copyfile(os.path.join(spec["base_model"], name), os.path.join(model_dir, name))
    return integrity.seal("model", model_dir)


def _last_loss(log_path: str) -> float | None:
    last = None
    with open(log_path, encoding="utf-8") as handle:
        for line in handle:
            last = json.loads(line)["loss"]
    return last


if __name__ == "__main__":
    main(sys.argv[1])
