"""Stage 5 on the command line: the serving environment, repositories, the canary, serving by hand."""

from __future__ import annotations

import os

import click

from kfp_llmops.components.common.errors import LlmopsError

from .options import blessed, config_option, state_option, watermark_key_option, watermark_record_option


@click.group()
def deploy() -> None:
    """Stage 5: Triton model repository, canary rollout with SLA analysis and rollback."""


@deploy.command("setup")
def deploy_setup() -> None:
    """Create the serving environment the local Triton servers run model.py in."""
    from kfp_llmops.components.deploy.serving_env import ensure_env, triton_paths

    path = ensure_env()
    triton_paths()
    click.echo(f"serving environment ready: {path}")


@deploy.command("repository")
@click.option("--model", "model_dir", required=True, type=click.Path(file_okay=False))
@click.option("--blessing", type=click.Path(dir_okay=False), help="blessing.json from evaluate_llm.")
@click.option("--blessed-root", help="The blessed model's Merkle root (instead of --blessing).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@config_option("Deploy config YAML.")
@state_option()
@watermark_record_option()
@click.option(
    "--signing-key",
    type=click.Path(dir_okay=False),
    help="Sign the repository with this PEM private key (else $LLMOPS_SIGNING_KEY; neither: unsigned).",
)
def deploy_repository(
    model_dir, blessing, blessed_root, out_dir, config_path, state_dir, watermark_record, signing_key
) -> None:
    """Build a sealed Triton model repository from exactly the blessed model."""
    from kfp_llmops.components.common import signing
    from kfp_llmops.components.deploy import DeployConfig, build_repository, costed_decoding, watermark_params

    root, decoding, _ = blessed(blessing, blessed_root)
    built = build_repository(
        model_dir,
        root,
        out_dir,
        DeployConfig.load(config_path),
        state_dir,
        watermark_params(watermark_record),
        signing.key_file(signing_key),
        decoding,
        costed_decoding(watermark_record),
    )
    click.echo(
        f"{out_dir}: {built['model_name']} version {built['version']}, repository root "
        f"{built['repository_root']}, model root {built['model_root']}"
    )


@deploy.command("canary")
@click.option("--repository", "repo_dir", type=click.Path(file_okay=False), help="A sealed repository.")
@click.option("--model", "model_dir", type=click.Path(file_okay=False), help="Or a model folder to build one from.")
@click.option("--blessing", type=click.Path(dir_okay=False), help="blessing.json from evaluate_llm.")
@click.option("--blessed-root", help="The blessed model's Merkle root (instead of --blessing).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@state_option("Local deployment state: the promoted repository and its predecessor.")
@config_option("Deploy config YAML.")
@watermark_key_option()
@click.option("--drill-failure-rate", type=float, help="Rehearsal: the canary fails this fraction of requests.")
@click.option("--drill-latency-ms", type=float, help="Rehearsal: the canary adds this latency per request.")
@click.option("--drill-first-token-ms", type=float, help="Rehearsal: the canary's first token comes this much later.")
@click.option("--drill-token-ms", type=float, help="Rehearsal: every token of the canary comes this much later.")
@watermark_record_option()
@click.option(
    "--public-key",
    type=click.Path(dir_okay=False),
    help="Refuse a repository (and, with --model, a "
    "model) not signed by this key's pair (else $LLMOPS_SIGNING_PUBLIC_KEY).",
)
@click.option(
    "--signing-key",
    type=click.Path(dir_okay=False),
    help="With --model: sign the repository built (else $LLMOPS_SIGNING_KEY).",
)
def deploy_canary(
    repo_dir,
    model_dir,
    blessing,
    blessed_root,
    out_dir,
    state_dir,
    config_path,
    key_file,
    drill_failure_rate,
    drill_latency_ms,
    drill_first_token_ms,
    drill_token_ms,
    watermark_record,
    public_key,
    signing_key,
) -> None:
    """Roll a repository out progressively; exit 0 promoted, 1 rolled back, 2 bad input."""
    from kfp_llmops.components.deploy import (
        DeployConfig,
        build_and_deploy,
        costed_decoding,
        stage_result,
        watermark_params,
    )

    cfg = DeployConfig.load(
        config_path,
        {
            "drill.failure_rate": drill_failure_rate,
            "drill.added_latency_ms": drill_latency_ms,
            "drill.first_token_latency_ms": drill_first_token_ms,
            "drill.token_latency_ms": drill_token_ms,
        },
    )
    root, decoding, compared_with = blessed(blessing, blessed_root)
    if bool(repo_dir) == bool(model_dir):
        raise LlmopsError("give exactly one of --repository and --model")
    from kfp_llmops.components.common import signing

    public_key = signing.key_file(public_key, public=True)
    if watermark_record and not model_dir:
        raise LlmopsError("--watermark applies when building from --model; a sealed repository keeps its own")
    _, record = build_and_deploy(
        model_dir,
        os.path.join(out_dir, "repository") if model_dir else repo_dir,
        root,
        out_dir,
        cfg,
        state_dir,
        key_file,
        kgw=watermark_params(watermark_record) if model_dir else None,
        decoding=decoding,
        costed=costed_decoding(watermark_record),
        signing_key=signing.key_file(signing_key),
        public_key=public_key,
        compared_with=compared_with,
        log=click.echo,
    )
    click.echo(f"decision={record['decision']} version={record['version']} reason: {record['reason']}")
    click.echo(f"record {os.path.join(out_dir, 'record.json')}, report {os.path.join(out_dir, 'report.html')}")
    if cfg.fail_on_rollback:
        from kfp_llmops.components.common.contract import raise_unless_passed

        raise_unless_passed(stage_result(record))


@deploy.command("serve")
@state_option("Local deployment state whose stable version is served.")
@click.option("--port", default=0, show_default=True, help="nginx's port (0: a free one).")
@click.option("--host", default="127.0.0.1", show_default=True)
@watermark_key_option()
@click.option(
    "--api-keys",
    "api_keys",
    type=click.Path(dir_okay=False),
    help="API keys clients must send (Authorization: Bearer), one per line; read again when it changes. "
    "Default: none on a loopback --host; elsewhere a key made in STATE/api-keys.",
)
@click.option(
    "--no-api-keys", is_flag=True, help="Ask no API key even on a --host others reach (anyone there is answered)."
)
@click.option(
    "--public-key",
    type=click.Path(dir_okay=False),
    help="Refuse to serve a promoted repository not signed by this key's pair (else $LLMOPS_SIGNING_PUBLIC_KEY).",
)
@config_option("Deploy config YAML: its serving, front_door and local sections (bounds, startup timeout).")
def deploy_serve(state_dir, port, host, key_file, api_keys, no_api_keys, public_key, config_path) -> None:
    """Serve the promoted model (Triton and its OpenAI-compatible API behind nginx, its
    engine and watermark as promoted) in the foreground; the first line printed starts
    with the URL; Ctrl-C or SIGTERM stops everything."""
    from kfp_llmops.components.deploy import DeployConfig
    from kfp_llmops.components.deploy.local_target import serve

    if api_keys and no_api_keys:
        raise click.UsageError("--api-keys and --no-api-keys: give one")
    cfg = DeployConfig.load(config_path)
    keys = None if no_api_keys else (api_keys or "")
    from kfp_llmops.components.common import signing

    public_key = signing.key_file(public_key, public=True)
    announce = lambda line: click.echo(line)  # noqa: E731
    serve(state_dir, port, host, key_file, announce=announce, cfg=cfg, api_keys=keys, public_key=public_key)


@deploy.command("render")
@click.option("--repository-root", required=True, help="Root of the repository to roll out.")
@config_option("Deploy config YAML (target, cluster).")
@click.option("--target", type=click.Choice(["kserve", "gateway"]), default="kserve", show_default=True)
def deploy_render(repository_root, config_path, target) -> None:
    """Print the manifests the cluster target applies at each step (YAML stream)."""
    from kfp_llmops.components.deploy import DeployConfig
    from kfp_llmops.components.deploy.cluster import rollout_manifests, to_yaml

    cfg = DeployConfig.load(config_path, {"target": target})
    steps = rollout_manifests(cfg, repository_root)
    click.echo(to_yaml([m for _, m in steps]), nl=False)


@deploy.command("undo")
@state_option()
def deploy_undo(state_dir) -> None:
    """One-step rollback of the last local promotion (previous/ becomes stable/)."""
    from kfp_llmops.components.deploy.local_target import undo

    state = undo(state_dir)
    click.echo(f"stable is version {state['stable']['version']} again (root {state['stable']['repository_root']})")
