"""Data-validation benchmark: throughput on >= 200 MB with names on and off, peak RSS at
50 vs 200 MB, the PII engine side by side with Presidio's pattern recognizers on the same
1 MB sample, and PERSON/ADDRESS side by side with Presidio with its spaCy NER on."""

from __future__ import annotations

import json
import os
import tempfile
import time

from kfp_llmops.components.data_validation import pii
from tests.benchmarks.corpus import write_corpus
from tests.benchmarks.peak import run_with_peak
from tests.pii_corpus import HELD_OUT as HELD
from tests.pii_corpus import PUBLIC_FIGURES, held_out_samples, labeled_samples, name_samples, score_by_type

MB = 1024 * 1024


# The data stage's rooms a baseline patches, each where the name it replaces is looked up.
_MODULE = (
    "type('Rooms', (), {m: importlib.import_module('kfp_llmops.components.data_validation.' + m)"
    " for m in ('blocks', 'stream', 'schema', 'local_engine')})"
)

# The path before the Hyperscan candidate search: every string through find_pii.
_SCAN_ALL = (
    "import importlib\n"
    f"v = {_MODULE}\n"
    "v.stream.candidate_lines = lambda lines, with_names=False: dict.fromkeys(range(len(lines)))\n"
)

# Blocks with every row in Python: no plain rows in C (plain_rows.c).
_PYTHON_ROWS = "import os\nos.environ['LLMOPS_PURE_PYTHON'] = '1'\n"

# The loop before blocks, names off: one line at a time through `check` (its exact-dedup
# index fed one key at a time), a candidate line's strings scanned for every pattern family.
_ROW_AT_A_TIME = (
    "import importlib, orjson\n"
    "from tests import row_at_a_time\n"
    f"v = {_MODULE}\n"
    "kinds = row_at_a_time.line_kinds\n"
    "row_at_a_time.line_kinds = lambda raw: v.blocks.NONE if kinds(raw) == v.blocks.NONE else None\n"
    "def one_at_a_time(self, lines, first, candidates, lengths):\n"
    "    out = []\n"
    "    for i, raw in enumerate(lines):\n"
    "        try:\n"
    "            out.append(orjson.dumps(row_at_a_time.check(self, raw, first + i)) + b'\\n')\n"
    "        except v.schema.Rejected as rej:\n"
    "            out.append(rej)\n"
    "    return out\n"
    "v.blocks.Validator.judge_lines = lambda self, *args: (one_at_a_time(self, *args), None)\n"
)

# The runtime before the collector and BLAS changes, names on: the objects alive before
# the stream stay in the garbage collector's full collections, and the NER model's matrix
# products go to spaCy's default, blis.
_COLLECTED_BLIS = (
    "import contextlib, importlib\n"
    f"v = {_MODULE}\n"
    "v.local_engine.long_lived_frozen = contextlib.nullcontext\n"
    "import thinc.api\n"
    "thinc.api.use_ops = lambda *a, **k: contextlib.nullcontext()\n"
)

# The loop before blocks, names on: one line at a time through `begin`, every row through
# the name finder's candidate pass, the rows settled in the same NER batches.
_NAMES_ROW_AT_A_TIME = (
    "import importlib\n"
    "from tests import row_at_a_time\n"
    f"v = {_MODULE}\n"
    "v.stream.candidate_lines = lambda lines, with_names=False: {}\n"
    "def one_at_a_time(self, lines, first, candidates, lengths):\n"
    "    out = []\n"
    "    for i, raw in enumerate(lines):\n"
    "        try:\n"
    "            out.append(row_at_a_time.begin(self, raw, first + i))\n"
    "        except v.schema.Rejected as rej:\n"
    "            out.append(rej)\n"
    "    return out\n"
    "v.blocks.Validator.judge_lines = lambda self, *args: (one_at_a_time(self, *args), None)\n"
)


# Candidate rows judged in Python, not pii_rows.c (the path before it), the rest the same.
_PII_IN_PYTHON = f"import importlib\nv = {_MODULE}\nv.blocks.Validator.c_patterns = False\n"

# The exact index's storage before sorted runs (SQLite), everything else the same.
_SQLITE_INDEX = (
    "import importlib\n"
    f"v = {_MODULE}\n"
    "from tests.benchmarks.sqlite_index import SqliteFingerprintIndex\n"
    "v.blocks.FingerprintIndex = SqliteFingerprintIndex\n"
)

# The exact index alone: `n` random keys a block of 1024 at a time, 1% of them repeats
# of earlier keys (a sample of 100,000 kept as it goes).
_INDEX_ALONE = """
import json, time
import numpy as np
from {module} import {cls} as Index
rng, index, line = np.random.default_rng(1), Index(), 1
seen, repeats, found = np.zeros(0, dtype=np.uint64), 0, 0
started = time.perf_counter()
for start in range(0, {n}, 1024):
    keys = rng.integers(1, 2**63, size=1024, dtype=np.uint64)
    again = rng.random(1024) < 0.01
    if len(seen):
        keys[again] = seen[rng.integers(0, len(seen), size=int(again.sum()))]
        repeats += int(again.sum())
    if start % 65536 == 0:
        seen = np.concatenate([seen, keys[:64]])[-100000:]
    found += int((index.add_many(keys, np.arange(line, line + 1024)) != 0).sum())
    line += 1024
seconds = time.perf_counter() - started
index.close()
json.dump({{"seconds": seconds, "repeats": repeats, "found": found}}, open({out!r}, "w"))
"""


def index_alone(n: int) -> dict:
    """ns a key and peak RSS of the exact index and of its SQLite baseline, `n` keys each."""
    results = {}
    for label, module, cls in (
        ("runs", "kfp_llmops.components.data_validation.dedup", "FingerprintIndex"),
        ("sqlite", "tests.benchmarks.sqlite_index", "SqliteFingerprintIndex"),
    ):
        fd, out = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        _, peak = run_with_peak(_INDEX_ALONE.format(module=module, cls=cls, n=n, out=out))
        with open(out) as handle:
            got = json.load(handle)
        os.unlink(out)
        if got["found"] != got["repeats"]:
            raise AssertionError(f"{label}: {got['found']} repeats found of {got['repeats']}")
        results[label] = {"ns_per_key": got["seconds"] / n * 1e9, "peak_rss_mb": peak}
    results["speedup"] = results["sqlite"]["ns_per_key"] / results["runs"]["ns_per_key"]
    results["keys"] = n
    return results


def run_validator(path: str, out_dir: str, names: bool = True, patch: str = "", ray_workers: int = 0) -> dict:
    """Validate in a child process: wall time from here, peak RSS from the child itself."""
    cfg = os.path.join(out_dir, "bench.yaml")
    os.makedirs(out_dir, exist_ok=True)
    with open(cfg, "w") as handle:
        handle.write("gate:\n  max_reject_rate: 1.0\n")
        handle.write(f"pii:\n  names:\n    enabled: {str(names).lower()}\n")
        if ray_workers:
            handle.write(f"engine: ray\nray:\n  workers: {ray_workers}\n")
    args = ["data", "validate", path, "--out", out_dir, "--config", cfg, "--no-progress"]
    started = time.perf_counter()
    _, peak = run_with_peak(
        patch + f"import sys\nfrom kfp_llmops.pipelines.cli.main import main\nsys.exit(main({args!r}))"
    )
    elapsed = time.perf_counter() - started
    with open(os.path.join(out_dir, "metrics.json")) as handle:
        metrics = json.load(handle)
    size = os.path.getsize(path)
    return {
        "bytes": size,
        "rows": metrics["rows_in"],
        "seconds": elapsed,
        "mb_per_s": size / MB / elapsed,
        "rows_per_s": metrics["rows_in"] / elapsed,
        "peak_rss_mb": peak,
    }


_IN_IMAGE = """
import json, resource, sys, time
from kfp_llmops.pipelines.cli.main import main
open("/tmp/c.yaml", "w").write("gate:\\n  max_reject_rate: 1.0\\npii:\\n  names:\\n    enabled: %s\\n")
started = time.perf_counter()
try:
    main(["data", "validate", "/in/%s", "--out", "/out/o", "--config", "/tmp/c.yaml", "--no-progress"])
except SystemExit:
    pass
print(json.dumps({"seconds": time.perf_counter() - started,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


# One shard's three passes in one process (the work each Ray task does), names off.
_SHARD_PASSES = """
import json, time
from kfp_llmops.components.data_validation import sharded
from kfp_llmops.components.data_validation.config import DataValidationConfig
from kfp_llmops.components.data_validation.reader import Lines
config = DataValidationConfig()
config.pii.names.enabled = False
shard = sharded.plan({path!r}, 1 << 62)[0][0]
t0 = time.perf_counter()
keyed = sharded.shard_keys(shard, config, 1)
t1 = time.perf_counter()
pair = sharded.first_occurrences(1, keyed[2])
t2 = time.perf_counter()
sharded.validate_shard(shard, [1], Lines(), config, {{}}, pair)
t3 = time.perf_counter()
json.dump({{"keys": t1 - t0, "first": t2 - t1, "validate": t3 - t2}}, open({out!r}, "w"))
"""


def shard_passes(path: str) -> dict:
    """MB/s of pass 1 (keys), pass 3 (validation) and all three for one shard of `path`
    on one core, and the process's peak RSS: the per-core figure a Ray cluster scales."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    _, peak = run_with_peak(_SHARD_PASSES.format(path=path, out=out))
    with open(out) as handle:
        seconds = json.load(handle)
    os.unlink(out)
    mb = os.path.getsize(path) / MB
    return {
        "keys_mb_per_s": mb / seconds["keys"],
        "validate_mb_per_s": mb / seconds["validate"],
        "all_mb_per_s": mb / sum(seconds.values()),
        "peak_rss_mb": peak,
    }


def _same_outputs(a: str, b: str) -> None:
    """A faster path that changed an output is no result: clean, quarantine, stats and the
    root must be byte-identical to the path it is compared with."""
    for name in ("clean.jsonl", "quarantine.jsonl", "stats.json"):
        with open(os.path.join(a, name), "rb") as x, open(os.path.join(b, name), "rb") as y:
            if x.read() != y.read():
                raise AssertionError(f"{name} differs between {a} and {b}")
    roots = [json.load(open(os.path.join(d, "metrics.json")))["merkle_root"] for d in (a, b)]
    if roots[0] != roots[1]:
        raise AssertionError(f"merkle roots differ between {a} and {b}")


def run_in_image(path: str, names: bool) -> dict | None:
    """The validator inside the data image, as a pod runs it (none of the development
    venv's other packages: Presidio, torch). None when the image is not built."""
    import subprocess

    from kfp_llmops.components import images
    from kfp_llmops.pipelines import containers

    try:
        containers.docker_ready()
        containers.check_runnable(["data"])
    except Exception as exc:  # noqa: BLE001 - the image part is optional
        print(f"(data image not measured: {exc})", flush=True)
        return None
    folder, name = os.path.split(os.path.abspath(path))
    done = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            f"{folder}:/in:ro",
            "--tmpfs",
            "/out:size=4g",
            "-e",
            "LLMOPS_NO_PROGRESS=1",
            images.image("data", pinned=False),
            "python",
            "-c",
            _IN_IMAGE % (str(names).lower(), name),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["mb_per_s"] = os.path.getsize(path) / MB / out["seconds"]
    return out


def _presidio_analyzer(model_dir: str):
    import logging

    import tldextract

    # Presidio's URL/email validation calls tldextract, which would fetch the public
    # suffix list from the network; use the snapshot bundled with tldextract instead.
    tldextract.tldextract.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=())
    logging.getLogger("presidio-analyzer").setLevel(logging.ERROR)
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import SpacyNlpEngine

    engine = SpacyNlpEngine(models=[{"lang_code": "en", "model_name": model_dir}])
    return AnalyzerEngine(nlp_engine=engine, supported_languages=["en"])


def _presidio():
    import spacy

    model_dir = tempfile.mkdtemp(prefix="spacy-blank-")
    spacy.blank("en").to_disk(model_dir)  # no NER model: only the pattern recognizers fire
    analyzer = _presidio_analyzer(model_dir)
    return lambda text: [(r.start, r.end) for r in analyzer.analyze(text, language="en")]


# Presidio has no ADDRESS entity: its spaCy NER reports places as LOCATION (GPE, LOC, FAC).
_PRESIDIO_TYPES = {"PERSON": pii.PERSON, "LOCATION": pii.ADDRESS}


def _presidio_ner():
    """Presidio with its NER recognizers on, on the same pinned en_core_web_sm we use, with
    the same allow list of public figures."""
    from kfp_llmops.components.data_validation import ner

    analyzer = _presidio_analyzer(ner.resolve(ner.BUNDLED, None)[0])
    entities = ["PERSON", "LOCATION"]
    return lambda text: [
        pii.Finding(r.start, r.end, _PRESIDIO_TYPES[r.entity_type])
        for r in analyzer.analyze(text, language="en", entities=entities, allow_list=PUBLIC_FIGURES)
    ]


def _ours_names():
    """A fresh NER cache, so repeated windows are not free."""
    from kfp_llmops.components.data_validation import names, ner

    finder = names.NameFinder(ner.NerConfirmer(ner.resolve(ner.BUNDLED, None)[0]), PUBLIC_FIGURES)
    return lambda text: finder.find([text])[0]


def score_names(detect, samples) -> dict:
    """`score_by_type` and throughput."""
    started = time.perf_counter()
    spans = [detect(s.text) for s in samples]
    elapsed = time.perf_counter() - started
    out = score_by_type(samples, spans)
    size = sum(len(s.text.encode("utf-8")) for s in samples)
    out.update(mb_per_s=size / MB / elapsed, seconds=elapsed, bytes=size)
    return out


def _ours(text: str):
    return [(f.start, f.end) for f in pii.find_pii(text)]


def score(detect, samples) -> dict:
    """Type-agnostic span overlap, so tools with different entity names compare fairly."""
    tp = fp = found = total = intact = negatives = 0
    started = time.perf_counter()
    spans = [detect(s.text) for s in samples]
    elapsed = time.perf_counter() - started
    for s, found_spans in zip(samples, spans, strict=False):
        for _, a, b in s.positives:
            total += 1
            found += any(x < b and y > a for x, y in found_spans)
        for a, b in s.negatives:
            negatives += 1
            intact += not any(x < b and y > a for x, y in found_spans)
        for x, y in found_spans:
            if any(x < b and y > a for _, a, b in s.positives):
                tp += 1
            else:
                fp += 1
    size = sum(len(s.text.encode("utf-8")) for s in samples)
    return {
        "mb_per_s": size / MB / elapsed,
        "seconds": elapsed,
        "bytes": size,
        "recall": found / total,
        "precision": tp / max(1, tp + fp),
        "hard_negatives_intact": intact / negatives,
    }


def corpus_texts(path: str, target: int) -> list[str]:
    """The first `target` bytes of text fields from a benchmark corpus."""
    texts, size = [], 0
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            texts += [row["prompt"], row["response"]]
            size += len(row["prompt"].encode()) + len(row["response"].encode())
            if size >= target:
                break
    return texts


def throughput(detect, texts: list[str]) -> float:
    started = time.perf_counter()
    for text in texts:
        detect(text)
    return sum(len(t.encode("utf-8")) for t in texts) / MB / (time.perf_counter() - started)


def sample_of_size(target: int, seed: int = 5):
    samples, size, n = [], 0, 0
    pool = labeled_samples(40000, seed=seed)
    while size < target:
        s = pool[n % len(pool)]
        samples.append(s)
        size += len(s.text.encode("utf-8"))
        n += 1
    return samples


def main(
    work: str = "build/bench",
    big_mb: int = 200,
    small_mb: int = 50,
    sample_mb: float = 1.0,
    names_mb: float = 0.25,
    index_keys: int = 1 << 22,
) -> dict:
    os.makedirs(work, exist_ok=True)
    small = write_corpus(os.path.join(work, f"corpus-names_{small_mb}mb.jsonl"), small_mb * MB, seed=1)
    big = write_corpus(os.path.join(work, f"corpus-names_{big_mb}mb.jsonl"), big_mb * MB, seed=2)
    results = {
        "small": run_validator(small["path"], os.path.join(work, "out_small")),
        "big": run_validator(big["path"], os.path.join(work, "out_big")),
        "big_names_off": run_validator(big["path"], os.path.join(work, "out_big_off"), names=False),
        "big_names_off_scan_all": run_validator(
            big["path"], os.path.join(work, "out_big_off_all"), names=False, patch=_SCAN_ALL
        ),
        "big_names_off_rows": run_validator(
            big["path"], os.path.join(work, "out_big_off_rows"), names=False, patch=_ROW_AT_A_TIME
        ),
        "big_rows": run_validator(big["path"], os.path.join(work, "out_big_rows"), patch=_NAMES_ROW_AT_A_TIME),
        "big_names_off_python": run_validator(
            big["path"], os.path.join(work, "out_big_off_python"), names=False, patch=_PYTHON_ROWS
        ),
    }
    for other in ("out_big_off_rows", "out_big_off_all", "out_big_off_python"):
        _same_outputs(os.path.join(work, "out_big_off"), os.path.join(work, other))
    _same_outputs(os.path.join(work, "out_big"), os.path.join(work, "out_big_rows"))
    results["blocks_speedup"] = results["big_names_off"]["mb_per_s"] / results["big_names_off_rows"]["mb_per_s"]
    results["c_speedup"] = results["big_names_off"]["mb_per_s"] / results["big_names_off_python"]["mb_per_s"]
    results["names_on_speedup"] = results["big"]["mb_per_s"] / results["big_rows"]["mb_per_s"]
    results["big_names_off_sqlite"] = run_validator(
        big["path"], os.path.join(work, "out_big_off_sqlite"), names=False, patch=_SQLITE_INDEX
    )
    _same_outputs(os.path.join(work, "out_big_off"), os.path.join(work, "out_big_off_sqlite"))
    results["index_speedup"] = results["big_names_off"]["mb_per_s"] / results["big_names_off_sqlite"]["mb_per_s"]
    results["big_names_off_pii_python"] = run_validator(
        big["path"], os.path.join(work, "out_big_off_pii_python"), names=False, patch=_PII_IN_PYTHON
    )
    _same_outputs(os.path.join(work, "out_big_off"), os.path.join(work, "out_big_off_pii_python"))
    results["pii_rows_speedup"] = results["big_names_off"]["mb_per_s"] / results["big_names_off_pii_python"]["mb_per_s"]
    results["index_alone"] = index_alone(index_keys)
    results["big_collected_blis"] = run_validator(
        big["path"], os.path.join(work, "out_big_blis"), patch=_COLLECTED_BLIS
    )
    _same_outputs(os.path.join(work, "out_big"), os.path.join(work, "out_big_blis"))
    results["runtime_speedup"] = results["big"]["mb_per_s"] / results["big_collected_blis"]["mb_per_s"]
    results["big_names_off_ray2"] = run_validator(
        big["path"], os.path.join(work, "out_big_off_ray"), names=False, ray_workers=2
    )
    results["ray2_vs_single"] = results["big_names_off_ray2"]["mb_per_s"] / results["big_names_off"]["mb_per_s"]
    results["shard_passes"] = shard_passes(small["path"])
    results["candidate_search_speedup"] = (
        results["big_names_off"]["mb_per_s"] / results["big_names_off_scan_all"]["mb_per_s"]
    )
    results["names_cost"] = results["big_names_off"]["mb_per_s"] / results["big"]["mb_per_s"]
    results["image_on"] = run_in_image(small["path"], names=True)
    results["image_off"] = run_in_image(small["path"], names=False) if results["image_on"] else None
    results["rss_ratio_big_vs_small"] = results["big"]["peak_rss_mb"] / results["small"]["peak_rss_mb"]
    texts = corpus_texts(big["path"], int(sample_mb * MB))
    samples = sample_of_size(int(sample_mb * MB))
    presidio = _presidio()
    results["ours"] = score(_ours, samples)
    results["presidio"] = score(presidio, samples)
    results["ours"]["corpus_mb_per_s"] = throughput(_ours, texts)
    results["presidio"]["corpus_mb_per_s"] = throughput(presidio, texts)
    results["pii_speedup_vs_presidio"] = results["ours"]["corpus_mb_per_s"] / results["presidio"]["corpus_mb_per_s"]
    results["pii_speedup_labeled"] = results["ours"]["mb_per_s"] / results["presidio"]["mb_per_s"]
    named, size, seed = [], 0, 17
    while size < names_mb * MB:  # distinct samples: no window is seen twice by luck
        batch = name_samples(3000, seed=seed)
        named += batch
        size += sum(len(s.text.encode("utf-8")) for s in batch)
        seed += 1
    results["names_ours"] = score_names(_ours_names(), named)
    results["names_presidio"] = score_names(_presidio_ner(), named)
    results["names_speedup"] = results["names_ours"]["mb_per_s"] / results["names_presidio"]["mb_per_s"]
    from tests.faker_corpus import faker_samples, recall_by_kind

    for split in ("tune", "held_out"):
        samples, detect = faker_samples(split), _ours_names()
        results[f"faker_{split}"] = recall_by_kind(samples, [detect(s.text) for s in samples])
    results["held_out_ours"] = score_names(_ours_names(), held_out_samples())
    results["held_out_presidio"] = score_names(_presidio_ner(), held_out_samples())
    return results


def report(r: dict) -> str:
    o, p, sp = r["ours"], r["presidio"], r["shard_passes"]
    ia, ia_keys = r["index_alone"], r["index_alone"]["keys"]
    n, pn = r["names_ours"], r["names_presidio"]
    return "\n".join(
        [
            "## validate_dataset",
            f"validator, {r['big']['bytes'] / MB:.0f} MB: {r['big']['mb_per_s']:.1f} MB/s, "
            f"{r['big']['rows_per_s']:,.0f} rows/s ({r['big']['seconds']:.1f} s)",
            f"peak RSS: {r['small']['peak_rss_mb']:.0f} MB at {r['small']['bytes'] / MB:.0f} MB input, "
            f"{r['big']['peak_rss_mb']:.0f} MB at {r['big']['bytes'] / MB:.0f} MB input "
            f"(ratio {r['rss_ratio_big_vs_small']:.2f})",
            f"PII engines on the same text ({o['bytes'] / MB:.2f} MB of corpus text; a labeled sample of "
            "the same size, half PII, half hard negatives):",
            "  engine      corpus MB/s  labeled MB/s  recall  precision  hard negatives intact",
            f"  kfp-llmops  {o['corpus_mb_per_s']:11.2f} {o['mb_per_s']:13.2f} {o['recall']:7.3f} "
            f"{o['precision']:10.3f}"
            f" {o['hard_negatives_intact']:10.3f}",
            f"  presidio    {p['corpus_mb_per_s']:11.3f} {p['mb_per_s']:13.3f} {p['recall']:7.3f} "
            f"{p['precision']:10.3f}"
            f" {p['hard_negatives_intact']:10.3f}",
            f"  throughput ratio: {r['pii_speedup_vs_presidio']:.0f}x Presidio on corpus text, "
            f"{r['pii_speedup_labeled']:.0f}x on the labeled sample",
            f"names off, {r['big_names_off']['bytes'] / MB:.0f} MB: {r['big_names_off']['mb_per_s']:.1f} MB/s "
            f"({r['big_names_off']['seconds']:.1f} s); names on: {r['big']['mb_per_s']:.1f} MB/s "
            f"(target >= 8); names cost {r['names_cost']:.2f}x",
            f"  names off, every string through find_pii (no Hyperscan candidate search): "
            f"{r['big_names_off_scan_all']['mb_per_s']:.1f} MB/s; the search is {r['candidate_search_speedup']:.2f}x "
            f"({r['big']['bytes'] / r['big']['rows']:.0f} bytes a row)",
            f"  one row at a time (the loops before blocks: names off, every family scanned on a candidate "
            f"line, {r['big_names_off_rows']['mb_per_s']:.1f} MB/s; names on, every row through the name finder, "
            f"{r['big_rows']['mb_per_s']:.1f} MB/s): blocks are {r['blocks_speedup']:.2f}x names off, "
            f"{r['names_on_speedup']:.2f}x names on (targets >= 30 and >= 8 MB/s; outputs byte-identical, checked)",
            f"  names on, the model's products on blis and the collector walking every object alive "
            f"(the runtime before): {r['big_collected_blis']['mb_per_s']:.1f} MB/s; freezing the objects alive "
            f"before the stream and NumPy's BLAS are {r['runtime_speedup']:.2f}x (outputs byte-identical, checked)",
            f"  names off, candidate rows judged in Python (no pii_rows.c): "
            f"{r['big_names_off_pii_python']['mb_per_s']:.1f} MB/s; judged in C they are {r['pii_rows_speedup']:.2f}x "
            "(outputs byte-identical, checked)",
            f"  names off, the exact index in SQLite (its storage before sorted runs): "
            f"{r['big_names_off_sqlite']['mb_per_s']:.1f} MB/s; sorted runs are {r['index_speedup']:.2f}x "
            "(outputs byte-identical, checked)",
            f"  the exact index alone, {ia_keys:,} keys (1% repeats): sorted runs {ia['runs']['ns_per_key']:.0f} ns "
            f"a key, peak RSS {ia['runs']['peak_rss_mb']:.0f} MB; SQLite {ia['sqlite']['ns_per_key']:.0f} ns, "
            f"{ia['sqlite']['peak_rss_mb']:.0f} MB; {ia['speedup']:.2f}x",
            f"  names off, blocks with every row in Python (no plain_rows.c): "
            f"{r['big_names_off_python']['mb_per_s']:.1f} MB/s; plain rows in C are {r['c_speedup']:.2f}x "
            "(outputs byte-identical, checked)",
            f"  names off on a local Ray with 2 workers (engine: ray, start-up included): "
            f"{r['big_names_off_ray2']['mb_per_s']:.1f} MB/s, peak RSS of the driver "
            f"{r['big_names_off_ray2']['peak_rss_mb']:.0f} MB; "
            f"{r['ray2_vs_single']:.2f}x the single process",
            f"  one shard's passes on one core, {r['small']['bytes'] / MB:.0f} MB names off: keys "
            f"{sp['keys_mb_per_s']:.1f} MB/s, validation {sp['validate_mb_per_s']:.1f} MB/s, "
            f"all {sp['all_mb_per_s']:.1f} MB/s, peak RSS {sp['peak_rss_mb']:.0f} MB",
            *(
                [
                    f"in the data image, {r['small']['bytes'] / MB:.0f} MB: "
                    f"names on {r['image_on']['mb_per_s']:.1f} MB/s, "
                    f"peak RSS {r['image_on']['peak_rss_mb']:.0f} MB; names off {r['image_off']['mb_per_s']:.1f} MB/s, "
                    f"{r['image_off']['peak_rss_mb']:.0f} MB"
                ]
                if r.get("image_on")
                else []
            ),
            f"PERSON / ADDRESS on a labeled sample ({n['bytes'] / MB:.2f} MB, EN + ZH, a third hard negatives; "
            "targets: recall and precision >= 0.90 PERSON, >= 0.85 ADDRESS, >= 20x Presidio):",
            "  engine                PERSON rec  prec   ADDRESS rec  prec   negatives intact   MB/s",
            *(
                f"  {label:<20} {x['PERSON']['recall']:10.3f} {x['PERSON']['precision']:5.3f} "
                f"{x['ADDRESS']['recall']:12.3f} {x['ADDRESS']['precision']:5.3f} {x['hard_negatives_intact']:18.3f} "
                f"{x['mb_per_s']:7.3f}"
                for label, x in (("kfp-llmops", n), ("presidio + spaCy NER", pn))
            ),
            f"  throughput ratio: {r['names_speedup']:.0f}x Presidio with NER",
            f"  held-out sentences ({len(HELD)} written apart, not used for tuning): "
            + "; ".join(
                f"{label} PERSON recall {x['PERSON']['recall']:.2f} precision {x['PERSON']['precision']:.2f}, "
                f"ADDRESS recall {x['ADDRESS']['recall']:.2f}, "
                f"negatives intact {x['hard_negatives_intact']:.2f}"
                for label, x in (("kfp-llmops", r["held_out_ours"]), ("presidio", r["held_out_presidio"]))
            ),
            "  names and addresses from Faker (en_US, zh_CN) in sentences and log lines without cue words "
            "(tests/faker_corpus.py; targets >= 0.90 each, negatives >= 0.95):",
            *(
                f"  {split:<9} EN person {x['en_person']:.3f}  EN address {x['en_address']:.3f}  ZH person "
                f"{x['zh_person']:.3f}  ZH address {x['zh_address']:.3f}  negatives intact {x['negatives_intact']:.3f}"
                for split, x in (("tune", r["faker_tune"]), ("held-out", r["faker_held_out"]))
            ),
        ]
    )


if __name__ == "__main__":
    res = main()
    print(report(res))
    print(json.dumps(res, indent=2))
