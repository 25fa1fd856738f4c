"""Stage 3, evaluate_llm: generation, exact match, BERTScore, two toxicity detectors,
perplexity, the win rate against the model in production, and a TFX-style blessing gate.

`run_to_dir` serves the CLI, `run_component` the KFP component; both call `evaluate`.
"""

from __future__ import annotations

import os

from kfp_llmops.components.common import atomic
from kfp_llmops.components.common.contract import Artifact, Metrics, StageResult

from .config import EvalConfig

__all__ = ["EvalConfig", "run_to_dir", "run_component", "stage_result", "find_production"]


def find_production(cfg: EvalConfig, promoted, work: str):
    """The model the candidate is judged against: `win_rate.baseline_model` (its root
    pinned by `baseline_model_root`, else the promoted one's), else the promoted release's
    model from the first place its record names that this pod reaches. None on a first
    release; an unreachable promoted model skips the win rate, saying where it looked."""
    from kfp_llmops.components.common import baseline
    from kfp_llmops.components.common.errors import InputError

    from .evaluate import Production

    wanted = cfg.win_rate
    if not wanted.enabled:
        return None
    if wanted.baseline_model:
        root = wanted.baseline_model_root or (promoted.model_root if promoted else None)
        if not root:
            raise InputError("win_rate.baseline_model: pin its Merkle root with win_rate.baseline_model_root")
        folder, missed = baseline.model_folder([wanted.baseline_model], root, work)
        if folder is None:
            raise InputError(f"win_rate.baseline_model: {missed[0]}")
        return Production(folder, root, f"the production model {wanted.baseline_model}")
    if promoted is None:
        return None
    if not promoted.model_root:
        return Production(None, None, promoted.describe(), "the promoted release names no model root")
    folder, missed = baseline.model_folder(promoted.model_places, promoted.model_root, work)
    why = (
        ""
        if folder
        else (
            "the promoted model is not reachable here ("
            + ("; ".join(missed) or "its record names no model folder")
            + "); set win_rate.baseline_model"
        )
    )
    if why:
        print(f"evaluate_llm: win rate skipped: {why}")
    return Production(folder, promoted.model_root, promoted.describe(), why)


def _reports(result: dict, out_dir: str) -> str:
    from . import report

    svg = report.histograms_svg(result["samples"])
    atomic.write_text(os.path.join(out_dir, "histograms.svg"), svg)
    atomic.write_text(os.path.join(out_dir, "report.md"), report.render_markdown(result, "histograms.svg"))
    return report.render_html(result, svg)


def run_to_dir(
    model_dir: str,
    eval_path: str,
    out_dir: str,
    config_source: str | None = None,
    baseline_path: str | None = None,
    model_root: str | None = None,
    show_progress: bool = True,
    production_model: str | None = None,
    production_root: str | None = None,
    base_model: str | None = None,
    base_model_root: str | None = None,
) -> dict:
    """`production_model` (its root pinned by `production_root`): the model the
    candidate is judged against for the win rate (else the config's, if any);
    `base_model` (pinned by `base_model_root`): the one its training started from, for
    the forgetting check."""
    from .evaluate import evaluate
    from .forgetting import find_base

    cfg = EvalConfig.load(config_source)
    if production_model:
        cfg.win_rate.baseline_model, cfg.win_rate.baseline_model_root = production_model, production_root
    production = find_production(cfg, None, os.path.join(out_dir, "work"))
    base = find_base(cfg.forgetting, base_model, base_model_root)
    result = evaluate(
        model_dir,
        eval_path,
        out_dir,
        cfg,
        baseline_path,
        model_root,
        show_progress,
        production=production,
        base=base,
        compared_with={"release": "given", "model_root": production_root} if production_root else None,
    )
    html = _reports(result, out_dir)
    atomic.write_text(os.path.join(out_dir, "report.html"), html)
    return result


def stage_result(result: dict) -> StageResult:
    """The blessing as the one stage result; `reason` names each failed check and its kind."""
    failed = [
        f"{c['metric']} ({c['kind']}: {c['reason'] or c['bound']})" for c in result["checks"] if c["verdict"] == "fail"
    ]
    numeric = {k: float(v) for k, v in result["metrics"].items() if isinstance(v, (int, float)) and v == v}
    reason = "not blessed: " + "; ".join(failed) if not result["blessed"] else ""
    return StageResult("evaluate_llm", result["blessed"], result["blessed"], reason, result["checks"], numeric)


def run_component(
    *,
    model: Artifact,
    eval_dataset: Artifact,
    config: str,
    responses: Artifact,
    metrics: Metrics,
    blessing: Artifact,
    report: Artifact,
    baseline_metrics: Artifact | None = None,
    note: Artifact | None = None,
    baseline_release: str = "auto",
    model_root: str = "",
    eval_root: str = "",
    base_model: Artifact | None = None,
    base_model_root: str = "",
) -> StageResult:
    """KFP entry: verifies the model against its root (`model_root`, else its metadata's)
    and the eval set against `eval_root`, evaluates against the production baseline
    (given, else the pinned promoted release's, verified), writes the artifacts and the
    lineage note (`note`: no shared folder is touched, so the task can be cached)."""
    from kfp_llmops.components.common import baseline, integrity

    from .evaluate import evaluate
    from .forgetting import find_base

    cfg = EvalConfig.load(config)
    if eval_root:
        integrity.verify("dataset", eval_dataset.path, eval_root)
    stated = model.metadata.get("merkle_root")
    if model_root and stated and stated != model_root:
        from kfp_llmops.components.common.errors import InputError

        raise InputError(f"model_root: {model_root} is not the model's stated root {stated}")
    work = os.path.join(os.path.dirname(report.path), "work")
    promoted = baseline.load("", baseline_release)
    result = evaluate(
        model.path,
        eval_dataset.path,
        work,
        cfg,
        baseline_metrics.path if baseline_metrics is not None else None,
        model_root or stated,
        baseline_metrics=promoted.eval_metrics if promoted and baseline_metrics is None else None,
        baseline_note=None if baseline_metrics is not None else baseline.note(promoted),
        production=find_production(cfg, promoted, work),
        base=find_base(
            cfg.forgetting,
            base_model.path if base_model is not None else None,
            base_model_root
            or model.metadata.get("base_model_root")
            or (base_model.metadata.get("merkle_root") if base_model is not None else None),
        ),
        compared_with=baseline.compared_with(promoted) if baseline_metrics is None else None,
    )
    summary = stage_result(result)
    _publish(result, work, summary.metrics, responses, metrics, blessing, report)
    from kfp_llmops.components.common import records

    if note is not None:
        os.makedirs(os.path.dirname(note.path), exist_ok=True)
        records.write(
            note.path,
            records.EvaluateLlm(
                params={"eval_config": config},
                metrics=summary.metrics,
                result="blessed" if result["blessed"] else "not blessed",
                inputs={"model_root": result["model_root"]},
                outputs={
                    "blessing": records.BlessingOut(
                        root=result["model_root"], path=blessing.path, blessed=result["blessed"]
                    )
                },
            ),
        )
    if not summary.passed:
        print(f"evaluate_llm: model NOT blessed: {summary.reason.removeprefix('not blessed: ')}")
    return summary


def _publish(result: dict, work: str, numeric: dict, responses, metrics: Metrics, blessing, report) -> None:
    """The report, responses, blessing and metrics as the KFP UI shows them."""
    atomic.write_text(report.path, _reports(result, work))
    atomic.copy_file(os.path.join(work, "responses.jsonl"), responses.path)
    atomic.copy_file(os.path.join(work, "blessing.json"), blessing.path)
    responses.metadata.update({"model_root": result["model_root"], "rows": result["metrics"]["samples"]})
    blessing.metadata.update(
        {"blessed": result["blessed"], "model_root": result["model_root"], "decoding": result["decoding"]}
    )
    if result["compared_with"] is not None:
        blessing.metadata["compared_with"] = result["compared_with"]
    for key, value in numeric.items():
        metrics.log_metric(key, value)
    metrics.metadata["model_root"] = result["model_root"]
    metrics.metadata["baseline"] = result["baseline_note"] or "given"
