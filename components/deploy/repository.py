"""A Triton model repository built from exactly the blessed model, and its verification.

Layout (the artifact's folder):
    manifest.json                  Merkle manifest of everything below (the repository root)
    <name>/config.pbtxt            python backend, decoupled (streams), BYTES in/out, dynamic batching
    <name>/<version>/model.py      triton_model.py
    <name>/<version>/serving.json  the blessed decoding, the verified watermark parameters, drill, model root
    <name>/<version>/weights/      the model folder, with its own manifest (the model root)
"""

from __future__ import annotations

import json
import os
import shutil

from kfp_llmops.components.common import atomic, integrity, merkle, signing
from kfp_llmops.components.common.decoding import Decoding
from kfp_llmops.components.common.errors import InputError
from kfp_llmops.components.common.watermark.params import KGW

from .config import DeployConfig
from .serving_request import INPUTS, OUTPUTS


def render_config(cfg: DeployConfig, version: int) -> str:
    s = cfg.serving
    inputs = ",\n".join(
        f'  {{ name: "{n}" data_type: {t} dims: [ 1 ]{" optional: true" if opt else ""} }}'
        for n, (t, opt) in INPUTS.items()
    )
    outputs = ",\n".join(f'  {{ name: "{n}" data_type: {t} dims: [ 1 ] }}' for n, t in OUTPUTS.items())
    return (
        f'name: "{s.model_name}"\nbackend: "python"\nmax_batch_size: {s.max_batch_size}\n'
        f"version_policy: {{ specific: {{ versions: [ {version} ] }} }}\n"
        "model_transaction_policy { decoupled: true }\n"
        f"input [\n{inputs}\n]\noutput [\n{outputs}\n]\n"
        f"instance_group [ {{ kind: {s.instance_kind} count: {s.instance_count} }} ]\n"
        f"dynamic_batching {{ max_queue_delay_microseconds: {s.max_queue_delay_us} }}\n"
    )


_WIRE = {"TYPE_STRING": "BYTES", "TYPE_INT32": "INT32", "TYPE_FP32": "FP32", "TYPE_INT64": "INT64", "TYPE_BOOL": "BOOL"}


def declared_interface(cfg: DeployConfig) -> tuple[dict, dict]:
    """(metadata, config) as Triton's HTTP API reports them for the repository this config
    builds: the canary side of the interface check where the canary cannot be asked
    before traffic moves (KServe). A test checks it against a live server's answers."""
    batch = [-1] if cfg.serving.max_batch_size > 0 else []
    meta = {
        "inputs": [{"name": n, "datatype": _WIRE[t], "shape": batch + [1]} for n, (t, _) in INPUTS.items()],
        "outputs": [{"name": n, "datatype": _WIRE[t], "shape": batch + [1]} for n, t in OUTPUTS.items()],
    }
    config = {
        "max_batch_size": cfg.serving.max_batch_size,
        "input": [{"name": n, "optional": opt} for n, (_, opt) in INPUTS.items()],
        "output": [{"name": n} for n in OUTPUTS],
        "model_transaction_policy": {"decoupled": True},
    }
    return meta, config


def serving_settings(
    cfg: DeployConfig, model_root: str, version: int, kgw: KGW | None, decoding: Decoding, engine: str
) -> dict:
    return {
        "version": version,
        "model_root": model_root,
        "decoding": decoding.model_dump(),
        "max_new_tokens_limit": cfg.serving.max_new_tokens,
        "prompt_limits": cfg.front_door.prompt_limits,
        "key_file": cfg.serving.key_file,
        "watermark": {"enabled": cfg.watermark.enabled, "kgw": kgw.model_dump() if kgw else None},
        "drill": cfg.drill.model_dump(),
        "threads": 1,
        "engine": engine,
        "vllm": cfg.serving.vllm.model_dump(),
    }


def resolved_engine(engine: str, weights: str) -> str:
    """`auto` is vllm where it is installed and runs this model (this environment is the
    serving one's base), else transformers; `vllm` where it cannot run is refused here,
    not a minute into the server's start."""
    from .serving_env import vllm_unsupported

    if engine == "transformers":
        return engine
    why = vllm_unsupported(weights)
    if why is None:
        return "vllm"
    if engine == "vllm":
        raise InputError(f"serving.engine: vllm cannot serve this model: {why}")
    return "transformers"


def build(
    model_dir: str,
    blessed_root: str | None,
    out_dir: str,
    cfg: DeployConfig,
    version: int,
    kgw: KGW | None,
    signing_key: str | None = None,
    decoding: Decoding | None = None,
) -> dict:
    """Verify the model against the blessed root, then write and seal the repository, and
    sign it with `signing_key` when given; `kgw`: the watermark parameters verify_watermark
    verified (required with the watermark on: nobody else's are served); `decoding`: the
    one the blessing recorded (evaluation's defaults for a blessing without one)."""
    if not blessed_root:
        raise InputError(f"{model_dir}: no blessed model root given; deploy only what evaluate_llm blessed")
    if cfg.watermark.enabled and kgw is None:
        raise InputError(
            "watermark: no verified parameters to serve; pass verify_watermark's metrics.json "
            "(`--watermark`) or set watermark.enabled: false"
        )
    decoding = decoding or Decoding()
    if decoding.max_new_tokens > cfg.serving.max_new_tokens:
        raise InputError(
            f"serving.max_new_tokens: {cfg.serving.max_new_tokens} is below the blessed decoding's "
            f"max_new_tokens {decoding.max_new_tokens}"
        )
    model_root = integrity.verify("model", model_dir, blessed_root)
    engine = resolved_engine(cfg.serving.engine, model_dir)
    model_manifest, _ = integrity.load_manifest(os.path.join(model_dir, integrity.MANIFEST_NAME))
    name = cfg.serving.model_name
    version_dir = os.path.join(out_dir, name, str(version))
    if os.path.exists(out_dir) and os.listdir(out_dir):
        raise InputError(f"{out_dir}: repository folder is not empty")
    try:
        shutil.copytree(model_dir, os.path.join(version_dir, "weights"), copy_function=atomic.copy2)
        atomic.copy2(os.path.join(os.path.dirname(__file__), "triton_model.py"), os.path.join(version_dir, "model.py"))
    except BaseException:
        shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)  # half a repository is not one
        raise
    atomic.write_text(
        os.path.join(version_dir, "serving.json"),
        json.dumps(serving_settings(cfg, model_root, version, kgw, decoding, engine), indent=2, sort_keys=True),
    )
    atomic.write_text(os.path.join(out_dir, name, "config.pbtxt"), render_config(cfg, version))
    # The weights were verified a moment ago: their digests seal the copy without a
    # third read. `verify` reads the copy once before any traffic moves.
    prefix = f"{name}/{version}/weights/"
    known = (
        {prefix + f.path: merkle.FileDigest(prefix + f.path, f.size, f.root, f.leaves) for f in model_manifest.files}
        if model_manifest.chunk_size == merkle.DEFAULT_CHUNK_SIZE
        else {}
    )
    root = integrity.seal("repository", out_dir, known=known)
    signed = signing.sign_folder(out_dir, signing_key) if signing_key else None
    return {
        "repository_root": root,
        "model_root": model_root,
        "model_name": name,
        "version": version,
        "weights": prefix.rstrip("/"),
        "signed_sha256": signed,
    }


def describe(repo_dir: str) -> dict:
    """Model name, version and the serving settings of a repository (after verify)."""
    names = [n for n in sorted(os.listdir(repo_dir)) if os.path.isdir(os.path.join(repo_dir, n))]
    if len(names) != 1:
        raise InputError(f"{repo_dir}: expected one model folder, found {names or 'none'}")
    versions = [v for v in os.listdir(os.path.join(repo_dir, names[0])) if v.isdigit()]
    if len(versions) != 1:
        raise InputError(f"{repo_dir}/{names[0]}: expected one version folder, found {sorted(versions) or 'none'}")
    path = os.path.join(repo_dir, names[0], versions[0], "serving.json")
    try:
        with open(path, encoding="utf-8") as handle:
            settings = json.load(handle)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable serving settings: {exc}") from None
    return {
        "model_name": names[0],
        "version": int(versions[0]),
        "settings": settings,
        "weights": os.path.join(repo_dir, names[0], versions[0], "weights"),
    }


def verify(
    repo_dir: str, blessed_root: str | None, repository_root: str | None = None, public_key: str | None = None
) -> dict:
    """Refuse a repository that is damaged, whose weights are not the blessed model, or,
    with `public_key`, that is unsigned or not signed by its pair."""
    signed = signing.verify_folder(repo_dir, public_key)["digest"] if public_key else None
    root = integrity.verify("repository", repo_dir, repository_root)
    info = describe(repo_dir)
    if not blessed_root:
        raise InputError(f"{repo_dir}: no blessed model root to check the weights against")
    try:
        weights_root = integrity.verify("model", info["weights"], blessed_root)
    except InputError as exc:
        raise InputError(f"refusing to deploy: weights are not the blessed model ({exc})") from None
    return {**info, "repository_root": root, "model_root": weights_root, "signed_sha256": signed}
