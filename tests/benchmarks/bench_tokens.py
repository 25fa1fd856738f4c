"""Tokenizing the training data: peak memory of the old in-memory encoding (every pair
read into a list, then [N, seq_len] int64 arrays built whole) and of the streaming pass
train_zero3 now makes (one record at a time into memory-mapped int32 files), at 1x and
10x the demo dataset, each in a fresh process, the baseline (imports and the tokenizer
alone) measured in the same run."""

from __future__ import annotations

import os
import statistics
import tempfile

from tests.benchmarks.peak import run_with_peak

SEQ_LEN = 128
_LOAD = (
    "from transformers import AutoTokenizer\n"
    "from kfp_llmops.components.training import data\n"
    "tok = AutoTokenizer.from_pretrained({model!r})\n"
)
CODE = {
    "baseline": _LOAD,
    "in_memory": _LOAD + "t = data.encode(tok, data.read_examples({clean!r}), " + str(SEQ_LEN) + ", True)\n",
    "streaming": _LOAD + "t = data.tokenize_to_files({clean!r}, tok, " + str(SEQ_LEN) + ", True, {out!r})\n",
}


def _data(work: str, scale: int) -> str:
    """validate_dataset's clean output of the demo dataset at `scale` x its 4000 rows."""
    from kfp_llmops.components.data_validation import run_to_dir
    from kfp_llmops.pipelines.demo.demo_data import make_demo_dataset

    made = make_demo_dataset(os.path.join(work, f"raw{scale}"), rows=4000 * scale)
    run_to_dir(
        made["train"], os.path.join(work, f"valid{scale}"), show_progress=False, overrides={"dedup.near.enabled": False}
    )
    return os.path.join(work, f"valid{scale}", "clean.jsonl")


def main(rounds: int = 3) -> dict:
    from kfp_llmops.components.training.base_model import build_base_model

    result = {"seq_len": SEQ_LEN, "rounds": rounds}
    with tempfile.TemporaryDirectory() as work:
        clean = {scale: _data(work, scale) for scale in (1, 10)}
        model = os.path.join(work, "model")
        build_base_model(clean[1], model, size="demo")
        for scale, path in clean.items():
            rows = sum(1 for _ in open(path))
            peaks = {name: [] for name in CODE}
            for i in range(rounds):
                for name, code in CODE.items():  # interleaved, a fresh process each
                    out = os.path.join(work, f"tokens-{scale}-{i}")
                    peaks[name].append(run_with_peak(code.format(model=model, clean=path, out=out))[1])
            base = statistics.median(peaks["baseline"])
            result[f"x{scale}"] = {
                "rows": rows,
                "baseline_mib": round(base, 1),
                **{
                    name: {
                        "median_mib": round(statistics.median(v) - base, 1),
                        "min_mib": round(min(v) - base, 1),
                        "max_mib": round(max(v) - base, 1),
                    }
                    for name, v in peaks.items()
                    if name != "baseline"
                },
            }
    return result


def report(r: dict) -> str:
    lines = [
        f"Tokenizing the clean data (seq_len {r['seq_len']}, {r['rounds']} rounds): peak memory above "
        "the imports and tokenizer"
    ]
    for scale in ("x1", "x10"):
        s = r[scale]
        lines.append(
            f"  {scale:<4} {s['rows']:>6} rows: in-memory {s['in_memory']['median_mib']:.1f} MiB "
            f"({s['in_memory']['min_mib']:.1f}-{s['in_memory']['max_mib']:.1f}), streaming "
            f"{s['streaming']['median_mib']:.1f} MiB ({s['streaming']['min_mib']:.1f}-"
            f"{s['streaming']['max_mib']:.1f})"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(main()))
