"""The base model loaded straight into its ZeRO-3 partitions.

`from_pretrained` on every rank materialises the whole model per rank before DeepSpeed
partitions it, which defeats ZeRO-3 for a model larger than one rank's memory. Here the
model is built under `deepspeed.zero.Init` (each parameter partitioned as it is created,
no random init) and each rank reads only the bytes of its own flat slice of each tensor
from the safetensors files (plain reads, no memory map) into its partition: no rank ever
holds the whole model and no weights move between ranks.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import sys

from kfp_llmops.components.common.errors import InputError

# safetensors dtype -> (torch dtype name, bytes per element)
DTYPES = {"F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2), "F64": ("float64", 8)}


def load(auto_cls, model_dir: str, ds_config: dict, rank: int):
    """The model of `model_dir`'s architecture, each parameter holding this rank's slice of
    the stored weights, in the dtype the DeepSpeed config trains in."""
    import deepspeed
    import torch
    from transformers import AutoConfig
    from transformers.initialization import no_init_weights

    if not any(
        os.path.exists(os.path.join(model_dir, name)) for name in ("model.safetensors", "model.safetensors.index.json")
    ):
        # pickled weights (sealed with --allow-pickle) cannot be read a slice at a time
        print(
            f"[train] {model_dir}: no safetensors weights; every rank loads the whole model before "
            "ZeRO-3 partitions it",
            file=sys.stderr,
            flush=True,
        )
        return auto_cls.from_pretrained(model_dir)
    config = AutoConfig.from_pretrained(model_dir)
    cls = auto_cls._model_mapping[type(config)]  # resolved before zero.Init patches tensor creation
    with large_allocations_mapped(), no_init_weights(), deepspeed.zero.Init(config_dict_or_path=ds_config):
        model = cls._from_config(config)  # no random init: the files set every weight
    model.tie_weights()  # no_init_weights also skips the tying (GPT-2's lm_head is its embedding)
    stored = index(model_dir)
    prefix = getattr(model, "base_model_prefix", "") + "."
    for name, param in model.named_parameters():
        # checkpoints of a bare base model (GPT-2's own) name weights without the prefix
        where = stored.get(name) or (stored.get(name[len(prefix) :]) if name.startswith(prefix) else None)
        if where is None:
            raise InputError(
                f"{model_dir}: the safetensors files hold no weights for parameter {name} of {cls.__name__}"
            )
        read_partition(where, param, rank, torch)
    return model


@contextlib.contextmanager
def large_allocations_mapped(threshold: int = 1 << 20, after: int = 32 << 20):
    """zero.Init creates each parameter whole and keeps only its slice; with glibc's default
    (dynamic) mmap threshold, whole tensors under 32 MiB come from the heap and their freed
    pages stay with the process, about 0.3 of the model on 2 ranks. Inside, allocations of
    1 MiB or more are mapped and given back when freed; afterwards the threshold is glibc's
    usual ceiling, 32 MiB, and the heap is trimmed. A no-op without glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        libc = None
    mmap_threshold = -3  # M_MMAP_THRESHOLD in malloc.h
    if libc is not None:
        libc.mallopt(mmap_threshold, threshold)
    try:
        yield
    finally:
        if libc is not None:
            libc.mallopt(mmap_threshold, after)
            libc.malloc_trim(0)


def map_large_allocations(threshold: int = 1 << 20) -> None:
    """For the rest of the process, allocations of `threshold` bytes or more are mapped and
    given back when freed, and the heap's free pages are returned now. Training gathers
    each layer's whole weights, uses them and frees them, over and over: from glibc's heap
    (its ceiling is 32 MiB) those pages stayed with the rank, and its first optimizer step
    peaked above 3 times the model instead of 2.9 (tests/benchmarks/bench_load.py)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, threshold)  # M_MMAP_THRESHOLD
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def index(model_dir: str) -> dict[str, tuple[str, int, str, int]]:
    """Tensor name -> (file, byte offset of its data, dtype, element count), from the
    safetensors headers (8-byte little-endian length, then JSON), sharded or not."""
    shards = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(shards):
        with open(shards, encoding="utf-8") as handle:
            files = sorted(set(json.load(handle)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        path = os.path.join(model_dir, name)
        with open(path, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            try:
                header = json.loads(handle.read(size))
            except (ValueError, MemoryError, OverflowError) as exc:
                raise InputError(f"{path}: not a safetensors file (its header does not parse: {exc})") from None
        for key, info in header.items():
            if key == "__metadata__":
                continue
            if info["dtype"] not in DTYPES:
                raise InputError(f"{path}: tensor {key}: dtype {info['dtype']} is not a floating-point weight type")
            begin, end = info["data_offsets"]
            count = math.prod(info["shape"])
            if end - begin != count * DTYPES[info["dtype"]][1]:
                raise InputError(f"{path}: tensor {key}: {end - begin} bytes do not hold shape {info['shape']}")
            out[key] = (path, 8 + size + begin, info["dtype"], count)
    return out


def read_partition(where: tuple[str, int, str, int], param, rank: int, torch) -> None:
    """This rank's share of the flattened parameter (ZeRO-3's layout: equal slices, the
    last one padded with zeros) read from the file into `param.ds_tensor`."""
    path, offset, dtype, numel = where
    name, item = DTYPES[dtype]
    part = param.ds_tensor
    size = part.numel()
    start = min(size * rank, numel)
    count = max(0, min(numel - start, size))
    with torch.no_grad():
        if count < size:
            part.narrow(0, count, size - count).zero_()
        if not count:
            return
        target = part.narrow(0, 0, count)
        # read in place on CPU when the dtypes agree; through a host buffer otherwise (GPU, conversion)
        same = target.dtype == getattr(torch, name) and target.device.type == "cpu"
        buf = target.view(torch.uint8).numpy() if same else bytearray(count * item)
        with open(path, "rb", buffering=0) as handle:
            handle.seek(offset + start * item)
            view, done = memoryview(buf).cast("B"), 0
            while done < len(view):
                got = handle.readinto(view[done:])
                if not got:
                    raise InputError(f"{path}: file ends inside a tensor's data")
                done += got
        if not same:
            target.copy_(torch.frombuffer(buf, dtype=getattr(torch, name)))
