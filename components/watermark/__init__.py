"""Stage 4, verify_watermark: the verification stage (`verify.py`) with its gate and
report. The watermark itself is shared with serving, so it lives in `common/watermark/`:
the KGW text watermark (`kgw.py`), its key (`keys.py`), its parameters (`params.py`) and
the weight watermark (`weights.py`).

`run_to_dir` serves the CLI, `run_component` the KFP component; both call `verify`.
"""

from __future__ import annotations

import json
import os

from kfp_llmops.components.common import atomic
from kfp_llmops.components.common.contract import Artifact, Metrics, StageResult
from kfp_llmops.components.common.errors import InputError

from .config import WatermarkConfig


def _write_report(result: dict, out_dir: str) -> str:
    from .report import render_html, z_histogram_svg

    svg = z_histogram_svg(result["z_watermarked"], result["z_unwatermarked"], result["z_threshold"])
    atomic.write_text(os.path.join(out_dir, "z_scores.svg"), svg)
    page = render_html(result, svg)
    atomic.write_text(os.path.join(out_dir, "report.html"), page)
    return page


def run_to_dir(
    model_dir: str,
    eval_path: str,
    out_dir: str,
    config_source: str | None = None,
    key_file: str | None = None,
    model_root: str | None = None,
    decoding=None,
) -> dict:
    from kfp_llmops.components.common.watermark.keys import load_key

    from .verify import verify

    cfg = WatermarkConfig.load(config_source)
    result = verify(model_dir, eval_path, out_dir, cfg, load_key(key_file), model_root, decoding)
    _write_report(result, out_dir)
    return result


def stage_result(result: dict) -> StageResult:
    from kfp_llmops.components.common import gates

    failed = gates.failures([gates.Check(**c) for c in result["checks"]])
    reason = "" if result["verified"] else "watermark not verified: " + "; ".join(failed)
    numeric = {k: v for k, v in result["metrics"].items() if v == v}
    return StageResult("verify_watermark", result["verified"], result["verified"], reason, result["checks"], numeric)


def run_component(
    *,
    model: Artifact,
    eval_dataset: Artifact,
    config: str,
    key_file: str,
    watermarked: Artifact,
    metrics: Metrics,
    report: Artifact,
    release_dir: str = "",
    blessing: Artifact | None = None,
) -> StageResult:
    """KFP entry: the key comes from `key_file` (a mounted Secret) or the environment; the
    cost is measured under the decoding `blessing` (evaluate_llm's) records."""
    from kfp_llmops.components.common.decoding import Decoding
    from kfp_llmops.components.common.watermark.keys import load_key

    from .verify import verify

    cfg = WatermarkConfig.load(config)
    embedded = model.metadata.get("weight_watermark")
    if embedded:  # train_zero3 recorded what it embedded: check exactly that
        cfg.weights = embedded
    work = os.path.join(os.path.dirname(report.path), "work")
    decoding = Decoding.from_record(blessing.metadata, "blessing") if blessing is not None else None
    result = verify(
        model.path,
        eval_dataset.path,
        work,
        cfg,
        load_key(key_file or None),
        model.metadata.get("merkle_root"),
        decoding,
    )
    atomic.write_text(report.path, _write_report(result, work))
    atomic.copy_file(os.path.join(work, "watermarked.jsonl"), watermarked.path)
    watermarked.metadata.update(
        {"model_root": result["model_root"], "kgw": result["kgw"], "decoding": result["decoding"]}
    )
    summary = stage_result(result)
    for key, value in summary.metrics.items():
        metrics.log_metric(key, value)
    metrics.metadata.update({"verified": result["verified"], "model_root": result["model_root"]})
    for point in result["tradeoff"]:  # the curve, as numbers the Kubeflow UI lists
        metrics.log_metric(f"tpr_at_delta_{point['delta']:g}", point["tpr"])
        for name in ("exact_match_cost", "perplexity_increase", "bertscore_cost", "judge_win_rate"):
            metrics.log_metric(f"{name}_at_delta_{point['delta']:g}", point[name])
    for row in result.get("schemes", [])[1:]:  # the other schemes measured beside the served one
        for name in ("tpr", "fpr", "text_perplexity_increase", "text_repetition"):
            metrics.log_metric(f"{name}_{row['scheme']}", row[name])
    from kfp_llmops.components.common import records

    records.note(
        release_dir,
        records.VerifyWatermark(
            params={"watermark_config": config},
            result="verified" if result["verified"] else "not verified",
            inputs={"model_root": result["model_root"]},
            metrics=summary.metrics,
            outputs={
                "watermarked": records.Artifact(root=result["model_root"], path=watermarked.path),
                "kgw": result["kgw"],
            },
        ),
    )
    return summary


def read_texts(path: str) -> list[tuple[str, str]]:
    """(id, text) from JSONL rows with `response` or `text` (responses.jsonl works as is)."""
    from kfp_llmops.components.common.jsonl import iter_objects

    out = []
    for n, row in iter_objects(path, "texts file"):
        text = row.get("response", row.get("text"))
        if not isinstance(text, str):
            raise InputError(f"{path}:{n}: no 'response' or 'text' string field")
        out.append((str(row.get("id", n)), text))
    return out


def detection_params(path: str | None):
    """KGW parameters from a verify run's metrics.json (its `kgw`), a watermark config, or
    the defaults."""
    from kfp_llmops.components.common.watermark.params import KGW

    if not path:
        return KGW()
    if path.endswith(".json"):
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: unreadable: {exc}") from None
        if isinstance(data, dict) and "kgw" in data:
            return KGW.from_record(data, path)
    return KGW.of(WatermarkConfig.load(path))


def detect_file(path: str, tokenizer_dir: str, key: int, params=None) -> list[dict]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    wm = (params or detection_params(None)).watermark(key, len(tokenizer))
    results = []
    for ident, text in read_texts(path):
        d = wm.detect(tokenizer.encode(text))
        results.append({"id": ident, **d.to_json()})
    return results
