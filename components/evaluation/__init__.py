"""Stage 3, evaluate_llm: generation, BERTScore, two toxicity detectors, perplexity and a
TFX-style blessing gate.

`run_to_dir` serves the CLI, `run_component` the KFP component; both call `evaluate`.
"""
from __future__ import annotations

import os
import shutil

from kfp_llmops.components.common.errors import GateFailed

from .config import EvalConfig

__all__ = ["EvalConfig", "run_to_dir", "run_component", "raise_unless_blessed"]


def _reports(result: dict, out_dir: str) -> str:
    from . import report
    svg = report.histograms_svg(result["samples"])
    with open(os.path.join(out_dir, "histograms.svg"), "w", encoding="utf-8") as handle:
        handle.write(svg)
    with open(os.path.join(out_dir, "report.md"), "w", encoding="utf-8") as handle:
        handle.write(report.render_markdown(result, "histograms.svg"))
    return report.render_html(result, svg)


def run_to_dir(model_dir: str, eval_path: str, out_dir: str, config_source: str | None = None,
               baseline_path: str | None = None, model_root: str | None = None, show_progress: bool = True) -> dict:
    from .evaluate import evaluate

    cfg = EvalConfig.load(config_source)
    result = evaluate(model_dir, eval_path, out_dir, cfg, baseline_path, model_root, show_progress)
    html = _reports(result, out_dir)
    with open(os.path.join(out_dir, "report.html"), "w", encoding="utf-8") as handle:
        handle.write(html)
    return result


def raise_unless_blessed(result: dict) -> None:
    if not result["blessed"]:
        failed = [f"{c['metric']} ({c['kind']}: {c['reason'] or c['bound']})"
                  for c in result["checks"] if c["verdict"] == "fail"]
        raise GateFailed("not blessed: " + "; ".join(failed))


def run_component(model, eval_dataset, baseline_metrics, config: str, responses, metrics, blessing, report,
                  release_dir: str = "", baseline_release: str = "auto") -> bool:
    """KFP entry: verifies the model against its root, evaluates against the production
    baseline (given, else the last promoted release's, verified), writes the artifacts."""
    from kfp_llmops.components.common import baseline

    from .evaluate import evaluate

    cfg = EvalConfig.load(config)
    work = os.path.join(os.path.dirname(report.path), "work")
    promoted = baseline.load(release_dir, baseline_release) if baseline_metrics is None else None
    result = evaluate(model.path, eval_dataset.path, work, cfg,
                      baseline_metrics.path if baseline_metrics is not None else None,
                      model.metadata.get("merkle_root"),
                      baseline_metrics=promoted.eval_metrics if promoted else None,
                      baseline_note=None if baseline_metrics is not None else baseline.note(promoted))
    with open(report.path, "w", encoding="utf-8") as handle:
        handle.write(_reports(result, work))
    shutil.copyfile(os.path.join(work, "responses.jsonl"), responses.path)
    shutil.copyfile(os.path.join(work, "blessing.json"), blessing.path)
    responses.metadata.update({"model_root": result["model_root"], "rows": result["metrics"]["samples"]})
    blessing.metadata.update({"blessed": result["blessed"], "model_root": result["model_root"]})
    numeric = {k: float(v) for k, v in result["metrics"].items() if isinstance(v, (int, float)) and v == v}
    for key, value in numeric.items():
        metrics.log_metric(key, value)
    metrics.metadata["model_root"] = result["model_root"]
    metrics.metadata["baseline"] = result["baseline_note"] or "given"
    from kfp_llmops.components.common import records
    records.note(release_dir, records.EvaluateLlm(
        params={"eval_config": config}, metrics=numeric,
        result="blessed" if result["blessed"] else "not blessed", inputs={"model_root": result["model_root"]},
        outputs={"blessing": records.BlessingOut(root=result["model_root"], path=blessing.path,
                                                 blessed=result["blessed"])}))
    if not result["blessed"]:
        print("evaluate_llm: model NOT blessed: " + "; ".join(
            c["metric"] for c in result["checks"] if c["verdict"] == "fail"))
    return result["blessed"]
