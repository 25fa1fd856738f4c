"""Stage 5, triton_canary_deploy: a Triton model repository built from exactly the
blessed model (`repository.py`), a progressive canary with SLA analysis and automatic
rollback (`canary.py`, `analysis.py`) on a target: two real Triton servers behind nginx
(`local_target.py`) or KServe / Gateway API on a cluster (`cluster.py`).

`run_to_dir` serves the CLI, `run_component` the KFP component; both call `deploy`.
"""

from __future__ import annotations

import json
import os

from kfp_llmops.components.common import atomic
from kfp_llmops.components.common.contract import Artifact, Metrics, StageResult, raise_unless_passed
from kfp_llmops.components.common.errors import GateFailed, InputError

from .config import DeployConfig

__all__ = ["DeployConfig", "deploy", "build_and_deploy", "build_repository", "run_component", "stage_result"]


def next_version(cfg: DeployConfig, state_dir: str) -> int:
    from kfp_llmops.components.common.records import read_serving_state

    if cfg.version:
        return cfg.version
    stable = read_serving_state(state_dir).get("stable") if cfg.target == "local" else None
    return (stable["version"] + 1) if stable else 1


def build_repository(
    model_dir: str,
    blessed_root: str | None,
    out_dir: str,
    cfg: DeployConfig,
    state_dir: str,
    kgw=None,
    signing_key: str | None = None,
    decoding=None,
    costed: dict | None = None,
) -> dict:
    """`kgw`: the watermark parameters verify_watermark verified (`watermark_params`);
    `signing_key`: the repository is signed with model-signing; `decoding`: the blessing's
    (`Decoding.from_record`), served by default; `costed`: the decoding verify_watermark
    measured the watermark's cost under (its record's `decoding`), which must be it."""
    from . import repository

    if cfg.watermark.enabled and costed is not None and decoding is not None and costed != decoding.model_dump():
        raise InputError(
            f"watermark: its cost was measured under decoding {costed}, but the blessed decoding served "
            f"is {decoding.model_dump()}; verify the watermark with the blessing (`--blessing`)"
        )
    return repository.build(
        model_dir, blessed_root, out_dir, cfg, next_version(cfg, state_dir), kgw, signing_key, decoding
    )


def costed_decoding(source) -> dict | None:
    """The decoding a verify_watermark record (artifact metadata, or its metrics.json) says
    the cost was measured under; None for a record without one."""
    if isinstance(source, str):
        try:
            with open(source, encoding="utf-8") as handle:
                source = json.load(handle)
        except (OSError, ValueError):
            return None  # watermark_params reports an unreadable record
    return (source or {}).get("decoding")


def watermark_params(source, origin: str = "verify_watermark's output"):
    """The KGW parameters to serve with: the ones verify_watermark recorded (artifact
    metadata, or its metrics.json); None without a record (the repository refuses to
    serve a watermark nobody verified)."""
    from kfp_llmops.components.common.watermark.params import KGW

    return None if source is None else KGW.from_record(source, source if isinstance(source, str) else origin)


def make_target(cfg: DeployConfig, state_dir: str, work: str, key_file: str | None):
    if cfg.target == "local":
        from .local_target import LocalTarget

        return LocalTarget(cfg, state_dir, work, key_file)
    from .cluster import ClusterTarget

    return ClusterTarget(cfg)


def deploy(
    repo_dir: str,
    blessed_root: str | None,
    out_dir: str,
    cfg: DeployConfig,
    state_dir: str,
    key_file: str | None = None,
    before_interval=None,
    log=print,
    public_key: str | None = None,
    lock_api=None,
    compared_with: dict | None = None,
) -> dict:
    """Verify the repository is the blessed model (and, with `public_key`, signed by its
    pair) before any traffic moves, roll it out, write record and report. The served model
    is held for the whole rollout (`rollout_lock`; a caller that built the repository
    already holds it, so the version it numbered is still the next one). `compared_with`:
    the blessing's record of the production model it was judged against (None: unknown)."""
    from .rollout_lock import rollout_lock

    with rollout_lock(cfg, state_dir, log, lock_api) as (held, guard):
        return _deploy(
            repo_dir,
            blessed_root,
            out_dir,
            cfg,
            state_dir,
            key_file,
            before_interval,
            log,
            public_key,
            held,
            guard,
            compared_with,
        )


def build_and_deploy(
    model_dir: str | None,
    repo_dir: str,
    blessed_root: str | None,
    out_dir: str,
    cfg: DeployConfig,
    state_dir: str,
    key_file: str | None = None,
    *,
    kgw=None,
    decoding=None,
    costed: dict | None = None,
    signing_key: str | None = None,
    public_key: str | None = None,
    compared_with: dict | None = None,
    log=print,
) -> tuple[dict | None, dict]:
    """The one release sequence the component and `llmops deploy canary` run: under the
    rollout lock (held from numbering the version to the rollout's end), the model's
    signature checked (with `public_key`), the repository built from `model_dir` into
    `repo_dir` (None: `repo_dir` is a built one), then rolled out. (built, outcome)."""
    from kfp_llmops.components.common import signing

    from .rollout_lock import rollout_lock

    built = None
    with rollout_lock(cfg, state_dir, log):
        if model_dir:
            if public_key:
                signing.verify_folder(model_dir, public_key)
            built = build_repository(
                model_dir, blessed_root, repo_dir, cfg, state_dir, kgw, signing_key, decoding, costed
            )
        outcome = deploy(
            repo_dir,
            blessed_root,
            out_dir,
            cfg,
            state_dir,
            key_file,
            log=log,
            public_key=public_key,
            compared_with=compared_with,
        )
    return built, outcome


def stale_baseline(compared_with: dict | None, production: tuple[bool, str | None]) -> str | None:
    """Why the blessing's comparison does not hold (production is not the model it was
    judged against, or which model serves cannot be told), or None when it holds or the
    blessing did not record what it was judged against."""
    known, serving = production
    if compared_with is None or (known and compared_with.get("model_root") == serving):
        return None
    judged = compared_with.get("model_root")
    release = compared_with.get("release") or "?"
    named = os.path.basename(os.path.dirname(release.split("#", 1)[0])) if "#" in release else release

    def model(root):
        return f"model {root[:16]}…" if root else "no model (a first release)"

    against = f"the blessing judged this model against production {model(judged)} (release {named})"
    if not known:
        return (
            f"{against}, but which model serves now cannot be told: the live serving resource has no model-root "
            "annotation (an older release wrote it); set on_stale_baseline: allow for this release, whose "
            "resources are annotated"
        )
    return (
        f"{against}, but production is now {model(serving)}: another release was promoted since; evaluate "
        "against it again, or set on_stale_baseline: allow"
    )


def _deploy(
    repo_dir,
    blessed_root,
    out_dir,
    cfg,
    state_dir,
    key_file,
    before_interval,
    log,
    public_key,
    held,
    guard,
    compared_with,
) -> dict:
    from kfp_llmops.components.common.records import read_serving_state

    from . import repository
    from .canary import rollout
    from .report import render_html, timeline_png

    info = repository.verify(repo_dir, blessed_root, public_key=public_key)
    stable = read_serving_state(state_dir).get("stable") if cfg.target == "local" else None
    if stable and info["version"] <= stable["version"]:
        raise InputError(
            f"{repo_dir}: version {info['version']} is not above stable's {stable['version']} "
            f"(another release was promoted since it was built); build it again"
        )
    target = make_target(cfg, state_dir, os.path.join(out_dir, "work"), key_file)
    production = target.production_root()
    stale = stale_baseline(compared_with, production)
    if stale and cfg.on_stale_baseline == "refuse":
        raise GateFailed(f"refusing to promote over a model it was not compared with: {stale}")
    if stale:
        log(f"[deploy] {stale}; deploying anyway (on_stale_baseline: allow)")
    key, tokenizer = None, None
    if cfg.watermark.enabled:
        from transformers import AutoTokenizer

        from kfp_llmops.components.common.watermark.keys import load_key

        key = load_key(key_file)
        tokenizer = AutoTokenizer.from_pretrained(info["weights"])
    os.makedirs(out_dir, exist_ok=True)
    try:
        target.start(repo_dir, info)
        record = rollout(target, cfg, info, key, tokenizer, before_interval, log, guard)
    finally:
        target.close()
    stable = target.stable_at_start
    record.update(
        {
            "target": cfg.target,
            "model_name": info["model_name"],
            "version": info["version"],
            "repository_root": info["repository_root"],
            "model_root": info["model_root"],
            "signed_sha256": info["signed_sha256"],
            "served_uri": getattr(target, "storage_uri", None) or None,
            "stable_version": stable["version"] if stable else None,
            "stable_repository_root": stable["repository_root"] if stable else None,
            "drill": cfg.drill.model_dump(),
            "steps": cfg.steps,
            "interval_s": cfg.interval_s,
            "lock": {"holder": held["holder"], "waited_s": held["waited_s"]},
            "production_root": production[1],
            "compared_with": compared_with,
            "stale_baseline": stale,
        }
    )
    requests = record.pop("requests")
    atomic.write_text(os.path.join(out_dir, "requests.jsonl"), "".join(json.dumps(r) + "\n" for r in requests))
    atomic.write_json(os.path.join(out_dir, "record.json"), record, default=lambda v: None)
    png = timeline_png({**record, "requests": requests})
    atomic.write_bytes(os.path.join(out_dir, "timeline.png"), png)
    atomic.write_text(os.path.join(out_dir, "report.html"), render_html(record, png))
    record["metrics"] = summary_metrics(record, requests)
    return record


def summary_metrics(record: dict, requests: list[dict]) -> dict:
    canary = [r for r in requests if r["backend"] == "canary"]
    return {
        "promoted": float(record["decision"] == "promoted"),
        "intervals": float(len(record["intervals"])),
        "rollout_seconds": float(record.get("seconds", 0.0)),
        "canary_requests": float(len(canary)),
        "canary_failed_requests": float(sum(not r["ok"] for r in canary)),
        "requests_total": float(len(requests)),
    }


def stage_result(record: dict) -> StageResult:
    promoted = record["decision"] == "promoted"
    reason = "" if promoted else f"canary rolled back: {record['reason']}"
    checks = [c for interval in record.get("intervals", []) for c in interval.get("checks", [])]
    return StageResult("triton_canary_deploy", promoted, record["decision"], reason, checks, record.get("metrics", {}))


def run_component(
    *,
    model: Artifact,
    blessing: Artifact,
    config: str,
    key_file: str,
    state_dir: str,
    repository: Artifact,
    record: Artifact,
    metrics: Metrics,
    report: Artifact,
    release_dir: str = "",
    default_target: str = "local",
    watermarked: Artifact | None = None,
    signing_key_file: str = "",
    public_key_file: str = "",
) -> StageResult:
    """KFP entry: only a blessed model whose root matches the blessing is deployed, with
    the watermark parameters `watermarked` (verify_watermark's output) records. With a
    public key, the model must carry a signature by its pair, and the repository built
    from it is signed (`signing_key_file`) and its signature verified before traffic moves."""
    from kfp_llmops.components.common import signing
    from kfp_llmops.components.common.decoding import Decoding

    cfg = DeployConfig.load(config)
    if "target" not in cfg.model_fields_set:
        cfg = DeployConfig.load(config, {"target": default_target})
    blessed_root = _blessed_root(model, blessing, watermarked)
    state = state_dir or os.path.join(os.path.dirname(report.path), "serving-state")
    kgw = watermark_params(watermarked.metadata if watermarked is not None else None)
    private, public = signing.key_file(signing_key_file), signing.key_file(public_key_file, public=True)
    work = os.path.join(os.path.dirname(report.path), "deploy")
    built, outcome = build_and_deploy(
        model.path,
        repository.path,
        blessed_root,
        work,
        cfg,
        state,
        key_file or None,
        kgw=kgw,
        decoding=Decoding.from_record(blessing.metadata, "blessing"),
        costed=costed_decoding(watermarked.metadata if watermarked is not None else None),
        signing_key=private,
        public_key=public,
        compared_with=blessing.metadata.get("compared_with"),
    )
    _publish(work, built, outcome, repository, record, metrics, report)
    from kfp_llmops.components.common import baseline

    kept = baseline.keep_model(release_dir, model.path, blessed_root) if outcome["decision"] == "promoted" else None
    serving_state = os.path.abspath(state) if cfg.target == "local" else None
    _note(release_dir, config, blessed_root, built, outcome, repository.path, serving_state, kept)
    summary = stage_result(outcome)
    if cfg.fail_on_rollback:
        raise_unless_passed(summary)
    return summary


def _blessed_root(model: Artifact, blessing: Artifact, watermarked: Artifact | None) -> str:
    """The root evaluate_llm blessed, once the model and the watermark stage's record are
    both of it."""
    blessed_root = blessing.metadata.get("model_root")
    if not blessing.metadata.get("blessed"):
        raise InputError("blessing: the model was not blessed by evaluate_llm; refusing to deploy")
    if model.metadata.get("merkle_root") and model.metadata["merkle_root"] != blessed_root:
        raise InputError(f"model root {model.metadata['merkle_root']} is not the blessed root {blessed_root}")
    if watermarked is not None and watermarked.metadata.get("model_root") != blessed_root:
        raise InputError(
            f"watermarked: verified model {watermarked.metadata.get('model_root')} is not the blessed "
            f"root {blessed_root}"
        )
    return blessed_root


def _publish(work: str, built: dict, outcome: dict, repository, record, metrics: Metrics, report) -> None:
    """The repository, record, report and metrics as the KFP UI shows them."""
    repository.metadata.update(
        {
            "merkle_root": built["repository_root"],
            "model_root": built["model_root"],
            "model_name": built["model_name"],
            "version": built["version"],
            "signed_sha256": built["signed_sha256"],
        }
    )
    atomic.copy_file(os.path.join(work, "record.json"), record.path)
    atomic.copy_file(os.path.join(work, "report.html"), report.path)
    record.metadata.update(
        {
            "decision": outcome["decision"],
            "repository_root": outcome["repository_root"],
            "model_root": outcome["model_root"],
            "version": outcome["version"],
        }
    )
    for k, v in outcome["metrics"].items():
        metrics.log_metric(k, v)
    metrics.metadata.update({"decision": outcome["decision"], "reason": outcome["reason"][:500]})


def _note(
    release_dir: str,
    config: str,
    blessed_root: str,
    built: dict,
    outcome: dict,
    repository_path: str,
    serving_state: str | None,
    kept: str | None,
) -> None:
    """The stage's record in the release folder; `kept`: where the promoted model was kept."""
    from kfp_llmops.components.common import records

    records.note(
        release_dir,
        records.TritonCanaryDeploy(
            params={"deploy_config": config},
            result=outcome["decision"],
            reason=outcome["reason"],
            inputs=records.DeployInputs(
                model_root=outcome["model_root"],
                blessed_root=blessed_root,
                production_root=outcome["production_root"],
                compared_with=(outcome["compared_with"] or {}).get("release"),
            ),
            outputs=records.DeployOutputs(
                repository=records.RepositoryOut(
                    root=outcome["repository_root"],
                    path=repository_path,
                    version=outcome["version"],
                    weights=built["weights"],
                    signed_sha256=built["signed_sha256"],
                ),
                serving_state=records.Artifact(path=serving_state),
                served_uri=outcome.get("served_uri"),
                production=records.Artifact(root=blessed_root if kept else None, path=kept),
            ),
        ),
    )
