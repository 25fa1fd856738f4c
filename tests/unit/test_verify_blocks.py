"""The verifier cuts files into one piece per thread, and each thread reads its piece in
blocks of whole chunks; damage must still be localized to the exact chunk wherever it
falls relative to blocks, pieces and files, with any number of threads and any chunk
size."""

import os
import random

import pytest

from kfp_llmops.components.common import integrity

PER = 8  # chunks per read block in these tests (the real block is integrity.READ_BLOCK, 1 MiB)


def _folder(tmp_path, chunk_size: int, chunks: float):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    rng = random.Random(chunk_size)
    (folder / "shard.bin").write_bytes(rng.randbytes(int(chunks * chunk_size)))
    (folder / "small.bin").write_bytes(b"x" * 10)
    (folder / "empty.bin").write_bytes(b"")
    return folder, integrity.hash_directory(str(folder), chunk_size)


@pytest.fixture
def small_blocks(monkeypatch):
    def use(chunk_size: int, per: float = PER) -> None:
        monkeypatch.setattr(integrity, "READ_BLOCK", int(per * chunk_size))
        monkeypatch.setattr(integrity, "_MIN_PIECE_CHUNKS", 3)

    return use


@pytest.mark.parametrize("chunk_size", [4096, 1000])
@pytest.mark.parametrize("threads", [1, 3])
def test_bad_chunks_are_localized_across_block_and_piece_edges(tmp_path, small_blocks, chunk_size, threads):
    small_blocks(chunk_size)
    folder, manifest = _folder(tmp_path, chunk_size, 3 * PER + 2.5)
    assert integrity.verify_directory(str(folder), manifest, threads=threads).ok
    # 29 chunks in all: with 3 threads the shard is cut at chunks 10 and 20
    bad = [0, PER - 1, PER, 9, 10, 2 * PER - 1, 2 * PER, 19, 20, 3 * PER + 2]  # the last is partial
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


def test_a_chunk_larger_than_the_read_block_is_read_whole(tmp_path, small_blocks):
    small_blocks(4096, per=0.25)
    folder, manifest = _folder(tmp_path, 4096, 5.5)
    assert integrity.verify_directory(str(folder), manifest).ok
    path = folder / "shard.bin"
    data = bytearray(path.read_bytes())
    data[2 * 4096 + 4095] ^= 1
    path.write_bytes(data)
    [problem] = integrity.verify_directory(str(folder), manifest).problems
    assert problem.ranges == [(2 * 4096, 3 * 4096)]


@pytest.mark.parametrize("keep_chunks", [0, PER - 0.5, PER + 1])
def test_truncated_file_fails_every_chunk_from_the_cut(tmp_path, small_blocks, keep_chunks):
    chunk_size = 4096
    small_blocks(chunk_size)
    folder, manifest = _folder(tmp_path, chunk_size, 2 * PER + 1)
    path = folder / "shard.bin"
    kept = int(keep_chunks * chunk_size)
    os.truncate(path, kept)
    report = integrity.verify_directory(str(folder), manifest)
    kinds = {p.kind: p for p in report.problems}
    assert set(kinds) == {"size", "corrupted"}
    first_bad = kept // chunk_size
    assert kinds["corrupted"].ranges[0][0] == first_bad * chunk_size
    assert len(kinds["corrupted"].ranges) == 2 * PER + 1 - first_bad


def test_bytes_appended_to_the_last_chunk_fail_it(tmp_path, small_blocks):
    small_blocks(4096)
    folder, manifest = _folder(tmp_path, 4096, PER + 0.5)
    with open(folder / "shard.bin", "ab") as handle:
        handle.write(b"tail")
    kinds = {p.kind: p for p in integrity.verify_directory(str(folder), manifest).problems}
    assert set(kinds) == {"size", "corrupted"}
    assert kinds["corrupted"].ranges == [(PER * 4096, int((PER + 0.5) * 4096))]
