"""The one integrity module: seal and verify by kind, the chunk size taken from metadata."""

import pytest

from kfp_llmops.components.common import integrity
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.data_validation import run_to_dir as validate


def test_a_dataset_validated_at_another_chunk_size_verifies_at_the_recorded_one(tmp_path):
    raw = tmp_path / "raw.jsonl"
    raw.write_text(
        "".join(f'{{"prompt": "question {i}?", "response": "answer number {i} is here"}}\n' for i in range(3000))
    )
    result = validate(str(raw), str(tmp_path / "out"), overrides={"chunk_size": 4096}, show_progress=False)
    clean, meta = str(tmp_path / "out" / "clean.jsonl"), result.metrics
    assert meta["chunk_size"] == 4096 and (tmp_path / "out" / "clean.jsonl").stat().st_size > 3 * 4096
    assert integrity.verify("dataset", clean, meta["merkle_root"], integrity.chunk_size_of(meta)) == meta["merkle_root"]
    with pytest.raises(InputError, match="does not match the pinned root"):
        integrity.verify("dataset", clean, meta["merkle_root"])  # the default chunk size: another root


def test_folders_seal_and_verify_and_name_what_is_wrong(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "weights.bin").write_bytes(b"\x01" * 10_000)
    root = integrity.seal("model", str(tmp_path / "m"), chunk_size=4096)
    assert integrity.verify("model", str(tmp_path / "m"), root) == root
    with open(tmp_path / "m" / "weights.bin", "r+b") as handle:
        handle.seek(5000)
        handle.write(b"\x02")
    with pytest.raises(InputError, match=r"corrupted weights.bin"):
        integrity.verify("model", str(tmp_path / "m"), root)
    with pytest.raises(InputError, match="no manifest.json"):
        integrity.verify("repository", str(tmp_path))
    with pytest.raises(ValueError, match="unknown kind"):
        integrity.verify("dataset-ish", str(tmp_path))
