"""`llmops submit`: a compiled pipeline to a KFP API server through `kfp.Client`; the
token comes from the environment, never from the command line (shell history)."""
from __future__ import annotations

import os

from kfp_llmops.components.common.errors import InputError, LlmopsError

TOKEN_VARS = ("LLMOPS_KFP_TOKEN", "KF_PIPELINES_TOKEN")


def submit(package: str, host: str, namespace: str | None, experiment: str, params: dict,
           run_name: str | None = None) -> dict:
    import warnings

    import kfp

    if not os.path.isfile(package):
        raise InputError(f"{package}: no compiled pipeline (run `llmops compile`)")
    token = next((os.environ[v] for v in TOKEN_VARS if os.environ.get(v)), None)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)
            client = kfp.Client(host=host, namespace=namespace, existing_token=token)
            result = client.create_run_from_pipeline_package(package, arguments=params, run_name=run_name,
                                                             experiment_name=experiment, namespace=namespace)
    except Exception as exc:  # noqa: BLE001 - connection, auth and API errors all end here
        raise LlmopsError(f"{host}: submit failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}") from None
    return {"run_id": result.run_id, "url": f"{host.rstrip('/')}/#/runs/details/{result.run_id}"}
