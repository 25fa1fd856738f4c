"""The hashing checkpoint engine: what it writes loads unchanged, its digest is the
file's Merkle hash, and the zip CRC-32 it skips is one torch never checks."""
import zipfile

import pytest
import torch

from kfp_llmops.components.common import merkle
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
    assert zipfile.ZipFile(path).testzip() is not None          # the CRC does not match...
    loaded = torch.load(path, weights_only=True)                 # ...and torch loads it anyway
    assert not torch.equal(loaded["w"], STATE["w"])


# Durable saves hash the file back (8 MiB reads) while fsync runs; the 12 MB state spans
# several reads and a partial last chunk.
@pytest.mark.parametrize("durable,size", [(False, 70_000), (True, 70_000), (True, 3_000_001)])
def test_engine_output_loads_and_its_digest_is_the_files_merkle_hash(tmp_path, durable, size):
    state = {"w": torch.arange(size, dtype=torch.float32), "step": 3}
    engine, path = _save(tmp_path, state, durable)
    assert torch.serialization.get_crc32_options() is True      # the global option is restored
    loaded = engine.load(str(path))
    assert torch.equal(loaded["w"], state["w"]) and loaded["step"] == 3
    digest = engine.digests["rank0.pt"]
    assert digest == merkle.hash_file(path, "rank0.pt", 4096)


def test_zip_crc_can_be_kept(tmp_path):
    engine, path = _save(tmp_path, zip_crc32=True)
    assert zipfile.ZipFile(path).testzip() is None
    assert engine.digests["rank0.pt"].root == merkle.hash_file(path, "rank0.pt", 4096).root
