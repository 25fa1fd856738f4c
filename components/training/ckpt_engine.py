"""A DeepSpeed checkpoint engine that hashes every file it writes.

DeepSpeed calls `save(state_dict, path)` on every rank for the files that rank owns;
each rank hashes exactly what it wrote, chunk by chunk, into a Merkle tree. When saves
are durable (the default: a checkpoint that is not on disk is no checkpoint), `torch.save`
writes at full speed and the file is then hashed back from the page cache, in 1 MiB
reads, while `fsync` drains it to the disk: the hashing hides behind the flush that a
durable save waits for anyway. Without fsync (nothing to hide behind), a helper thread
hashes each buffer while it is being written, so nothing is read twice.

torch's zip writer also computes a CRC-32 of every record, single-threaded at about
1 GB/s, which `torch.load` never checks (a flipped payload byte loads silently; a test
shows it). The BLAKE3 leaves cover every byte and are what verify checks, so this
engine skips the CRC by default (`zip_crc32=True` keeps it; zip tools then stop warning).
"""

from __future__ import annotations

import io
import os
import pickle
from concurrent.futures import ThreadPoolExecutor

import torch
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

from kfp_llmops.components.common import integrity, merkle


class HashingWriter(io.RawIOBase):
    """Durable: writes at full speed; `finish` hashes the file back while fsync runs.
    Not durable: writes the caller's buffer while a helper thread hashes the same buffer
    (both release the GIL), returning only when both are done, since torch owns the
    buffer again as soon as `write` returns."""

    def __init__(self, path: str, chunk_size: int, durable: bool):
        super().__init__()
        self._file = open(path, "w+b", buffering=0)
        self._hasher = merkle.MerkleWriter(chunk_size)
        self._durable = durable
        self._pool = ThreadPoolExecutor(max_workers=1)

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        hashed = None if self._durable else self._pool.submit(self._hasher.update, view)
        written = 0
        try:
            while written < len(view):
                written += self._file.write(view[written:])
        finally:
            if hashed is not None:
                hashed.result()
        return len(view)

    def finish(self, rel_path: str) -> merkle.FileDigest:
        fd = self._file.fileno()
        if self._durable:
            synced = self._pool.submit(os.fsync, fd)
            try:
                self._hash_back(fd)
            finally:
                synced.result()
        self.release()
        return self._hasher.finish(rel_path)

    def release(self) -> None:
        """Let go of the file and the helper thread (after a save, or a failed one)."""
        self._pool.shutdown()
        self._file.close()
        self.close()

    def _hash_back(self, fd: int) -> None:
        """Hash the file as written, from the page cache (pread: the fsync thread shares
        the descriptor, not an offset)."""
        block = memoryview(bytearray(max(integrity.READ_BLOCK, self._hasher.chunk_size)))
        offset = 0
        while True:
            got = os.preadv(fd, [block], offset)
            if got == 0:
                return
            self._hasher.update(block[:got])
            offset += got


class HashingCheckpointEngine(TorchCheckpointEngine):
    """Torch serialization, plus a FileDigest per written file (relative to `base`)."""

    def __init__(self, chunk_size: int = merkle.DEFAULT_CHUNK_SIZE, durable: bool = True, zip_crc32: bool = False):
        super().__init__(None)
        self.zipfile_serialization = True
        self.chunk_size, self.durable, self.zip_crc32 = chunk_size, durable, zip_crc32
        self.base: str | None = None
        self.digests: dict[str, merkle.FileDigest] = {}

    def begin(self, base: str) -> None:
        self.base, self.digests = base, {}

    def save(self, state_dict, path: str) -> None:
        if self.base is None:  # outside a checkpoint save (nothing to commit)
            torch.save(state_dict, path)
            return
        rel = os.path.relpath(path, self.base).replace(os.sep, "/")
        crc = torch.serialization.get_crc32_options()
        torch.serialization.set_crc32_options(self.zip_crc32)
        writer = None
        try:
            writer = HashingWriter(path, self.chunk_size, self.durable)
            torch.save(state_dict, writer)
            self.digests[rel] = writer.finish(rel)
        except Exception as exc:
            # A full disk is said with the file and the free space, whether the writer's
            # OSError comes through torch.save as it is or under the RuntimeError torch's
            # zip writer raises while closing after it. The save fails either way, and the
            # run stops: no training on without it.
            from kfp_llmops.components.common.errors import raise_as_environment_problem

            if writer is not None:
                writer.release()
            raise_as_environment_problem(exc, path, "writing checkpoint")
        finally:
            torch.serialization.set_crc32_options(crc)

    def load(self, path: str, map_location=None):
        """Only ever called on files the caller verified against the manifest first, and
        never unpickled beyond tensors, containers and DeepSpeed's own state types
        (`safe_load`): a verified root says who wrote a file, not that it is harmless."""
        return safe_load(path, map_location)


def _deepspeed_types() -> list:
    """What DeepSpeed's ZeRO optimizer states hold besides tensors: its stage enum and
    its loss scalers (plain attributes, set without running their code)."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    return [ZeroStageEnum, LossScaler, DynamicLossScaler]


def _enum_member(cls, name: str):
    """Python pickles an enum member as getattr(its class, its name); this is that getattr
    for DeepSpeed's enums alone (a general getattr would reach any attribute)."""
    import enum

    if not (isinstance(cls, type) and issubclass(cls, enum.Enum) and cls in _deepspeed_types()):
        raise pickle.UnpicklingError(f"getattr on {cls!r} in a checkpoint: only DeepSpeed's enums are allowed")
    return cls[name]


def safe_load(path: str, map_location=None):
    """torch.load with weights_only=True, DeepSpeed's types allowed; anything else in the
    pickle (a payload that would run code) is refused before it is unpickled, naming it."""
    allowed = [*_deepspeed_types(), (_enum_member, "__builtin__.getattr"), (_enum_member, "builtins.getattr")]
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        from kfp_llmops.components.common.errors import InputError

        lines = [line.strip() for line in str(exc).rsplit("WeightsUnpickler error:", 1)[-1].splitlines()]
        named = [line for line in lines if "GLOBAL" in line or "unrecognized" in line or "getattr on" in line]
        reason = (named or [line for line in lines if line] or ["unreadable"])[0].split(". Please use")[0]
        what = "a checkpoint holds tensors and DeepSpeed's state only"
        raise InputError(f"{path}: refused to load: {reason} ({what})") from None
