"""The parallel verifier maps a few chunks at a time and reads ahead; damage must still be
localized to the exact chunk wherever it falls relative to windows and segments."""
import os
import random

import pytest

from kfp_llmops.components.common import integrity

WINDOW = integrity._WINDOW_CHUNKS
SEGMENT = integrity._SEGMENT_CHUNKS


def _folder(tmp_path, chunk_size: int, chunks: float):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    rng = random.Random(chunk_size)
    (folder / "shard.bin").write_bytes(rng.randbytes(int(chunks * chunk_size)))
    (folder / "small.bin").write_bytes(b"x" * 10)
    return folder, integrity.hash_directory(str(folder), chunk_size)


@pytest.mark.parametrize("chunk_size", [4096, 1000])      # mapped windows; the read fallback
@pytest.mark.parametrize("threads", [1, 3])
def test_bad_chunks_are_localized_across_window_and_segment_edges(tmp_path, chunk_size, threads):
    folder, manifest = _folder(tmp_path, chunk_size, SEGMENT + WINDOW + 2.5)
    assert integrity.verify_directory(str(folder), manifest, threads=threads).ok
    bad = [0, WINDOW - 1, WINDOW, SEGMENT - 1, SEGMENT, SEGMENT + WINDOW + 2]   # the last is partial
    path = folder / "shard.bin"
    data = bytearray(path.read_bytes())
    for index in bad:
        data[index * chunk_size + 3] ^= 0x40
    path.write_bytes(data)
    report = integrity.verify_directory(str(folder), manifest, threads=threads)
    [problem] = report.problems
    assert problem.kind == "corrupted" and problem.path == "shard.bin"
    size = len(data)
    assert problem.ranges == [(i * chunk_size, min(size, (i + 1) * chunk_size)) for i in bad]


@pytest.mark.parametrize("keep_chunks", [0, WINDOW - 0.5, WINDOW + 1])
def test_truncated_file_fails_every_chunk_from_the_cut(tmp_path, keep_chunks):
    chunk_size = 4096
    folder, manifest = _folder(tmp_path, chunk_size, 2 * WINDOW + 1)
    path = folder / "shard.bin"
    kept = int(keep_chunks * chunk_size)
    os.truncate(path, kept)
    report = integrity.verify_directory(str(folder), manifest)
    kinds = {p.kind: p for p in report.problems}
    assert set(kinds) == {"size", "corrupted"}
    first_bad = kept // chunk_size
    assert kinds["corrupted"].ranges[0][0] == first_bad * chunk_size
    assert len(kinds["corrupted"].ranges) == 2 * WINDOW + 1 - first_bad
