"""`llmops compile`: every pipeline to each GitOps target, byte-deterministic, with
`--check` as the drift gate (non-zero when committed output is stale).

Targets: `kfp` (KFP IR, `compiled/<name>.yaml`: upload in the UI, `kfp run submit`),
`k8s` (`Pipeline` + `PipelineVersion` for KFP's Kubernetes-native mode,
`compiled/k8s/<name>.yaml`), `argo` (a standalone Argo WorkflowTemplate,
`compiled/argo/<name>.yaml`)."""
from __future__ import annotations

import difflib
import os
import re
import tempfile

import yaml
from kfp import compiler
from kfp.compiler.compiler_utils import KubernetesManifestOptions

from kfp_llmops.components import images

from . import argo
from .release import PIPELINES

COMPILED_DIR = os.path.join(os.path.dirname(__file__), "compiled")
TARGETS = ("kfp", "k8s", "argo")
ARGO = {"release": argo.workflow_template}


def _kfp(name: str, **options) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.yaml")
        compiler.Compiler().compile(PIPELINES[name], package_path=path, **options)
        with open(path, encoding="utf-8") as handle:
            return handle.read()


def resource_name(name: str) -> str:
    return f"llmops-{name}"


def version_name(name: str) -> str:
    """PipelineVersion names follow the package version: a release is one version."""
    return f"{resource_name(name)}-{re.sub(r'[^a-z0-9]+', '-', images.TAG.lower()).strip('-')}"


def compile_one(name: str, target: str = "kfp") -> str | None:
    """The compiled text, or None when `target` has no form of this pipeline."""
    if target == "kfp":
        return _kfp(name)
    if target == "k8s":
        return _kfp(name, kubernetes_manifest_format=True, kubernetes_manifest_options=KubernetesManifestOptions(
            pipeline_name=resource_name(name), pipeline_version_name=version_name(name), namespace="kubeflow",
            include_pipeline_manifest=True))
    if target == "argo":
        if name not in ARGO:
            return None
        return yaml.safe_dump(ARGO[name](resource_name(name)), sort_keys=False, width=120)
    raise ValueError(f"unknown target {target!r}")


def output_path(out_dir: str, name: str, target: str) -> str:
    return os.path.join(out_dir, f"{name}.yaml") if target == "kfp" else os.path.join(out_dir, target, f"{name}.yaml")


def compile_all(out_dir: str = COMPILED_DIR, check: bool = False, targets: tuple[str, ...] = TARGETS) -> list[str]:
    """Write (or, with check, compare) each pipeline for each target; return what differs."""
    stale = []
    for target in targets:
        for name in sorted(PIPELINES):
            text = compile_one(name, target)
            if text is None:
                continue
            path = output_path(out_dir, name, target)
            current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
            if current == text:
                continue
            stale.append(os.path.relpath(path, out_dir))
            if check:
                diff = difflib.unified_diff((current or "").splitlines(), text.splitlines(),
                                            f"committed/{name}.yaml", f"compiled/{name}.yaml", lineterm="", n=1)
                print("\n".join(list(diff)[:40]))
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(text)
    return stale
