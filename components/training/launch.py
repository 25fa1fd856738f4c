"""Starts the ranks: verifies the inputs once, tokenizes, writes a run spec, and runs
`torchrun` (gloo on CPU, NCCL on GPUs). Rerunning the same command after a crash or a
`kill -9` resumes from the newest intact checkpoint."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata

from blake3 import blake3

from kfp_llmops.components import __version__
from kfp_llmops.components.common import integrity
from kfp_llmops.components.common.errors import InputError, LlmopsError

from .config import TrainConfig
from .data import tokenize_to_files

TOKENS_FORMAT = 2  # bump when the encoding of examples changes (2: lengths.npy)


@dataclass(frozen=True)
class RunInputs:
    """One run's inputs, the roots they are pinned to, and where its outputs go: given to
    `train` once and handed whole to whichever launcher runs the ranks."""

    clean_path: str
    base_model: str
    out_dir: str = ""  # the spec, tokens and logs (one node); a multi-node run uses the claim
    dataset_root: str | None = None
    base_model_root: str | None = None
    dataset_chunk_size: int | None = None
    checkpoint_dir: str | None = None  # default: <out_dir>/checkpoints
    model_dir: str | None = None  # default: <out_dir>/model
    stop_after: int | None = None  # stop after this step (a crash rehearsal)
    watermark_key_file: str | None = None


def environment() -> dict:
    """What produced a checkpoint: versions and a hash of every installed package."""
    import torch

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "deepspeed": version("deepspeed"),
        "transformers": version("transformers"),
        "cuda": torch.version.cuda,
        "packages_blake3": blake3("\n".join(packages).encode()).hexdigest(),
    }


def config_hash(cfg: TrainConfig) -> str:
    return hashlib.sha256(cfg.model_dump_json().encode()).hexdigest()


def check_precision(cfg: TrainConfig, cuda: bool) -> None:
    """fp16 needs a GPU: DeepSpeed's CPU accelerator has bf16 and fp32 only."""
    if cfg.precision == "fp16" and not cuda:
        raise InputError(
            "precision: fp16 needs GPUs (DeepSpeed's CPU accelerator has no fp16); use bf16 or fp32 on CPU ranks"
        )


def resolve_recipe(cfg: TrainConfig, base_model: str) -> TrainConfig:
    """The config with its recipe applied: `scratch` for a model build_base_model made from
    random weights, else `lora` unless the config names one (`TrainConfig.for_model`)."""
    from transformers import AutoConfig

    from kfp_llmops.components.common.generation import context_of, from_scratch

    try:
        config = AutoConfig.from_pretrained(base_model)
    except (OSError, ValueError) as exc:
        raise InputError(f"{os.path.join(base_model, 'config.json')}: unreadable model config: {exc}") from None
    resolved = cfg.for_model(from_scratch(config), context_of(config))
    if cfg.recipe is None:
        print(
            f"[train] recipe {resolved.recipe} (lr {resolved.lr:g}, warm-up {resolved.warmup_steps} steps, "
            f"seq_len {resolved.seq_len}{', LoRA' if resolved.lora.enabled else ''}) for the fields the config "
            "leaves unset",
            file=sys.stderr,
            flush=True,
        )
    return resolved


def _check_fits(base_model: str, cfg: TrainConfig) -> None:
    """seq_len within the model's context: positions past it have no embedding."""
    from transformers import AutoConfig

    from kfp_llmops.components.common.generation import context_of

    context = context_of(AutoConfig.from_pretrained(base_model))
    if context and cfg.seq_len > context:
        raise InputError(
            f"seq_len: {cfg.seq_len} is beyond the model's context of {context} tokens "
            f"({os.path.join(base_model, 'config.json')})"
        )


def train_here(run: RunInputs, cfg: TrainConfig) -> dict:
    """The ranks on this node through torchrun; rank 0's result."""
    import torch

    check_precision(cfg, torch.cuda.is_available())
    spec_path, spec, env = prepare(run, cfg)
    # One node: rendezvous on loopback. `--standalone` alone advertises the hostname, which a
    # pod or a container without a network (kfp.local's DockerRunner here) cannot resolve.
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--local-addr",
        "127.0.0.1",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(cfg.world_size),
        "-m",
        "kfp_llmops.components.training.worker",
        spec_path,
    ]
    return run_ranks(cmd, spec, env, run.out_dir)


def prepare(run: RunInputs, cfg: TrainConfig) -> tuple[str, dict, dict]:
    """Verify the inputs, tokenize, and write the run spec every rank reads: (its path, it,
    the ranks' environment). Any launcher then starts `worker.py SPEC` once per rank.
    The recipe is resolved here too (idempotent), so every launcher's ranks get one."""
    from transformers import AutoTokenizer

    base_model, out_dir = run.base_model, run.out_dir
    cfg = resolve_recipe(cfg, base_model)
    os.makedirs(out_dir, exist_ok=True)
    data_root = integrity.verify("dataset", run.clean_path, run.dataset_root, run.dataset_chunk_size)
    model_root = integrity.verify("model", base_model, run.base_model_root)
    _check_fits(base_model, cfg)
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
        raise InputError(
            f"{os.path.join(base_model, 'tokenizer_config.json')}: pad_token: not set and no EOS "
            "to pad with (`llmops model seal --pad-token eos` sets one)"
        )
    # Tokens depend on the data, the model (its tokenizer and chat template) and two settings.
    key = blake3(json.dumps([data_root, model_root, cfg.seq_len, cfg.mask_prompt, TOKENS_FORMAT]).encode())
    tokens = tokenize_to_files(
        run.clean_path, tokenizer, cfg.seq_len, cfg.mask_prompt, os.path.join(out_dir, "tokens", key.hexdigest()[:16])
    )
    warn_truncation(tokens)
    spec = {
        "config": cfg.model_dump(),
        "tokens": tokens,
        "base_model": os.path.abspath(base_model),
        "checkpoint_dir": os.path.abspath(run.checkpoint_dir or os.path.join(out_dir, "checkpoints")),
        "model_dir": os.path.abspath(run.model_dir or os.path.join(out_dir, "model")),
        "train_log": os.path.join(out_dir, "train_log.jsonl"),
        "result": os.path.join(out_dir, "result.json"),
        "stop_after": run.stop_after,
        "meta": {
            "config_hash": config_hash(cfg),
            "dataset_root": data_root,
            "base_model_root": model_root,
            "code_version": __version__,
            "environment": environment(),
        },
    }
    spec_path = os.path.join(out_dir, "run_spec.json")
    with open(spec_path, "w", encoding="utf-8") as handle:
        json.dump(spec, handle, indent=2)
    if os.path.exists(spec["result"]):
        os.unlink(spec["result"])
    import torch

    env = dict(os.environ, **rank_env(cfg, torch.cuda.is_available()))
    if cfg.weight_watermark.enabled:  # the key reaches the ranks by environment, never by file
        from kfp_llmops.components.common.watermark.keys import ENV_VAR, load_key

        env[ENV_VAR] = str(load_key(run.watermark_key_file))
    return spec_path, spec, env


# Above this share of examples cut at seq_len, training says so.
TRUNCATION_WARNING = 0.01


def warn_truncation(tokens: dict) -> None:
    share = tokens["truncated"] / max(1, tokens["rows"])
    if share > TRUNCATION_WARNING:
        print(
            f"[train] warning: seq_len {tokens['seq_len']} cuts {tokens['truncated']:,} of {tokens['rows']:,} "
            f"examples ({share:.1%}): their ends, the answers, are not trained on; raise seq_len",
            file=sys.stderr,
            flush=True,
        )


def rank_env(cfg: TrainConfig, cuda: bool) -> dict[str, str]:
    """What every rank's environment gets on top of its launcher's."""
    env = {
        "OMP_NUM_THREADS": str(cfg.threads_per_rank),
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
    }
    if not cuda:
        env["DS_ACCELERATOR"] = "cpu"
    return env


_PROBLEM = re.compile(rb"EnvironmentProblem: (.+)")


def run_ranks(cmd: list[str], spec: dict, env: dict, out_dir: str) -> dict:
    """Run a launcher command for the ranks, show their progress, and read rank 0's result."""
    from kfp_llmops.components.common.errors import EnvironmentProblem, environment_problem

    log_path = os.path.join(out_dir, "ranks.log")
    unlogged = None  # the log's volume filled: the ranks' own error still counts
    with open(log_path, "ab", buffering=0) as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.PIPE)
        tail, line = bytearray(), b""
        said: list[str] = []  # every rank's full-disk line, however much output follows it
        shown = Progress(sys.stderr.buffer)
        while chunk := os.read(proc.stderr.fileno(), 65536):  # live progress, and keep the tail
            if unlogged is None:
                try:
                    log.write(chunk)
                except OSError as exc:
                    unlogged = exc
            shown.feed(chunk)
            tail = (tail + chunk)[-20000:]
            *ended, line = (line + chunk).split(b"\n")
            said += [m.decode(errors="replace") for piece in ended for m in _PROBLEM.findall(piece)]
            line = line[-65536:]
        shown.close()
        said += [m.decode(errors="replace") for m in _PROBLEM.findall(line)]
        proc.wait()
    if proc.returncode != 0 and said:  # a full disk: the first rank's own one line, exit 2
        raise EnvironmentProblem(
            said[0] + "; rerun the same command once there is room: it resumes from the last verified checkpoint"
        )
    unlogged = environment_problem(unlogged, log_path) if unlogged is not None else None
    if unlogged is not None:
        raise unlogged
    if proc.returncode != 0 or not os.path.exists(spec["result"]):
        raise LlmopsError(
            f"training failed (exit {proc.returncode}); rerun the same command to resume "
            f"from the last verified checkpoint; last log line: "
            f"{last_error(tail.decode(errors='replace'))}"
        )
    return read_result(spec)


def newest_tag(result: dict) -> str | None:
    """The checkpoint a run ended on: its last save, else the one it resumed from."""
    return result["saves"][-1]["tag"] if result["saves"] else result["resumed_from"]


def read_result(spec: dict) -> dict:
    """Rank 0's result of a finished run, with what the run was given."""
    with open(spec["result"], encoding="utf-8") as handle:
        result = json.load(handle)
    result.update(
        {
            "dataset_root": spec["meta"]["dataset_root"],
            "base_model_root": spec["meta"]["base_model_root"],
            "checkpoint_dir": spec["checkpoint_dir"],
            "model_dir": spec["model_dir"],
            "train_log": spec["train_log"],
            "truncated_examples": spec["tokens"]["truncated"],
            "truncated_share": spec["tokens"]["truncated"] / max(1, spec["tokens"]["rows"]),
            "recipe": spec["config"]["recipe"],
            "seq_len": spec["config"]["seq_len"],
        }
    )
    return result


def shows_progress(chunk: bytes) -> bool:
    """The progress bar and our own messages; DeepSpeed's chatter stays in ranks.log, and so
    does a library's Python warning written onto the end of a bar refresh."""
    if b"Warning: " in chunk:
        return False
    return chunk.startswith((b"\r", b"train", b"[train]")) or b"train:" in chunk


class Progress:
    """The ranks' stderr passed on a line (or a progress bar's refresh, ended by "\r") at
    a time, whole: the pipe cuts writes anywhere, and an unbuffered rank writes a message
    and its newline apart, so a chunk is no unit to judge or show."""

    def __init__(self, out):
        self.out, self.pending = out, b""

    def feed(self, chunk: bytes) -> None:
        pieces = re.split(rb"(?<=[\n\r])", self.pending + chunk)
        self.pending = pieces.pop()  # the unended rest waits for its end
        self._show(pieces)

    def close(self) -> None:
        self._show([self.pending])
        self.pending = b""

    def _show(self, pieces: list[bytes]) -> None:
        shown = b"".join(p for p in pieces if p and shows_progress(p))
        if shown:
            self.out.write(shown)
            self.out.flush()


def last_error(text: str) -> str:
    """The rank's own exception line, not the launcher's (torchrun's, mpirun's) summary of it."""
    lines = [re.sub(r"^\[rank\d+\]: ", "", ln) for ln in text.splitlines() if ln.strip(" -")]
    errors = [
        ln
        for ln in lines
        if ("Error" in ln or "error" in ln or ln.startswith("worker:"))
        and not ln.startswith((" ", "mpirun", "Primary job"))
        and "ChildFailedError" not in ln
        and "elastic" not in ln
    ]
    return (errors or lines or ["(none)"])[-1][:300]


__all__ = ["train_here", "environment", "config_hash"]
