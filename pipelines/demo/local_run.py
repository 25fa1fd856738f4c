"""`llmops run` / `make demo`: the release pipeline through kfp.local on the bundled
dataset, with a summary table and `summary.json` in one run folder."""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from dataclasses import dataclass

from kfp_llmops.components import images
from kfp_llmops.components.common import records
from kfp_llmops.components.common.errors import InputError

from ..release import LOCAL_PIPELINES
from .demo_data import DEMO_DEPLOY, DEMO_DETECTION, DEMO_TRAIN, DEMO_WATERMARK, make_demo_dataset


def _demo_key(out_dir: str) -> str:
    """A per-run-folder random key file (a Secret's role locally); never in pipeline YAML."""
    import secrets

    path = os.path.join(out_dir, "watermark.key")
    if not os.path.exists(path):
        os.makedirs(out_dir, exist_ok=True)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as handle:
            handle.write(str(secrets.randbelow(2**62) + 1))
    return path


def _demo_signing_keys(out_dir: str) -> tuple[str, str]:
    """A per-run-folder signing key pair (a Secret's role locally), made once."""
    from kfp_llmops.components.common import signing

    private, public = (os.path.join(out_dir, "signing", name) for name in ("private.pem", "public.pem"))
    if not (os.path.exists(private) and os.path.exists(public)):
        signing.generate_keys(private, public)
    return private, public


def spec_sha256(pipeline_func) -> str:
    """SHA-256 of the pipeline spec as compiled now (what the provenance names)."""
    import tempfile

    from kfp import compiler

    from kfp_llmops.components.common.integrity import sha256_file

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "spec.yaml")
        compiler.Compiler().compile(pipeline_func, path)
        return sha256_file(path)


HOST_DIR = ".llmops"  # container runs: host-side inputs and state under the pipeline root


def _share(folder: str) -> None:
    """Make a host folder and everything in it usable by the images' non-root user: owned
    by it when we may chown (root), else open to all (only the demo key is in it)."""
    for d, _, files in os.walk(folder):
        for name in [d] + [os.path.join(d, f) for f in files]:
            if os.geteuid() == 0:
                os.chown(name, images.UID, images.UID)
            else:
                os.chmod(name, 0o777 if os.path.isdir(name) else 0o644)


def _demo_configs(train_config, watermark_config, base_model, dataset, base_model_size: str) -> tuple[str, str]:
    """The configs a run gets where none is given: the demo's for the demo's model and data."""
    if train_config is None:
        train_config = DEMO_TRAIN if not base_model and base_model_size == "demo" else ""
    if watermark_config is None:
        own = base_model or dataset
        watermark_config = "" if own else DEMO_WATERMARK if base_model_size == "demo" else DEMO_DETECTION
    return train_config, watermark_config


def _clear_run(out_dir: str, containers: bool) -> tuple[str, str, str]:
    """The run's folder, pipeline root and host folder (where keys, data and releases live:
    under the pipeline root for containers, which see nothing else), cleared of what an
    earlier run left in the pipeline root and workspace (the host folder stays, with its
    serving state)."""
    root = os.path.join(out_dir, "pipeline_root")
    os.makedirs(root, exist_ok=True)
    for stale in [os.path.join(root, d) for d in os.listdir(root) if d != HOST_DIR] + [
        os.path.join(out_dir, "workspace")
    ]:
        shutil.rmtree(stale, ignore_errors=True)
    return out_dir, root, os.path.join(root, HOST_DIR) if containers else out_dir


def _datasets(host: str, rows: int, dataset: str | None, eval_dataset: str | None, containers: bool) -> dict:
    """The train and eval sets: the user's where given, the demo's otherwise."""
    data = (
        make_demo_dataset(os.path.join(host, "data"), rows, train=not dataset) if not (dataset and eval_dataset) else {}
    )
    for name, given in (("train", dataset), ("eval", eval_dataset)):
        if given:
            data[name] = os.path.abspath(given)
            if containers:  # only the pipeline root is visible inside the containers
                os.makedirs(os.path.join(host, "data"), exist_ok=True)
                data[name] = shutil.copy(data[name], os.path.join(host, "data", f"{name}-{os.path.basename(given)}"))
    return data


def _base_model(host: str, base_model: str | None, base_model_root: str | None, containers: bool) -> dict:
    """The pipeline's base-model arguments: the folder (copied where containers see it) and
    the root it verifies to, pinned before the run."""
    if not base_model:
        return {}
    from kfp_llmops.components.common import integrity

    root_now = integrity.verify("model", base_model, base_model_root)
    source = os.path.abspath(base_model)
    if containers:
        source = os.path.join(host, "base_model")
        shutil.rmtree(source, ignore_errors=True)
        shutil.copytree(base_model, source)
    return {"base_model_uri": source, "base_model_root": root_now}


@dataclass
class _Files:
    """What a run keeps on the host side: the demo's keys, its release folder, the serving
    state (which outlives runs)."""

    key_file: str
    signing_key: str
    public_key: str
    release_dir: str
    serving: str

    @classmethod
    def under(cls, host: str) -> _Files:
        key_file = _demo_key(host)
        signing_key, public_key = _demo_signing_keys(host)
        return cls(key_file, signing_key, public_key, _release_dir(host), os.path.join(host, "serving"))

    def arguments(self) -> dict:
        """The pipeline's parameters that name them."""
        return {
            "watermark_key_file": self.key_file,
            "serving_state_dir": self.serving,
            "release_dir": self.release_dir,
            "signing_key_file": self.signing_key,
            "signing_public_key_file": self.public_key,
        }


def _release_dir(host: str) -> str:
    """One folder per run, as on the release volume: promoted.json beside them names the
    release in production, the next run's baseline (`baseline_release`)."""
    release_dir = os.path.join(host, "releases", time.strftime("run-%Y%m%d-%H%M%S"))
    while os.path.exists(release_dir):
        release_dir += "x"
    os.makedirs(release_dir)
    return release_dir


def _runner(root: str, shared: tuple[str, ...]):
    """kfp.local's DockerRunner, once dockerd and the images are there; `shared` folders
    made before the pipeline root is shared with the images' user."""
    from kfp import local

    from ..containers import check_runnable, docker_ready

    try:
        import docker  # noqa: F401 - kfp.local's DockerRunner drives dockerd through it
    except ImportError:
        raise InputError("--containers needs the `docker` Python package (the dev extra has it)") from None
    docker_ready()
    check_runnable()
    for d in shared:
        os.makedirs(d, exist_ok=True)
    _share(root)
    return local.DockerRunner(network_mode="none", shm_size="1g")


def run_local(
    out_dir: str,
    pipeline: str = "release",
    rows: int = 4000,
    pii_policy: str = "balanced",
    data_config: str = "",
    dataset: str | None = None,
    train_config: str | None = None,
    base_model_size: str = "demo",
    eval_dataset: str | None = None,
    eval_config: str = "",
    watermark_config: str | None = None,
    deploy_config: str = DEMO_DEPLOY,
    containers: bool = False,
    base_model: str | None = None,
    base_model_root: str | None = None,
    baseline_release: str = "auto",
    ask_served: bool = False,
) -> dict:
    """Run `pipeline` locally; returns (and writes) the run summary built from the task outputs.

    With `containers`, every task runs in its stage image through kfp.local's DockerRunner
    (dockerd), as the image's non-root user, with no network (the deploy stage's servers
    talk over the container's own loopback). DockerRunner mounts only the pipeline root,
    so the data, the key, the release folder and the serving state live under
    `<pipeline root>/.llmops/` (the serving state outlives runs, as it does without).

    `base_model`: a sealed model folder to fine-tune instead of the demo model; its root
    is pinned (`base_model_root`, else the root it verifies to now). Without a
    `train_config`, the demo model trains with DEMO_TRAIN and any other with the stage's
    defaults; without a `watermark_config`, the demo's data and model are verified with
    DEMO_WATERMARK (its prompts and cost gate are the demo's), the `tiny` model with its
    prompts only, and a user's model or data with the stage's defaults.

    `ask_served`: once a release is promoted, the held-out questions are asked of the
    served model through nginx and its exact-match rate set beside the watermark stage's
    (`summary["served"]`)."""
    from kfp import local

    train_config, watermark_config = _demo_configs(train_config, watermark_config, base_model, dataset, base_model_size)
    out_dir, root, host = _clear_run(os.path.abspath(out_dir), containers)
    data = _datasets(host, rows, dataset, eval_dataset, containers)
    base = _base_model(host, base_model, base_model_root, containers)
    files = _Files.under(host)
    runner = _runner(root, (files.release_dir, files.serving)) if containers else local.SubprocessRunner(use_venv=False)
    local.init(runner=runner, pipeline_root=root, workspace_root=os.path.join(out_dir, "workspace"))
    started = time.time()
    _run_pipeline(
        pipeline,
        dataset_uri=data["train"],
        eval_dataset_uri=data["eval"],
        data_config=data_config,
        pii_policy=pii_policy,
        train_config=train_config,
        base_model_size=base_model_size,
        baseline_release=baseline_release,
        eval_config=eval_config,
        watermark_config=watermark_config,
        deploy_config=deploy_config,
        **files.arguments(),
        **base,
    )
    summary = {
        "pipeline": pipeline,
        "run_folder": out_dir,
        "elapsed_s": round(time.time() - started, 1),
        "runner": "docker" if containers else "subprocess",
        "release_record": os.path.join(files.release_dir, "record.json"),
        "provenance": os.path.join(files.release_dir, "provenance.intoto.json"),
        "public_key": files.public_key,
        "dataset": data["train"],
        "eval_dataset": data.get("eval"),
        "stages": collect_stages(root),
    }
    if ask_served and not containers and _promoted(summary["stages"]):
        summary["served"] = ask_served_model(files.serving, files.key_file, data["eval"], summary["stages"])
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2)
    return summary


def _promoted(stages: list[dict]) -> bool:
    deployed = {s["stage"]: s for s in stages}.get("triton_canary_deploy")
    return bool(deployed) and deployed["gate"] == "promoted"


def _run_pipeline(pipeline: str, **arguments) -> None:
    """The pipeline through kfp.local, with its spec's hash (what the provenance names)."""
    with warnings.catch_warnings():
        # The stage images hold this package; locally the current venv plays that role.
        warnings.filterwarnings("ignore", message=".*non-Python base image.*")
        LOCAL_PIPELINES[pipeline](pipeline_spec_sha256=spec_sha256(LOCAL_PIPELINES[pipeline]), **arguments)


def _task_outputs(run_dir: str, task: str) -> dict | None:
    path = os.path.join(run_dir, task, "executor_output.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        out = json.load(handle)
    arts = {
        name: {"uri": a["artifacts"][0]["uri"], "metadata": a["artifacts"][0].get("metadata", {})}
        for name, a in out.get("artifacts", {}).items()
    }
    return {"artifacts": arts, "parameters": out.get("parameterValues", {})}


TASK = {s.name: s.task for s in records.STAGES}


def collect_stages(pipeline_root: str) -> list[dict]:
    """One summary row per stage of the latest run in `pipeline_root` (whichever pipeline
    it ran), from the executor outputs kfp.local wrote."""
    # kfp.local names a run `<pipeline>-<%Y-%m-%d-%H-%M-%S-%f>`: the stamp orders the runs.
    runs = sorted((d for d in os.listdir(pipeline_root) if d != HOST_DIR), key=lambda d: d[-26:])
    run_dir = os.path.join(pipeline_root, runs[-1])
    outputs = {stage: _task_outputs(run_dir, task) for stage, task in TASK.items()}
    stages = []
    for stage, row in _ROWS.items():
        if outputs[stage]:
            stages.append(row(outputs[stage]))
        elif stage == "train_zero3" and outputs["validate_dataset"]:
            stages.append(
                {"stage": stage, "gate": "skipped", "detail": "data gate failed", "merkle_root": None, "outputs": {}}
            )
    return stages


def _validated(v: dict) -> dict:
    m = v["artifacts"]["metrics"]["metadata"]
    return {
        "stage": "validate_dataset",
        "gate": "passed" if v["parameters"].get("Output") else "failed",
        "detail": f"{int(m['rows_in'])} rows in, {int(m['rows_out'])} clean, "
        f"{int(m['rows_quarantined'])} quarantined; " + _drift(m),
        "merkle_root": v["artifacts"]["clean"]["metadata"].get("merkle_root"),
        "outputs": {"clean": v["artifacts"]["clean"]["uri"], "report": v["artifacts"]["report"]["uri"]},
    }


def _trained(t: dict) -> dict:
    m = t["artifacts"]["metrics"]["metadata"]
    return {
        "stage": "train_zero3",
        "gate": "trained",
        "detail": f"final loss {m.get('final_loss', float('nan')):.3f}, "
        f"{m.get('processed_tokens_per_s', 0):,.0f} tokens/s "
        f"({m.get('tokens_per_s', 0):,.0f} trained on)",
        "merkle_root": t["artifacts"]["model"]["metadata"].get("merkle_root"),
        "checkpoint_root": t["artifacts"]["checkpoints"]["metadata"].get("merkle_root"),
        "outputs": {
            "model": t["artifacts"]["model"]["uri"],
            "report": t["artifacts"]["report"]["uri"],
            "checkpoints": t["artifacts"]["checkpoints"]["uri"],
        },
    }


def _evaluated(e: dict) -> dict:
    m = e["artifacts"]["metrics"]["metadata"]
    return {
        "stage": "evaluate_llm",
        "gate": "blessed" if e["parameters"].get("Output") else "not blessed",
        "detail": _changes(e["artifacts"]["blessing"]["uri"]) + f"exact {m.get('exact_match', float('nan')):.1%}, "
        f"BERTScore F1 {m.get('bertscore_f1', float('nan')):.3f}, "
        f"perplexity {m.get('perplexity', float('nan')):.2f}, "
        f"flagged {m.get('toxicity_flagged_rate', float('nan')):.1%}",
        "merkle_root": e["artifacts"]["blessing"]["metadata"].get("model_root"),
        "outputs": {
            "report": e["artifacts"]["report"]["uri"],
            "responses": e["artifacts"]["responses"]["uri"],
            "blessing": e["artifacts"]["blessing"]["uri"],
        },
    }


def _watermarked(w: dict) -> dict:
    m = w["artifacts"]["metrics"]["metadata"]
    return {
        "stage": "verify_watermark",
        "gate": "verified" if w["parameters"].get("Output") else "not verified",
        "detail": f"TPR {m.get('tpr', float('nan')):.2f}, FPR {m.get('fpr', float('nan')):.2f}, "
        f"TPR@10% subst. {m.get('tpr_substitution_10', float('nan')):.2f}, "
        f"cost: exact match {m.get('exact_match_cost', float('nan')):.1%}, perplexity "
        f"{m.get('perplexity_increase', float('nan')):+.0%}, BERTScore "
        f"{m.get('bertscore_cost', float('nan')):.3f}, judge's win rate "
        f"{m.get('judge_win_rate', float('nan')):.2f}",
        "merkle_root": m.get("model_root"),
        "exact_match_watermarked": m.get("exact_match_watermarked"),
        "outputs": {"report": w["artifacts"]["report"]["uri"], "watermarked": w["artifacts"]["watermarked"]["uri"]},
    }


def _deployed(d: dict) -> dict:
    rec = d["artifacts"]["record"]["metadata"]
    m = d["artifacts"]["metrics"]["metadata"]
    return {
        "stage": "triton_canary_deploy",
        "gate": rec.get("decision", "?"),
        "detail": f"version {rec.get('version')}: {m.get('reason', '')}"[:90],
        "merkle_root": rec.get("repository_root"),
        "outputs": {
            "report": d["artifacts"]["report"]["uri"],
            "record": d["artifacts"]["record"]["uri"],
            "repository": d["artifacts"]["repository"]["uri"],
        },
    }


# Each stage's summary row, in pipeline order.
_ROWS = {
    "validate_dataset": _validated,
    "train_zero3": _trained,
    "evaluate_llm": _evaluated,
    "verify_watermark": _watermarked,
    "triton_canary_deploy": _deployed,
}


def _drift(m: dict) -> str:
    psi = {k[4:]: v for k, v in m.items() if k.startswith("psi_")}
    return ("PSI " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(psi.items()))) if psi else "no drift reference"


def _changes(blessing_path: str) -> str:
    """'change 4/4, win rate 0.50 (12-180-8) vs production; ' when the blessing compared with one."""
    try:
        with open(blessing_path, encoding="utf-8") as handle:
            checks = [c for c in json.load(handle)["checks"] if c["verdict"] != "skipped"]
    except (OSError, ValueError, KeyError):
        return ""
    changes = [c for c in checks if c["kind"] == "change"]
    parts = [f"change {sum(c['verdict'] == 'pass' for c in changes)}/{len(changes)}"] if changes else []
    parts += [f"win rate {c['value']:.2f} ({c['reason']})" for c in checks if c["metric"] == "win_rate"]
    return f"{', '.join(parts)} vs production; " if parts else ""


def ask_served_model(serving_dir: str, key_file: str, eval_path: str, stages: list[dict]) -> dict:
    """The held-out questions asked of the promoted model through nginx and the OpenAI API
    (`llmops deploy serve`'s stack), beside the exact-match rate the watermark stage
    measured with the watermark on."""
    from kfp_llmops.components.common.progress import progress
    from kfp_llmops.components.deploy.local_target import serving
    from kfp_llmops.components.deploy.served_answers import exact_match

    with serving(serving_dir, key_file=key_file) as (url, info):
        bar = progress(None, "held-out questions through nginx", unit="q")
        got = exact_match(url, info["model_name"], eval_path, bar)
        bar.close()
    marked = {s["stage"]: s for s in stages}.get("verify_watermark", {}).get("exact_match_watermarked")
    return {
        "exact_match": got["exact_match"],
        "questions": got["questions"],
        "version": info["version"],
        "engine": info["settings"].get("engine", "transformers"),
        "watermark_stage_exact_match": marked,
    }


def format_summary(summary: dict) -> str:
    rows = [("stage", "gate", "result", "merkle root")]
    for s in summary["stages"]:
        rows.append(
            (s["stage"], s["gate"], s["detail"], ((s["merkle_root"] or "")[:16] + "…") if s["merkle_root"] else "-")
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(f"run folder: {summary['run_folder']}  ({summary['elapsed_s']} s)")
    for s in summary["stages"]:
        if "report" in s["outputs"]:
            lines.append(f"{s['stage']} report: {s['outputs']['report']}")
    lines.append(f"release record: {summary['release_record']} (llmops lineage verify it)")
    if os.path.exists(summary.get("provenance") or ""):
        lines.append(
            f"signed provenance: {summary['provenance']} (llmops lineage verify it --public-key "
            f"{summary['public_key']})"
        )
    served = summary.get("served")
    if served:
        stage = served["watermark_stage_exact_match"]
        lines.append(
            f"served (version {served['version']}, engine {served.get('engine', 'transformers')}, OpenAI API through "
            f"nginx): exact match {served['exact_match']:.1%} on "
            f"{served['questions']} held-out questions; the watermark stage measured "
            + (f"{stage:.1%}" if stage is not None else "n/a")
            + " with the watermark on"
        )
    lines.append(f"summary: {os.path.join(summary['run_folder'], 'summary.json')}")
    return "\n".join(lines)
