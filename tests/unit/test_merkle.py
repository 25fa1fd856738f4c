import io
import os
import random

import pytest

from kfp_llmops.components.common import merkle


def _leaves(n):
    return [merkle.leaf_hash(bytes([i % 256]) * 3) for i in range(n)]


def _rfc6962(leaves):
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return merkle.node_hash(_rfc6962(leaves[:k]), _rfc6962(leaves[k:]))


@pytest.mark.parametrize("n", range(1, 40))
def test_tree_shape_matches_rfc6962_and_every_proof_verifies(n):
    leaves = _leaves(n)
    root = merkle.tree_root(leaves)
    assert root == _rfc6962(leaves)
    for i in range(n):
        path = merkle.proof(leaves, i)
        assert merkle.verify_proof(leaves[i], path, root)
        assert not merkle.verify_proof(merkle.leaf_hash(b"other"), path, root)


def test_streaming_writer_equals_whole_file_hash_for_any_write_pattern(tmp_path):
    data = random.Random(3).randbytes(10_000)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    whole = merkle.hash_file(path, chunk_size=1024)
    w = merkle.MerkleWriter(1024)
    rng = random.Random(4)
    pos = 0
    while pos < len(data):
        step = rng.randint(0, 3000)
        w.update(data[pos : pos + step])
        pos += step
    streamed = w.finish("f.bin")
    assert streamed.root == whole.root and streamed.size == len(data)
    assert len(streamed.leaves) == 10  # ceil(10000 / 1024)


def test_empty_file_and_chunk_boundary():
    assert merkle.hash_stream(io.BytesIO(b""), "e").root == merkle.leaf_hash(b"")
    exact = merkle.hash_stream(io.BytesIO(b"x" * 2048), "x", chunk_size=1024)
    assert len(exact.leaves) == 2


def test_domain_separation_leaf_vs_node():
    a, b = merkle.leaf_hash(b"a"), merkle.leaf_hash(b"b")
    # A leaf whose bytes are a node's preimage must not collide with that node.
    assert merkle.leaf_hash(b"\x01" + a + b) != merkle.node_hash(a, b)
    assert merkle.leaf_hash(a + b) != merkle.node_hash(a, b)


def test_combined_root_depends_on_paths_sizes_and_content_not_order():
    f1 = merkle.hash_stream(io.BytesIO(b"one"), "a.txt")
    f2 = merkle.hash_stream(io.BytesIO(b"two"), "b.txt")
    assert merkle.combine([f1, f2]) == merkle.combine([f2, f1])
    renamed = merkle.FileDigest("c.txt", f2.size, f2.root, f2.leaves)
    assert merkle.combine([f1, renamed]) != merkle.combine([f1, f2])
    changed = merkle.hash_stream(io.BytesIO(b"twO"), "b.txt")
    assert merkle.combine([f1, changed]) != merkle.combine([f1, f2])


def test_manifest_json_roundtrip():
    f = merkle.hash_stream(io.BytesIO(os.urandom(5000)), "data.bin", chunk_size=1024)
    m = merkle.Manifest(1024, [f])
    again = merkle.Manifest.from_json(m.to_json())
    assert again.root == m.root and again.files[0].leaves == f.leaves
    with pytest.raises(ValueError):
        merkle.Manifest.from_json({"format": "other"})
