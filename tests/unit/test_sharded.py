"""The sharded engine gives the single process's outputs byte for byte: any shard size,
duplicates whose first occurrence is in another shard, lines longer than a shard,
characters cut by a nominal boundary, gzip; on Ray with 1, 2 and 4 workers, and when a
worker is killed mid-task."""

import gzip
import importlib
import json
import os
import random

import pytest

from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.data_validation import sharded
from kfp_llmops.components.data_validation.config import DataValidationConfig
from kfp_llmops.components.data_validation.outputs import OutputPaths
from tests import pii_corpus

# The package exports the function `validate` under the module's name.
engines = importlib.import_module("kfp_llmops.components.data_validation.engines")

MAX_LINE = 600


def _corpus(path, rows: int = 900, seed: int = 4) -> None:
    """Rows that exercise every branch at once, in a file with a BOM."""
    rng = random.Random(seed)
    pii = [s.text for s in pii_corpus.labeled_samples(200, seed=seed)] + [
        s.text for s in pii_corpus.name_samples(100, seed=seed)
    ]
    lines = []
    for i in range(rows):
        roll = rng.random()
        if roll < 0.08 and lines:
            lines.append(rng.choice(lines))  # exact duplicate, anywhere before
        elif roll < 0.10:
            lines.append(json.dumps({"prompt": "Tell me", "response": "x" * (MAX_LINE + rng.randrange(2000))}))
        elif roll < 0.11:
            lines.append(json.dumps({"prompt": "Q", "response": "é" * 100})[:-3])  # malformed, multi-byte
        elif roll < 0.12:
            lines.append("")
        elif roll < 0.13:
            lines.append(json.dumps({"prompt": "ok", "response": "fine"}).replace("fine", "fi\x00ne"))
        else:
            text = rng.choice(pii) if rng.random() < 0.4 else f"fact {i} 中文句子，数据 {rng.random()}"
            lines.append(
                json.dumps({"prompt": f"Question {i % 97}?", "response": text}, ensure_ascii=rng.random() < 0.5)
            )
    body = "\ufeff" + "\n".join(lines) + "\n"
    data = body.encode("utf-8")
    edge = json.dumps({"prompt": "exactly", "response": ""})
    edge = edge[:-2] + "y" * (MAX_LINE - len(edge)) + '"}'  # exactly MAX_LINE bytes, then a line of its own
    data += edge.encode() + b"\n" + b'{"prompt": "after the edge", "response": "kept"}\n'
    data += b'{"prompt": "bad utf8", "response": "\xff\xfe"}\n{"prompt": "no newline at the end", "response": "x"}'
    path.write_bytes(data)


def _config(names: bool) -> DataValidationConfig:
    cfg = DataValidationConfig()
    cfg.gate.max_reject_rate = 1.0
    cfg.pii.names.enabled = names
    cfg.schema_.max_line_bytes = MAX_LINE
    return cfg


def _outputs(out_dir, result) -> list:
    metrics = {k: v for k, v in result.metrics.items() if k != "elapsed_s"}
    return [(out_dir / name).read_bytes() for name in ("clean.jsonl", "quarantine.jsonl", "stats.json")] + [
        metrics,
        result.samples,
    ]


def _local(tmp_path, path, cfg, name="local"):
    out = tmp_path / name
    return _outputs(out, engines.validate(str(path), OutputPaths.in_dir(str(out)), cfg, show_progress=False))


def _sharded(tmp_path, path, cfg, shard_bytes, partitions, name="sharded", submit=sharded.in_process):
    out = tmp_path / name
    result = sharded.run(
        str(path),
        OutputPaths.in_dir(str(out)),
        cfg,
        None,
        submit,
        lambda x: x,
        shard_bytes,
        partitions,
        log=lambda message: None,
    )
    return _outputs(out, result)


@pytest.mark.parametrize("names", [False, True])
def test_any_shard_size_gives_the_single_process_outputs(tmp_path, names):
    path = tmp_path / "in.jsonl"
    _corpus(path)
    cfg = _config(names)
    want = _local(tmp_path, path, cfg)
    assert want[3]["by_reason"]["duplicate"] > 20 and want[3]["by_reason"]["line_too_long"] > 5
    assert b'"after the edge"' in want[0]  # the line after one of exactly max_line bytes is its own
    size = path.stat().st_size
    for shard_bytes, partitions in ((size * 2, 1), (size // 2, 2), (4096, 3), (257, 5), (97, 1)):
        got = _sharded(tmp_path, path, cfg, shard_bytes, partitions, name=f"s{shard_bytes}")
        for i, what in enumerate(("clean", "quarantine", "stats", "metrics", "samples")):
            assert got[i] == want[i], (shard_bytes, what)


def test_gzip_input_is_one_shard_with_the_same_outputs(tmp_path):
    path = tmp_path / "in.jsonl"
    _corpus(path, rows=300)
    packed = tmp_path / "in.jsonl.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    cfg = _config(False)
    shards, _ = sharded.plan(str(packed), 1024)
    assert len(shards) == 1
    assert _sharded(tmp_path, packed, cfg, 1024, 2) == _local(tmp_path, packed, cfg)


def test_an_input_that_changes_between_passes_is_refused(tmp_path):
    path = tmp_path / "in.jsonl"
    _corpus(path, rows=200)
    calls = []

    def submit(fn, *args, num_returns=1):
        if fn is sharded.validate_shard and not calls:  # after the keys were read: rewrite a byte
            data = bytearray(path.read_bytes())
            data[-5] = ord("y")
            path.write_bytes(bytes(data))
            calls.append(1)
        return fn(*args)

    with pytest.raises(InputError, match="changed while being read"):
        _sharded(tmp_path, path, _config(False), 2048, 2, submit=submit)
    assert not (tmp_path / "sharded" / "clean.jsonl").exists()


def _near_corpus(path, rows: int = 700, seed: int = 5) -> None:
    """Long answers, many copied with a word or two changed (near duplicates of a row
    anywhere before, or of a near duplicate), some exact copies, some chains."""
    rng = random.Random(seed)
    words = [f"w{n}" for n in range(400)]
    lines: list[str] = []
    for i in range(rows):
        roll = rng.random()
        if roll < 0.25 and lines:
            row = json.loads(rng.choice(lines))
            said = row["response"].split()
            for _ in range(rng.choice((1, 1, 2, 8))):  # 8 changed words: usually not similar enough
                said[rng.randrange(len(said))] = rng.choice(words)
            row["response"] = " ".join(said)
            lines.append(json.dumps(row))
        elif roll < 0.3 and lines:
            lines.append(rng.choice(lines))
        else:
            lines.append(json.dumps({"prompt": f"Q{i}?", "response": " ".join(rng.choice(words) for _ in range(60))}))
    path.write_text("\n".join(lines) + "\n")


def test_near_duplicates_are_the_single_processs_on_any_shards(tmp_path):
    path = tmp_path / "in.jsonl"
    _near_corpus(path)
    cfg = _config(False)
    cfg.dedup.near.enabled = True
    want = _local(tmp_path, path, cfg)
    reasons = want[3]["by_reason"]
    assert reasons["near_duplicate"] > 30 and reasons["duplicate"] > 20, reasons
    size = path.stat().st_size
    for shard_bytes, partitions in ((size * 2, 1), (size // 3, 2), (2048, 3), (500, 4)):
        got = _sharded(tmp_path, path, cfg, shard_bytes, partitions, name=f"n{shard_bytes}")
        for i, what in enumerate(("clean", "quarantine", "stats", "metrics", "samples")):
            assert got[i] == want[i], (shard_bytes, what)
    cfg.dedup.exact = False  # then exact copies are near duplicates too, citing the same lines
    want = _local(tmp_path, path, cfg, name="local-near-only")
    assert "duplicate" not in want[3]["by_reason"] and want[3]["by_reason"]["near_duplicate"] > 60
    assert _sharded(tmp_path, path, cfg, 2048, 3, name="near-only") == want
    loaded = DataValidationConfig.load("dedup:\n  near: {enabled: true}\n", {"engine": "ray"})
    assert loaded.engine == "ray" and loaded.dedup.near.enabled  # no longer refused


def test_ray_with_1_2_and_4_workers_and_a_killed_worker(tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="ray is in the data extra: make installs it")
    path = tmp_path / "in.jsonl"
    _corpus(path, rows=1500)
    cfg = _config(True)
    cfg.dedup.near.enabled = True
    want = _local(tmp_path, path, cfg)
    cfg.engine = "ray"
    cfg.ray.shard_mb = 1
    small = path.stat().st_size // 5  # five shards: shard_mb is MiB, so the plan is patched smaller
    monkeypatch.setattr(sharded, "plan", lambda p, _bytes, plan=sharded.plan: plan(p, small))
    for workers in (1, 2, 4):
        cfg.ray.workers = workers
        assert _local(tmp_path, path, cfg, name=f"ray{workers}") == want, workers
    marker = tmp_path / "killed"
    monkeypatch.setenv(sharded.DRILL_KILL, f"3:{marker}")  # shard 3's first try dies with SIGKILL
    cfg.ray.workers = 2
    assert _local(tmp_path, path, cfg, name="ray-killed") == want
    assert marker.exists()  # the drill did kill a worker, and the retry gave the same bytes


def _folder(tmp_path) -> tuple:
    """A folder of part files as a writer leaves it (a gzip part, an empty part, a
    _SUCCESS marker, a hidden checksum file, a nested partition, a part without a final
    newline, a BOM at a part's start, duplicates across parts), and the same rows as one file."""
    whole = tmp_path / "whole.jsonl"
    _corpus(whole, rows=600)
    lines = whole.read_bytes().removeprefix(b"\xef\xbb\xbf").split(b"\n")
    parts = [lines[:150], lines[150:300], lines[300:450], lines[450:]]
    folder = tmp_path / "parts"
    (folder / "part-3").mkdir(parents=True)
    (folder / "part-0.jsonl").write_bytes(b"\xef\xbb\xbf" + b"\n".join(parts[0]) + b"\n")
    (folder / "part-1.jsonl.gz").write_bytes(gzip.compress(b"\n".join(parts[1]) + b"\n"))
    (folder / "part-2.jsonl").write_bytes(b"\n".join(parts[2]))  # no final newline
    (folder / "part-3" / "data.jsonl").write_bytes(b"\xef\xbb\xbf" + b"\n".join(parts[3]))
    (folder / "part-9.jsonl").write_bytes(b"")
    (folder / "_SUCCESS").write_bytes(b"")
    (folder / ".part-0.jsonl.crc").write_bytes(b"\x00\x01")
    joined = tmp_path / "joined.jsonl"
    joined.write_bytes(b"\n".join(b"\n".join(p) for p in parts))
    return folder, joined, [len(p) for p in parts]


def test_a_folder_of_parts_is_one_stream_in_name_order_on_either_engine(tmp_path):
    folder, joined, counts = _folder(tmp_path)
    cfg = _config(False)
    want = _local(tmp_path, folder, cfg, name="folder")
    whole = _local(tmp_path, joined, cfg, name="joined")
    # Rows, order and the clean file (so its root) are the concatenation's; a file's BOM is its own.
    assert want[0] == whole[0] and want[3]["merkle_root"] == whole[3]["merkle_root"]
    assert want[3]["rows_in"] == whole[3]["rows_in"] == sum(counts) and want[3]["input_files"] == 4
    quarantined = [json.loads(line) for line in want[1].splitlines()]
    # Each entry names its file and its line there: the joined file's line, counted back.
    names = ["part-0.jsonl", "part-1.jsonl.gz", "part-2.jsonl", "part-3/data.jsonl"]
    starts = dict(zip(names, [0, counts[0], sum(counts[:2]), sum(counts[:3])], strict=False))
    in_whole = [json.loads(line) for line in whole[1].splitlines()]
    assert [starts[q["file"]] + q["line"] for q in quarantined] == [q["line"] for q in in_whole]
    assert [q["reason"] for q in quarantined] == [q["reason"] for q in in_whole]
    assert any(
        q["reason"] == "duplicate" and " line " in q["detail"] and ".jsonl" in q["detail"] for q in quarantined
    )  # a duplicate cites its first occurrence's file and line
    for shard_bytes, partitions in ((1 << 20, 1), (4096, 3), (300, 2)):
        got = _sharded(tmp_path, folder, cfg, shard_bytes, partitions, name=f"f{shard_bytes}")
        for i, what in enumerate(("clean", "quarantine", "stats", "metrics", "samples")):
            assert got[i] == want[i], (shard_bytes, what)


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda f: None, "holds no data files"),
        (lambda f: (f / "notes.txt").write_text("x"), r"notes.txt: not a data file in the input folder"),
        (lambda f: (f / "a.jsonl").write_bytes(b"\x00\x01\x02\x03binary"), r"a.jsonl: binary data"),
    ],
)
def test_a_folder_with_what_cannot_be_data_is_one_line_naming_the_file(tmp_path, make, message):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "_SUCCESS").write_bytes(b"")
    make(folder)
    for run in (
        lambda: _local(tmp_path, folder, _config(False)),
        lambda: _sharded(tmp_path, folder, _config(False), 4096, 2),
    ):
        with pytest.raises(InputError, match=message):
            run()
    assert not (tmp_path / "local").exists() or not os.listdir(tmp_path / "local")
