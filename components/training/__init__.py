"""Stage 2, train_zero3: DeepSpeed ZeRO-3 training whose checkpoints are Merkle-hashed
as they are written, committed atomically, verified before resume and resumed bit-for-bit.

`run_to_dir` serves the CLI, `run_component` the KFP component; both call `engines.train`.
"""

from __future__ import annotations

import json
import os

from kfp_llmops.components.common import atomic, integrity
from kfp_llmops.components.common.contract import Artifact, Metrics, StageResult

from .config import TrainConfig

__all__ = ["TrainConfig", "run_to_dir", "run_component", "build_base_component"]


def _write_reports(result: dict, out_dir: str) -> tuple[str, str]:
    from . import report

    png = report.loss_curve_png(result["train_log"])
    atomic.write_bytes(os.path.join(out_dir, "loss_curve.png"), png)
    md = os.path.join(out_dir, "report.md")
    atomic.write_text(md, report.render_markdown(result, "loss_curve.png"))
    return md, report.render_html(result, png)


def run_to_dir(
    clean_path: str,
    base_model: str,
    out_dir: str,
    config_source: str | None = None,
    overrides: dict | None = None,
    dataset_root: str | None = None,
    stop_after: int | None = None,
    dataset_chunk_size: int | None = None,
) -> dict:
    """CLI entry: checkpoints, model, train_log.jsonl, metrics.json, report.md in `out_dir`."""
    from .engines import train

    cfg = TrainConfig.load(config_source, overrides)
    result = train(
        clean_path,
        base_model,
        out_dir,
        cfg,
        dataset_root=dataset_root,
        stop_after=stop_after,
        dataset_chunk_size=dataset_chunk_size,
    )
    _write_reports(result, out_dir)
    atomic.write_json(os.path.join(out_dir, "metrics.json"), result)
    return result


def _seed_from(resume_dir: str, ckpt_dir: str, pinned_root: str | None) -> str:
    """Copy the earlier run's checkpoint whose Merkle root is the pinned one into this
    run's folder, verified there again; nothing else of `resume_dir` is loaded (a
    checkpoint is unpickled on resume: one nobody pinned could be anyone's)."""
    from kfp_llmops.components.common.errors import InputError

    if not pinned_root:
        raise InputError(
            f"resume_from {resume_dir}: no pinned checkpoint root (the artifact's merkle_root, the pipelines' "
            "checkpoint_root): an imported checkpoint is loaded only when it verifies to a root given with it"
        )
    location = os.path.join(resume_dir, "location.json")
    if os.path.isfile(location):  # the checkpoints live on a claim; the artifact says where
        with open(location, encoding="utf-8") as handle:
            resume_dir = json.load(handle)["checkpoint_dir"]
    found = []
    for _, tag in integrity.list_tags(resume_dir):
        try:  # the root its manifest states: only the pinned one is hashed, not every tag
            stated = integrity.load_checkpoint(os.path.join(resume_dir, tag))[1]["root"]
        except (OSError, ValueError, KeyError, TypeError):
            stated = None
        if stated != pinned_root:
            found.append(f"{tag}: {stated[:16] + '…' if stated else 'no readable manifest'}")
            continue
        report = integrity.verify_checkpoint(os.path.join(resume_dir, tag), pinned_root)
        if not report.ok:
            found.append(f"{tag}: {report.summary()}")
            continue
        os.makedirs(ckpt_dir, exist_ok=True)
        dest = os.path.join(ckpt_dir, tag)
        if not os.path.exists(dest):
            atomic.copy_tree(os.path.join(resume_dir, tag), dest, link=False)
        integrity.verify("checkpoint", dest, pinned_root)  # what is loaded is what was pinned
        return tag
    raise InputError(
        f"resume_from {resume_dir}: no checkpoint verifies to the pinned root {pinned_root[:16]}… "
        f"({'; '.join(found) or 'no checkpoints'})"
    )


def ranks_for(gpus: str) -> dict:
    """Config overrides for a pod with `gpus` GPUs: one rank per GPU ("0": none)."""
    try:
        n = int(str(gpus).strip() or "0")
    except ValueError:
        n = -1
    if n < 0:
        from kfp_llmops.components.common.errors import InputError

        raise InputError(f"gpus: {gpus!r} is not a whole number of GPUs")
    return {"world_size": n} if n else {}


def run_component(
    *,
    dataset: Artifact,
    base_model: Artifact,
    config: str,
    resume_from: Artifact | None,
    checkpoint_dir: str,
    model: Artifact,
    checkpoints: Artifact,
    metrics: Metrics,
    report: Artifact,
    train_log: Artifact,
    release_dir: str = "",
    gpus: str = "0",
    signing_key_file: str = "",
) -> StageResult:
    """KFP entry: verifies the inputs' roots from their metadata, trains, stamps lineage;
    signs the exported model with model-signing when a signing key is given."""
    from kfp_llmops.components.common import signing

    from .engines import train

    # `gpus` sizes this pod's own ranks; a multi-node run's pods come from its multinode settings.
    multinode = TrainConfig.load(config).multinode.nodes > 1
    cfg = TrainConfig.load(config, {} if multinode else ranks_for(gpus))
    work = os.path.join(os.path.dirname(model.path), "work")
    ckpt_dir = checkpoint_dir or checkpoints.path
    if resume_from is not None:
        _seed_from(resume_from.path, ckpt_dir, resume_from.metadata.get("merkle_root"))
    result = train(
        dataset.path,
        base_model.path,
        work,
        cfg,
        dataset_root=dataset.metadata.get("merkle_root"),
        dataset_chunk_size=integrity.chunk_size_of(dataset.metadata),
        base_model_root=base_model.metadata.get("merkle_root"),
        checkpoint_dir=ckpt_dir,
        model_dir=model.path,
    )
    os.makedirs(work, exist_ok=True)  # a multi-node run wrote its files on the claim
    md, html = _write_reports(result, work)
    atomic.write_text(report.path, html)
    atomic.copy_file(result["train_log"], train_log.path)
    if checkpoint_dir:
        os.makedirs(checkpoints.path, exist_ok=True)
        atomic.write_json(
            os.path.join(checkpoints.path, "location.json"), {"checkpoint_dir": checkpoint_dir}, indent=None
        )
    signed = _stamp(result, cfg, model, checkpoints, ckpt_dir, signing.key_file(signing_key_file))
    _log_metrics(result, metrics)
    from kfp_llmops.components.common import records

    records.note(
        release_dir,
        records.TrainZero3(
            params={"train_config": config, "gpu_count": str(gpus)},
            inputs=records.TrainInputs(dataset_root=result["dataset_root"], base_model_root=result["base_model_root"]),
            outputs=records.TrainOutputs(
                model=records.ModelOut(
                    root=result["model_root"],
                    path=model.path,
                    checkpoint_root=result["checkpoint_root"],
                    signed_sha256=signed,
                ),
                checkpoints=records.CheckpointsOut(
                    root=result["checkpoint_root"], path=ckpt_dir, tag=checkpoints.metadata["tag"]
                ),
            ),
        ),
    )
    logged = {k: result[k] for k in ("final_loss", "tokens_per_s") if result.get(k) is not None}
    return StageResult("train_zero3", True, result["model_root"], metrics=logged)


def _stamp(result: dict, cfg: TrainConfig, model: Artifact, checkpoints: Artifact, ckpt_dir: str, key) -> str | None:
    """Roots and lineage on the model and checkpoints; the model signed where a key is
    given (returns the signature's SHA-256)."""
    from kfp_llmops.components.common import signing

    from .launch import newest_tag

    lineage = {"dataset_root": result["dataset_root"], "base_model_root": result["base_model_root"]}
    model.metadata.update(
        {
            "merkle_root": result["model_root"],
            "checkpoint_root": result["checkpoint_root"],
            "framework": "transformers",
            "format": "safetensors",
            **lineage,
        }
    )
    if cfg.weight_watermark.enabled:  # verify_watermark checks exactly what was embedded
        model.metadata["weight_watermark"] = cfg.weight_watermark.model_dump()
    signed = signing.sign_folder(model.path, key) if key else None
    if signed:
        model.metadata["signature"] = {"file": signing.SIGNATURE_NAME, "sha256": signed}
    checkpoints.metadata.update(
        {"merkle_root": result["checkpoint_root"], "tag": newest_tag(result), "location": ckpt_dir, **lineage}
    )
    return signed


def _log_metrics(result: dict, metrics: Metrics) -> None:
    for key in (
        "final_loss",
        "tokens_per_s",
        "processed_tokens_per_s",
        "step_time_s",
        "resume_verify_seconds",
        "truncated_share",
    ):
        if result.get(key) is not None:
            metrics.log_metric(key, result[key])
    saves = result["saves"]
    if saves:
        metrics.log_metric("checkpoint_save_seconds", sum(s["save_seconds"] for s in saves) / len(saves))
        metrics.log_metric("checkpoint_commit_seconds", sum(s["commit_seconds"] for s in saves) / len(saves))


def build_base_component(
    *,
    dataset: Artifact,
    base_model: Artifact,
    size: str,
    release_dir: str = "",
    base_model_uri: str = "",
    base_model_root: str = "",
) -> StageResult:
    """The user's sealed model when `base_model_uri` names one (its pinned root checked on
    the copy this task outputs), else the demo model built from the verified clean data."""
    from kfp_llmops.components.common import records

    integrity.verify(
        "dataset", dataset.path, dataset.metadata.get("merkle_root"), integrity.chunk_size_of(dataset.metadata)
    )
    if base_model_uri:
        from .model_folder import import_model

        root = import_model(
            base_model_uri, base_model_root, base_model.path, os.path.join(os.path.dirname(base_model.path), "fetch")
        )
        base_model.metadata.update({"merkle_root": root, "source": base_model_uri, "format": "safetensors"})
    else:
        from .base_model import build_base_model

        root = build_base_model(dataset.path, base_model.path, size=size)
        base_model.metadata.update({"merkle_root": root, "size": size, "format": "safetensors"})
    records.note(
        release_dir,
        records.BuildBaseModel(
            params={"base_model_uri": base_model_uri, "base_model_root": base_model_root, "base_model_size": size},
            result="imported" if base_model_uri else "built",
            inputs={"dataset_root": dataset.metadata.get("merkle_root"), "base_model_uri": base_model_uri or None},
            outputs={"base_model": records.Artifact(root=root, path=base_model.path)},
        ),
    )
    return StageResult("build_base_model", True, root)
