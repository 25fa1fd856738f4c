"""The hashing checkpoint engine: what it writes loads unchanged, its digest is the
file's Merkle hash, and the zip CRC-32 it skips is one torch never checks."""

import errno
import io
import os
import zipfile

import pytest
import torch

from kfp_llmops.components.common import merkle
from kfp_llmops.components.common.errors import InputError, environment_problem
from kfp_llmops.components.training.ckpt_engine import HashingCheckpointEngine

STATE = {"w": torch.arange(70_000, dtype=torch.float32), "step": 3}


def _save(tmp_path, state=STATE, durable=False, **kwargs):
    engine = HashingCheckpointEngine(chunk_size=4096, durable=durable, **kwargs)
    engine.begin(str(tmp_path))
    path = tmp_path / "rank0.pt"
    engine.save(state, str(path))
    return engine, path


def test_torch_load_never_checks_the_zip_crc(tmp_path):
    """Why the engine skips the CRC: torch computes it on save, nobody checks it on load."""
    path = tmp_path / "plain.pt"
    torch.save(STATE, path)
    data = bytearray(path.read_bytes())
    data[data.find(STATE["w"][1000:1004].numpy().tobytes())] ^= 0x01
    path.write_bytes(data)
    assert zipfile.ZipFile(path).testzip() is not None  # the CRC does not match...
    loaded = torch.load(path, weights_only=True)  # ...and torch loads it anyway
    assert not torch.equal(loaded["w"], STATE["w"])


# Durable saves hash the file back (8 MiB reads) while fsync runs; the 12 MB state spans
# several reads and a partial last chunk.
@pytest.mark.parametrize("durable,size", [(False, 70_000), (True, 70_000), (True, 3_000_001)])
def test_engine_output_loads_and_its_digest_is_the_files_merkle_hash(tmp_path, durable, size):
    state = {"w": torch.arange(size, dtype=torch.float32), "step": 3}
    engine, path = _save(tmp_path, state, durable)
    assert torch.serialization.get_crc32_options() is True  # the global option is restored
    loaded = engine.load(str(path))
    assert torch.equal(loaded["w"], state["w"]) and loaded["step"] == 3
    digest = engine.digests["rank0.pt"]
    assert digest == merkle.hash_file(path, "rank0.pt", 4096)


def test_zip_crc_can_be_kept(tmp_path):
    engine, path = _save(tmp_path, zip_crc32=True)
    assert zipfile.ZipFile(path).testzip() is None
    assert engine.digests["rank0.pt"].root == merkle.hash_file(path, "rank0.pt", 4096).root


class _Volume(io.RawIOBase):
    """A volume with `room` bytes left: the write that would pass it fails as a full disk does."""

    def __init__(self, room: int):
        super().__init__()
        self.room, self.used = room, 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        size = memoryview(data).nbytes
        if self.used + size > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.used += size
        return size


@pytest.mark.parametrize("room", [0, 1000, 200_000])
def test_a_full_disk_under_torchs_zip_writer_is_still_said_as_a_full_disk(room):
    """torch's zip writer, closing after a failed write, raises its own RuntimeError
    ("unexpected pos") over the OSError; the one-line full-disk error must see through it."""
    with pytest.raises(Exception) as raised:
        torch.save(STATE, _Volume(room))
    assert isinstance(raised.value, OSError if room == 0 else RuntimeError)  # what torch does
    problem = environment_problem(raised.value, "/ckpt/rank0.pt", "writing checkpoint")
    assert problem is not None and str(problem).startswith("writing checkpoint /ckpt/rank0.pt: no space left")
    assert environment_problem(RuntimeError("unexpected pos 704 vs 598")) is None  # no disk behind it


class _Payload:
    """What a planted checkpoint carries: unpickling it runs a command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_holding_a_pickled_payload_is_refused_before_it_runs(tmp_path):
    marker = tmp_path / "ran"
    engine, path = _save(tmp_path, {"w": torch.ones(3), "extra": _Payload(marker)})
    with pytest.raises(InputError, match=r"rank0.pt: refused to load: .*system"):
        engine.load(str(path))
    assert not marker.exists()
    torch.load(path, weights_only=False)  # what the fallback this replaced did
    assert marker.exists()


def test_deepspeeds_own_state_types_load_and_no_other_getattr(tmp_path):
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    state = {"zero_stage": ZeroStageEnum.weights, "loss_scaler": LossScaler(1.0), "w": torch.ones(2)}
    engine, path = _save(tmp_path, state)
    loaded = engine.load(str(path))
    assert loaded["zero_stage"] is ZeroStageEnum.weights and loaded["loss_scaler"].cur_scale == 1.0
    import enum

    class Other(enum.Enum):
        A = 1

    globals()["Other"] = Other  # picklable by name, not one of DeepSpeed's
    Other.__qualname__ = "Other"
    engine, path = _save(tmp_path, {"e": Other.A})
    with pytest.raises(InputError, match="refused to load"):
        engine.load(str(path))
