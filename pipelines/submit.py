"""`llmops submit`: run a pipeline on a KFP API server as a run of a named, immutable
pipeline version. The version (named with the spec's digest, as `llmops compile` names
it) is uploaded when the server does not have it yet; the run is attached to it, so the
UI lists every run under the exact spec it ran. The token comes from the environment,
never from the command line (shell history)."""

from __future__ import annotations

import json
import os

from kfp_llmops.components.common.errors import InputError, LlmopsError

TOKEN_VARS = ("LLMOPS_KFP_TOKEN", "KF_PIPELINES_TOKEN")


def _version_id(client, pipeline_id: str, name: str) -> str | None:
    flt = json.dumps({"predicates": [{"key": "name", "operation": "EQUALS", "string_value": name}]})
    found = client.list_pipeline_versions(pipeline_id, page_size=1, filter=flt).pipeline_versions or []
    return found[0].pipeline_version_id if found else None


def publish_and_run(
    client,
    package: str,
    pipeline_name: str,
    version_name: str,
    namespace: str | None,
    experiment: str,
    params: dict,
    run_name: str | None = None,
) -> dict:
    """Upload the pipeline and this version if missing, then run that version."""
    pipeline_id = client.get_pipeline_id(pipeline_name)
    uploaded = []
    if pipeline_id is None:
        pipeline_id = client.upload_pipeline(package, pipeline_name, namespace=namespace).pipeline_id
        uploaded.append("pipeline")
    version_id = _version_id(client, pipeline_id, version_name)
    if version_id is None:
        version_id = client.upload_pipeline_version(package, version_name, pipeline_id=pipeline_id).pipeline_version_id
        uploaded.append("version")
    exp = client.create_experiment(experiment, namespace=namespace)  # returns the existing one
    run = client.run_pipeline(
        exp.experiment_id, run_name or version_name, params=params, pipeline_id=pipeline_id, version_id=version_id
    )
    return {
        "run_id": run.run_id,
        "pipeline_id": pipeline_id,
        "version_id": version_id,
        "version": version_name,
        "uploaded": uploaded,
        "url": f"{client._get_url_prefix()}/#/runs/details/{run.run_id}",
    }


def submit(
    pipeline: str,
    package: str | None,
    host: str,
    namespace: str | None,
    experiment: str,
    params: dict,
    run_name: str | None = None,
) -> dict:
    import warnings

    import kfp

    from .compile import COMPILED_DIR, resource_name, version_name

    package = package or os.path.join(COMPILED_DIR, f"{pipeline}.yaml")
    if not os.path.isfile(package):
        raise InputError(f"{package}: no compiled pipeline (run `llmops compile`)")
    if "pipeline_spec_sha256" not in params:  # what the release provenance names
        from kfp_llmops.components.common.integrity import sha256_file

        params = {**params, "pipeline_spec_sha256": sha256_file(package)}
    token = next((os.environ[v] for v in TOKEN_VARS if os.environ.get(v)), None)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)
            client = kfp.Client(host=host, namespace=namespace, existing_token=token)
            return publish_and_run(
                client,
                package,
                resource_name(pipeline),
                version_name(pipeline),
                namespace,
                experiment,
                params,
                run_name,
            )
    except Exception as exc:  # noqa: BLE001 - connection, auth and API errors all end here
        raise LlmopsError(f"{host}: submit failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from None
